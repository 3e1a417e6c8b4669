"""``mode=evaluate``: score a trained checkpoint on the data splits.

``python -m dlrm_exp mode=evaluate checkpoint=<run folder or checkpoints/step_<n>>
[data=...] [split=val|test|all]`` builds this job's model and plan (any sharding type and
world size: DCP reshards the saved tables onto it), loads only the model's weights, and
writes AUROC, log loss, NE and the row counts of each split to ``metrics.json``
(:class:`~dlrm_exp.record.run_record.EvalMetrics`) and TensorBoard (``val/*``, ``test/*`` at
the checkpoint's step). On the data it was trained with, the numbers are the training run's
final ones: the same weights see the same batches.
"""

import logging
import time
from functools import partial
from pathlib import Path

from torchrec.distributed.types import ShardingPlan

from dlrm_exp.config import Config, CriteoTsvDataConfig, EvalSplit
from dlrm_exp.data.criteo_tsv import check_skipped_rows, inputs_read
from dlrm_exp.data.splits import DataSplits, read_summary
from dlrm_exp.distributed.launch import (
    check_devices,
    env_rank,
    process_group,
)
from dlrm_exp.errors import ConfigError, DataError
from dlrm_exp.loop.checkpoint import BEST, find_checkpoint, load_model_weights
from dlrm_exp.loop.evaluate import evaluate, quality
from dlrm_exp.modes.job import Job, ModeResult
from dlrm_exp.modes.setup import (
    FolderCheck,
    check_folder_first,
    check_folder_in_worker,
    prepare,
    rank_batches,
    run_on_ranks,
    warn_changed_inputs,
    warn_other_data_values,
    warn_other_ids,
    warn_unlike_training,
    warn_unscored,
)
from dlrm_exp.planning.tables import model_inputs, table_shapes
from dlrm_exp.record.metric_table import split_line
from dlrm_exp.record.run_record import UNFINISHED, EvalMetrics
from dlrm_exp.record.tracking import Tracker
from dlrm_exp.util.files import check_writable, read_json_object
from dlrm_exp.util.rank_zero import on_rank_zero
from dlrm_exp.util.substitution import Substitution, precisions_text

log = logging.getLogger(__name__)

#: Substitutions of settings only training runs (the optimizer's update, the sparse
#: backward), which a scoring neither runs nor is changed by.
_TRAINING_ONLY = ("optimizer", "optimizer.stochastic_rounding", "train.sparse_backward")


def run(cfg: Config, job: Job) -> ModeResult:
    """``mode=evaluate``; the task's value is the val AUROC (or the test AUROC with
    ``split=test``)."""
    result = run_evaluate(cfg, job)
    scored = result.val or result.test
    lines = summary(result, job.run_dir) if env_rank() == 0 else None
    return ModeResult(summary=lines, value=scored.get("auroc"))


def run_evaluate(cfg: Config, job: Job) -> EvalMetrics:
    """Evaluate ``cfg.checkpoint`` as configured; rank 0 writes ``metrics.json``.

    Raises:
        CheckpointError: the checkpoint is missing, partial, unreadable or of another model.
        ConfigError: the run folder holds another mode's ``metrics.json`` (a training run's).
        DataError, InsufficientMemoryError, ConfigError: as in training.
    """
    check_devices(cfg.hardware)
    assert cfg.checkpoint is not None  # Config.__post_init__ requires it
    pending = check_folder_first(partial(_check_folder, job.run_dir), job.run_dir)
    if pending is None:  # refused before workers start (launched: in the worker)
        find_checkpoint(cfg.checkpoint, warn=False)  # (the worker's look warns)
    return run_on_ranks(evaluate_worker, cfg, job, pending)


def _check_folder(run_dir: Path) -> None:
    """The run folder can take this evaluation's record (see :func:`_keep_other_records`)."""
    check_writable(run_dir)
    _keep_other_records(run_dir)


def _keep_other_records(run_dir: Path) -> None:
    """An evaluation writes ``metrics.json`` in its run folder: refuse a folder whose
    ``metrics.json`` is another mode's record (``hydra.run.dir`` set to the training run's
    folder), which it would replace. An earlier evaluation's record, or a sweep job's that
    failed or was interrupted (no measurements: the job rerun in its folder), is replaced.

    Raises:
        ConfigError: ``run_dir/metrics.json`` exists and is none of those.
    """
    record = run_dir / "metrics.json"
    if not record.is_file():
        return
    content = read_json_object(record) or {}
    replaceable = content.get("status") in UNFINISHED
    if content.get("mode") != EvalMetrics.mode and not replaceable:
        raise ConfigError(
            f"hydra.run.dir={run_dir} holds another run's metrics.json (a training record): "
            "mode=evaluate would replace it; leave hydra.run.dir unset (a new folder under "
            "outputs/) or name another folder"
        )


def _check_rows(cfg: Config, splits: DataSplits) -> None:
    """The one split asked for (``split=val`` / ``test``) has rows to score.

    Raises:
        DataError: it has none (``data.test_fraction=0``): the run scored nothing and
            recorded ``status: completed`` with no metric (review).
    """
    if cfg.split is not EvalSplit.all and len(getattr(splits, cfg.split.value)) == 0:
        name = cfg.split.value
        raise DataError(
            f"split={name}: the {name} split has no rows here (e.g. data.{name}_fraction=0, or "
            f"an empty {name} input): nothing to score; give it rows, or score another split"
        )


