"""Sharding: planner constraints, the sharder (row-wise on CPU too), Topology and the plan.

TorchRec's stock ``EmbeddingBagCollectionSharder`` offers ``row_wise``, ``table_row_wise`` and
``grid_shard`` only on CUDA, although the CPU kernels and gloo collectives run them correctly;
:class:`CpuEmbeddingBagCollectionSharder` also offers them on CPU.
"""

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import psutil
import torch
import torch.distributed as dist
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints
from torchrec.distributed.planner.storage_reservations import FixedPercentageStorageReservation
from torchrec.distributed.planner.types import HardwareConfig as TorchRecHardwareConfig
from torchrec.distributed.planner.types import (
    KernelConfig,
    PlannerError,
    PlannerErrorType,
    Topology,
    TopologyFactory,
    TrainerConfig,
)
from torchrec.distributed.types import (
    CacheParams,
    QuantizedCommCodecs,
    ShardingPlan,
    ShardingType,
)
from torchrec.modules.embedding_configs import EmbeddingBagConfig

from dlrm_exp.config import (
    ComputeDevice,
    ComputeKernel,
    HardwareConfig,
    ShardingConfig,
    ShardingStrategy,
    SparseOptimizer,
)
from dlrm_exp.errors import InsufficientMemoryError, PlanError
from dlrm_exp.storage import FP32_BYTES, GIB, EmbeddingStorage, largest_fitting_cap

log = logging.getLogger(__name__)

#: Share of each rank's memory the planner keeps free for dense parameters, activations and
#: input batches (TorchRec's ``FixedPercentageStorageReservation``).
STORAGE_RESERVATION = 0.15

_CPU_EXTRA_TYPES = (ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE, ShardingType.GRID_SHARD)


class CpuEmbeddingBagCollectionSharder(EmbeddingBagCollectionSharder):
    """``EmbeddingBagCollectionSharder`` that also offers row_wise, table_row_wise and
    grid_shard when the compute device is the CPU."""

    def sharding_types(self, compute_device_type: str) -> list[str]:
        types = super().sharding_types(compute_device_type)
        if compute_device_type == "cpu":
            types += [t.value for t in _CPU_EXTRA_TYPES if t.value not in types]
        return types


def build_sharder(
    qcomm_codecs_registry: dict[str, QuantizedCommCodecs] | None,
) -> CpuEmbeddingBagCollectionSharder:
    """The EBC sharder, with the quantized-communication codecs (None: fp32 collectives)."""
    return CpuEmbeddingBagCollectionSharder(qcomm_codecs_registry=qcomm_codecs_registry)


def build_constraints(
    cfg: ShardingConfig,
    tables: list[EmbeddingBagConfig],
    offered_types: list[str],
    pooling_factors: list[int] | None = None,
) -> dict[str, ParameterConstraints]:
    """``ParameterConstraints`` for every table: its sharding type and compute kernel (the
    group's, or its ``per_table_*`` override), and its ids per sample (``pooling_factors``,
    default 1: one-hot; the multi-hot sizes with ``data=criteo_multihot``) for the planner's
    cost estimates.

    For ``auto`` the planner may pick any type the sharder offers (``offered_types``) that
    works with the compute kernel: data_parallel only goes with the dense kernel.
    ``fused_uvm_caching`` gets ``CacheParams(load_factor=cache_load_factor)``.
    """
    constraints = {}
    for index, table in enumerate(tables):
        kind, kernel = cfg.table_choice(table.name)
        if kind is ShardingStrategy.auto:
            dp = ShardingType.DATA_PARALLEL.value
            types = [t for t in offered_types if (kernel is ComputeKernel.dense) == (t == dp)]
        else:
            types = [kind.value]
        cache = None
        if kernel is ComputeKernel.fused_uvm_caching and cfg.cache_load_factor is not None:
            cache = CacheParams(load_factor=cfg.cache_load_factor)
        pooling = float(pooling_factors[index]) if pooling_factors else 1.0
        constraints[table.name] = ParameterConstraints(
            sharding_types=types,
            compute_kernels=[kernel.value],
            cache_params=cache,
            pooling_factors=[pooling],
        )
    return constraints


def machine_memory_bytes() -> int:
    """Total RAM of this machine, bytes (psutil)."""
    return int(psutil.virtual_memory().total)


@dataclass(frozen=True)
class MemoryCapacity:
    """Per-rank memory the planner may use, bytes, and where the number came from."""

    ddr_bytes: int
    hbm_bytes: int | None
    source: str
    hbm_source: str = ""


