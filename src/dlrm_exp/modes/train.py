"""``mode=train``: data -> sharded model -> training loop -> run folder.

Writes, on rank 0, into the Hydra run folder: ``plan.txt`` (TorchRec's table of the sharding
plan) and ``plan.json``, TensorBoard events (scalars + HParams) and ``metrics.json`` (a
:class:`~dlrm_exp.record.run_record.RunMetrics`), written last and atomically, so a crash never
leaves a partial one.

With ``hardware.nproc_per_node > 1`` the parent process checks what it can before any worker
exists (data paths, the plan on the meta device), then starts the workers with torch's elastic
launcher; under torchrun the process is already a worker and trains directly.
"""

import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from torchrec.distributed.types import ShardingPlan

from dlrm_exp.config import Config
from dlrm_exp.config.keys import flat_settings
from dlrm_exp.data import input_digests, per_rank_sizes
from dlrm_exp.data.prefetch import prefetched
from dlrm_exp.data.splits import read_summary
from dlrm_exp.distributed.comm_stats import CollectiveBytes, allreduce_bytes
from dlrm_exp.distributed.launch import (
    check_devices,
    env_rank,
    process_group,
)
from dlrm_exp.errors import DataError, WorkerFailedError
from dlrm_exp.factories.experiment import KERNEL_ITERATIONS, kernel_iterations
from dlrm_exp.factories.managed_collision import managed_rows_held
from dlrm_exp.factories.precision import slow_precision_warning
from dlrm_exp.loop.checkpoint import (
    BEST,
    CheckpointError,
    CheckpointLayout,
    best_checkpoint,
    complete_checkpoints,
    find_checkpoint,
    holds_best,
    load_model_weights,
    read_trainer_state,
    save_checkpoint,
)
from dlrm_exp.loop.early_stopping import EARLY_STOPPING, BestValidation
from dlrm_exp.loop.metrics import (
    rank_memory_gib,
    reset_peak_memory,
    step_time_ms,
)
from dlrm_exp.loop.run_folder import (
    check_run_folder,
    continued_resume,
    replaces_attempt,
    resume_command,
)
from dlrm_exp.loop.settings import resolved_inputs, sweep_job
from dlrm_exp.loop.train_window import TrainWindow
from dlrm_exp.loop.trainer import BatchSources, FitResult, Trainer, TrainerState
from dlrm_exp.modes.job import Job, ModeResult
from dlrm_exp.modes.resume import (
    checkpoint_to_resume,
    replace_attempt,
    resume_from_checkpoint,
)
from dlrm_exp.modes.setup import (
    FolderCheck,
    check_folder_first,
    check_folder_in_worker,
    prepare,
    rank_batches,
    run_on_ranks,
    shared_job,
    warn_unscored,
)
from dlrm_exp.modes.train_run import TrainRun
from dlrm_exp.perf.peak import PeakUnavailable
from dlrm_exp.perf.profile import PROFILE_DIR, TRACE_SUFFIX, StepProfiler, profile_files
from dlrm_exp.perf.theoretical_peak import cpu_flags
from dlrm_exp.perf.utilization import rank_bound, rank_peak, utilization
from dlrm_exp.planning.plan_record import plan_record, plan_text
from dlrm_exp.planning.tables import model_inputs, table_configs, table_shapes
from dlrm_exp.record.metric_table import METRICS, QUALITY, split_line
from dlrm_exp.record.run_record import RunMetrics
from dlrm_exp.record.tracking import Tracker, run_hparams
from dlrm_exp.util.files import check_writable, write_json_atomic, write_text_atomic
from dlrm_exp.util.rank_zero import on_rank_zero
from dlrm_exp.util.substitution import Substitution, collectives_ran
from dlrm_exp.util.text import step_text

log = logging.getLogger(__name__)


def run(cfg: Config, job: Job) -> ModeResult:
    """``mode=train``: train, and on rank 0 summarise; the task's value is the val AUROC."""
    metrics = run_train(cfg, job.run_dir, job.choices, job.tensorboard_dir, job.swept)
    lines = None
    if env_rank() == 0:
        lines = summary(metrics, job.run_dir, tensorboard_logdir(job))
    return ModeResult(summary=lines, value=metrics.val["auroc"])


def tensorboard_logdir(job: Job) -> str:
    """The folder the summary's ``tensorboard --logdir`` names: a sweep's folder (the one its
    job's folder and its events folder share: a swept path's slashes nest the events folder,
    ``data.path=/d/a.tsv``, whose parent held one run), else ``outputs`` for a run folder under
    ``./outputs`` (where every run of this checkout goes), else the run folder itself
    (``hydra.run.dir`` elsewhere: its parent may be ``/tmp``)."""
    if job.tensorboard_dir is not None:
        # (absolute both: Hydra's run folder is, the events folder under a relative
        # hydra.sweep.dir, the default, is not, and commonpath refused the pair: review)
        return os.path.commonpath([job.run_dir.absolute(), job.tensorboard_dir.absolute()])
    under_outputs = job.run_dir.resolve().is_relative_to((Path.cwd() / "outputs").resolve())
    return "outputs" if under_outputs else str(job.run_dir)


