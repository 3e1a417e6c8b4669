"""``mode=plan``: shard a model for hardware that is not here, with TorchRec's planner.

``EmbeddingShardingPlanner.plan()`` needs no process group and takes a ``Topology`` of any
size, so ``python -m dlrm_exp mode=plan hardware=a100_40gb_x8 hardware.nnodes=2 model=...``
plans for 16 A100s on a laptop: the model is built on the meta device (nothing materialized),
the plan goes to ``plan.txt`` / ``plan.json``, and the summary prints per table the sharding
type, compute kernel and ranks; per rank the planner's HBM and DDR use against capacity and its
perf estimates (forward/backward compute and communication, ms per step); the total embedding
storage (:mod:`dlrm_exp.planning.storage`, the numbers train mode's insufficient-memory error uses);
and the imbalance between ranks (max / mean). A plan that cannot fit raises the same
``InsufficientMemoryError`` as train mode.
"""

import logging
from pathlib import Path
from typing import Any

from dlrm_exp.config import Config
from dlrm_exp.factories.experiment import build_module
from dlrm_exp.modes.job import Job, ModeResult
from dlrm_exp.planning.estimates import imbalance
from dlrm_exp.planning.job import plan_job, tables_storage
from dlrm_exp.planning.plan_record import plan_record, plan_text, replicated_tables
from dlrm_exp.planning.planner import usable_bytes
from dlrm_exp.planning.storage import GIB, IN_MIB_BELOW, MIB
from dlrm_exp.planning.tables import table_configs
from dlrm_exp.planning.topology import memory_capacity
from dlrm_exp.util.files import write_json_atomic, write_text_atomic

log = logging.getLogger(__name__)


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
    batch = cfg.train.global_batch_note(hw.world_size)  # (it plans the batch buffers)
    if batch:
        log.warning(batch)
    result = plan_job(cfg, build_module(cfg))
    ctx = result.context
    record = plan_record(
        result.plan, table_configs(cfg.model), ctx.world_size, ctx.local_world_size
    ).to_json()
    capacity = result.capacity or memory_capacity(hw, ctx.local_world_size)
    storage, estimates = result.storage, result.estimates  # as the plan places the tables
    dp_names = replicated_tables(result.plan)
    record["hardware"] = {
        "nnodes": hw.nnodes,
        "compute_device": hw.compute_device.value,
        "hbm_cap_gib_per_rank": (capacity.hbm_bytes or 0) / GIB,
        "ddr_cap_gib_per_rank": capacity.ddr_bytes / GIB,
    }
    record["storage"] = {
        "embedding_weights_gib": storage.weight_bytes / GIB,
        "embedding_weight_precision": storage.weight_precision,
        "optimizer_state_gib": storage.optimizer_bytes / GIB,
        "data_parallel_gradients_gib": storage.gradient_bytes / GIB,
        "total_gib": storage.total_bytes / GIB,
    }
    replicated = tables_storage(cfg, dp_names, dp_names)
    if replicated.rows and ctx.world_size > 1:  # every rank holds these whole
        record["storage"]["data_parallel_gib"] = replicated.total_bytes / GIB
        record["storage"]["held_on_all_ranks_gib"] = (
            storage.total_bytes + replicated.total_bytes * (ctx.world_size - 1)
        ) / GIB
    record["estimates_per_rank"] = [{**vars(e), "total_ms": e.total_ms} for e in estimates]
    if estimates:
        record["imbalance"] = {
            "hbm": imbalance([e.hbm_bytes for e in estimates]),
            "ddr": imbalance([e.ddr_bytes for e in estimates]),
            "perf": imbalance([e.total_ms for e in estimates]),
        }
    if result.held_per_rank is not None:  # a replayed plan: its shards' bytes, no estimate
        held = {kind.lower(): list(v) for kind, v in result.held_per_rank.items()}
        record["held_per_rank"] = held
        record["imbalance"] = {kind: imbalance(v) for kind, v in held.items()}
    write_text_atomic(run_dir / "plan.txt", plan_text(result.plan) + "\n")
    write_json_atomic(run_dir / "plan.json", record)
    return record


def run(cfg: Config, job: Job) -> ModeResult:
    """``mode=plan``: plan, write the plan files, and summarise."""
    record = run_plan(cfg, job.run_dir)
    return ModeResult(summary=summary(record, job.run_dir))


