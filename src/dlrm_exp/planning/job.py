"""Planning one job: the one function both ``mode=plan`` and training call, so both choose the
same plan for the same config.

``plan_job`` either reads ``sharding.plan_path`` (``sharding=from_file``) or runs TorchRec's
planner over the meta-device model, and returns a :class:`PlanResult` (the plan with the
capacity it was planned against and, from the planner, the per-rank estimates).
"""

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torchrec.distributed.planner.constants import UVM_CACHING_RATIO
from torchrec.distributed.types import ModuleSharder, ShardingPlan

from dlrm_exp.config import (
    ComputeDevice,
    ComputeKernel,
    Config,
    EmbeddingDataType,
    HardwareConfig,
    ShardingStrategy,
)
from dlrm_exp.config.optimizer import fbgemm_fuses, fbgemm_steps_replicas
from dlrm_exp.distributed.launch import DistContext
from dlrm_exp.distributed.qcomms import builds_codecs, check_supported
from dlrm_exp.distributed.sharder import job_sharders
from dlrm_exp.errors import ConfigError, InsufficientMemoryError
from dlrm_exp.planning.constraints import build_constraints, table_placement
from dlrm_exp.planning.empty_shards import check_cpu_row_shards
from dlrm_exp.planning.estimates import EstimateCollector, RankEstimate, rank_estimates
from dlrm_exp.planning.fused_state import DEVICE_RESIDENT_KERNELS
from dlrm_exp.planning.plan_file import load_plan, offered_placements
from dlrm_exp.planning.plan_record import (
    plan_record,
    plan_sharding_types,
    plan_table_types,
    replicated_tables,
)
from dlrm_exp.planning.planner import (
    STORAGE_RESERVATION,
    build_planner,
    insufficient_memory_message,
    plan_or_explain,
    usable_bytes,
)
from dlrm_exp.planning.storage import (
    GIB,
    EmbeddingStorage,
    embedding_storage,
    row_bytes,
)
from dlrm_exp.planning.tables import table_configs, whole_pieces
from dlrm_exp.planning.topology import MemoryCapacity, build_topology, memory_capacity
from dlrm_exp.planning.uvm_cache import DevicePart, cache_message
from dlrm_exp.util.rank_zero import on_rank_zero
from dlrm_exp.util.substitution import Substitution
from dlrm_exp.util.text import first_few


def check_ranks_per_host(hardware: HardwareConfig, local_world_size: int) -> None:
    """A job that runs (``local_world_size`` ranks on each host) plans for its own ranks per
    host: TorchRec cuts table-row-wise and grid tables by the launcher's
    ``LOCAL_WORLD_SIZE`` at run time, whatever the plan assumed.

    Raises:
        ConfigError: ``hardware.local_world_size`` is set to another number.
    """
    if hardware.local_world_size not in (None, local_world_size):
        raise ConfigError(
            f"hardware.local_world_size={hardware.local_world_size} plans for that many ranks "
            f"per host, but this job runs {local_world_size} per host: leave it unset "
            "when training (it is for mode=plan of another layout)"
        )


def planning_context(hardware: HardwareConfig, ctx: DistContext | None = None) -> DistContext:
    """The job as the planner sees it: rank 0 on the meta device, ``world_size`` ranks (the
    running job's, else ``nproc_per_node x nnodes``) with ``hardware.local_world_size`` ranks
    per host (null: the running job's ranks per host, else ``nproc_per_node``).

    ``mode=plan``, the training parent's pre-flight and a worker that plans for itself all
    take their context from here, so the per-rank memory capacity and the Topology agree.

    Raises:
        ConfigError: a running job (``ctx``) with another ``hardware.local_world_size`` than
            its ranks per host: TorchRec cuts table-row-wise and grid tables by the
            launcher's ranks per host (``LOCAL_WORLD_SIZE``), whatever the plan assumed.
    """
    if ctx is not None:
        check_ranks_per_host(hardware, ctx.local_world_size)
    world = ctx.world_size if ctx is not None else hardware.world_size
    local = ctx.local_world_size if ctx is not None else hardware.nproc_per_node
    return DistContext(
        rank=0,
        world_size=world,
        local_rank=0,
        local_world_size=hardware.local_world_size or local,
        device=torch.device("meta"),
    )