def memory_capacity(cfg: HardwareConfig, local_world_size: int) -> MemoryCapacity:
    """Per-rank DDR (and HBM) capacity: the config's values, else measured on this machine.

    A null ``ddr_cap`` becomes total RAM / ``local_world_size``; a null ``hbm_cap``
    on CUDA becomes the memory of device 0.
    """
    if cfg.ddr_cap is not None:
        ddr, source = int(cfg.ddr_cap * GIB), "hardware.ddr_cap"
    else:
        ddr = machine_memory_bytes() // local_world_size
        source = (
            f"measured: {machine_memory_bytes() / GIB:.1f} GiB RAM / {local_world_size} rank(s)"
        )
    hbm: int | None = None
    hbm_source = ""
    if cfg.compute_device is ComputeDevice.cuda:
        if cfg.hbm_cap is not None:
            hbm, hbm_source = int(cfg.hbm_cap * GIB), "hardware.hbm_cap"
        elif torch.cuda.is_available():
            hbm = torch.cuda.get_device_properties(0).total_memory
            hbm_source = f"measured: {torch.cuda.get_device_name(0)}"
    return MemoryCapacity(ddr_bytes=ddr, hbm_bytes=hbm, source=source, hbm_source=hbm_source)


def gbps_to_bytes_per_ms(gbps: float) -> float:
    """GB/s to the planner's bytes/ms, with TorchRec's convention GB = 1024**3 bytes
    (``INTRA_NODE_BANDWIDTH = 600 * 1024**3 / 1000`` is its 600 GB/s)."""
    return gbps * 1024**3 / 1000


def build_topology(
    cfg: HardwareConfig, world_size: int, local_world_size: int, capacity: MemoryCapacity
) -> Topology:
    """TorchRec ``Topology`` for ``world_size`` ranks with the given per-rank capacity and the
    config's bandwidths (GB/s; null keeps TorchRec's 600 GB/s intra-host, 12.5 GB/s
    inter-host, 897 GB/s HBM)."""
    bandwidths = any(v is not None for v in (cfg.intra_host_bw, cfg.inter_host_bw, cfg.hbm_mem_bw))
    hardware = TorchRecHardwareConfig(
        intra_host_bw=None
        if cfg.intra_host_bw is None
        else gbps_to_bytes_per_ms(cfg.intra_host_bw),
        inter_host_bw=None
        if cfg.inter_host_bw is None
        else gbps_to_bytes_per_ms(cfg.inter_host_bw),
        hbm_mem_bw=None if cfg.hbm_mem_bw is None else gbps_to_bytes_per_ms(cfg.hbm_mem_bw),
    )
    return TopologyFactory.create_topology(
        trainer_config=TrainerConfig(
            world_size=world_size,
            local_world_size=cfg.local_world_size or local_world_size,
            ddr_cap_bytes=capacity.ddr_bytes,
            hbm_cap_bytes=capacity.hbm_bytes,
        ),
        hardware_config=hardware,
        kernel_config=KernelConfig(
            compute_device=cfg.compute_device.value, use_hardware_based_bandwidth=bandwidths
        ),
    )


def build_planner(
    topology: Topology, constraints: dict[str, ParameterConstraints], batch_size: int
) -> EmbeddingShardingPlanner:
    """TorchRec's ``EmbeddingShardingPlanner`` with a fixed storage reservation."""
    return EmbeddingShardingPlanner(
        topology=topology,
        batch_size=batch_size,
        constraints=constraints,
        storage_reservation=FixedPercentageStorageReservation(STORAGE_RESERVATION),
    )


def insufficient_memory_message(
    storage: EmbeddingStorage,
    optimizer: SparseOptimizer,
    table_sizes: list[int],
    embedding_dim: int,
    capacity: MemoryCapacity,
    world_size: int,
    device_kind: str,
    replicated: EmbeddingStorage | None = None,
    copies: list[int] | None = None,
) -> str:
    """One message with what the tables need, what the hardware offers, and a cap that fits.

    The suggested ``model.num_embeddings_cap`` keeps the tables within 80 % of the usable
    memory (offered minus the planner's reservation), leaving room for the dense part.
    """
    on_hbm = device_kind == "HBM" and bool(capacity.hbm_bytes)
    per_rank = capacity.hbm_bytes if on_hbm and capacity.hbm_bytes else capacity.ddr_bytes
    source = capacity.hbm_source if on_hbm else capacity.source
    offered = per_rank * world_size
    usable = offered * (1 - STORAGE_RESERVATION)
    cap = largest_fitting_cap(table_sizes, embedding_dim, optimizer, usable * 0.8, copies)
    lines: list[str] = [
        f"Not enough memory for the embedding tables ({len(table_sizes)} tables, "
        f"{storage.rows:,} rows x embedding_dim {embedding_dim}):",
        f"  needed:  {storage.weight_bytes / GIB:.2f} GiB fp32 weights + "
        f"{storage.optimizer_bytes / GIB:.2f} GiB {optimizer.value} state = "
        f"{storage.total_bytes / GIB:.2f} GiB",
    ]
    if replicated is not None and replicated.rows and world_size > 1:
        lines.append(
            f"           of which {replicated.total_bytes / GIB:.2f} GiB are data_parallel "
            f"tables, held whole by each of the {world_size} ranks: "
            f"{(storage.total_bytes + replicated.total_bytes * (world_size - 1)) / GIB:.2f} GiB "
            "in all"
        )
    lines += [
        f"  offered: {offered / GIB:.2f} GiB {device_kind} on {world_size} rank(s) "
        f"({per_rank / GIB:.2f} GiB each, {source}; "
        f"{STORAGE_RESERVATION:.0%} kept for dense parameters and activations)",
    ]
    ranks_needed = math.ceil(storage.total_bytes / (per_rank * (1 - STORAGE_RESERVATION)))
    more = f"at least {ranks_needed} ranks of {per_rank / GIB:.2f} GiB (hardware.nnodes=...)"
    if cap is not None:
        lines.append(
            f"Fix: cap the tables with model.num_embeddings_cap={cap}, or add ranks / memory: "
            f"{more}."
        )
    else:
        lines.append(f"Fix: add ranks or memory: {more}; no table cap makes this fit.")
    return "\n".join(lines)


