"""A training job's start from a checkpoint (``train.resume``): which one it loads
(:func:`checkpoint_to_resume`), the weights, the loop's state and training window it restores
(:func:`resume_from_checkpoint`), what it keeps of that run's validations where it validates on
other rows, the folder's record kept where nothing is left to train, and its TensorBoard
history continued or set aside.
"""

import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dlrm_exp.config import Config
from dlrm_exp.config.data import input_path_key
from dlrm_exp.config.model import ManagedCollision
from dlrm_exp.factories.experiment import KERNEL_ITERATIONS, set_kernel_iterations
from dlrm_exp.loop.checkpoint import (
    CHECKPOINTS,
    CheckpointError,
    CheckpointLayout,
    adopt_best,
    complete_checkpoints,
    drop_stale_best,
    in_run_folder,
    later_checkpoints,
    load_checkpoint,
    read_rank_state,
    resolve_resume,
    resume_step,
)
from dlrm_exp.loop.early_stopping import EARLY_STOPPING, TARGET
from dlrm_exp.loop.run_folder import (
    began_from,
    drop_attempt_record,
    other_folder,
)
from dlrm_exp.loop.settings import change_line, setting_changes, validation_changes
from dlrm_exp.loop.trainer import Trainer, TrainerState
from dlrm_exp.modes.setup import (
    warn_dtype_change,
    warn_list,
)
from dlrm_exp.modes.train_run import TrainRun
from dlrm_exp.record.run_record import COMPLETED, RunMetrics
from dlrm_exp.record.tracking import EVENT_FILES, Tracker
from dlrm_exp.util.rank_zero import on_rank_zero
from dlrm_exp.util.text import first_few

log = logging.getLogger(__name__)


def warn_other_data_order(saved: dict[str, Any], cfg: Config, world_size: int) -> None:
    """One warning when a checkpoint trained on another number of ranks is resumed on data
    whose step order depends on the ranks (:meth:`DataConfig.order_depends_on_world_size`):
    the resume continues at the same sample count, but not with the rows the run would have
    read next."""
    trained_on = saved.get("world_size")
    if trained_on in (None, world_size) or not cfg.data.order_depends_on_world_size():
        return
    log.warning(
        "train.resume: the checkpoint was trained on %d rank(s), this job has %d; the rows each "
        "step reads depend on the ranks here (Parquet blocks per rank, or shuffled batches of "
        "ranks x batch size rows), so the rest of this epoch trains some rows twice and others "
        "not at all",
        trained_on,
        world_size,
    )


def checkpoint_to_resume(cfg: Config, run_dir: Path, multirun: bool) -> Path | None:
    """The checkpoint ``train.resume`` names for a run in ``run_dir`` (None: start fresh, also
    when ``auto`` finds none); ``multirun``: a sweep's job (its refusal names
    ``hydra.sweep.dir``).

    Raises:
        CheckpointError: the path is not a complete checkpoint folder, or one this run folder
            holds later checkpoints than (training on from it here would mix two runs).
    """
    if not cfg.train.resume:
        return None
    path = resolve_resume(cfg.train.resume, run_dir)
    if path is None and not multirun and not cfg.train.init_from and _new_folder(run_dir):
        log.warning(  # (an INFO line was all: checkpoints review)
            "train.resume=auto: %s is a new folder (Hydra names one per run) with no "
            "checkpoint: this run trains from its start; to continue a run, give its folder: "
            "hydra.run.dir=%s",
            run_dir, _newest_checkpointed(run_dir) or "<that run's folder>",
        )  # fmt: skip
        return None
    if path is None:
        log.info("train.resume=auto: no complete checkpoint in %s, starting fresh", run_dir)
        return None  # (a stale best goes once the run passed its checks: replace_attempt)
    auto = cfg.train.resume == "auto"  # the newest: none is later
    later = [] if auto else later_checkpoints(run_dir, path)
    if later:
        raise CheckpointError(
            f"train.resume={cfg.train.resume}: this run folder holds later checkpoints "
            f"({first_few([p.name for p in later])}); training on from an earlier one here "
            "would mix the two runs (pruning and train.resume=auto take the later ones): "
            f"resume into {other_folder(multirun)}, or remove them"
        )
    return path


def _new_folder(run_dir: Path) -> bool:
    """Whether ``run_dir`` is one Hydra named for this run (``outputs/<date>/<time>``, the
    default ``hydra.run.dir``: a folder named by hand is the first run of a long job, not a
    mistake: diff review) holding nothing an earlier training run leaves: no record, no
    checkpoints, no TensorBoard events (what this job wrote so far, its config, log and
    plan, aside)."""
    named = re.fullmatch(r"\d{4}-\d{2}-\d{2}", run_dir.parent.name) and re.fullmatch(
        r"\d{2}-\d{2}-\d{2}", run_dir.name
    )
    earlier = ("metrics.json", CHECKPOINTS, EVENT_FILES)
    return bool(named) and not any(any(run_dir.glob(name)) for name in earlier)


