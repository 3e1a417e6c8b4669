"""Typed factories wired together: config -> sharded model, optimizer and training pipeline.

``build_experiment`` is the one place where the groups meet: model (meta device) ->
sparse optimizer in backward -> planner (constraints, Topology, sharder with qcomm codecs) ->
``DistributedModelParallel`` -> combined optimizer -> ``TrainPipelineSparseDist``.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torchrec.distributed import TrainPipelineSparseDist
from torchrec.distributed.model_parallel import DistributedModelParallel
from torchrec.distributed.planner import EmbeddingShardingPlanner
from torchrec.distributed.types import ShardingPlan
from torchrec.models.dlrm import DLRMTrain
from torchrec.optim.keyed import CombinedOptimizer

from dlrm_exp.config import Config, OnNonFinite, ShardingStrategy
from dlrm_exp.launch import DistContext
from dlrm_exp.model import build_model, table_configs
from dlrm_exp.nonfinite import SkipNonFiniteDLRMTrain, install_gradient_guards
from dlrm_exp.optim import apply_sparse_optimizer, build_optimizer
from dlrm_exp.plan_file import load_plan
from dlrm_exp.qcomms import build_qcomm_codecs_registry, check_supported
from dlrm_exp.sharding import (
    CpuEmbeddingBagCollectionSharder,
    build_constraints,
    build_planner,
    build_sharder,
    build_topology,
    insufficient_memory_message,
    memory_capacity,
    plan_or_explain,
    plan_sharding_types,
)
from dlrm_exp.storage import embedding_storage
from dlrm_exp.table_init import init_tables


@dataclass
class Experiment:
    """The built objects of one run."""

    model: DistributedModelParallel
    optimizer: CombinedOptimizer
    pipeline: TrainPipelineSparseDist
    plan: ShardingPlan


#: Replaces the ``DLRMTrain`` wrapper around the built DLRM (e.g. the rank-sliced reference of
#: ``mode=verify``); it must keep the DLRM as ``.model``.
TrainWrapper = Callable[[DLRMTrain], DLRMTrain]


def build_module(
    cfg: Config, dense_device: torch.device, wrap: TrainWrapper | None = None
) -> DLRMTrain:
    """The unsharded DLRM (tables on meta, dense part on ``dense_device``) with the sparse
    optimizer attached for fusion into backward: the input of planning and sharding."""
    module = build_model(cfg.model, dense_device=dense_device)
    if wrap is not None:
        module = wrap(module)
    apply_sparse_optimizer(module, cfg.optimizer)
    return module


def job_sharder(cfg: Config) -> CpuEmbeddingBagCollectionSharder:
    """The EBC sharder with the job's qcomm codecs."""
    return build_sharder(build_qcomm_codecs_registry(cfg.qcomms))


