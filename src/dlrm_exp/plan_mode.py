"""``mode=plan``: shard a model for hardware that is not here, with TorchRec's planner.

``EmbeddingShardingPlanner.plan()`` needs no process group and takes a ``Topology`` of any
size, so ``python -m dlrm_exp mode=plan hardware=a100_40gb_x8 hardware.nnodes=2 model=...``
plans for 16 A100s on a laptop: the model is built on the meta device (nothing materialized),
the plan goes to ``plan.txt`` / ``plan.json``, and the summary prints per table the sharding
type, compute kernel and ranks; per rank the planner's HBM and DDR use against capacity and its
perf estimates (forward/backward compute and communication, ms per step); the total embedding
storage (:mod:`dlrm_exp.storage`, the numbers train mode's insufficient-memory error uses);
and the imbalance between ranks (max / mean). A plan that cannot fit raises the same
``InsufficientMemoryError`` as train mode.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torchrec.distributed.planner import EmbeddingShardingPlanner

from dlrm_exp.config import Config
from dlrm_exp.experiment import build_module, plan_model
from dlrm_exp.launch import DistContext
from dlrm_exp.model import table_configs
from dlrm_exp.sharding import memory_capacity, plan_record, plan_text
from dlrm_exp.storage import GIB, embedding_storage
from dlrm_exp.tracking import write_json_atomic, write_text_atomic


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


def rank_estimates(planner: EmbeddingShardingPlanner, world_size: int) -> list[RankEstimate]:
    """Sum the planner's per-shard storage and perf estimates of its chosen plan by rank."""
    ranks = [RankEstimate() for _ in range(world_size)]
    best = getattr(planner, "_best_plan", None) or []  # the ShardingOptions plan() chose
    for option in best:
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


def _imbalance(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return max(values) / mean if mean > 0 else 1.0


def run_plan(cfg: Config, run_dir: Path) -> dict[str, Any]:
    """Plan ``cfg`` for ``cfg.hardware`` (any size, no process group); write ``plan.txt`` and
    ``plan.json`` (with the estimates) into ``run_dir`` and return that record.

    Raises:
        InsufficientMemoryError: the tables cannot fit; the message has needed vs offered GiB.
        PlanError / ConfigError: the planner found no placement for the constraints, or the
            plan cannot run with the configured qcomms.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    hw = cfg.hardware
    world = hw.world_size
    local = hw.local_world_size or hw.nproc_per_node
    ctx = DistContext(
        rank=0, world_size=world, local_rank=0, local_world_size=local, device=torch.device("meta")
    )
    module = build_module(cfg, torch.device("meta"))
    planners: list[EmbeddingShardingPlanner] = []
    plan = plan_model(cfg, ctx, module, keep_planner=planners.append)
    tables = table_configs(cfg.model)
    record = plan_record(plan, tables, world)
    capacity = memory_capacity(hw, local)
    estimates = rank_estimates(planners[0], world)
    storage = embedding_storage(
        [t.num_embeddings for t in tables], cfg.model.embedding_dim, cfg.optimizer.sparse_optimizer
    )
    record["hardware"] = {
        "world_size": world,
        "local_world_size": local,
        "nnodes": hw.nnodes,
        "compute_device": hw.compute_device.value,
        "hbm_cap_gib_per_rank": (capacity.hbm_bytes or 0) / GIB,
        "ddr_cap_gib_per_rank": capacity.ddr_bytes / GIB,
    }
    record["storage"] = {
        "embedding_weights_gib": storage.weight_bytes / GIB,
        "optimizer_state_gib": storage.optimizer_bytes / GIB,
        "total_gib": storage.total_bytes / GIB,
    }
    record["estimates_per_rank"] = [{**vars(e), "total_ms": e.total_ms} for e in estimates]
    record["imbalance"] = {
        "hbm": _imbalance([e.hbm_bytes for e in estimates]),
        "ddr": _imbalance([e.ddr_bytes for e in estimates]),
        "perf": _imbalance([e.total_ms for e in estimates]),
    }
    write_text_atomic(run_dir / "plan.txt", plan_text(plan) + "\n")
    write_json_atomic(run_dir / "plan.json", record)
    return record


def summary(record: dict[str, Any], run_dir: Path) -> str:
    """The lines ``mode=plan`` prints: tables, ranks against capacity, totals, imbalance."""
    hw, storage = record["hardware"], record["storage"]
    lines = [
        f"plan for {hw['world_size']} x {hw['compute_device']} rank(s) on {hw['nnodes']} host(s), "
        f"{hw['hbm_cap_gib_per_rank']:.0f} GiB HBM + {hw['ddr_cap_gib_per_rank']:.0f} GiB DDR each",
        f"{'table':<12} {'rows':>12} {'sharding type':<18} {'kernel':<18} ranks",
    ]
    for name, t in record["tables"].items():
        ranks = t["ranks"]
        shown = ranks if len(ranks) <= 8 else f"{ranks[0]}..{ranks[-1]} ({len(ranks)})"
        lines.append(
            f"{name:<12} {t['num_embeddings']:>12,} {t['sharding_type']:<18} "
            f"{t['compute_kernel']:<18} {shown}"
        )
    lines.append(
        f"{'rank':>4} {'HBM GiB':>9} {'DDR GiB':>9} {'fwd comp':>9} {'fwd comm':>9} "
        f"{'bwd comp':>9} {'bwd comm':>9} {'total ms':>9}"
    )
    for rank, e in enumerate(record["estimates_per_rank"]):
        lines.append(
            f"{rank:>4} {e['hbm_bytes'] / GIB:>9.2f} {e['ddr_bytes'] / GIB:>9.2f} "
            f"{e['fwd_compute_ms']:>9.3f} {e['fwd_comms_ms']:>9.3f} {e['bwd_compute_ms']:>9.3f} "
            f"{e['bwd_comms_ms']:>9.3f} {e['total_ms']:>9.3f}"
        )
    used_hbm = max(e["hbm_bytes"] for e in record["estimates_per_rank"]) / GIB
    imbalance = record["imbalance"]
    lines += [
        f"largest rank: {used_hbm:.2f} of {hw['hbm_cap_gib_per_rank']:.2f} GiB HBM "
        "(planner estimate: tables, optimizer state, kernel buffers)",
        f"total embedding storage: {storage['embedding_weights_gib']:.2f} GiB fp32 weights + "
        f"{storage['optimizer_state_gib']:.2f} GiB optimizer state = "
        f"{storage['total_gib']:.2f} GiB",
        f"imbalance (max / mean over ranks): HBM {imbalance['hbm']:.2f}, DDR "
        f"{imbalance['ddr']:.2f}, perf {imbalance['perf']:.2f}",
        f"plan files: {run_dir / 'plan.txt'}, {run_dir / 'plan.json'}",
    ]
    return "\n".join(lines)
