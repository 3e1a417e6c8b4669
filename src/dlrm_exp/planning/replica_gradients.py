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

import dataclasses
from typing import Any

from torchrec.distributed.planner.types import ShardEstimator, ShardingOption, Topology
from torchrec.distributed.types import ShardingType


class ReplicaGradientStorage(ShardEstimator):
    """Adds each data_parallel shard's gradient (its weights' bytes) to its storage estimate
    (run after TorchRec's ``EmbeddingStorageEstimator``, which sets ``shard.storage``).

    Args:
        topology: the planner's topology (its ``compute_device``).
    """

    def __init__(self, topology: Topology) -> None:
        self._on_gpu = topology.compute_device in ("cuda", "mtia")

    def estimate(self, sharding_options: list[ShardingOption], *_: Any, **__: Any) -> None:
        """Update ``sharding_options``' shard storage in place (TorchRec's interface)."""
        for option in sharding_options:
            if option.sharding_type != ShardingType.DATA_PARALLEL.value:
                continue
            for shard in option.shards:
                if shard.storage is None:
                    continue
                rows, cols = shard.size
                grad = rows * cols * option.tensor.element_size()
                shard.storage = dataclasses.replace(
                    shard.storage,
                    hbm=shard.storage.hbm + (grad if self._on_gpu else 0),
                    ddr=shard.storage.ddr + (0 if self._on_gpu else grad),
                )