def _newest_checkpointed(run_dir: Path) -> Path | None:
    """The newest folder beside Hydra's default ones (``outputs/<date>/<time>``: two levels
    above ``run_dir``) that holds a complete checkpoint, for the hint; None: none."""
    folders = [f for f in run_dir.parent.parent.glob("*/*/checkpoints") if f.is_dir()]
    for folder in sorted(folders, key=lambda f: f.stat().st_mtime, reverse=True)[:20]:
        if folder.parent != run_dir and complete_checkpoints(folder.parent):
            return folder.parent
    return None


def resume_from_checkpoint(
    run: TrainRun,
    layout: CheckpointLayout,
    samples_per_step: list[int],
    trainer: Trainer,
    tracker: Tracker,
) -> tuple[TrainerState | None, RunMetrics | None]:
    """Load the checkpoint ``train.resume`` names into the experiment and the ``trainer``'s
    training window; the loop's state at this job's step of the checkpoint's data position (of
    the trainer's ``total_steps``), or None to start fresh, and the folder's record kept when
    nothing is left to train (:func:`_finished_record`). Where this job's steps count other
    global batches, ``tracker`` sets the earlier event files aside
    (:meth:`Tracker.restart_history`)."""
    path, total_steps = run.resume_path, trainer.total_steps
    if path is None:  # afresh: an earlier attempt's events here (if any) hidden
        tracker.purge_from(0)
        return None, None
    saved = load_checkpoint(path, run.experiment.model, run.experiment.optimizer, layout)
    if run.ctx.is_main and "model.embedding_data_type" not in (saved.get("settings") or {}):
        # a checkpoint of an earlier version: its weights' dtypes say what the settings'
        # line below cannot (else that line names a change, once)
        warn_dtype_change(path, run.experiment.table_data_types, "resuming")
    if KERNEL_ITERATIONS in saved:  # (checkpoints of earlier versions: counted from 0)
        set_kernel_iterations(run.experiment.model, int(saved[KERNEL_ITERATIONS]))
    changes = setting_changes(saved.get("settings"), layout.settings)
    changed = [change_line(c) for c in changes]
    if run.ctx.is_main:
        warn_list(
            f"train.resume: {{n}} setting(s) differ from the run that wrote {path}",
            changed,
            "this run continues another data stream or update than that run's; its "
            f".hydra/config.yaml has them{_digests_where(changes)}",
        )
    state = TrainerState.from_checkpoint(
        saved, resume_step(saved, samples_per_step, run.ctx.world_size)
    )
    other, kept, forgot = _on_other_rows(run, state, changes, path, total_steps)
    if not other:  # (other rows: the gap paired another run's window: diff review)
        _restore_window(run, trainer, path, saved)
    state.reconsider_stop(run.cfg.train, total_steps)
    log.info("resumed from %s at step %d", path, state.step)
    run.resumed.update(checkpoint=str(path), step=state.step, changed_settings=changed)
    state.started_from = began_from(path, run.job.run_dir, saved, dict(run.resumed))
    own = in_run_folder(path, run.job.run_dir)
    if state.started_from and own:  # (where it began: the record said its own checkpoint)
        run.resumed["started_from"] = state.started_from
    kept = kept if other else _finished_record(run, state, total_steps)
    if not run.replaces:  # (else the events are an abandoned attempt's: replace_attempt's)
        _continue_history(tracker, state, int(saved["step"]), forgot, own)
    if run.cfg.train.keep_best:  # another run's best: held here too; a stale one: removed
        source = Path(state.best_checkpoint) if state.best_checkpoint else None
        # nothing to train beside the completed record kept: the folder stays as it is
        best = adopt_best(source, run.job.run_dir, run.ctx.is_main, state.best, kept is None)
        state.best_checkpoint = None if best is None else str(best)
    if run.ctx.is_main:
        warn_other_data_order(saved, run.cfg, run.ctx.world_size)
    between = between_evictions(int(saved["step"]), run.cfg.model.managed_tables)
    if between and run.ctx.is_main:
        log.warning(between)
    return state, kept


def _digests_where(changes: list[tuple[str, Any, Any]]) -> str:
    """Where a changed files' digest (``data.path.files``, ...) is recorded, which no config file
    holds (the warning sent a user to .hydra/config.yaml for it: npy review)."""
    if all(input_path_key(key) == key for key, _, _ in changes):
        return ""
    return (
        " (the input files' digests, data.*.files, data.path.conversion and data.path.ids: its "
        "checkpoint's trainer_state.json)"
    )


