"""The planner's own estimates of its chosen plan, per rank: storage (bytes) and perf (ms per
step), and the imbalance between ranks.

The estimates live on the ``ShardingOption``s the planner chose. TorchRec hands them to every
``Stats`` reporter passed to ``EmbeddingShardingPlanner(stats=...)``, its public hook for plan
statistics; :class:`EstimateCollector` is such a reporter, so no private planner attribute is
read.
"""

from dataclasses import dataclass
from typing import Any

from torchrec.distributed.planner.types import ShardingOption, Stats


@dataclass
class RankEstimate:
    """The planner's estimates for one rank: storage (bytes) and perf (ms per step)."""

    hbm_bytes: float = 0.0
    ddr_bytes: float = 0.0
    fwd_compute_ms: float = 0.0
    fwd_comms_ms: float = 0.0
    bwd_compute_ms: float = 0.0
    bwd_comms_ms: float = 0.0

    @property
    def total_ms(self) -> float:
        return self.fwd_compute_ms + self.fwd_comms_ms + self.bwd_compute_ms + self.bwd_comms_ms


def rank_estimates(best_plan: list[ShardingOption], world_size: int) -> list[RankEstimate]:
    """Sum the planner's per-shard storage and perf estimates of its chosen plan by rank."""
    ranks = [RankEstimate() for _ in range(world_size)]
    for option in best_plan:
        for shard in option.shards:
            if shard.rank is None:
                continue
            r = ranks[shard.rank]
            if shard.storage is not None:
                r.hbm_bytes += shard.storage.hbm
                r.ddr_bytes += shard.storage.ddr
            if shard.perf is not None:
                r.fwd_compute_ms += shard.perf.fwd_compute
                r.fwd_comms_ms += shard.perf.fwd_comms
                r.bwd_compute_ms += shard.perf.bwd_compute
                r.bwd_comms_ms += shard.perf.bwd_comms
    return ranks


def imbalance(values: list[float]) -> float:
    """max / mean of per-rank values (1.0 when all are zero)."""
    mean = sum(values) / len(values)
    return max(values) / mean if mean > 0 else 1.0


class EstimateCollector(Stats):
    """A planner ``Stats`` reporter that keeps the chosen plan's ``ShardingOption``s
    (``best_plan``) of the last ``plan()`` call."""

    def __init__(self) -> None:
        self.best_plan: list[ShardingOption] = []

    def log(self, *args: Any, **kwargs: Any) -> None:
        """TorchRec calls this after planning with ``best_plan`` among its keyword arguments."""
        self.best_plan = list(kwargs.get("best_plan") or [])