def run_train(
    cfg: Config,
    run_dir: Path,
    choices: Mapping[str, str],
    tensorboard_dir: Path | None = None,
    swept: Mapping[str, Any] | None = None,
) -> RunMetrics:
    """Train as configured and return the run's record (written as ``metrics.json`` on rank
    0). TensorBoard events go to ``tensorboard_dir`` (default: ``run_dir``); ``swept``: see
    :class:`~dlrm_exp.modes.job.Job`.

    Raises:
        DataError, InsufficientMemoryError, ConfigError: user-fixable problems, before
            training starts.
        RunFolderInUseError: a run that starts fresh (``train.resume`` unset, or ``auto``
            finding no step checkpoint) is given a folder holding another run's checkpoints
            or record; a resumed run with ``train.keep_best=false`` has a ``best`` from before.
        WorkerFailedError: a worker process failed or was killed.
    """
    check_devices(cfg.hardware)
    asked = cfg.train.resume
    if env_rank() == 0:  # (a torchrun rank above 0 is in ".": rank 0 decides for all)
        cfg.train.resume = continued_resume(asked, run_dir, swept or {})
    pending = check_folder_first(partial(_check_folder, cfg, run_dir, swept or {}), run_dir)
    job = Job(run_dir, dict(choices), tensorboard_dir, dict(swept or {}), multirun=_in_multirun())
    try:
        return run_on_ranks(train_worker, cfg, job, pending)
    except WorkerFailedError as err:  # (a killed worker said nothing of them: crash review)
        saved = complete_checkpoints(run_dir)
        if not saved:
            raise
        # (begun from train.resume=PATH, that PATH continues it: auto would start a sweep's
        # jobs not yet run afresh); a refusal in a worker is no crash the same command gets
        # past, hence "once mended" (it said to rerun a refused command: review)
        again = resume_command(run_dir, _in_multirun(), auto=asked in (None, "", "auto"))
        raise WorkerFailedError(
            f"{err}; the complete checkpoints stay (newest: {saved[-1].name}): once what failed "
            f"is mended, {again} continues from it"
        ) from None


def _check_folder(cfg: Config, run_dir: Path, swept: Mapping[str, Any]) -> None:
    """What training may find in its folder (see :func:`run_train`'s errors); ``swept``:
    the sweep's job's swept values."""
    check_writable(run_dir)
    multirun = _in_multirun()
    job = (swept, job_settings(cfg)) if multirun else None
    check_run_folder(run_dir, cfg.train.resume, cfg.train.keep_best, multirun, job)
    # the checkpoint to resume, refused here (a missing one, or one this folder holds later
    # ones than) rather than in a worker, whose failure the hint to rerun the same command
    # followed (review)
    if cfg.train.resume not in (None, "", "auto"):  # (auto finds the newest, or none)
        checkpoint_to_resume(cfg, run_dir, multirun)


def _in_multirun() -> bool:
    """Whether this job is one of a ``-m`` sweep's (its folder chosen by hydra.sweep.dir)."""
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def _weights_origin(cfg: Config, resume: Path | None) -> tuple[Path | None, str | None]:
    """Where this run's training began from weights of another run (``train.init_from``):
    the checkpoint to load them from (a fresh start only; found before the model is built,
    whose tables then need no random start) and the one to record, this start's or the
    one the resumed checkpoint records (a resumed fine-tuning's record said none: diff
    review). ``(None, None)``: none.

    Raises:
        CheckpointError: nothing there, or no complete checkpoint in a run folder.
    """
    if resume is not None:
        began = read_trainer_state(resume).get("initialized_from")
        if cfg.train.init_from and _found(cfg.train.init_from) != began:  # (a requeue of
            # the fine-tuning itself is no news; another init_from was dropped: diff reviews)
            log.warning("train.init_from is not read: this run continues its checkpoint %s", resume)
        return None, began
    if not cfg.train.init_from:
        return None, None
    path = find_checkpoint(cfg.train.init_from, key="train.init_from")
    return path, str(path)


def _found(location: str) -> str | None:
    """The checkpoint ``train.init_from`` names, as records name it (None: none there)."""
    try:
        return str(find_checkpoint(location, warn=False, key="train.init_from"))
    except CheckpointError:
        return None