def _on_other_rows(
    run: TrainRun,
    state: TrainerState,
    changes: list[tuple[str, Any, Any]],
    path: Path,
    total_steps: int,
) -> tuple[list[str], RunMetrics | None, bool]:
    """What a resume from checkpoint ``path`` whose changed settings (``changes``:
    :func:`setting_changes`) give it other validation rows (:func:`validation_changes`;
    another test file moves none: review) keeps: where nothing is left to train, the folder's
    finished record, whole (a zero-step record replaced it, its best removed: diff review);
    else nothing of the checkpoint's validations (:func:`_forget_other_validations`, before
    the stop is reconsidered: a stop on other rows kept the other run's record: diff review).
    Returns (those settings, the record kept or None, whether it forgot)."""
    # decided once: hosts may list a shared folder differently (the files' digest), and ranks
    # that kept different bests would stop apart (diff review)
    other = on_rank_zero(
        lambda: validation_changes(
            changes, lambda key, was, now: run.cfg.data.rows_differ(key, was, now, ("val",))
        )
    )
    ends = bool(other) and state.step >= total_steps
    kept = _finished_record(run, state, total_steps, other) if ends else None
    return other, kept, kept is None and _forget_other_validations(run, state, other, path)


def _restore_window(run: TrainRun, trainer: Trainer, path: Path, saved: dict[str, Any]) -> None:
    """The training window of checkpoint ``path`` (trainer state ``saved``) on this rank:
    with the same world size only (else other ranks' batches), none from an earlier
    version."""
    if saved.get("world_size") == run.ctx.world_size:
        rank_state = read_rank_state(path, run.ctx.rank) or {}
        if "train_window" in rank_state:
            trainer.window.restore(rank_state["train_window"], run.ctx.device)


def _forget_other_validations(
    run: TrainRun, state: TrainerState, other: list[str], path: Path
) -> bool:
    """A resume whose changed settings ``other`` give it other validation rows than the run
    of checkpoint ``path`` (:func:`validation_changes`: another data source, a data key that
    decides the validation rows, or seed for generated data) forgets that run's validations
    and best: a job resumed from another seed's checkpoint on generated data kept that run's
    best, reported its val AUROC (0.7907, of other rows; its own reached 0.6963) and scored
    the test split with its weights (review); with nothing left to train and no record kept,
    the final weights are validated on this run's rows. Returns whether it forgot any."""
    if not (other and (state.val_history or state.best_checkpoint)):
        return False
    if run.ctx.is_main:
        log.warning(
            "train.resume: %s give this run other validation rows than the run of %s: its "
            "%d validation(s) are not compared with this run's, nor its best weights kept "
            "as this run's best; this run's best, early stopping and target count its own "
            "validations",
            ", ".join(other), path, len(state.val_history),
        )  # fmt: skip
    state.forget_validations()
    return True


def replace_attempt(run: TrainRun, start: TrainerState | None, tracker: Tracker) -> None:
    """Rank 0, once every check passed and the start point is loaded (earlier, a refusal
    lost what was removed: diff review): what an earlier attempt in the folder left that
    would be taken for this run's goes. Starting afresh with ``train.resume=auto`` or over an
    abandoned attempt, its ``best`` (:func:`drop_stale_best`; a requeued job's too); over an
    abandoned attempt, its record (:func:`drop_attempt_record`) and, where this job resumed
    from another run's checkpoint, its TensorBoard points, set aside (one curve joined the
    two: diff review; a fresh start hides them with :func:`resume_from_checkpoint`'s purge)."""
    run_dir, fresh = run.job.run_dir, start is None
    # (resumed with keep_best, adopt_best replaced or removed it; without, it stayed and was
    # scored: diff review)
    auto_fresh = fresh and run.cfg.train.resume == "auto"
    if auto_fresh or (run.replaces and (fresh or not run.cfg.train.keep_best)):
        drop_stale_best(run_dir)
    if not run.replaces:
        return
    drop_attempt_record(run_dir)
    if start is not None:  # (each attempt set aside into a folder of its own)
        aside = tracker.restart_history(
            "tensorboard_earlier_attempt", start.val_history, start.train_windows
        )
        if aside is not None:
            log.warning("the earlier attempt's TensorBoard points moved to %s", aside)