def summary(record: dict[str, Any], run_dir: Path) -> str:
    """The lines ``mode=plan`` prints: tables, ranks against capacity, totals, imbalance."""
    hw, storage = record["hardware"], record["storage"]
    hbm = f"{hw['hbm_cap_gib_per_rank']:.2f} GiB HBM + " if hw["hbm_cap_gib_per_rank"] else ""
    lines = [  # (whole GiB read "0 GiB HBM + 12 GiB DDR" above "of 11.77 GiB DDR": review)
        f"plan for {record['world_size']} x {hw['compute_device']} rank(s) on {hw['nnodes']} "
        f"host(s), {hbm}{hw['ddr_cap_gib_per_rank']:.2f} GiB DDR each",
        f"{'table':<12} {'rows':>12} {'sharding type':<18} {'kernel':<18} ranks",
    ]
    for name, t in record["tables"].items():
        ranks = t["ranks"]
        shown = ranks if len(ranks) <= 8 else f"{ranks[0]}..{ranks[-1]} ({len(ranks)})"
        lines.append(
            f"{name:<12} {t['num_embeddings']:>12,} {t['sharding_type']:<18} "
            f"{t['compute_kernel']:<18} {shown}"
        )
    lines += _rank_lines(record)
    lines += [
        f"total embedding storage: {_gib(storage['embedding_weights_gib'])} "
        f"{storage['embedding_weight_precision']} weights + "
        + (
            f"{_gib(storage['data_parallel_gradients_gib'])} data_parallel gradients + "
            if storage.get("data_parallel_gradients_gib")
            else ""
        )
        + f"{_gib(storage['optimizer_state_gib'])} optimizer state = "
        f"{_gib(storage['total_gib'])}",
    ]
    if "held_on_all_ranks_gib" in storage:
        lines.append(
            f"  of which {_gib(storage['data_parallel_gib'])} are data_parallel tables, held "
            f"whole by each of the {record['world_size']} ranks: "
            f"{_gib(storage['held_on_all_ranks_gib'])} on the ranks in all"
        )
    lines += [
        f"plan files: {run_dir / 'plan.txt'}, {run_dir / 'plan.json'}",
    ]
    return "\n".join(lines)


def _rank_lines(record: dict[str, Any]) -> list[str]:
    """The summary's lines per rank and of the largest: the planner's estimates, or for a
    replayed plan (``sharding=from_file``) the bytes its shards take (tables and optimizer
    state; it printed nothing per rank: planning review). No HBM on CPU (its column read 0:
    diff review)."""
    estimates, ratio = record["estimates_per_rank"], record.get("imbalance")
    kinds = ("hbm", "ddr") if record["hardware"]["hbm_cap_gib_per_rank"] else ("ddr",)
    if estimates:
        held = {k: [e[f"{k}_bytes"] for e in estimates] for k in ("hbm", "ddr")}
        ms = ("fwd_compute_ms", "fwd_comms_ms", "bwd_compute_ms", "bwd_comms_ms", "total_ms")
        head = ("fwd comp", "fwd comm", "bwd comp", "bwd comm", "total ms")
        times = [[f"{e[k]:>9.3f}" for k in ms] for e in estimates]
        what = "planner estimate: tables, optimizer state, kernel buffers"
        kinds_ratio = [*kinds, "perf"]
    elif "held_per_rank" in record:
        held, head = record["held_per_rank"], ()
        times = [[] for _ in held["ddr"]]
        what = "the plan file's shards: tables and optimizer state; a replayed plan has no perf "
        what += "estimate"
        kinds_ratio = list(kinds)
    else:
        return []
    # each kind in its own unit, as the largest-rank line says its largest value (one unit
    # for both said 0.05 GiB HBM beside that line's 50.24 MiB: diff review)
    units = {k: ("GiB", GIB) if max(held[k]) >= IN_MIB_BELOW else ("MiB", MIB) for k in kinds}
    columns = [f"{k.upper()} {units[k][0]}" for k in kinds] + list(head)
    lines = [f"{'rank':>4} " + " ".join(f"{c:>9}" for c in columns)]
    for rank, row in enumerate(times):
        sizes = [f"{held[k][rank] / units[k][1]:>9.2f}" for k in kinds]
        lines.append(f"{rank:>4} " + " ".join([*sizes, *row]))
    shown = ", ".join(f"{k.upper() if k != 'perf' else k} {ratio[k]:.2f}" for k in kinds_ratio)
    return [
        *lines,
        f"largest rank: {_largest(record['hardware'], held)} ({what})",
        f"imbalance (max / mean over ranks): {shown}",
    ]


def _largest(hw: dict[str, Any], held: dict[str, list[float]]) -> str:
    """The largest rank's bytes (``held``: per memory kind, bytes per rank) against each
    rank's memory and what the planner gives the tables of it: the HBM on a GPU, beside the
    DDR where tables keep rows there (UVM kernels: their host memory went unsaid: review), the
    DDR on CPU; each names its rank where there are several (the largest HBM and the largest
    DDR can be two ranks: planning review)."""
    kinds = ["hbm", "ddr"] if hw["hbm_cap_gib_per_rank"] and max(held["ddr"]) else []
    kinds = kinds or (["hbm"] if hw["hbm_cap_gib_per_rank"] else ["ddr"])
    parts = []
    for kind in kinds:
        cap, sizes = hw[f"{kind}_cap_gib_per_rank"], held[kind]
        rank = max(range(len(sizes)), key=sizes.__getitem__)
        on = f" on rank {rank}" if len(sizes) > 1 else ""
        parts.append(  # (13.57 of 16 GiB read as room; the planner's limit is 13.60: review)
            f"{_gib(sizes[rank] / GIB, bare=True)} of {cap:.2f} GiB {kind.upper()}{on}, of "
            f"which the planner gives the tables {usable_bytes(cap):.2f}"
        )
    return "; ".join(parts)


def _gib(gib: float, bare: bool = False) -> str:
    """``gib`` GiB as text: ``19.22 GiB``, or below a tenth of a GiB in MiB (``0.37 MiB``; as
    the per-rank table: at 0.01 GiB the two disagreed for a 50 MiB plan: re-read); ``bare``:
    a GiB amount without its unit (``19.22``, beside a capacity that says it)."""
    if 0 < gib * GIB < IN_MIB_BELOW:
        return f"{gib * GIB / MIB:.2f} MiB"
    return f"{gib:.2f}" if bare else f"{gib:.2f} GiB"