def _init_weights(run: TrainRun, layout: CheckpointLayout) -> None:
    """``train.init_from``: the model weights of ``run.init_path`` into this run's model (a
    collective; DCP reshards the tables to this run's plan), its optimizer and step fresh.

    Raises:
        CheckpointError: another model shape, other id policies or kinds, inputs in
            another order (:func:`~dlrm_exp.loop.checkpoint.load_model_weights`).
    """
    path = run.init_path
    assert path is not None
    load_model_weights(
        path, run.experiment.model, layout.tables, layout.id_policies, layout.id_kinds,
        run.ctx.world_size, layout.inputs,
    )  # fmt: skip
    if run.ctx.is_main:
        log.info("train.init_from: the model weights of %s, from step 0 with a fresh optimizer",
                 path)  # fmt: skip


def _announce(run: TrainRun) -> None:
    """Rank 0, before training: the substitutions, a slow precision and a batch other than
    the recipe's global one in the log, the plan as ``plan.txt`` and ``plan.json`` (with the
    ranks it was made for, so that ``sharding=from_file`` can check them)."""
    cfg, ctx, experiment = run.cfg, run.ctx, run.experiment
    for substitution in experiment.substitutions:
        log.warning(substitution.line())
    slow = slow_precision_warning(cfg.train.dense_precision, ctx.device.type, cpu_flags())
    batch = cfg.train.global_batch_note(ctx.world_size)
    for line in (slow, batch):
        if line:
            log.warning(line)
    write_text_atomic(run.job.run_dir / "plan.txt", plan_text(experiment.plan) + "\n")
    write_json_atomic(run.job.run_dir / "plan.json", run.plan_data.to_json())


def train_worker(
    cfg: Config, job: Job, check: FolderCheck | None = None, plan: ShardingPlan | None = None
) -> RunMetrics:
    """Train on this rank (joining or creating the process group); rank 0 writes the run
    folder. Every rank returns the run's record (rank 0's is the one written). ``check``:
    the run folder's, left to the worker (:func:`check_folder_first`)."""
    with process_group(cfg.hardware) as ctx:
        check_folder_in_worker(check)
        job = shared_job(job, ctx)
        # rank 0 decides for all: hosts may list a shared folder differently (NFS caching), and
        # ranks that loaded different steps would train apart, then hang
        resume_path, replaces, (init_path, began) = on_rank_zero(  # before building
            lambda: (
                resume := checkpoint_to_resume(cfg, job.run_dir, job.multirun),
                replaces_attempt(job.run_dir, cfg.train.resume),
                _weights_origin(cfg, resume),
            )
        )
        reset_peak_memory(ctx.device)  # this run's peak, not an earlier job's in this process
        loads = (resume_path or init_path) is not None
        splits, experiment = prepare(cfg, ctx, plan, loads_weights=loads)
        plan_data = plan_record(
            experiment.plan, table_configs(cfg.model), ctx.world_size, ctx.local_world_size
        )
        run = TrainRun(
            cfg, job, ctx, splits, experiment, plan_data, resume_path, init_path, began, replaces
        )
        if ctx.is_main:
            _announce(run)
            warn_unscored(cfg, splits, ("val", "test"), ctx.world_size)
        sizes = per_rank_sizes(len(splits.train), cfg.train.batch_size, ctx.world_size)
        _check_a_step(len(splits.train), ctx.world_size, sizes)
        samples_per_step = [s * ctx.world_size for s in sizes]
        layout = _layout(run)
        saver = _Saver(run, layout)
        tracker = Tracker(job.tensorboard_dir or job.run_dir, enabled=ctx.is_main)
        comm = CollectiveBytes()
        try:
            trainer = _trainer(run, samples_per_step, tracker, comm, saver)
            start, kept = resume_from_checkpoint(run, layout, samples_per_step, trainer, tracker)
            if kept is not None:
                return kept
            if init_path is not None:  # (loaded before the folder is cleaned: a refusal
                _init_weights(run, layout)  # left it without its record: re-read)
            if ctx.is_main:
                replace_attempt(run, start, tracker)
            with comm.installed():
                result = _fit(trainer, run, start, tracker)
            metrics = _run_metrics(run, result, comm, time.time() - job.started)
            tracker.hparams(
                run_hparams(cfg, job.choices, ctx.world_size, ctx.threads, metrics),
                _final_scalars(metrics),
                metrics.steps,
                job.swept,
            )
        finally:
            tracker.close()
        if ctx.is_main:
            metrics.write(job.run_dir / "metrics.json")
    return metrics