def _continue_history(
    tracker: Tracker, state: TrainerState, saved_step: int, forgot: bool, own: bool
) -> None:
    """The folder's TensorBoard points, for a job resumed at ``state.step`` from checkpoint
    step ``saved_step`` (``own``: of this folder): those logged after the checkpoint hidden
    (logged again); where the
    steps count other global batches (another world size or batch size), or the
    validations were of other rows (``forgot``: :func:`_forget_other_validations`; they
    stayed in the curve: diff review), all set aside into ``tensorboard_before_step_<n>/``
    (:meth:`Tracker.restart_history`) and the validations kept logged again in this job's
    steps. In a folder of its own (another run's checkpoint), the validations kept are logged
    (:meth:`Tracker.log_history`); points an attempt killed there left (no record, no
    checkpoint: ``kill -9``, the OOM killer) are of no run this one continues, and go to
    ``tensorboard_earlier_attempt/`` (they were hidden only after the checkpoint's step, and
    the curve joined the two: run-folder review)."""
    rescaled = saved_step != state.step
    if own and not (rescaled or forgot) and tracker.earlier:
        tracker.purge_from(state.step + 1)
        return
    name = f"tensorboard_before_step_{saved_step}" if own else "tensorboard_earlier_attempt"
    aside = tracker.restart_history(name, state.val_history, state.train_windows)
    if aside is not None and not own:
        log.warning("an earlier attempt's TensorBoard points in this folder moved to %s", aside)
    elif aside is not None and rescaled:
        log.warning(
            "the checkpoint's step %d is this job's step %d (another world size or batch "
            "size): TensorBoard's earlier points, in its steps, moved to %s; the validations "
            "are logged again in this job's steps",
            saved_step,
            state.step,
            aside,
        )
    elif aside is not None:
        log.warning("TensorBoard's earlier points, of other validation rows, moved to %s", aside)


def _finished_record(
    run: TrainRun, start: TrainerState | None, total_steps: int, other: Sequence[str] = ()
) -> RunMetrics | None:
    """The run folder's completed ``metrics.json``, kept, when ``train.resume`` gives a
    checkpoint where its training ended (the last step, or a stop) and that record is of the
    same step: a job that trains no step measures no throughput, step time or collective
    bytes, so it must not replace the record that did (a requeued job that finished after its
    last checkpoint). Where this job's ``other`` settings give other validation rows, the
    warning says the kept record's validations are not of them (it said only "kept": review).
    None: train (and write a record) as usual."""
    if start is None or (start.step < total_steps and start.stop_reason is None):
        return None
    if start.step > total_steps and run.ctx.is_main:
        log.warning(
            "train.resume: the checkpoint is at step %d, past this job's last step %d "
            "(train.max_steps / train.epochs): nothing is trained, and the record is of the "
            "checkpoint's weights at step %d",
            start.step,
            total_steps,
            start.step,
        )
    path = run.job.run_dir / "metrics.json"
    record = on_rank_zero(lambda: _completed_record(path, start.step))
    if record is not None and run.ctx.is_main:
        how = {
            TARGET: "remove or raise train.target_auroc",
            EARLY_STOPPING: "raise train.early_stopping.patience",
        }.get(start.stop_reason or "", "raise train.epochs or train.max_steps")
        rows = (
            f"; its validations are of that run's rows, not of this job's ({', '.join(other)}: "
            "mode=evaluate checkpoint=<this folder> with this job's data scores them)"
            if other
            else ""
        )
        log.warning(
            "train.resume: training ended at step %d (%s) in this run folder; nothing left to "
            "train, %s kept (%s to train on)%s",
            start.step,
            start.stop_reason or "its last step",
            path,
            how,
            rows,
        )
    elif start.step == total_steps and run.ctx.is_main:  # (past it: said above)
        log.warning(
            "train.resume: the checkpoint is at this job's last step %d (train.max_steps / "
            "train.epochs, in this job's steps: on another world size or batch size they count "
            "other global batches); nothing is trained, and the record is of the checkpoint's "
            "weights: raise train.max_steps or train.epochs to train on",
            start.step,
        )
    return record


def _completed_record(path: Path, step: int) -> RunMetrics | None:
    """The completed training record at ``path`` if it ended at ``step``, else None."""
    try:
        record = RunMetrics.read(path)
    except (OSError, ValueError, TypeError):
        return None
    return record if record.status == COMPLETED and record.steps == step else None


def between_evictions(step: int, managed: Mapping[str, ManagedCollision]) -> str | None:
    """The warning for a resume from a checkpoint of ``step`` that falls between the
    evictions of managed-collision tables (``{table: settings}``); None when it falls on every
    table's eviction (or there are none). TorchRec keeps the ids seen since the last eviction
    in buffers that checkpoints do not hold (the final or a preemption checkpoint can fall
    there), so such a resume continues closely, not bitwise."""
    off = sorted(f"{t} (every {mc.eviction_interval})" for t, mc in managed.items()
                 if step % mc.eviction_interval)  # fmt: skip
    if not off:
        return None
    return (
        f"resuming from step {step}, between the evictions of managed-collision table(s) "
        f"{first_few(off)}: the ids seen since their last "
        "eviction are not in the checkpoint, so this run continues closely, not bitwise"
    )