def plan_model(
    cfg: Config,
    ctx: DistContext,
    module: torch.nn.Module,
    sharder: CpuEmbeddingBagCollectionSharder | None = None,
    keep_planner: Callable[[EmbeddingShardingPlanner], None] | None = None,
) -> ShardingPlan:
    """Shard ``module`` (on the meta device) for this job with TorchRec's planner, or take
    the plan of ``sharding.plan_path`` (``sharding=from_file``). ``keep_planner`` receives the
    planner after planning (``mode=plan`` reads its estimates).

    Raises:
        ConfigError: the plan's sharding types cannot run with the configured qcomms on this
            backend (see :data:`dlrm_exp.qcomms.UNSUPPORTED_ON_GLOO`), or a plan file does not
            match the job (:func:`dlrm_exp.plan_file.load_plan`).
        InsufficientMemoryError: the tables do not fit; the message gives needed vs offered
            GiB and a ``model.num_embeddings_cap`` that fits. Raised before anything is
            allocated.
    """
    tables = table_configs(cfg.model)
    if cfg.sharding.sharding_type is ShardingStrategy.from_file:
        assert cfg.sharding.plan_path is not None
        device_type = cfg.hardware.compute_device.value
        plan = load_plan(
            cfg.sharding.plan_path, tables, ctx.world_size, ctx.local_world_size, device_type
        )
        check_supported(cfg.qcomms, plan_sharding_types(plan), cfg.hardware.backend.value)
        return plan
    capacity = memory_capacity(cfg.hardware, ctx.local_world_size)
    topology = build_topology(cfg.hardware, ctx.world_size, ctx.local_world_size, capacity)
    sharder = sharder or job_sharder(cfg)
    offered = sharder.sharding_types(cfg.hardware.compute_device.value)
    constraints = build_constraints(
        cfg.sharding, tables, offered, getattr(cfg.data, "multi_hot_sizes", None)
    )
    planner = build_planner(topology, constraints, cfg.train.batch_size)
    device_kind = "HBM" if capacity.hbm_bytes else "DDR"

    def explain() -> str:
        dim, opt = cfg.model.embedding_dim, cfg.optimizer.sparse_optimizer
        storage = embedding_storage(cfg.model.table_sizes, dim, opt)
        replicated = [
            cfg.sharding.table_choice(t.name)[0] is ShardingStrategy.data_parallel for t in tables
        ]
        dp_sizes = [t.num_embeddings for t, dp in zip(tables, replicated, strict=True) if dp]
        return insufficient_memory_message(
            storage,
            cfg.optimizer.sparse_optimizer,
            cfg.model.table_sizes,
            cfg.model.embedding_dim,
            capacity,
            ctx.world_size,
            device_kind,
            replicated=embedding_storage(dp_sizes, dim, opt),
            copies=[ctx.world_size if dp else 1 for dp in replicated],
        )

    overrides = cfg.sharding.overridden_tables
    summary = (
        f"sharding_type={cfg.sharding.sharding_type.value}, "
        f"compute_kernel={cfg.sharding.compute_kernel.value} on {ctx.world_size} rank(s)"
        + (f", per-table overrides for {', '.join(overrides)}" if overrides else "")
    )
    plan = plan_or_explain(planner, module, sharder, explain, summary)
    if keep_planner is not None:
        keep_planner(planner)
    check_supported(cfg.qcomms, plan_sharding_types(plan), cfg.hardware.backend.value)
    return plan


def build_experiment(
    cfg: Config,
    ctx: DistContext,
    plan: ShardingPlan | None = None,
    wrap: TrainWrapper | None = None,
) -> Experiment:
    """Build the sharded DLRM, its optimizers and the training pipeline for this rank.

    Parameters are initialized from ``cfg.seed`` (the same on every rank; tables independently
    of the plan, see :mod:`dlrm_exp.table_init`). Tables are allocated
    only after planning (here, or by the caller who passes ``plan``), so a plan that cannot fit
    fails before any table exists. ``wrap`` replaces the ``DLRMTrain`` around the DLRM
    (default: :class:`~dlrm_exp.nonfinite.SkipNonFiniteDLRMTrain` when
    ``train.on_nonfinite=skip``).
    """
    torch.manual_seed(cfg.seed)
    skip_nonfinite = wrap is None and cfg.train.on_nonfinite is OnNonFinite.skip
    if skip_nonfinite:
        wrap = SkipNonFiniteDLRMTrain.around
    module = build_module(cfg, ctx.device, wrap)
    sharder = job_sharder(cfg)
    if plan is None:
        plan = plan_model(cfg, ctx, module, sharder)
    model = DistributedModelParallel(
        module=module, device=ctx.device, plan=plan, sharders=[sharder]
    )
    init_tables(model, table_configs(cfg.model), cfg.seed)
    if skip_nonfinite:
        install_gradient_guards(model)
    optimizer = build_optimizer(model, cfg.optimizer)
    pipeline = TrainPipelineSparseDist(model, optimizer, ctx.device, execute_all_batches=True)
    return Experiment(model=model, optimizer=optimizer, pipeline=pipeline, plan=plan)