def _trainer(
    run: TrainRun,
    samples_per_step: list[int],
    tracker: Tracker,
    comm: CollectiveBytes,
    saver: "_Saver",
) -> Trainer:
    """The run's training loop, whose checkpoints ``saver`` writes (with its training
    window)."""
    cfg, ctx = run.cfg, run.ctx
    trainer = Trainer(
        run.experiment,
        cfg.train,
        samples_per_step,
        ctx.device,
        tracker,
        show_progress=ctx.is_main and cfg.train.progress_bar,
        log_progress=ctx.is_main,
        comm=comm,
        checkpoint=saver,
        profiler=StepProfiler(
            run.job.run_dir, ctx.rank, cfg.train.profile_steps, ctx.device, cfg.train.profile
        ),
        best_weights=_BestCheckpoint(saver),
    )
    saver.window = trainer.window
    past = cfg.optimizer.schedule_past(trainer.total_steps)
    if past and ctx.is_main:
        log.warning(past)
    return trainer


def _fit(
    trainer: Trainer, run: TrainRun, start: TrainerState | None, tracker: Tracker
) -> FitResult:
    """Train; a run that fails under way (a NaN loss, a crash) leaves its HParams session
    marked failed in TensorBoard."""
    try:
        return trainer.fit(_batch_sources(run), start)
    except Exception:
        hparams = run_hparams(run.cfg, run.job.choices, run.ctx.world_size, run.ctx.threads)
        tracker.hparams(hparams, {}, 0, run.job.swept, failed=True)
        raise


def _batch_sources(run: TrainRun) -> BatchSources:
    """Each split's batches on this rank; the training split is reshuffled per epoch when the
    data option shuffles batches (seeded by ``(seed, epoch)``: a resumed run sees its epoch's
    order)."""
    cfg, ctx, splits = run.cfg, run.ctx, run.splits
    shuffle = cfg.data.shuffles_batches()
    pin = ctx.device.type == "cuda"
    depth = cfg.train.prefetch_depth(cuda=pin)

    def train(epoch: int, skip: int) -> Any:
        seed = (cfg.seed, epoch) if shuffle else None
        return prefetched(rank_batches(cfg, ctx, splits.train, seed, skip=skip), depth, pin)

    return BatchSources(
        train=train,
        val=lambda: prefetched(rank_batches(cfg, ctx, splits.val), depth, pin),
        test=lambda: prefetched(rank_batches(cfg, ctx, splits.test), depth, pin),
    )


#: ``data`` keys that change how the data is read or reported, not which rows arrive.
_HOW_NOT_WHAT = frozenset(
    {
        "data.mmap_mode",
        "data.max_lookup_gib",
        "data.max_skipped_fraction",
        "data.max_reported_bad_lines",
    }
)


def _layout(run: TrainRun) -> CheckpointLayout:
    """The model layout a checkpoint records and a resume checks (a collective: every rank
    builds it, with rank 0's settings)."""
    tables = run.plan_data.tables
    return CheckpointLayout(
        tables=table_shapes(run.cfg.model),
        data_parallel_tables=sorted(
            name for name, t in tables.items() if t.sharding_type == "data_parallel"
        ),
        world_size=run.ctx.world_size,
        id_policies=run.cfg.data.id_policies(),
        id_kinds=run.splits.info.id_kinds,
        inputs=model_inputs(run.cfg),
        sweep_job=sweep_job(run.job.swept),
        settings={
            # rank 0's (a collective): the inputs' digest lists and reads the files' sizes,
            # once, as rank 0 decides a resume by it
            **on_rank_zero(lambda: job_settings(run.cfg)),
            # what the collectives ran in (asked and never run, on one rank, it was a change
            # of the update a resume warned of: what-ran review), and the codecs' loss scales
            # where codecs ran (diff review)
            **{
                key: value
                for key, value in flat_settings("qcomms", run.cfg.qcomms).items()
                if key.endswith("_loss_scale") and run.experiment.effective_qcomms
            },
            "qcomms": collectives_ran(
                run.experiment.effective_qcomms,
                run.ctx.world_size,
                [t.sharding_type for t in tables.values()],
            ),
        },
    )


def job_settings(cfg: Config) -> dict[str, Any]:
    """The settings a checkpoint records that the config decides (``seed``, the data source
    and its keys, input paths resolved and the digest of the files each names now
    (``data.path.files``: :func:`~dlrm_exp.data.input_digests`), ``optimizer.*``, batch
    size, precisions; not the loaders' knobs, :data:`_HOW_NOT_WHAT`): what a resume
    compares, and a sweep's job its folder's checkpoints by (:func:`check_same_sweep_job`)."""
    settings = {
        "seed": cfg.seed,
        "data": type(cfg.data).__name__,  # the source: its keys differ
        "train.batch_size": cfg.train.batch_size,
        "train.dense_precision": cfg.train.dense_precision.value,
        "train.symmetric_interaction": cfg.train.symmetric_interaction,
        "model.embedding_data_type": _table_dtypes(cfg),
        **resolved_inputs(flat_settings("data", cfg.data)),
        **input_digests(cfg.data),
        **flat_settings("optimizer", cfg.optimizer),
    }
    return {key: value for key, value in settings.items() if key not in _HOW_NOT_WHAT}


