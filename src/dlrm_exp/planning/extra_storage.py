"""The base of the planner's storage estimators that add what TorchRec's leaves out.

TorchRec's ``EmbeddingStorageEstimator`` sets each shard's ``storage`` (HBM and DDR bytes).
An :class:`ExtraStorage` estimator runs after it and adds bytes to the shards of the
sharding options it concerns, in HBM where the kernel keeps them on a GPU, else in DDR:
:class:`~dlrm_exp.planning.fused_state.FusedStateStorage` (the fused optimizer's fp32 state of
narrower tables) and :class:`~dlrm_exp.planning.replica_gradients.ReplicaGradientStorage` (the
data_parallel tables' gradients).
"""

import dataclasses
from typing import Any

from torchrec.distributed.planner.types import ShardEstimator, ShardingOption, Topology


class ExtraStorage(ShardEstimator):
    """Adds :meth:`extra_bytes` to the storage estimate of every shard of the options that
    :meth:`where` places (run after TorchRec's ``EmbeddingStorageEstimator``).

    Args:
        topology: the planner's topology (its ``compute_device``).
    """

    def __init__(self, topology: Topology) -> None:
        self.on_gpu = topology.compute_device in ("cuda", "mtia")

    def where(self, option: ShardingOption) -> bool | None:
        """Whether ``option``'s extra bytes live in device memory (HBM): ``True`` or ``False``
        (DDR), ``None`` when the option has none."""
        raise NotImplementedError

    def extra_bytes(self, option: ShardingOption, rows: int, cols: int) -> int:
        """The bytes to add for a ``rows x cols`` shard of ``option``."""
        raise NotImplementedError

    def estimate(self, sharding_options: list[ShardingOption], *_: Any, **__: Any) -> None:
        """Update ``sharding_options``' shard storage in place (TorchRec's interface; the
        sharder map TorchRec passes is not needed)."""
        for option in sharding_options:
            on_device = self.where(option)
            if on_device is None:
                continue
            for shard in option.shards:
                if shard.storage is None:
                    continue
                extra = self.extra_bytes(option, *shard.size)
                shard.storage = dataclasses.replace(
                    shard.storage,
                    hbm=shard.storage.hbm + (extra if on_device else 0),
                    ddr=shard.storage.ddr + (0 if on_device else extra),
                )