def plan_or_explain(
    planner: EmbeddingShardingPlanner,
    module: torch.nn.Module,
    sharder: EmbeddingBagCollectionSharder,
    explain_memory: Callable[[], str],
    constraints_summary: str = "",
) -> ShardingPlan:
    """Plan on rank 0 and broadcast the plan, or the planner's error, to every rank.

    The planner is not guaranteed to give the same plan in every process (``auto`` was seen to
    differ), so one rank decides. Broadcasting the error too means a plan that fails raises on
    every rank instead of leaving peers waiting for a plan. Without a process group (the
    parent's pre-flight, ``mode=plan``) it simply plans.

    Raises:
        InsufficientMemoryError: no placement fits; the message is ``explain_memory()``.
        PlanError: any other planner failure, with the planner's last reason and
            ``constraints_summary``.
    """
    distributed = dist.is_initialized() and dist.get_world_size() > 1
    outcome: list[object] = [None]
    if not distributed or dist.get_rank() == 0:
        try:
            outcome[0] = planner.plan(module, [sharder])
        except PlannerError as err:
            if err.error_type is PlannerErrorType.INSUFFICIENT_STORAGE:
                outcome[0] = InsufficientMemoryError(explain_memory())
            else:
                reason = [line.strip() for line in str(err).splitlines() if line.strip()][-1]
                outcome[0] = PlanError(
                    f"TorchRec's planner found no placement ({err.error_type.value}) for "
                    f"{constraints_summary}: {reason[:300]}"
                )
    if distributed:
        dist.broadcast_object_list(outcome, src=0)
    if isinstance(outcome[0], Exception):
        raise outcome[0]
    assert isinstance(outcome[0], ShardingPlan)
    return outcome[0]


def plan_sharding_types(plan: ShardingPlan) -> set[str]:
    """The sharding types used anywhere in ``plan`` (TorchRec ``ShardingType`` strings)."""
    return {
        ps.sharding_type
        for module_plan in plan.plan.values()
        for ps in module_plan.values()  # type: ignore[union-attr]
    }


def plan_record(
    plan: ShardingPlan, tables: list[EmbeddingBagConfig], world_size: int
) -> dict[str, object]:
    """The plan as data (``plan.json``): per table its sharding type, compute kernel, ranks and
    shards (rank, row/column offsets, sizes), and the fp32 embedding bytes held by each rank.

    A data_parallel table has one full-size shard on every rank.
    """
    by_name = {t.name: t for t in tables}
    per_rank = [0] * world_size
    records: dict[str, object] = {}
    for module_path, module_plan in plan.plan.items():
        for name, ps in module_plan.items():  # type: ignore[union-attr]
            table = by_name[name]
            full = [table.num_embeddings, table.embedding_dim]
            if ps.sharding_spec is None:
                shards = [{"rank": r, "offsets": [0, 0], "sizes": full} for r in ps.ranks or []]
            else:
                shards = [
                    {
                        "rank": shard.placement.rank(),
                        "offsets": list(shard.shard_offsets),
                        "sizes": list(shard.shard_sizes),
                    }
                    for shard in ps.sharding_spec.shards  # type: ignore[attr-defined]
                ]
            for shard in shards:
                per_rank[shard["rank"]] += shard["sizes"][0] * shard["sizes"][1] * FP32_BYTES
            records[name] = {
                "module": module_path,
                "sharding_type": ps.sharding_type,
                "compute_kernel": ps.compute_kernel,
                "ranks": list(ps.ranks or []),
                "num_embeddings": table.num_embeddings,
                "embedding_dim": table.embedding_dim,
                "shards": shards,
            }
    return {"world_size": world_size, "tables": records, "embedding_bytes_per_rank": per_rank}


def plan_text(plan: ShardingPlan) -> str:
    """The plan as TorchRec prints it: per module, a table of param | sharding type | compute
    kernel | ranks."""
    return str(plan)