def _table_dtypes(cfg: Config) -> str:
    """The tables' weight precision as a resume compares it: ``fp16``, or with the tables
    that differ, ``fp16 (t_cat_20=fp32)`` (a resume that changed it was not recorded as a
    changed setting, only warned: review)."""
    model = cfg.model
    default = model.embedding_data_type.value
    other = [
        f"{name}={dtype.value}"
        for name, dtype in zip(model.table_names, model.table_data_types, strict=True)
        if dtype.value != default
    ]
    return f"{default} ({', '.join(other)})" if other else default


def _check_a_step(rows: int, world_size: int, sizes: list[int]) -> None:
    """The training split gives every rank at least one row: with fewer rows than ranks no
    step ran and the record's epoch fractions divided by 0 (a bare ZeroDivisionError after a
    whole validation and test pass: review).

    Raises:
        DataError: naming the rows and the ranks.
    """
    if not sizes:
        raise DataError(
            f"the training split has {rows:,} row(s), fewer than the {world_size} ranks: no "
            "training step (every step gives each rank a row at least); give more rows or "
            "run fewer ranks (hardware.nproc_per_node)"
        )


@dataclass
class _Saver:
    """Writes this run's checkpoints. A save at the step of the one before it (the best
    validation's weights and a periodic checkpoint falling on one step) links that one's files
    instead of writing them again: weights and optimizer state change only by a training step,
    which moves the step on, and every rank makes the same calls, so all agree."""

    run: TrainRun
    layout: CheckpointLayout
    last: tuple[int, Path] | None = None
    window: TrainWindow | None = None  # the trainer's, saved with each checkpoint

    def _kernel_state(self) -> dict[str, int]:
        """The fused kernels' iteration counter (:func:`kernel_iterations`; a collective)."""
        count = kernel_iterations(self.run.experiment.model, self.run.ctx.device)
        return {KERNEL_ITERATIONS: count}

    def __call__(self, step: int, state: TrainerState, name: str | None = None) -> Path:
        same_as = self.last[1] if self.last is not None and self.last[0] == step else None
        path = save_checkpoint(
            self.run.job.run_dir,
            step,
            self.run.experiment.model,
            self.run.experiment.optimizer,
            {
                **state.state_dict(),
                **self.layout.state_dict(),
                **self._kernel_state(),
                "initialized_from": self.run.initialized_from,
            },  # fmt: skip
            self.run.ctx.is_main,
            self.run.cfg.train.keep_last_checkpoints,
            name,
            same_as,
            None if self.window is None else {"train_window": self.window.state()},
        )
        self.last = (step, path)
        linked = f" (DCP files linked from {same_as.name})" if same_as else ""
        log.info("checkpoint: %s%s", path, linked)
        return path


@dataclass(frozen=True)
class _BestCheckpoint:
    """``train.keep_best``: the best validation's weights as ``checkpoints/best``."""

    saver: _Saver

    def save(self, step: int, state: TrainerState) -> str:
        return str(self.saver(step, state, BEST))

    def restore(self, location: str, best: BestValidation) -> bool:
        """This run folder's ``checkpoints/best`` (a copied or moved folder keeps working),
        else ``location`` (a run resumed from another run's checkpoint), if it holds the
        weights of the validation ``best`` names: the best it recorded when saved has the same
        value (decided on rank 0 for every rank, so all load the same folder or none)."""
        path = on_rank_zero(lambda: self._holding(location, best))
        if path is None:
            return False
        layout, model = self.saver.layout, self.saver.run.experiment.model
        load_model_weights(
            path, model, layout.tables, layout.id_policies, layout.id_kinds, inputs=layout.inputs
        )
        return True

    def _holding(self, location: str, best: BestValidation) -> Path | None:
        """The folder :meth:`restore` loads, None when none holds ``best``'s weights."""
        path = best_checkpoint(self.saver.run.job.run_dir) or Path(location)
        try:
            return path if holds_best(path, best) else None
        except CheckpointError:
            return None


