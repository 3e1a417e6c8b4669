"""The fused sparse optimizer's state in the planner's storage estimate, at FBGEMM's width.

TorchRec's ``EmbeddingStorageEstimator`` sizes a shard's optimizer state as the weights' bytes
times a multiplier (Adam 2, Adagrad 1, RowWiseAdagrad ``1 / embedding_dim``), so at the
*weights'* element size. FBGEMM's fused kernels keep that state in fp32 whatever the weights'
precision (``SplitTableBatchedEmbeddingBagsCodegen`` allocates ``momentum1`` / ``momentum2``
as float32), so for fp16 tables TorchRec counts half of it: with Adam, fp16 weights of
``2 D`` bytes a row carry ``8 D`` bytes of state, not ``4 D``. A plan could then pass the
planner and fail to allocate. :class:`FusedStateStorage` runs after TorchRec's estimator and
adds the missing bytes to each shard, where the kernel keeps them (HBM for ``fused`` on a GPU,
DDR for the UVM kernels and on CPU), so the planner places, and refuses, by the real size.
"""

from torchrec.distributed.planner.types import ShardingOption, Topology

from dlrm_exp.config import SparseOptimizer
from dlrm_exp.config.optimizer import fbgemm_steps_replicas
from dlrm_exp.planning.extra_storage import ExtraStorage
from dlrm_exp.planning.storage import FP32_BYTES

#: The compute kernels whose optimizer is FBGEMM's fused one (state in fp32).
FUSED_KERNELS = ("fused", "fused_uvm", "fused_uvm_caching")
#: Of those, the one whose rows (and state) live in device memory on a GPU.
DEVICE_KERNEL = "fused"
#: The kernels whose rows live in device memory on a GPU: the fused one and ``dense``
#: (data_parallel); the UVM kernels keep theirs in host memory.
DEVICE_RESIDENT_KERNELS = (DEVICE_KERNEL, "dense")


def missing_state_bytes(
    rows: int, cols: int, element_bytes: int, optimizer: SparseOptimizer
) -> int:
    """The optimizer-state bytes TorchRec leaves out for a ``rows x cols`` shard whose weights
    take ``element_bytes`` each: FBGEMM's fp32 state less TorchRec's count at the weights'
    width (0 for fp32 weights and for SGD)."""
    return rows * optimizer.state_floats_per_row(cols) * (FP32_BYTES - element_bytes)


class FusedStateStorage(ExtraStorage):
    """Adds :func:`missing_state_bytes` to every shard's storage estimate of a fused table
    (run after TorchRec's ``EmbeddingStorageEstimator``, which sets ``shard.storage``).

    Args:
        topology: the planner's topology (its ``compute_device``).
        optimizer: the job's sparse optimizer (``optimizer.sparse_optimizer``).
    """

    def __init__(self, topology: Topology, optimizer: SparseOptimizer) -> None:
        super().__init__(topology)
        self._optimizer = optimizer

    def where(self, option: ShardingOption) -> bool | None:
        """HBM for the ``fused`` kernel on a GPU, DDR for the UVM kernels and on CPU; ``None``
        for fp32 tables (TorchRec counts their state right) and unfused kernels. On CPU a
        data_parallel replica (the ``dense`` kernel) is stepped by FBGEMM's fused optimizer
        too (:class:`~dlrm_exp.factories.replicated_optim.FbgemmReplicaOptimizer`, fp32
        state) when the optimizer is one FBGEMM's CPU kernels fuse."""
        kernel = option.compute_kernel
        on_cpu = not self.on_gpu
        fbgemm_replica = kernel == "dense" and fbgemm_steps_replicas(self._optimizer, on_cpu)
        if option.tensor.element_size() >= FP32_BYTES or not (
            kernel in FUSED_KERNELS or fbgemm_replica
        ):
            return None
        return self.on_gpu and kernel == DEVICE_KERNEL

    def extra_bytes(self, option: ShardingOption, rows: int, cols: int) -> int:
        """:func:`missing_state_bytes` of the shard."""
        return missing_state_bytes(rows, cols, option.tensor.element_size(), self._optimizer)