@dataclass(frozen=True)
class PlanResult:
    """A job's plan and what it was planned against.

    Attributes:
        plan: the ``ShardingPlan`` every rank uses.
        context: the planning context (:func:`planning_context`).
        storage: the tables' total storage as the plan places them (weights in their dtype,
            sparse optimizer state, data_parallel gradients; one copy each).
        capacity: per-rank memory the planner was offered (None for a plan file).
        estimates: the planner's per-rank storage and perf estimates (empty for a plan file).
        held_per_rank: for a plan file, ``{"HBM": bytes, "DDR": bytes}`` per rank its shards
            take (tables and optimizer state, as :func:`_check_plan_fits` counts them);
            None for the planner's plan, whose ``estimates`` say it.
    """

    plan: ShardingPlan
    context: DistContext
    storage: EmbeddingStorage
    capacity: MemoryCapacity | None = None
    estimates: list[RankEstimate] = field(default_factory=list)
    held_per_rank: dict[str, list[int]] | None = None


def _placements(cfg: Config) -> list[tuple[ShardingStrategy, ComputeKernel]]:
    """Each table's sharding type and kernel as planned (``auto`` ones data_parallel when the
    sparse optimizer is not fused or the kernel is ``dense``)."""
    fused, managed = _fuses_sparse_optimizer(cfg), set(cfg.model.managed_tables)
    return [table_placement(cfg.sharding, t.name, fused, managed) for t in table_configs(cfg.model)]


def _plan_storage(cfg: Config, plan: ShardingPlan) -> EmbeddingStorage:
    """What the tables need as ``plan`` places them, one copy each (its data_parallel ones,
    which a from_file plan or ``auto`` may choose, with their gradient)."""
    return tables_storage(cfg, set(cfg.model.table_names), replicated_tables(plan))