def _run_metrics(
    run: TrainRun, result: FitResult, comm: CollectiveBytes, wall_seconds: float
) -> RunMetrics:
    """The run's record. Collective bytes and peak memory are gathered from every rank (a
    collective: every rank calls it)."""
    state = result.state
    memory: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(memory, rank_memory_gib(run.ctx.device))
    info = run.splits.info
    return RunMetrics(
        val=result.val,
        test=result.test,
        samples_per_sec=result.samples_per_sec,
        steps=state.step,
        train_samples=state.samples,
        train_seconds=result.train_seconds,
        wall_seconds=wall_seconds,
        peak_memory_gib=memory[run.ctx.rank]["rss"],  # this rank's, as gathered
        comm_bytes_per_step=_comm_bytes_per_step(run, result, comm),
        peak_memory_gib_per_rank=memory,
        step_time_ms=step_time_ms(result.step_seconds),
        final_train_loss=state.final_train_loss,
        skipped_steps=state.skipped_steps,
        world_size=run.ctx.world_size,
        threads_per_rank=run.ctx.threads,
        host_allocator=run.ctx.host_allocator,
        prefetch_batches=run.cfg.train.prefetch_depth(cuda=run.ctx.device.type == "cuda"),
        loss_read_lag=result.loss_read_lag,
        embedding_bytes_per_rank=run.plan_data.embedding_bytes_per_rank,
        bayes_auroc=info.bayes_auroc,
        data=info.to_json(),
        val_history=state.val_history,
        choices=dict(run.job.choices),
        seed=run.cfg.seed,
        resumed=run.resumed,
        initialized_from=run.initialized_from,
        target_auroc=run.cfg.train.target_auroc,
        reached_target=state.target_step is not None,
        target_step=state.target_step,
        target_epoch=result.target_epoch,
        stop_reason=result.stop_reason,
        monitor=run.cfg.train.early_stopping.monitor.value,
        best_step=state.best.step,
        best_epoch=None if state.best.step is None else state.best.step / result.steps_per_epoch,
        best_value=state.best.value,
        weights="best" if result.final_weights else "final",
        final_weights=result.final_weights,
        train_windows=state.train_windows,
        utilization=_utilization(run, result),
        profile=_profile_record(run, result.traced),
        effective_qcomms=run.experiment.effective_qcomms,
        table_data_types=run.experiment.table_data_types,
        dense_precision=run.cfg.train.dense_precision.value,
        sparse_backward=run.experiment.sparse_backward_ran,
        table_sharding_types={name: t.sharding_type for name, t in run.plan_data.tables.items()},
        table_compute_kernels={n: t.compute_kernel for n, t in run.plan_data.tables.items()},
        table_rows={t.name: t.num_embeddings for t in table_configs(run.cfg.model)},
        managed_rows_held=_managed_rows_held(run),
        substitutions=[s.to_json() for s in run.experiment.substitutions],
    )


def _comm_bytes_per_step(
    run: TrainRun, result: FitResult, comm: CollectiveBytes
) -> dict[str, float]:
    """Bytes per step of each phase (forward, backward, input dist, DDP all-reduce) of the
    steps this job trained, summed over the ranks (a collective; empty when it trained none).
    Reduced on the rank's device (NCCL reduces CUDA tensors only), in float64 (exact past 1e8
    bytes)."""
    per_step = comm.per_step(result.steps_trained)
    per_step["allreduce"] = float(allreduce_bytes(run.experiment.model))  # (every step's)
    phases = list(per_step)
    totals = torch.tensor([per_step[k] for k in phases], dtype=torch.float64, device=run.ctx.device)
    dist.all_reduce(totals)
    return dict(zip(phases, totals.tolist(), strict=True)) if result.steps_trained else {}


def _managed_rows_held(run: TrainRun) -> dict[str, int]:
    """Rows holding a raw id of their own per managed-collision table, all ranks (a collective
    when the model has such tables; every rank has the same config)."""
    if not run.cfg.model.managed_tables:
        return {}
    held = managed_rows_held(run.experiment.model)
    tables = sorted(held)
    total = torch.tensor([held[t] for t in tables], dtype=torch.int64, device=run.ctx.device)
    dist.all_reduce(total)
    return dict(zip(tables, total.tolist(), strict=True))


def _utilization(run: TrainRun, result: FitResult) -> dict[str, Any]:
    """Rank 0's utilization record (empty on the other ranks, which write no metrics)."""
    if not run.ctx.is_main:
        return {}
    try:
        peak = rank_peak(run.cfg, run.ctx.device)
    except (PeakUnavailable, torch.OutOfMemoryError) as error:  # after training: no failure
        log.warning("utilization: %s", error)
        return {"measurement_errors": [f"matmul peak not measured: {error}"]}
    bound = rank_bound(run.cfg, run.ctx.device)
    util = utilization(run.cfg, result.samples_per_sec, run.ctx.world_size, peak, bound)
    for error in util.measurement_errors:
        log.warning("utilization: %s", error)
    return util.to_json()


