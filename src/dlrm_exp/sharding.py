"""Sharding: planner constraints, the sharder (row-wise on CPU too), Topology and the plan.

TorchRec's stock ``EmbeddingBagCollectionSharder`` offers ``row_wise``, ``table_row_wise`` and
``grid_shard`` only on CUDA, although the CPU kernels and gloo collectives run them correctly;
:class:`CpuEmbeddingBagCollectionSharder` also offers them on CPU.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass

import psutil
import torch
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints
from torchrec.distributed.planner.storage_reservations import FixedPercentageStorageReservation
from torchrec.distributed.planner.types import (
    KernelConfig,
    PlannerError,
    PlannerErrorType,
    Topology,
    TopologyFactory,
    TrainerConfig,
)
from torchrec.distributed.types import QuantizedCommCodecs, ShardingPlan, ShardingType
from torchrec.modules.embedding_configs import EmbeddingBagConfig

from dlrm_exp.config import (
    ComputeDevice,
    ComputeKernel,
    HardwareConfig,
    ShardingConfig,
    ShardingStrategy,
    SparseOptimizer,
)
from dlrm_exp.errors import InsufficientMemoryError
from dlrm_exp.storage import GIB, EmbeddingStorage, largest_fitting_cap

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
    cfg: ShardingConfig, tables: list[EmbeddingBagConfig], offered_types: list[str]
) -> dict[str, ParameterConstraints]:
    """``ParameterConstraints`` for every table: the requested sharding type and compute kernel.

    For ``auto`` the planner may pick any type the sharder offers (``offered_types``) that
    works with the compute kernel: data_parallel only goes with the dense kernel.
    """
    if cfg.sharding_type is ShardingStrategy.auto:
        types = [
            t
            for t in offered_types
            if cfg.compute_kernel is ComputeKernel.dense or t != ShardingType.DATA_PARALLEL.value
        ]
    else:
        types = [cfg.sharding_type.value]
    return {
        t.name: ParameterConstraints(
            sharding_types=types, compute_kernels=[cfg.compute_kernel.value]
        )
        for t in tables
    }


def machine_memory_bytes() -> int:
    """Total RAM of this machine, bytes (psutil)."""
    return int(psutil.virtual_memory().total)


@dataclass(frozen=True)
class MemoryCapacity:
    """Per-rank memory the planner may use, bytes, and where the number came from."""

    ddr_bytes: int
    hbm_bytes: int | None
    source: str


def memory_capacity(cfg: HardwareConfig, local_world_size: int) -> MemoryCapacity:
    """Per-rank DDR (and HBM) capacity: the config's values, else measured on this machine.

    A null ``ddr_cap_gib`` becomes total RAM / ``local_world_size``; a null ``hbm_cap_gib``
    on CUDA becomes the memory of device 0.
    """
    if cfg.ddr_cap_gib is not None:
        ddr, source = int(cfg.ddr_cap_gib * GIB), "hardware.ddr_cap_gib"
    else:
        ddr = machine_memory_bytes() // local_world_size
        source = (
            f"measured: {machine_memory_bytes() / GIB:.1f} GiB RAM / {local_world_size} rank(s)"
        )
    hbm: int | None = None
    if cfg.compute_device is ComputeDevice.cuda:
        if cfg.hbm_cap_gib is not None:
            hbm = int(cfg.hbm_cap_gib * GIB)
        elif torch.cuda.is_available():
            hbm = torch.cuda.get_device_properties(0).total_memory
    return MemoryCapacity(ddr_bytes=ddr, hbm_bytes=hbm, source=source)


def build_topology(
    cfg: HardwareConfig, world_size: int, local_world_size: int, capacity: MemoryCapacity
) -> Topology:
    """TorchRec ``Topology`` for ``world_size`` ranks with the given per-rank capacity."""
    return TopologyFactory.create_topology(
        trainer_config=TrainerConfig(
            world_size=world_size,
            local_world_size=local_world_size,
            ddr_cap_bytes=capacity.ddr_bytes,
            hbm_cap_bytes=capacity.hbm_bytes,
        ),
        kernel_config=KernelConfig(compute_device=cfg.compute_device.value),
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
) -> str:
    """One message with what the tables need, what the hardware offers, and a cap that fits.

    The suggested ``model.num_embeddings_cap`` keeps the tables within 80 % of the usable
    memory (offered minus the planner's reservation), leaving room for the dense part.
    """
    per_rank = (
        capacity.hbm_bytes if device_kind == "HBM" and capacity.hbm_bytes else capacity.ddr_bytes
    )
    offered = per_rank * world_size
    usable = offered * (1 - STORAGE_RESERVATION)
    cap = largest_fitting_cap(table_sizes, embedding_dim, optimizer, usable * 0.8)
    lines = [
        f"Not enough memory for the embedding tables ({len(table_sizes)} tables, "
        f"{storage.rows:,} rows x embedding_dim {embedding_dim}):",
        f"  needed:  {storage.weight_bytes / GIB:.2f} GiB fp32 weights + "
        f"{storage.optimizer_bytes / GIB:.2f} GiB {optimizer.value} state = "
        f"{storage.total_bytes / GIB:.2f} GiB",
        f"  offered: {offered / GIB:.2f} GiB {device_kind} on {world_size} rank(s) "
        f"({per_rank / GIB:.2f} GiB each, {capacity.source}; "
        f"{STORAGE_RESERVATION:.0%} kept for dense parameters and activations)",
    ]
    if cap is not None:
        lines.append(
            f"Fix: cap the tables with model.num_embeddings_cap={cap}, or add ranks / memory."
        )
    else:
        lines.append("Fix: add ranks or memory (hardware=...); no table cap makes this fit.")
    return "\n".join(lines)


def plan_or_explain(
    planner: EmbeddingShardingPlanner,
    module: torch.nn.Module,
    sharder: EmbeddingBagCollectionSharder,
    explain_memory: Callable[[], str],
) -> ShardingPlan:
    """Run the planner on this rank (it is deterministic, so every rank gets the same plan and
    a planner error is raised on every rank alike, never leaving peers waiting).

    Raises:
        InsufficientMemoryError: no placement fits; the message is ``explain_memory()``.
    """
    try:
        return planner.plan(module, [sharder])
    except PlannerError as err:
        if err.error_type is PlannerErrorType.INSUFFICIENT_STORAGE:
            raise InsufficientMemoryError(explain_memory()) from None
        raise


def plan_text(plan: ShardingPlan) -> str:
    """The plan as TorchRec prints it: per module, a table of param | sharding type | compute
    kernel | ranks."""
    return str(plan)
