"""The data_parallel tables' gradients in the planner's storage estimate.

TorchRec's ``EmbeddingStorageEstimator`` counts a data_parallel table's weights and optimizer
state on every rank, but not its gradient. Sharded tables have none (FBGEMM updates them inside
backward); a replica does: the ``dense`` kernel (FBGEMM's
``DenseTableBatchedEmbeddingBagsCodegen``, an ``nn.EmbeddingBag(sparse=False)``) gives a
gradient as large as the table, which DDP all-reduces in its buckets before the optimizer
steps (``gradient_as_bucket_view``: one copy). A plan that fits the weights and state could
then run out of memory in the first backward (a 14 GiB replica needed about 28 GiB).
:class:`ReplicaGradientStorage` runs after TorchRec's estimator and adds the gradient to each
data_parallel shard where the kernel keeps it (HBM on a GPU, DDR on CPU).
"""

from torchrec.distributed.planner.types import ShardingOption
from torchrec.distributed.types import ShardingType

from dlrm_exp.planning.extra_storage import ExtraStorage


class ReplicaGradientStorage(ExtraStorage):
    """Adds each data_parallel shard's gradient (its weights' bytes) to its storage estimate
    (run after TorchRec's ``EmbeddingStorageEstimator``, which sets ``shard.storage``).

    Args:
        topology: the planner's topology (its ``compute_device``).
    """

    def where(self, option: ShardingOption) -> bool | None:
        """HBM on a GPU, DDR on CPU; ``None`` for a sharded table (no gradient)."""
        if option.sharding_type != ShardingType.DATA_PARALLEL.value:
            return None
        return self.on_gpu

    def extra_bytes(self, option: ShardingOption, rows: int, cols: int) -> int:
        """The gradient: as many bytes as the shard's weights."""
        return rows * cols * option.tensor.element_size()