def _device_part(
    cfg: Config, placements: list[tuple[ShardingStrategy, ComputeKernel]], world_size: int
) -> DevicePart:
    """What the planned tables put in HBM on a GPU (:class:`DevicePart`)."""
    resident = cached = whole = 0
    optimizer, dim = cfg.optimizer.sparse_optimizer, cfg.model.embedding_dim
    sizes, types = cfg.model.table_sizes, cfg.model.table_data_types
    for n, t, (kind, kernel) in zip(sizes, types, placements, strict=True):
        replica = kind is ShardingStrategy.data_parallel
        full = n * row_bytes(dim, t, optimizer, replica)
        if kernel is ComputeKernel.fused_uvm_caching:
            cached += full
            pieces = _whole_pieces(kind, cfg, world_size)  # a table, a column shard, a host's
            whole = max(whole, full // pieces if pieces else 0)
        elif kernel.value in DEVICE_RESIDENT_KERNELS:
            resident += full * (world_size if replica else 1)
    factor = cfg.sharding.cache_load_factor
    return DevicePart(resident, cached, UVM_CACHING_RATIO if factor is None else factor, whole)


def _memory_message(cfg: Config, capacity: MemoryCapacity, world_size: int) -> str:
    """The insufficient-memory explanation for this job (data_parallel tables, as planned,
    counted once per rank with their gradient), unless the HBM caches of UVM-cached tables
    are what overflows (:mod:`.uvm_cache`: the HBM with the device-resident tables and the
    caches). With tables on both kinds of kernel, the DDR is then what overflows: explained
    with the UVM kernels' tables alone (every table was counted against it: review)."""
    placements = _placements(cfg)
    cache = cache_message(_device_part(cfg, placements, world_size), capacity, world_size)
    if cache is not None:
        return cache
    names = cfg.model.table_names
    in_host = [kernel.value not in DEVICE_RESIDENT_KERNELS for _, kernel in placements]
    chosen, on_hbm, note = list(range(len(names))), not any(in_host), ""
    if capacity.hbm_bytes and any(in_host) and not all(in_host):  # (the HBM fits: above)
        chosen = [i for i, host in enumerate(in_host) if host]
        shown = first_few([names[i] for i in chosen], 4)
        note = f"the {len(chosen)} table(s) on UVM kernels, whose rows live in host memory: {shown}"
    replicated = [placements[i][0] is ShardingStrategy.data_parallel for i in chosen]
    picked = {names[i] for i in chosen}
    dp_names = {names[i] for i, dp in zip(chosen, replicated, strict=True) if dp}
    sizes, types = cfg.model.table_sizes, cfg.model.table_data_types
    return insufficient_memory_message(
        tables_storage(cfg, picked, dp_names),
        cfg.optimizer.sparse_optimizer,
        [sizes[i] for i in chosen],
        cfg.model.embedding_dim,
        capacity,
        world_size,
        replicated=tables_storage(cfg, dp_names, dp_names),
        copies=[world_size if is_dp else 1 for is_dp in replicated],
        data_types=[types[i] for i in chosen],
        on_hbm=on_hbm,  # the UVM kernels' rows live in host memory
        replicated_tables=replicated,
        whole_tables=[_whole_pieces(placements[i][0], cfg, world_size) for i in chosen],
        batch_size=cfg.train.batch_size,
        ranks_per_node=cfg.hardware.nproc_per_node,
        pinned_dtypes=bool(cfg.model.embedding_data_type_per_table),
        note=note,
        global_batch=cfg.train.global_batch_size,
    )


def _whole_pieces(kind: ShardingStrategy, cfg: Config, world_size: int) -> int:
    """:func:`~dlrm_exp.planning.tables.whole_pieces` of a table of ``cfg`` on this job's
    hosts."""
    per_host = cfg.hardware.local_world_size or min(cfg.hardware.nproc_per_node, world_size)
    return whole_pieces(kind, cfg.model.embedding_dim, per_host)


def tables_storage(
    cfg: Config, names: set[str], data_parallel: set[str] | None = None
) -> EmbeddingStorage:
    """What the tables ``names`` of ``cfg.model`` need (weights in their dtype and the sparse
    optimizer's state, one copy, and a gradient for those in ``data_parallel``), e.g. the
    data_parallel ones that every rank holds whole."""
    model = cfg.model
    chosen = [i for i, name in enumerate(model.table_names) if name in names]
    sizes, types = model.table_sizes, model.table_data_types  # properties: built once here
    return embedding_storage(
        [sizes[i] for i in chosen],
        model.embedding_dim,
        cfg.optimizer.sparse_optimizer,
        [types[i] for i in chosen],
        [model.table_names[i] in (data_parallel or set()) for i in chosen],
    )


def plan_job(
    cfg: Config,
    module: torch.nn.Module,
    ctx: DistContext | None = None,
    sharders: list[ModuleSharder] | None = None,
) -> PlanResult:
    """Shard ``module`` (tables on the meta device) for this job with TorchRec's planner, or
    take the plan of ``sharding.plan_path`` (``sharding=from_file``).

    Args:
        cfg: the job's config.
        module: the unsharded model with its sparse optimizer attached.
        ctx: the running job's place (None: plan for ``cfg.hardware`` without a process group,
            as ``mode=plan`` and the training parent do); see :func:`planning_context`.
        sharders: the job's sharders, the EBC sharder first (default: :func:`job_sharders`).

    Returns:
        :class:`PlanResult`: the plan and its context and storage; from the planner also the
        capacity offered and the per-rank estimates.

    Raises:
        ConfigError: the plan's sharding types cannot run with the configured qcomms on this
            backend (:data:`dlrm_exp.distributed.qcomms.UNSUPPORTED`), a plan file
            does not match the job (:func:`dlrm_exp.planning.plan_file.load_plan`), or on CPU
            a rank would hold only empty shards of a group of tables
            (:func:`~dlrm_exp.planning.empty_shards.check_cpu_row_shards`).
        InsufficientMemoryError: the tables do not fit; the message gives needed vs offered
            GiB and a ``model.num_embeddings_cap`` that fits. Raised before anything is
            allocated.
        PlanError: the planner found no placement under the constraints.
    """
    target = planning_context(cfg.hardware, ctx)
    sharders = sharders or job_sharders(cfg.qcomms, cfg.optimizer.stochastic_rounding)
    if cfg.sharding.sharding_type is ShardingStrategy.from_file:
        result = _plan_from_file(cfg, module, target, sharders)
    else:
        result = _plan_with_planner(cfg, module, target, sharders)
    check_supported(cfg.qcomms, plan_sharding_types(result.plan), _placed_by(cfg, result.plan))
    _check_fp16_replicas(cfg, result.plan)
    if cfg.hardware.compute_device is ComputeDevice.cpu:
        check_cpu_row_shards(result.plan, cfg.model.table_data_type_of, target.world_size)
    return result


def _placed_by(cfg: Config, plan: ShardingPlan) -> Callable[[str], str]:
    """For a refusal: the tables ``plan`` gives a sharding type, and what placed them there
    (a per-table override, the plan file, ``sharding.sharding_type``, the planner)."""

    def placed(kind: str) -> str:
        names = sorted(t for t, k in plan_table_types(plan).items() if k == kind)
        managed = [t for t in names if t in cfg.model.managed_tables]  # (always row_wise,
        # constraints.table_placement's first rule: it named the group's setting: re-read)
        overridden = [t for t in names if t in cfg.sharding.per_table_sharding_type]
        overridden = [t for t in overridden if t not in managed]
        rest = [t for t in names if t not in overridden and t not in managed]
        by = {ShardingStrategy.from_file: "the plan file", ShardingStrategy.auto: "the planner"}
        asked = f"sharding.sharding_type={cfg.sharding.sharding_type.value}"
        parts = [f"+sharding.per_table_sharding_type.{t}" for t in overridden[:4]]
        parts += [f"{first_few(rest)} by {by.get(cfg.sharding.sharding_type, asked)}"] * bool(rest)
        parts += [f"{first_few(managed)} by id_policy=managed_collision, always"] * bool(managed)
        return "; ".join(parts)  # (both, where both placed some: diff reviews)

    return placed


def _check_fp16_replicas(cfg: Config, plan: ShardingPlan) -> None:
    """fp16 tables the plan replicates (``data_parallel``) are stepped after DDP by FBGEMM's
    fused kernel on CPU with a sparse optimizer of
    :data:`~dlrm_exp.config.optimizer.CPU_FUSED`, in fp32 state; anywhere else by
    ``torch.optim`` (Adam on CPU; every optimizer on CUDA), whose state is then fp16 too:
    Adam's ``eps`` and squared gradients and Adagrad's zero sums underflow, and rows turn
    inf or NaN at the first update (measured: Adam on CPU, NaN loss at step 2).

    Raises:
        ConfigError: naming the tables and the ways out.
    """
    on_cpu = cfg.hardware.compute_device is ComputeDevice.cpu
    if fbgemm_steps_replicas(cfg.optimizer.sparse_optimizer, on_cpu):
        return
    fp16 = {
        name
        for name, data_type in cfg.model.table_data_type_of.items()
        if data_type is EmbeddingDataType.fp16
    }
    replicated = sorted(fp16 & replicated_tables(plan))
    if replicated:
        shown = first_few(replicated, 4)
        opt = cfg.optimizer.sparse_optimizer.value
        raise ConfigError(
            f"model.embedding_data_type=fp16 with data_parallel tables ({shown}): here "
            f"torch.optim's {opt} would update their fp16 replicas in fp16 state, which turns "
            f"rows inf or NaN; keep them fp32 (+model.embedding_data_type_per_table.{replicated[0]}"
            "=fp32), or "
            + (
                "use a sparse optimizer FBGEMM fuses on CPU (optimizer=rowwise_adagrad, adagrad "
                "or sgd)"
                if on_cpu
                else "shard them (sharding=rowwise, tablewise, ...)"
            )
        )


def _fuses_sparse_optimizer(cfg: Config) -> bool:
    """Whether FBGEMM fuses the sparse optimizer into backward on the compute device (on CPU
    only those of :data:`~dlrm_exp.config.optimizer.CPU_FUSED`)."""
    on_cpu = cfg.hardware.compute_device is ComputeDevice.cpu
    return fbgemm_fuses(cfg.optimizer.sparse_optimizer, on_cpu)


def optimizer_substitution(cfg: Config) -> Substitution | None:
    """The substitution when the planner replicates ``auto`` tables because FBGEMM cannot fuse
    the sparse optimizer on this device (Adam on CPU: ``data_parallel`` with the dense kernel,
    stepped by ``torch.optim`` after DDP, see
    :func:`~dlrm_exp.planning.constraints.build_constraints`); None otherwise."""
    if _fuses_sparse_optimizer(cfg) or cfg.sharding.sharding_type is ShardingStrategy.from_file:
        return None
    tables = table_configs(cfg.model)
    if all(cfg.sharding.table_choice(t.name)[0] is not ShardingStrategy.auto for t in tables):
        return None
    name = cfg.optimizer.sparse_optimizer.value
    return Substitution(
        "optimizer",
        name,
        "torch.optim on data_parallel tables (dense kernel)",
        f"FBGEMM's CPU kernels cannot fuse {name} into backward",
    )


def _plan_from_file(
    cfg: Config, module: torch.nn.Module, target: DistContext, sharders: list[ModuleSharder]
) -> PlanResult:
    """``sharding=from_file``: the plan of ``sharding.plan_path``, checked against the job
    (tables and their modules, ranks, the placements the sharders offer on this device and
    sparse optimizer) and against this hardware's memory (:func:`_check_plan_fits`). Read and
    checked on rank 0 for every rank, as the planner's plan is: a file on one host only, or
    memory measured differently per host, failed some ranks while the others waited."""
    assert cfg.sharding.plan_path is not None  # checked by ShardingConfig
    path = cfg.sharding.plan_path
    device = cfg.hardware.compute_device.value
    restriction = None
    if not _fuses_sparse_optimizer(cfg):
        name = cfg.optimizer.sparse_optimizer.value
        restriction = f"optimizer.sparse_optimizer={name}: FBGEMM's {device} kernels cannot fuse it"

    def checked() -> tuple[ShardingPlan, dict[str, list[int]]]:
        offered = offered_placements(module, sharders, device, restriction)
        tables = table_configs(cfg.model)
        plan = load_plan(path, tables, target.world_size, target.local_world_size, offered)
        return plan, _check_plan_fits(cfg, plan, target)

    plan, held = on_rank_zero(checked)
    return PlanResult(plan, target, _plan_storage(cfg, plan), held_per_rank=held)


def _check_plan_fits(cfg: Config, plan: ShardingPlan, target: DistContext) -> dict[str, list[int]]:
    """A plan file was made for some hardware; refuse it before anything is allocated when a
    rank's shards (weights at their dtype, the fused optimizer's state in fp32) exceed what
    this job's rank offers, less the planner's reservation for the dense part and activations:
    on a GPU its HBM for the tables in device memory and the ``fused_uvm_caching`` tables'
    cache (its load factor of their weights, as TorchRec's planner counts it, default
    ``UVM_CACHING_RATIO``), and its DDR for the UVM kernels' rows; on CPU its DDR.

    Returns the bytes each rank holds (:func:`_plan_bytes_per_rank`).

    Raises:
        InsufficientMemoryError: naming the rank, the memory, the GiB it needs and offers.
    """
    capacity = memory_capacity(cfg.hardware, target.local_world_size)
    on_gpu = cfg.hardware.compute_device is ComputeDevice.cuda
    need = _plan_bytes_per_rank(cfg, plan, target, on_gpu)
    for on_hbm in (True, False) if on_gpu else (False,):
        per_rank, kind, source = capacity.for_tables(on_hbm)
        held = need["HBM" if on_hbm else "DDR"]
        rank = max(range(target.world_size), key=held.__getitem__)
        usable = usable_bytes(per_rank)
        if held[rank] > usable:
            raise InsufficientMemoryError(
                f"sharding.plan_path={cfg.sharding.plan_path}: rank {rank} holds "
                f"{held[rank] / GIB:.2f} GiB of tables and optimizer state in {kind}, more than "
                f"the {usable / GIB:.2f} GiB its {per_rank / GIB:.2f} GiB {kind} ({source}) "
                f"leaves after {STORAGE_RESERVATION:.0%} for the dense part and activations: "
                "plan again for this hardware (sharding=auto, mode=plan) or use hardware with "
                "more memory"
            )
    return need


def _plan_bytes_per_rank(
    cfg: Config, plan: ShardingPlan, target: DistContext, on_gpu: bool
) -> dict[str, list[int]]:
    """``{"HBM": bytes per rank, "DDR": bytes per rank}`` the plan's shards take (see
    :func:`_check_plan_fits`; on CPU every byte is DDR)."""
    record = plan_record(plan, table_configs(cfg.model), target.world_size, target.local_world_size)
    need = {"HBM": [0] * target.world_size, "DDR": [0] * target.world_size}
    optimizer, cached = cfg.optimizer.sparse_optimizer, ComputeKernel.fused_uvm_caching.value
    for table in record.tables.values():
        data_type = EmbeddingDataType(table.data_type)
        device = not on_gpu or table.compute_kernel in DEVICE_RESIDENT_KERNELS
        for shard in table.shards:
            rows, cols = shard.sizes
            replica = table.sharding_type == "data_parallel"  # with its gradient
            full = rows * row_bytes(cols, data_type, optimizer, replica)
            if device:
                need["HBM" if on_gpu else "DDR"][shard.rank] += full
                continue
            need["DDR"][shard.rank] += full  # the UVM kernels' rows live in host memory
            if table.compute_kernel == cached:  # and a cache of them (with state) in HBM,
                factor = table.cache_load_factor or UVM_CACHING_RATIO  # as TorchRec sizes it
                need["HBM"][shard.rank] += round(full * factor)
    return need


def _plan_with_planner(
    cfg: Config,
    module: torch.nn.Module,
    target: DistContext,
    sharders: list[ModuleSharder],
) -> PlanResult:
    """TorchRec's planner over ``module`` for ``target``, with the per-rank estimates."""
    capacity = memory_capacity(cfg.hardware, target.local_world_size)
    topology = build_topology(cfg.hardware, target.world_size, target.local_world_size, capacity)
    offered = sharders[0].sharding_types(cfg.hardware.compute_device.value)
    fused = _fuses_sparse_optimizer(cfg)
    tables = table_configs(cfg.model)
    constraints = build_constraints(
        cfg.sharding,
        tables,
        offered,
        cfg.data.pooling_factors(),
        fused_optimizer=fused,
        managed=set(cfg.model.managed_tables),
    )
    collector, qcomms = EstimateCollector(), cfg.qcomms
    planner = build_planner(
        topology,
        constraints,
        cfg.train.batch_size,
        [collector],
        optimizer=cfg.optimizer.sparse_optimizer,
        codecs=builds_codecs(qcomms),
    )
    plan = plan_or_explain(
        planner,
        module,
        sharders,
        lambda: _memory_message(cfg, capacity, target.world_size),
        _planner_summary(cfg, target.world_size),
    )
    return PlanResult(
        plan=plan,
        context=target,
        storage=_plan_storage(cfg, plan),
        capacity=capacity,
        estimates=rank_estimates(collector.best_plan, target.world_size),
    )


def _planner_summary(cfg: Config, world_size: int) -> str:
    """The job's sharding choices in one line, for the planner's error messages."""
    overrides = cfg.sharding.overridden_tables
    return (
        f"sharding_type={cfg.sharding.sharding_type.value}, "
        f"compute_kernel={cfg.sharding.compute_kernel.value} on {world_size} rank(s)"
        + (f", per-table overrides for {', '.join(overrides)}" if overrides else "")
    )