def _final_scalars(metrics: RunMetrics) -> dict[str, float | None]:
    """The HParams metrics: the kept weights' quality, throughput, collective bytes, peak
    memory, the fraction of the measured matmul peak, the largest rank's table bytes.
    Validation's are ``summary/val_*``: under ``val/*`` at the last step they would end the
    validation curve on the best weights' value when ``train.keep_best`` restored them."""
    return {
        **{f"summary/val_{q.key}": metrics.val[q.key] for q in QUALITY},
        **{f"test/{q.key}": metrics.test[q.key] for q in QUALITY},
        "summary/samples_per_sec": metrics.samples_per_sec,
        "summary/forward_comm_bytes_per_step": metrics.comm_bytes_per_step.get("forward"),
        "summary/backward_comm_bytes_per_step": metrics.comm_bytes_per_step.get("backward"),
        "summary/allreduce_bytes_per_step": metrics.comm_bytes_per_step.get("allreduce"),
        "summary/peak_memory_gib_max_rank": metrics.peak_rss_gib_max_rank,
        "summary/peak_gpu_gib_max_rank": metrics.peak_gpu_gib_max_rank,
        "summary/fraction_of_matmul_peak": metrics.utilization.get("fraction_of_matmul_peak"),
        # what fp16 tables buy (only RSS was there, which small tables do not move: review)
        "summary/table_bytes_max_rank": METRICS["table_bytes_per_rank"].read(metrics),
    }


#: A p90 step time this many times the median marks a run whose steps were starved of CPU.
CONTENTION_RATIO = 5.0


def _contention_warning(metrics: RunMetrics) -> list[str]:
    """A line when step times vary wildly (p90 > 5x p50): most often another process competing
    for the cores, or more threads than cores (``OMP_NUM_THREADS``, ``threads_per_rank``)."""
    p50, p90 = metrics.step_time_ms.get("p50"), metrics.step_time_ms.get("p90")
    if not p50 or not p90 or p90 <= CONTENTION_RATIO * p50:
        return []
    return [
        f"warning: step times vary {p90 / p50:.0f}x (p50 {p50:.1f} ms, p90 {p90:.1f} ms): "
        "likely another process competing for the cores, or more threads than cores "
        f"({metrics.threads_per_rank} threads per rank x {metrics.world_size} ranks; see "
        "hardware.threads_per_rank and OMP_NUM_THREADS); throughput is not representative"
    ]


def _fraction(value: float | None) -> str:
    return "n/a (measurement error)" if value is None else f"{value:.1%}"


def _utilization_lines(util: Mapping[str, Any]) -> list[str]:
    """The summary's utilization line, naming the peak it compares with (dtype, rate, when it
    was measured, probed or cached) and the theoretical bound; then one warning line per
    measurement error."""
    warnings = [f"warning: {e}" for e in util.get("measurement_errors", [])]
    if not util.get("dense_flops_per_sec"):
        return warnings
    bound = util.get("theoretical_matmul_flops_per_sec")
    bound_text = (
        f"theoretical {bound / 1e9:.0f} GFLOP/s: {_fraction(util['fraction_of_theoretical_peak'])}"
        if bound
        else "no theoretical bound known"
    )
    lines = [
        f"dense {util['dense_flops_per_sample'] / 1e6:.2f} MFLOP/sample, "
        f"{util['dense_flops_per_sec'] / 1e9:.1f} GFLOP/s per rank = "
        f"{_fraction(util['fraction_of_matmul_peak'])} of the measured {util['peak_dtype']} "
        f"matmul peak {util['peak_matmul_flops_per_sec'] / 1e9:.0f} GFLOP/s "
        f"({util.get('peak_source')} {util.get('peak_measured_at')}; {bound_text}); embeddings "
        f"{util['embedding_bytes_per_sec'] / 1e9:.2f} GB/s = "
        f"{_fraction(util['fraction_of_copy_peak'])} of copy bandwidth",
    ]
    return lines + warnings


def _best_lines(metrics: RunMetrics) -> list[str]:
    """Why training stopped early, and whose weights the val / test lines are."""
    lines = []
    epoch = metrics.best_epoch or 0.0
    if metrics.stop_reason == EARLY_STOPPING:
        after = (
            f"stopped improving after step {step_text(metrics.best_step)} (epoch {epoch:.2f}"
            if metrics.best_step is not None
            else "was never a finite number (a one-class validation split? a diverged model?"
        )
        lines.append(
            f"early stopping at step {metrics.steps}: val {metrics.monitor} {after}; "
            "train.early_stopping)"
        )
    gaps = [(s, metrics.generalization_gap(s)) for s in (metrics.best_step, metrics.steps)]
    gaps = [(s, g) for s, g in dict(gaps).items() if g is not None]
    if gaps:
        lines.append(
            "generalization gap (val log loss - train window log loss): "
            + ", ".join(f"{g:+.4f} at step {step_text(s)}" for s, g in gaps)
        )
    if metrics.weights == "best":
        final = metrics.final_weights
        lines.append(
            f"val / test are the best validation's weights (step {step_text(metrics.best_step)}, "
            f"epoch {epoch:.2f}, val {metrics.monitor} {metrics.best_value:.4f}; "
            "checkpoints/best); "
            f"the final weights (step {metrics.steps}): val AUROC {final['val']['auroc']:.4f}, "
            f"test AUROC {final['test']['auroc']:.4f}"
        )
        if metrics.weights_from:  # (what-ran review: shown beside this run's settings, unsaid)
            lines.append(
                f"those weights were trained before this run resumed at step "
                f"{metrics.resumed['step']}, by the checkpoint's run and in its settings; their "
                "val metrics are as it scored them"
            )
    return lines


