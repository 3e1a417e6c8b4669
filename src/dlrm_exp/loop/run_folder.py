"""Whether a run may train in its folder, and from which checkpoint: the folder's earlier run
or attempt, kept or replaced (:func:`check_run_folder`), a sweep's rerun meeting another job's
checkpoints (:func:`check_same_sweep_job`) or continuing its own attempt
(:func:`continued_resume`), and the commands that continue one (:func:`resume_command`).
"""

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dlrm_exp.errors import CheckpointError, FinishedRunKeptError, RunFolderInUseError
from dlrm_exp.loop.checkpoint import (
    CHECKPOINTS,
    best_checkpoint,
    complete_checkpoints,
    ended_how,
    in_run_folder,
    read_trainer_state,
)
from dlrm_exp.loop.settings import as_update, resolved_path, sweep_job
from dlrm_exp.record.run_record import UNFINISHED, finished_record, record_status
from dlrm_exp.util.text import first_few

log = logging.getLogger(__name__)


def check_no_earlier_run(
    run_dir: Path, best_too: bool = True, auto: bool = False, multirun: bool = False
) -> None:
    """A training run that starts fresh must start from an empty ``checkpoints/`` and no
    record: a later ``mode=evaluate|predict|export`` of the folder, or ``train.resume=auto``,
    would otherwise take an earlier run's checkpoint (its ``best``, or a later step) for this
    one's, and a run that failed would leave the earlier run's ``metrics.json`` beside its own
    config. An abandoned attempt (:func:`abandoned_attempt`) is no refusal: the run replaces
    it (:func:`replaces_attempt`; an interrupted sweep's job rerun as its hint said was
    refused: docs review). ``best_too=False``: a ``best`` is let be (a run resumed from
    another run's checkpoint adopts that run's best in its place, or removes it). ``auto``:
    ``train.resume=auto`` found no step checkpoint beside a finished run's record, which is
    kept, and the refusal says so. ``multirun``: a sweep's job (whose folder is chosen by
    ``hydra.sweep.dir``, not ``hydra.run.dir``).

    Raises:
        FinishedRunKeptError: a finished run's record is there (kept).
        RunFolderInUseError: naming the folder and what else it holds.
    """
    status = record_status(run_dir / "metrics.json")
    steps = complete_checkpoints(run_dir)
    if status in UNFINISHED and not steps:
        return  # an abandoned attempt (abandoned_attempt): this run replaces it
    best = best_checkpoint(run_dir) if best_too else None
    other = other_folder(multirun)
    if status is not None and status not in UNFINISHED:  # a finished run's: kept
        raise FinishedRunKeptError(_finished_kept(run_dir, other, steps, best, auto, multirun))
    if best is not None and not steps:  # (auto cannot continue a best: it trains afresh)
        raise RunFolderInUseError(
            f"{run_dir} holds the best weights of an earlier run ({best.name}) and no step "
            "checkpoint to continue from: train.resume=auto trains afresh here, replacing "
            f"them; or train into {other}, or remove {run_dir / CHECKPOINTS}"
        )
    if steps:
        names = first_few([p.name for p in ([best] if best else []) + steps])
        raise RunFolderInUseError(
            f"{run_dir} holds the checkpoints of an earlier run ({names}): continue it with "
            f"train.resume=auto, train into {other}, or remove {run_dir / CHECKPOINTS}"
        )


#: A sweep's job as the run-folder check knows it: its swept values (``Job.swept``) and its
#: :func:`~dlrm_exp.modes.train.job_settings`.
SweepJob = tuple[Mapping[str, Any], Mapping[str, Any]]


def check_same_sweep_job(
    run_dir: Path, saved: list[Path], job: SweepJob | None, other: str
) -> None:
    """A sweep's job (``job``; None: no sweep) finds in its folder no checkpoint (the newest
    of ``saved``) of another job of the sweep: a sweep rerun with an edited list numbers its
    jobs into other jobs' folders, where ``train.resume=auto`` continued another job's
    attempt, or replaced a finished job's record with one of no step trained, its best
    removed (diff reviews). Each key either job swept is compared, by the settings both
    record where they do (seed, data, optimizer: resolved values), else by the swept values
    (``sweep_job``; a group choice such as ``sharding``); a list narrowed to one value, or a
    checkpoint of a sweep without swept keys or of an earlier version, is compared so too.
    ``other``: where to train instead.

    Raises:
        RunFolderInUseError: naming that job's values of the keys that differ.
    """
    if job is None or not saved:
        return
    state = _saved_state(saved[-1])
    theirs, recorded = state.get("sweep_job") or {}, state.get("settings") or {}
    mine, settings = sweep_job(job[0]), job[1]
    differ = {}
    for key in sorted(theirs.keys() | mine.keys()):
        if key in recorded and key in settings:
            was, now = recorded[key], settings[key]
        elif key in theirs and key in mine:
            was, now = theirs[key], mine[key]
        else:
            continue
        if as_update(key, was) != as_update(key, now):
            differ[key] = was
    if differ:
        whose = " ".join(f"{k}={v}" for k, v in differ.items())
        names = first_few([p.name for p in saved])
        kept = "its record and " if (run_dir / "metrics.json").is_file() else ""
        raise RunFolderInUseError(
            f"{run_dir} holds {kept}the checkpoints of another job of an earlier sweep, "
            f"{whose} ({names}): train into {other}, or remove them"
        )


