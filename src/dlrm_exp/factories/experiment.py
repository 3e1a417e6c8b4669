"""Typed factories wired together: config -> sharded model, optimizer and training pipeline.

``build_experiment`` is the one place where the groups meet: model (meta device) ->
sparse optimizer in backward -> plan (:func:`dlrm_exp.planning.job.plan_job`) ->
``DistributedModelParallel`` -> combined optimizer -> the ``train.pipeline``
(:mod:`dlrm_exp.factories.pipeline`).
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist
from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
    SplitTableBatchedEmbeddingBagsCodegen,
)
from torchrec.distributed.model_parallel import DistributedModelParallel
from torchrec.distributed.train_pipeline.train_pipelines import TrainPipeline
from torchrec.distributed.types import ShardingPlan
from torchrec.models.dlrm import DLRMTrain
from torchrec.optim.keyed import CombinedOptimizer

from dlrm_exp.config import Config, OnNonFinite, OptimizerConfig, SparseBackward
from dlrm_exp.distributed.launch import DistContext
from dlrm_exp.distributed.qcomms import effective_qcomms, qcomms_substitution
from dlrm_exp.distributed.sharder import job_sharders
from dlrm_exp.distributed.torchrec_groups import time_out_torchrec_groups
from dlrm_exp.factories.interaction import apply_symmetric_interaction, interaction_substitution
from dlrm_exp.factories.lr_schedule import LRSchedule
from dlrm_exp.factories.model import build_model
from dlrm_exp.factories.nonfinite import SkipNonFiniteDLRMTrain, install_gradient_guards
from dlrm_exp.factories.optim import (
    apply_sparse_optimizer,
    build_optimizer,
    dense_learning_rate,
    replica_learning_rate,
    rounding_substitution,
)
from dlrm_exp.factories.pipeline import build_pipeline, pipeline_substitution
from dlrm_exp.factories.precision import apply_dense_precision
from dlrm_exp.factories.sparse_arch import apply_pooled_sparse_arch, overlapped_backward
from dlrm_exp.factories.sparse_backward import SparseBackwardThread, overlap_blocker
from dlrm_exp.factories.table_init import init_tables
from dlrm_exp.planning.column_shards import column_substitutions
from dlrm_exp.planning.constraints import managed_collision_substitution
from dlrm_exp.planning.job import optimizer_substitution, plan_job
from dlrm_exp.planning.plan_record import replicated_tables
from dlrm_exp.planning.tables import META, table_configs, table_weight_dtypes
from dlrm_exp.util.logs import quiet_cpu_dense_lookup
from dlrm_exp.util.substitution import Substitution


@dataclass
class Experiment:
    """The built objects of one run, with what runs other than the config asked:
    ``effective_qcomms`` (:func:`~dlrm_exp.distributed.qcomms.effective_qcomms`, read from
    ``model``), the table weights' dtypes (``table_data_types``, read from ``model``) and
    ``substitutions``; ``sparse_backward``: the helper thread of ``train.sparse_backward``
    where it runs (None: the backward runs serially)."""

    model: DistributedModelParallel
    optimizer: CombinedOptimizer
    pipeline: TrainPipeline
    plan: ShardingPlan
    lr_schedule: LRSchedule
    effective_qcomms: dict[str, dict[str, str]] = field(default_factory=dict)
    substitutions: list[Substitution] = field(default_factory=list)
    table_data_types: dict[str, str] = field(default_factory=dict)
    sparse_backward: SparseBackwardThread | None = None

    @property
    def sparse_backward_ran(self) -> str:
        """Where the sparse arch's backward runs: ``overlap`` (the helper thread) or
        ``serial`` (``train.sparse_backward``'s values)."""
        ran = SparseBackward.serial if self.sparse_backward is None else SparseBackward.overlap
        return ran.value

    def settle_sparse_backward(self) -> bool:
        """Wait for a sparse backward still running on the helper thread: before anything but
        the next lookup reads the tables or the optimizer state (the rates may be set
        meanwhile: FBGEMM took them at the lookup). True when one was running.

        Raises:
            Exception: what that backward raised.
        """
        return self.sparse_backward is not None and self.sparse_backward.settle()

    def learning_rate(self) -> float:
        """The dense optimizer's learning rate, as it applies now (the ``lr`` scalar)."""
        return dense_learning_rate(self.optimizer)

    def embedding_learning_rate(self) -> float | None:
        """The tables' learning rate now: the one FBGEMM's fused embedding kernel of this rank
        holds, read from the kernel itself (the kernels the schedule sets, found once, not by
        walking the model at every logged step); where this rank has none, the data-parallel
        tables' optimizer's (``lr/embedding`` was missing for them, though scheduled: tuning
        review); None where it has neither."""
        kernels = self.lr_schedule.kernels
        if kernels:
            return float(kernels[0].get_learning_rate())
        return replica_learning_rate(self.optimizer)


def fused_kernels(model: torch.nn.Module) -> list[SplitTableBatchedEmbeddingBagsCodegen]:
    """This rank's FBGEMM table-batched kernels. TorchRec's sharded embedding collections hide
    their lookup modules from ``modules()`` and offer no public accessor, so this adapter reads
    their ``_lookups``: the one place that does."""
    return [
        kernel
        for module in model.modules()
        for lookup in getattr(module, "_lookups", [])
        for kernel in lookup.modules()
        if isinstance(kernel, SplitTableBatchedEmbeddingBagsCodegen)
    ]


#: The trainer-state key of the fused kernels' iteration counter (:func:`kernel_iterations`).
KERNEL_ITERATIONS = "fused_kernel_iterations"


def kernel_iterations(model: torch.nn.Module, device: torch.device) -> int:
    """FBGEMM's iteration counter of the fused kernels (a collective, reduced on the rank's
    ``device``: the largest over every rank's kernels, 0 where none has one). Each kernel
    counts its forwards (training steps and evaluation batches alike) in its ``iter`` buffer,
    which fused Adam's bias correction reads (``1 - beta ** iter``) and which no state dict
    holds: TorchRec's fused optimizer state keeps Adam's moments only, and the kernels sit
    outside ``modules()``."""
    kernels = fused_kernels(model)
    count = torch.tensor([max((int(k.iter[0]) for k in kernels), default=0)], device=device)
    dist.all_reduce(count, op=dist.ReduceOp.MAX)
    return int(count[0])


def set_kernel_iterations(model: torch.nn.Module, count: int) -> None:
    """Set every fused kernel's iteration counter to ``count`` (a resumed run's, so fused Adam
    goes on with the saved bias correction instead of starting it again at 1). FBGEMM's
    ``set_optimizer_step`` sets ``iter`` alone; the host copy ``iter_cpu`` that the kernels
    compute with takes it only while it is 0, so it is set too."""
    for kernel in fused_kernels(model):
        kernel.iter.fill_(count)
        if hasattr(kernel, "iter_cpu"):
            kernel.iter_cpu.fill_(count)


#: Replaces the ``DLRMTrain`` wrapper around the built DLRM (e.g. the rank-sliced reference of
#: ``mode=verify``); it must keep the DLRM as ``.model``.
TrainWrapper = Callable[[DLRMTrain], DLRMTrain]


def build_module(
    cfg: Config,
    dense_device: torch.device = META,
    wrap: TrainWrapper | None = None,
    world_size: int | None = None,
) -> DLRMTrain:
    """The unsharded DLRM (tables on meta, dense part on ``dense_device``, computing in
    ``train.dense_precision``) with the sparse optimizer attached for fusion into backward:
    the input of planning and sharding. ``world_size``: the ranks that will train it (a
    managed-collision table gets one id bucket per rank; default ``hardware.world_size``, which
    a torchrun job may not have set)."""
    ranks = cfg.hardware.world_size if world_size is None else world_size
    module = build_model(cfg.model, dense_device=dense_device, world_size=ranks)
    apply_dense_precision(module, cfg.train.dense_precision, cfg.hardware.compute_device.value)
    apply_pooled_sparse_arch(module)
    if cfg.train.symmetric_interaction:
        apply_symmetric_interaction(module)
    if wrap is not None:
        module = wrap(module)
    apply_sparse_optimizer(module, cfg.optimizer)
    return module


def _overlap(
    cfg: Config, module: DLRMTrain, ctx: DistContext, plan: ShardingPlan
) -> tuple[SparseBackwardThread | None, Substitution | None]:
    """``train.sparse_backward`` on ``module``: the helper thread where ``overlap`` or
    ``auto`` applies; where it does not, for ``overlap`` the substitution that says why."""
    asked = cfg.train.sparse_backward
    if asked is SparseBackward.serial:
        return None, None
    replicated = sorted(replicated_tables(plan))
    why = overlap_blocker(ctx.device.type, ctx.world_size, torch.get_num_threads(), replicated)
    thread = None if why else overlapped_backward(module)
    if thread is not None or asked is SparseBackward.auto:
        return thread, None
    why = why or "TorchRec's sparse arch of managed-collision tables keeps its backward"
    serial = SparseBackward.serial.value
    return None, Substitution("train.sparse_backward", asked.value, serial, why)


def _lr_schedule(
    opt: OptimizerConfig, model: DistributedModelParallel, optimizer: CombinedOptimizer
) -> LRSchedule:
    """The warm-up / decay schedule of the dense optimizer and the fused table kernels."""
    return LRSchedule(
        optimizer,
        opt.lr_warmup_steps,
        opt.lr_decay_start,
        opt.lr_decay_steps,
        (fused_kernels(model), opt.learning_rate),
    )


def _sharded(
    module: torch.nn.Module,
    cfg: Config,
    ctx: DistContext,
    plan: ShardingPlan,
    sharders: list,
) -> DistributedModelParallel:
    """``module`` sharded by ``plan``; the groups TorchRec made for it (table_row_wise, grid)
    time out after ``hardware.collective_timeout_s`` as the job's others do."""
    model = DistributedModelParallel(module=module, device=ctx.device, plan=plan, sharders=sharders)
    if ctx.world_size > 1:  # (a one-rank job's groups have no peer to wait for)
        time_out_torchrec_groups(timedelta(seconds=cfg.hardware.collective_timeout_s))
    return model


def _substitutions(
    cfg: Config,
    world_size: int,
    plan: ShardingPlan,
    effective: dict,
    sparse_backward: Substitution | None,
) -> list[Substitution | None]:
    """What of ``cfg`` ran otherwise than asked, one entry per setting (None: as asked):
    the collectives' precisions that ran (``effective``), the optimizer, fp16 rounding, the
    interaction, managed-collision placement, the pipeline and the sparse backward (as
    :func:`_overlap` found it)."""
    return [
        qcomms_substitution(cfg.qcomms, effective, world_size),
        optimizer_substitution(cfg),
        rounding_substitution(cfg.model, cfg.optimizer, cfg.hardware.compute_device),
        interaction_substitution(cfg.model, cfg.train.symmetric_interaction),
        managed_collision_substitution(cfg.sharding, set(cfg.model.managed_tables)),
        pipeline_substitution(cfg.train, plan),
        sparse_backward,
        *column_substitutions(cfg, plan),
    ]


def build_experiment(
    cfg: Config,
    ctx: DistContext,
    plan: ShardingPlan | None = None,
    wrap: TrainWrapper | None = None,
    init_weights: bool = True,
) -> Experiment:
    """Build the sharded DLRM, its optimizers and the training pipeline for this rank.

    Parameters are initialized from ``cfg.seed`` (the same on every rank; tables independently
    of the plan, see :mod:`dlrm_exp.factories.table_init`; ``init_weights=False`` skips that
    cost for a caller that loads a checkpoint over them). Tables are allocated only after
    planning (here, or by the caller who passes ``plan``), so a plan that cannot fit fails
    before any table exists.
    ``wrap`` replaces the ``DLRMTrain`` around the DLRM (default:
    :class:`~dlrm_exp.factories.nonfinite.SkipNonFiniteDLRMTrain` when
    ``train.on_nonfinite=skip``).

    Raises:
        InsufficientMemoryError, PlanError, ConfigError: from
            :func:`~dlrm_exp.planning.job.plan_job` when ``plan`` is None.
    """
    torch.manual_seed(cfg.seed)
    skip_nonfinite = wrap is None and cfg.train.on_nonfinite is OnNonFinite.skip
    if skip_nonfinite:
        wrap = SkipNonFiniteDLRMTrain.around
    module = build_module(cfg, ctx.device, wrap, ctx.world_size)
    if ctx.device.type == "cpu":
        quiet_cpu_dense_lookup()
    sharders = job_sharders(cfg.qcomms, cfg.optimizer.stochastic_rounding)
    if plan is None:
        plan = plan_job(cfg, module, ctx, sharders).plan
    backward_thread, not_overlapped = _overlap(cfg, module, ctx, plan)
    model = _sharded(module, cfg, ctx, plan, sharders)
    if init_weights:
        init_tables(model, table_configs(cfg.model), cfg.seed)
    if skip_nonfinite:
        install_gradient_guards(model)
    optimizer = build_optimizer(model, cfg.optimizer)
    pipeline = build_pipeline(cfg.train, model, optimizer, ctx.device)
    schedule = _lr_schedule(cfg.optimizer, model, optimizer)
    # on one rank TorchRec skips every collective (and so its codecs): nothing is quantized
    effective = effective_qcomms(model) if ctx.world_size > 1 else {}
    substituted = _substitutions(cfg, ctx.world_size, plan, effective, not_overlapped)
    return Experiment(
        model,
        optimizer,
        pipeline,
        plan,
        schedule,
        effective,
        [s for s in substituted if s],
        table_weight_dtypes(model),
        backward_thread,
    )