def _steps_text(metrics: RunMetrics) -> str:
    """``32 steps``; after a resume, also the steps this run trained, which its samples/s and
    step times are of (the total beside this run's speed read as one run: what-ran review)."""
    start = metrics.resumed.get("step")
    if start is None:
        return f"{metrics.steps} steps"
    end = metrics.steps
    trained = "none" if start >= end else f"{start + 1}-{end}"
    return f"{end} steps ({trained} in this run, resumed at step {start})"


def _profile_record(run: TrainRun, traced: bool) -> list[str]:
    """The ``train.profile`` files of the run record (rank 0's; none without profiling): the
    traces only where this run wrote them (a resumed run that recorded none listed, and its
    summary counted, the earlier attempt's: diff review), and only its ranks' files."""
    if not (run.cfg.train.profile and run.ctx.is_main):
        return []
    cuda = run.ctx.device.type == "cuda"
    return profile_files(run.job.run_dir, run.ctx.world_size, traced, cuda)


def profile_line(files: list[str], run_dir: Path) -> str:
    """The summary's line of the ``train.profile`` ``files`` (relative to ``run_dir``): how
    many are traces, or that none is (a run shorter than the schedule wrote none, and "1
    files; traces open in ..." misled: presets review)."""
    traces = sum(name.endswith(TRACE_SUFFIX) for name in files)
    if not traces:
        return (
            f"profile: {run_dir / PROFILE_DIR} (no trace: the run ended before the profiler's "
            "recorded steps, train.profile_steps)"
        )
    return (
        f"profile: {run_dir / PROFILE_DIR} ({traces} trace(s) of {len(files)} files; traces "
        "open in https://ui.perfetto.dev)"
    )


def summary(metrics: RunMetrics, run_dir: Path, logdir: str = "outputs") -> str:
    """The lines printed at the end of a training run."""
    bayes = metrics.bayes_auroc or {}
    lines = []
    for split, m in (("val", metrics.val), ("test", metrics.test)):
        lines.append(split_line(split, m, bayes.get(split)))
    throughput = METRICS["samples_per_sec"].format(metrics.samples_per_sec)
    gpu = metrics.peak_gpu_gib_max_rank
    gpu_text = "" if gpu is None else f" | peak GPU memory {gpu:.2f} GiB (reserved, max rank)"
    host = metrics.peak_rss_gib_max_rank
    host = metrics.peak_memory_gib if host is None else host  # (as gpu: the largest rank's)
    lines.append(
        f"train {_steps_text(metrics)} | {throughput} samples/s "
        f"| peak host memory {host:.2f} GiB (max rank){gpu_text} "
        f"| job {metrics.wall_seconds:.1f} s"
    )
    ran = []  # what ran, where a precision is easy to miss
    if metrics.table_data_types:
        ran.append(
            f"precision: tables {metrics.tables_ran}, dense {metrics.dense_precision or 'fp32'}"
        )
    if metrics.effective_qcomms:
        ran.append(f"qcomms ran {metrics.qcomms_ran} (forward/backward)")
    if ran:
        lines.append("; ".join(ran))
    lines += [f"warning: {Substitution(**s).line()}" for s in metrics.substitutions]
    lines += _contention_warning(metrics)
    lines += _utilization_lines(metrics.utilization)
    read = metrics.data.get("read")
    if read:
        lines.append(read_summary(read))
    if metrics.target_auroc is not None:
        lines.append(
            f"target AUROC {metrics.target_auroc} reached at step {step_text(metrics.target_step)} "
            f"(epoch {metrics.target_epoch:.3f})"
            if metrics.reached_target
            else f"target AUROC {metrics.target_auroc} not reached in {metrics.steps} steps"
        )
    lines += _best_lines(metrics)
    if metrics.profile:
        lines.append(profile_line(metrics.profile, run_dir))
    lines.append(f"run folder: {run_dir}")
    lines.append(f"compare runs: tensorboard --logdir {logdir}")
    return "\n".join(lines)