def _saved_state(path: Path) -> dict[str, Any]:
    """Checkpoint ``path``'s trainer state, empty where it cannot be read."""
    try:
        return read_trainer_state(path)
    except CheckpointError:
        return {}


def _finished_kept(
    run_dir: Path, other: str, steps: list[Path], best: Path | None, auto: bool, multirun: bool
) -> str:
    """The refusal of a fresh start (or ``auto`` without a step checkpoint) beside a finished
    run's record, which is kept, with its ``steps`` and ``best`` (a sweep's rerun said each
    an error: diff review)."""
    if steps:
        names = first_few([p.name for p in ([best] if best else []) + steps])
        return (
            f"{run_dir} holds the record of a run that finished (metrics.json) and its "
            f"checkpoints ({names}), kept: train.resume=auto trains it on where more steps "
            f"are asked for; train into {other} to train it again"
        )
    weights = f" and its best weights ({best.name})" if best else ""
    nothing = (  # (to say why auto cannot continue it, or why a best is no resume)
        ", but no step checkpoint that train.resume=auto could continue (it saved none: "
        "train.checkpoint_every_n_steps)"
        if auto or best
        else ""
    )
    remove = f"its metrics.json{' and checkpoints/' if best else ''}"
    return (
        f"{run_dir} holds the record of a run that finished (metrics.json){weights}, "
        f"kept{nothing}: train into {other} to train it again"
        + ("" if multirun else f", or remove {remove}")  # (a sweep's rerun keeps them)
    )


def abandoned_attempt(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds an abandoned attempt: the record of a run that failed or was
    interrupted (``metrics.json``) and no complete step checkpoint to continue it from. A
    training job started in the folder (afresh, ``train.resume=auto``, or from another run's
    checkpoint) replaces it."""
    status = record_status(run_dir / "metrics.json")
    return status in UNFINISHED and not complete_checkpoints(run_dir)


def replaces_attempt(run_dir: Path, resume: str | None) -> bool:
    """Whether a training job with ``train.resume=resume`` replaces an abandoned attempt in
    ``run_dir`` (:func:`abandoned_attempt`): it starts afresh or from another run's
    checkpoint, not from the folder's own ``best`` (which an attempt resumed from is kept:
    it was removed, then not found: diff review)."""
    own = bool(resume) and resume != "auto" and in_run_folder(Path(resume or ""), run_dir)
    return abandoned_attempt(run_dir) and not own


def drop_attempt_record(run_dir: Path) -> None:
    """Remove an abandoned attempt's record once the job replacing it has passed every check
    and loaded what it starts from (removed at the job's start, a refusal then lost it: diff
    review); a failed record stayed beside the new attempt's files until it wrote its own,
    and a sweep's summary gave its error."""
    log.warning(
        "%s: replacing the record of an earlier attempt that %s and saved no step checkpoint",
        run_dir, ended_how(run_dir),
    )  # fmt: skip
    (run_dir / "metrics.json").unlink(missing_ok=True)


def check_run_folder(
    run_dir: Path,
    resume: str | None,
    keep_best: bool,
    multirun: bool = False,
    job: SweepJob | None = None,
) -> None:
    """What a training run may find in its folder: a fresh start (``train.resume`` unset)
    nothing of an earlier run (:func:`check_no_earlier_run`, which lets an abandoned attempt
    be replaced); ``train.resume=auto`` finding no step checkpoint starts fresh too, refused
    only beside a finished run's ``metrics.json`` (an interrupted attempt of the job, a
    requeued one, may have left its ``best``, which the fresh start removes:
    :func:`drop_stale_best`); a resume, no ``best`` it would not keep
    (:func:`check_best_is_kept`), and one from another run's checkpoint, no step checkpoint or
    record of an earlier run here either. ``multirun``: a sweep's job, ``job`` (its swept
    values and settings; None: not known), finding no other job's checkpoints
    (:func:`check_same_sweep_job`).

    Raises:
        RunFolderInUseError: see those checks (a ``resume`` path that is no complete
            checkpoint is refused where it is loaded).
    """
    best = best_checkpoint(run_dir)  # (a finished job may have saved no step checkpoint)
    saved = [*([best] if best else []), *complete_checkpoints(run_dir)]
    check_same_sweep_job(run_dir, saved, job, other_folder(multirun))
    if resume and (resume != "auto" or complete_checkpoints(run_dir)):
        if resume != "auto" and not in_run_folder(Path(resume), run_dir):
            # another run's checkpoint: training on from it here would mix this folder's
            # earlier run with it (pruning by samples removed the new checkpoints, evaluate
            # and train.resume=auto took the earlier run's later ones)
            check_no_earlier_run(run_dir, best_too=False, multirun=multirun)
        if not replaces_attempt(run_dir, resume):  # (that best is no run's of this job's)
            check_best_is_kept(run_dir, keep_best)
    elif not resume or (run_dir / "metrics.json").is_file():  # a finished run's, no requeue
        check_no_earlier_run(run_dir, auto=resume == "auto", multirun=multirun)


