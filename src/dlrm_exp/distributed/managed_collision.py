"""The sharder of managed-collision tables, with their eviction made to run on CPU.

TorchRec's ``ManagedCollisionEmbeddingBagCollectionSharder`` shards a
``ManagedCollisionEmbeddingBagCollection`` ``row_wise``: each rank maps the raw ids of its
share of the input range to its share of the rows. When the managed-collision module evicts
ids, the sharded module resets the evicted rows' weights and optimizer state through FBGEMM's
``reset_weight_momentum`` op, which fbgemm-gpu has for CUDA only (on CPU:
``NotImplementedError: Could not run 'fbgemm::reset_weight_momentum' with arguments from the
'CPU' backend``; fbgemm-gpu-cpu 1.6-1.9), and whose arguments do not even reach the host
weights of a CPU kernel. :class:`CpuRowReset` does the same reset through the kernel's public
per-table views; :class:`CpuManagedCollisionEmbeddingBagCollectionSharder` installs it on CPU.

The one private name used is ``_table_to_tbe_and_index`` of TorchRec's
``ShardedManagedCollisionEmbeddingBagCollection`` (TorchRec 1.6-1.9: ``{table: (FBGEMM kernel,
logical table index)}``, read by its ``_evict``); :func:`install_cpu_row_reset` fails with
a clear error if a TorchRec release renames it, and a test pins it.
"""

from typing import Any

import torch
from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
    SplitTableBatchedEmbeddingBagsCodegen,
)
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.mc_embeddingbag import (
    ManagedCollisionEmbeddingBagCollectionSharder,
    ShardedManagedCollisionEmbeddingBagCollection,
)
from torchrec.distributed.mc_modules import ManagedCollisionCollectionSharder

#: The attribute of TorchRec's sharded managed-collision module that maps a table to its
#: FBGEMM kernel and logical index: what its ``_evict`` resets rows through.
_KERNELS_ATTRIBUTE = "_table_to_tbe_and_index"


class CpuRowReset:
    """The row reset of one FBGEMM CPU kernel, in the interface ``_evict`` calls.

    Does what FBGEMM's CUDA ``reset_weight_momentum`` does: the evicted rows' weights and
    optimizer state (every state of the fused optimizer, e.g. RowWiseAdagrad's (rows,) sum of
    squares) become 0, through ``split_embedding_weights()`` and ``split_optimizer_states()``,
    which on CPU are views of the kernel's host storage. TorchRec then re-initializes the
    weights with the table's ``init_fn``.
    """

    def __init__(self, kernel: SplitTableBatchedEmbeddingBagsCodegen) -> None:
        self.kernel = kernel

    @torch.no_grad()
    def reset_embedding_weight_momentum(
        self,
        pruned_indices: torch.Tensor,
        pruned_indices_offsets: torch.Tensor,
        logical_table_ids: torch.Tensor,
        buffer_ids: torch.Tensor,
    ) -> None:
        """Zero the rows ``pruned_indices[offsets[i]:offsets[i+1]]`` (local row indices) of
        logical table ``logical_table_ids[i]``, weights and optimizer state.

        Args:
            pruned_indices: (N,) int64 local rows.
            pruned_indices_offsets: (T + 1,) int64 offsets of each table's rows.
            logical_table_ids: (T,) int32 tables of the kernel.
            buffer_ids: unused (FBGEMM's buffer of a table; one on CPU).
        """
        weights = self.kernel.split_embedding_weights()
        states = self.kernel.split_optimizer_states()
        for i, table in enumerate(logical_table_ids.tolist()):
            rows = pruned_indices[
                int(pruned_indices_offsets[i]) : int(pruned_indices_offsets[i + 1])
            ]
            weights[table][rows] = 0
            for state in states[table] if states else []:
                state[rows] = 0


def install_cpu_row_reset(module: ShardedManagedCollisionEmbeddingBagCollection) -> None:
    """Make ``module`` reset evicted rows with :class:`CpuRowReset`.

    Raises:
        RuntimeError: this TorchRec has no ``_table_to_tbe_and_index`` (the adapter must
            follow the release).
    """
    kernels = getattr(module, _KERNELS_ATTRIBUTE, None)
    if not isinstance(kernels, dict):
        raise RuntimeError(
            "this TorchRec's ShardedManagedCollisionEmbeddingBagCollection has no "
            f"{_KERNELS_ATTRIBUTE}: dlrm_exp's CPU eviction (distributed/managed_collision.py) "
            "must be updated for it; managed collision still runs on CUDA"
        )
    for table, (kernel, index) in kernels.items():
        if isinstance(kernel, SplitTableBatchedEmbeddingBagsCodegen):
            kernels[table] = (CpuRowReset(kernel), index)


class CpuManagedCollisionEmbeddingBagCollectionSharder(
    ManagedCollisionEmbeddingBagCollectionSharder
):
    """TorchRec's managed-collision EBC sharder, installing :class:`CpuRowReset` on modules
    sharded to the CPU (its EBC sharder must offer ``row_wise`` there:
    :class:`~dlrm_exp.distributed.sharder.CpuEmbeddingBagCollectionSharder`)."""

    def shard(self, *args: Any, **kwargs: Any) -> Any:
        """TorchRec's ``shard(module, params, env, device, module_fqn)``, plus the CPU reset."""
        sharded = super().shard(*args, **kwargs)
        if any(p.device.type == "cpu" for p in sharded.parameters()):
            install_cpu_row_reset(sharded)
        return sharded


def managed_collision_sharder(
    ebc_sharder: EmbeddingBagCollectionSharder,
) -> CpuManagedCollisionEmbeddingBagCollectionSharder:
    """The managed-collision sharder whose tables ``ebc_sharder`` shards (so they get its
    sharding types, fused parameters and quantized-communication codecs)."""
    return CpuManagedCollisionEmbeddingBagCollectionSharder(
        ebc_sharder=ebc_sharder,
        mc_sharder=ManagedCollisionCollectionSharder(),
        qcomm_codecs_registry=ebc_sharder.qcomm_codecs_registry,
    )