def _check_skipped(cfg: Config, splits: DataSplits, names: tuple[str, ...]) -> None:
    """TSV rows of a scored input skipped beyond ``data.max_skipped_fraction`` of its rows
    are refused (:func:`check_skipped_rows`), input by input."""
    if isinstance(cfg.data, CriteoTsvDataConfig) and splits.info.read:
        for key in sorted(cfg.data.read_inputs(names)):  # each file on its own: a clean
            check_skipped_rows(  # test file let a bad val file through (Criteo review)
                inputs_read(splits.info.read, {key}),
                cfg.data.max_skipped_fraction,
                "evaluated",
                # (predict's advice, has_label=false, is none here: docs review)
                fix="Evaluation scores labelled rows; to score the valid ones, raise "
                "data.max_skipped_fraction (or set it to null)",
                source=key,
            )


def evaluate_worker(
    cfg: Config, job: Job, check: FolderCheck | None = None, plan: ShardingPlan | None = None
) -> EvalMetrics:
    """Load the checkpoint's weights on this rank and score the asked-for splits (every rank
    takes part; rank 0 writes). Rank 0 finds ``checkpoint=``'s folder for every rank (hosts
    may list a shared folder differently). ``check``: the run folder's, left to the worker
    (:func:`check_folder_first`)."""
    with process_group(cfg.hardware) as ctx:
        check_folder_in_worker(check)
        location = cfg.checkpoint
        assert location is not None  # Config.__post_init__ requires it
        path = on_rank_zero(lambda: find_checkpoint(location))
        names = cfg.scored_splits()
        splits, experiment = prepare(cfg, ctx, plan, loads_weights=True, scored=names)
        _check_skipped(cfg, splits, names)
        _check_rows(cfg, splits)
        saved = load_model_weights(
            path,
            experiment.model,
            table_shapes(cfg.model),
            cfg.data.id_policies(),
            splits.info.id_kinds,
            ctx.world_size,
            model_inputs(cfg),
        )
        step = int(saved["step"])
        scoring = [s for s in experiment.substitutions if s.setting not in _TRAINING_ONLY]
        if ctx.is_main:
            for substitution in scoring:
                log.warning(substitution.line())
            warn_unscored(cfg, splits, names, ctx.world_size)
            warn_unlike_training(saved, cfg, ctx.world_size, path)
            warn_other_data_values(saved, cfg)
            warn_changed_inputs(saved, cfg, ids_warned=warn_other_ids(saved, cfg))
        scores = {
            name: evaluate(
                experiment.pipeline,
                experiment.model,
                rank_batches(cfg, ctx, getattr(splits, name)),
                ctx.device,
            )
            for name in names
        }
        _log_scores(job.tensorboard_dir or job.run_dir, ctx.is_main, scores, step)
        result = EvalMetrics(
            checkpoint=str(path),
            step=step,
            val=scores.get("val", {}),
            test=scores.get("test", {}),
            world_size=ctx.world_size,
            data=splits.info.to_json(),
            wall_seconds=time.time() - job.started,
            effective_qcomms=experiment.effective_qcomms,
            substitutions=[s.to_json() for s in scoring],
        )
        if ctx.is_main:
            result.write(job.run_dir / "metrics.json")
    return result


def _log_scores(folder: Path, is_main: bool, scores: dict[str, dict], step: int) -> None:
    """TensorBoard's ``val/*`` / ``test/*`` of the ``scores`` at the checkpoint's ``step``
    (rank 0, ``is_main``), the points already in ``folder`` (an earlier evaluation's, whose
    record this one replaces, or a failed sweep job's of another mode) set aside into
    ``tensorboard_earlier_run/`` (an earlier evaluation's test points stayed beside a val-only
    record: run-folder review)."""
    tracker = Tracker(folder, enabled=is_main)
    try:
        aside = tracker.restart_history("tensorboard_earlier_run", [], [])
        if aside is not None:
            log.warning("the folder's earlier TensorBoard points moved to %s", aside)
        for name, values in scores.items():
            tracker.scalars(name, quality(values), step)
    finally:
        tracker.close()


def summary(result: EvalMetrics, run_dir: Path) -> str:
    """The lines ``mode=evaluate`` prints."""
    weights = " (the best validation's weights)" if Path(result.checkpoint).name == BEST else ""
    lines = [
        f"evaluated {result.checkpoint} (step {result.step}){weights} on {result.world_size} "
        "rank(s)"
    ]
    for name, values in (("val", result.val), ("test", result.test)):
        if values:
            lines.append(split_line(name, values))
    if result.effective_qcomms:
        lines.append(f"qcomms ran {precisions_text(result.effective_qcomms)} (forward/backward)")
    lines += [f"warning: {Substitution(**s).line()}" for s in result.substitutions]
    read = result.data.get("read")
    if read:  # the rows read, valid, padded and skipped, as training prints them
        lines.append(read_summary(read))
    lines.append(f"run folder: {run_dir}")
    return "\n".join(lines)