def check_best_is_kept(run_dir: Path, keep_best: bool) -> None:
    """A run resumed with ``train.keep_best=false`` records its final weights, but
    ``mode=evaluate|predict|export`` of the folder take its ``checkpoints/best`` first: one
    kept before the resume would be scored instead.

    Raises:
        RunFolderInUseError: ``keep_best`` is off and the folder has a ``best``.
    """
    best = best_checkpoint(run_dir)
    if not keep_best and best is not None:
        raise RunFolderInUseError(
            f"train.keep_best=false, but {best} holds this run's best weights from before the "
            "resume, which mode=evaluate|predict|export of the folder would take for the "
            "recorded final ones: resume with train.keep_best=true, or remove it"
        )


def other_folder(multirun: bool) -> str:
    """Where a refused training job may go instead, for a message: for a job of a ``-m``
    sweep ``hydra.sweep.dir`` (``hydra.run.dir`` is not read there), else ``hydra.run.dir``."""
    if multirun:
        return "another sweep folder (hydra.sweep.dir=...)"
    return "another folder (hydra.run.dir=...)"


def resume_command(run_dir: Path, multirun: bool, auto: bool = True) -> str:
    """The command that continues the training of run folder ``run_dir``: the same command
    with ``hydra.run.dir=<run_dir> train.resume=auto``, or for a job of a ``-m`` sweep (whose
    jobs go where ``hydra.sweep.dir`` says; ``hydra.run.dir`` is not read) the same ``-m``
    command with ``hydra.sweep.dir=<its sweep folder>``; ``auto=False``: without
    ``train.resume=auto`` (a job that saved no step checkpoint runs again as it was asked)."""
    resume = " train.resume=auto" if auto else ""
    if multirun:  # the job folders are <sweep dir>/<job number>
        return f"the same -m command with hydra.sweep.dir={run_dir.parent}{resume}"
    return f"the same command with hydra.run.dir={run_dir}{resume}"


def requeued_resume(resume: str | None) -> str | None:
    """``train.resume`` of a job a cluster scheduler may requeue (a submitit task): ``auto``
    when unset, so a requeue continues from the task's newest checkpoint; a PATH as given,
    which :func:`continued_resume` turns into ``auto`` where the folder holds the task's own
    attempt begun from it (every PATH was ``auto`` where the folder held checkpoints: a
    first start into a finished run's folder replaced that run's record and best: diff
    review)."""
    return "auto" if resume in (None, "auto") else resume


def continued_resume(resume: str | None, run_dir: Path, swept: Mapping[str, Any]) -> str | None:
    """``train.resume`` for a job rerun into its folder: ``PATH``, another run's checkpoint,
    is ``auto`` where ``run_dir`` holds no finished run's record and its newest complete step
    checkpoint was saved in training that began from that PATH (:func:`began_from`) by this
    job: a single run, or the sweep's job of the same swept values (``swept``:
    :func:`sweep_job`): the job's own attempt, interrupted, which the rerun continues (a
    changed fixed setting is warned of, as with ``auto``). An interrupted sweep started with
    ``train.resume=PATH`` had no command that finished it: the same one refused the job's own
    checkpoints, and ``auto`` started the jobs that had not run afresh instead of from PATH
    (review); a sweep rerun with an edited list, whose jobs Hydra numbers into other jobs'
    folders, is refused as before (it continued another job's attempt: diff review). Else
    ``resume`` as given."""
    if not resume or resume == "auto" or in_run_folder(Path(resume), run_dir):
        return resume
    if finished_record(run_dir / "metrics.json"):
        return resume  # a finished run's folder: kept (check_no_earlier_run)
    found = complete_checkpoints(run_dir)
    state = _saved_state(found[-1]) if found else {}
    began = state.get("started_from")
    if (
        not isinstance(began, dict)
        or began.get("checkpoint") != resolved_path(resume)
        or state.get("sweep_job") != sweep_job(swept)
    ):
        return resume  # (another run's or job's: refused by check_run_folder)
    log.warning(
        "train.resume=%s: %s holds this job's earlier attempt, begun from that checkpoint; "
        "continuing it from its newest checkpoint, %s (train.resume=auto)",
        resume, run_dir, found[-1].name,
    )  # fmt: skip
    return "auto"


def began_from(
    path: Path, run_dir: Path, saved: dict[str, Any], resumed: dict[str, Any]
) -> dict[str, Any] | None:
    """Where the training of a run in ``run_dir`` resumed from checkpoint ``path`` (trainer
    state ``saved``) began (:attr:`~dlrm_exp.loop.trainer.TrainerState.started_from`): where
    ``path`` is another run's, ``resumed`` (the record's ``{"checkpoint", "step",
    "changed_settings"}`` of this resume) with the checkpoint resolved; else what the run of
    its own checkpoint began from (None: a fresh start)."""
    if in_run_folder(path, run_dir):
        return saved.get("started_from")
    return {**resumed, "checkpoint": resolved_path(str(path))}
