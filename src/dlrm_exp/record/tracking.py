"""TensorBoard: scalars, the run's HParams and the Custom Scalars charts, written with
TensorBoard's own writer."""

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tensorboard.compat.proto.event_pb2 import Event, SessionLog
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.plugins.hparams.api_pb2 import Status
from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams as hparams_summary

from dlrm_exp.config import Config
from dlrm_exp.record.metric_table import QUALITY
from dlrm_exp.record.run_record import RunMetrics
from dlrm_exp.record.runs import normalized_value

Scalar = int | float | str | bool

#: The config groups whose choices are HParams.
GROUPS = ("model", "sharding", "optimizer", "qcomms", "data", "hardware")


def run_hparams(
    cfg: Config,
    choices: Mapping[str, str],
    world_size: int,
    threads: int,
    metrics: RunMetrics | None = None,
) -> dict[str, Scalar]:
    """The run's HParams: each group's choice (and the ``experiment`` preset) and the key
    fields, as TensorBoard scalars; where a run's ``metrics`` say what ran, the tables' compute
    kernels and weight dtypes and the precision of each embedding collective
    (:attr:`~dlrm_exp.record.run_record.RunMetrics.qcomms_ran`, e.g.
    ``reduce_scatter FP16/BF16``) as they ran (what was asked could differ; runs that
    differed only in them, the dense precision, the threads or the pipeline had the same
    HParams: what-ran review); without (a run failed under way) what was asked, and
    ``qcomms_ran`` n/a. ``threads``: each rank's intra-op threads. The learning-rate schedule
    and ``eps`` are HParams of every run, not only of a sweep that varies them.
    Fields a group choice already says (the sharding type, the sparse optimizer, the asked
    qcomms precisions) are left out: TensorBoard's table shows the first 5 differing HParams,
    and four such copies pushed the swept ``sharding`` out of them (review). ``seed`` is text
    (a number showed as ``1.0000``); ``batch_size_per_rank`` says what ``train.batch_size``
    counts."""
    ran = metrics or RunMetrics()  # (none: failed under way, so what was asked)
    return {
        **{group: str(choices.get(group, "?")) for group in GROUPS},
        "experiment": str(choices.get("experiment") or "none"),
        "embedding_dim": cfg.model.embedding_dim,
        "num_tables": len(cfg.model.table_sizes),
        "num_embeddings_cap": cfg.model.num_embeddings_cap or 0,
        "interaction_type": cfg.model.interaction_type.value,
        "compute_kernel": ran.kernels_ran or cfg.sharding.compute_kernel.value,
        "embedding_data_type": ran.tables_ran or cfg.model.embedding_data_type.value,
        "qcomms_ran": ran.qcomms_ran if metrics else "n/a",
        "dense_precision": cfg.train.dense_precision.value,
        "pipeline": cfg.train.pipeline.value,
        "sparse_backward": ran.sparse_backward or cfg.train.sparse_backward.value,
        "learning_rate": cfg.optimizer.learning_rate,
        "dense_learning_rate": cfg.optimizer.dense_learning_rate,
        # (single runs of other schedules or eps had the same HParams: tuning review)
        "lr_warmup_steps": cfg.optimizer.lr_warmup_steps,
        "lr_decay_start": cfg.optimizer.lr_decay_start,
        "lr_decay_steps": cfg.optimizer.lr_decay_steps,
        "eps": cfg.optimizer.eps,
        "batch_size_per_rank": cfg.train.batch_size,
        "world_size": world_size,
        "threads_per_rank": threads,
        "seed": str(cfg.seed),
        # (the best weights of a checkpoint's run, trained under its settings: review)
        "weights_from": (ran.weights_from or "this run") if metrics else "n/a",
        # (a fine-tuned run had a fresh run's HParams: diff review)
        "init_from": (ran.initialized_from if metrics else cfg.train.init_from) or "none",
    }


#: Swept keys an HParam of another name already shows (its value, or what it sets).
_SHOWN_AS = {
    "hardware.nproc_per_node": "world_size",
    "hardware.nnodes": "world_size",
    "train.batch_size": "batch_size_per_rank",
}


#: TensorBoard's Custom Scalars tab: the charts a DLRM run is read by, each over every run of
#: the log folder, ahead of the alphabetical Time Series (where ``lr`` and ``summary`` come
#: first). Validation beside the last training batches (``train_window``) shows overfitting as
#: it happens. ``{chart: ["Multiline", [tag regex, ...]]}`` as ``add_custom_scalars`` takes it.
CUSTOM_SCALARS = {
    "dlrm_exp": {
        "AUROC: validation and the last training batches": [
            "Multiline",
            [r"^val/auroc$", r"^train_window/auroc$"],
        ],
        "log loss: validation, the last training batches, the logged steps": [
            "Multiline",
            [r"^val/logloss$", r"^train_window/logloss$", r"^train/loss$"],
        ],
        "NE (normalized entropy), validation": ["Multiline", [r"^val/ne$"]],
        "samples/s": ["Multiline", [r"^train/samples_per_sec$"]],
        "learning rate: dense and embedding": ["Multiline", [r"^lr$", r"^lr/embedding$"]],
    }
}


def _event_file_writer(writer: SummaryWriter) -> object:
    """The event-file writer behind ``writer``. ``SummaryWriter`` exposes it only as the private
    ``_get_file_writer()``; its public ``add_hparams`` would write the HParams entry into a new
    sub-folder (a second TensorBoard run per run), which is what going through the file writer
    avoids. This adapter is the one place that touches the private method."""
    return writer._get_file_writer()


def _with_status(end: Summary, status: int) -> Summary:
    """``end``, torch's HParams session-end entry (which always says ``STATUS_SUCCESS``), with
    ``status`` (``tensorboard.plugins.hparams.api_pb2.Status``) instead."""
    data = end.value[0].metadata.plugin_data
    content = HParamsPluginData.FromString(data.content)
    content.session_end_info.status = status
    data.content = content.SerializeToString()
    return end


def swept_hparams(hparams: Mapping[str, Scalar], swept: Mapping[str, Any]) -> dict[str, Scalar]:
    """``hparams`` with each of a sweep's swept keys (``{key: this job's parsed value}``) that
    has no HParam added as one of its own: a key is the HParam of its name (``sharding``,
    ``seed``), else of its last part (``optimizer.learning_rate`` -> ``learning_rate``), else
    the one of :data:`_SHOWN_AS` (``hardware.nproc_per_node`` -> ``world_size``: both were
    shown; review), else it is added under its key with its value as parsed
    (``optimizer.stochastic_rounding=false`` -> ``false``, ``model.dcn_num_layers=3`` -> 3, a
    number, so TensorBoard offers a range filter); booleans (which torch's ``hparams`` would
    turn into 1.0 / 0.0), lists, dicts and null as canonical text (``true``)."""
    values = dict(hparams)
    for key, value in swept.items():
        if key in hparams or key.rsplit(".", 1)[-1] in hparams or _SHOWN_AS.get(key) in hparams:
            continue
        scalar = isinstance(value, (int, float, str)) and not isinstance(value, bool)
        values[key] = value if scalar else normalized_value(value)
    return values


#: The names of TensorBoard's event files.
EVENT_FILES = "events.out.tfevents.*"


class Tracker:
    """TensorBoard event writer for one run folder; a no-op on ranks other than 0.

    Scalars: ``train/loss``, ``train/samples_per_sec``, ``lr``, ``val/*``, ``test/*``.
    HParams: the group choices and key fields (TensorBoard infers the experiment over the
    runs of ``--logdir``); the final metrics are also scalars (``test/*``, ``summary/*``: the
    kept weights' validation as ``summary/val_*``, beside the ``val/*`` history).
    Custom Scalars: the :data:`CUSTOM_SCALARS` charts.
    """

    def __init__(self, run_dir: Path | None, enabled: bool) -> None:
        on = enabled and run_dir is not None
        self.folder = run_dir
        #: The event files of an earlier job in this folder (a resumed run's).
        self.earlier = sorted(run_dir.glob(EVENT_FILES)) if on and run_dir.is_dir() else []
        self._on = on
        self._writer: SummaryWriter | None = None

    @property
    def writer(self) -> SummaryWriter | None:
        """The event writer, opened (with the Custom Scalars charts) when first written to:
        a run refused before it logs anything (a checkpoint that cannot be loaded) left an
        empty event file in the folder (review). None on ranks other than 0."""
        if self._on and self._writer is None:
            self._writer = SummaryWriter(str(self.folder))
            self._writer.add_custom_scalars(CUSTOM_SCALARS)
        return self._writer

    def restart_history(
        self, aside: str, validations: list[dict[str, float]], windows: list[dict[str, float]]
    ) -> Path | None:
        """For a resume whose steps count other global batches (another world size or batch
        size), or one over an abandoned attempt: move the earlier jobs' event files into the
        subfolder ``aside`` (``aside_2``, ... where taken: two set-asides mixed their points
        in one; TensorBoard shows each as a run of its own), and log the checkpoint's
        ``validations`` and training ``windows`` again at their (rescaled) steps (``val/*``,
        ``train_window/*``), so this run's curves share one step unit. Returns the subfolder
        (None: nothing was moved; the history is logged all the same, as a folder of its own
        lacked it: review)."""
        if not self.earlier or self.folder is None or self.writer is None:
            self.log_history(validations, windows)  # (the writer opened only where it logs)
            return None
        taken = {path.name for path in self.folder.iterdir()}
        free = (f"{aside}_{n}" if n > 1 else aside for n in range(1, len(taken) + 2))
        target = self.folder / next(name for name in free if name not in taken)
        target.mkdir()
        for path in self.earlier:
            path.rename(target / path.name)
        self.earlier = []
        self.log_history(validations, windows)
        return target

    def log_history(
        self, validations: list[dict[str, float]], windows: list[dict[str, float]]
    ) -> None:
        """Log a checkpoint's ``validations`` and training ``windows`` at their (rescaled)
        steps (``val/*``, ``train_window/*``): after :meth:`restart_history`, or for a run
        resumed into a folder of its own, whose curve lacked the validations one of which it
        reported as its result (review)."""
        for entry in validations:  # the tags a validation logs (quality(): no sample count)
            quality = {q.key: entry[q.key] for q in QUALITY if q.key in entry}
            self.scalars("val", quality, round(entry["step"]))
        for entry in windows:
            values = {k: v for k, v in entry.items() if k != "step"}
            self.scalars("train_window", values, round(entry["step"]))

    def purge_from(self, step: int) -> None:
        """Mark a resume (TensorBoard's ``SessionLog.START``, what ``SummaryWriter``'s
        ``purge_step`` writes): readers drop what earlier event files logged at ``step`` or
        later, which the resumed run logs again (a crashed run's steps after its checkpoint
        were read twice by EventAccumulator and pandas exports)."""
        if self.earlier and self.writer is not None:
            event = Event(step=step, session_log=SessionLog(status=SessionLog.START))
            _event_file_writer(self.writer).add_event(event)  # type: ignore[attr-defined]

    def scalar(self, tag: str, value: float | None, step: int) -> None:
        if self.writer is not None and value is not None and math.isfinite(value):
            self.writer.add_scalar(tag, value, step)

    def scalars(self, prefix: str, values: Mapping[str, float], step: int) -> None:
        for key, value in values.items():
            self.scalar(f"{prefix}/{key}", value, step)

    def text(self, tag: str, text: str, step: int) -> None:
        """A text entry (TensorBoard's Text tab), e.g. where a target was reached."""
        if self.writer is not None:
            self.writer.add_text(tag, text, step)

    def hparams(
        self,
        hparams: Mapping[str, Scalar],
        metrics: Mapping[str, float],
        step: int,
        swept: Mapping[str, Any] | None = None,
        failed: bool = False,
    ) -> None:
        """Write this run's HParams (TensorBoard's HParams plugin: the session start and end
        entries) into its event file, with each metric also logged as a scalar of the same tag
        at ``step``; ``swept`` (a sweep's swept keys and this job's parsed values) adds the
        swept keys that have no HParam (:func:`swept_hparams`). ``failed``: the run failed
        under way; its session ends with ``STATUS_FAILURE``, so the HParams table lists it
        (its status filter) instead of leaving it out.

        No experiment entry is written: TensorBoard then infers the experiment from every run
        under ``--logdir`` (each HParam's type, its values or range, and whether it differs
        between the runs, which its table shows first), whatever mix of sweeps and single runs
        the folder holds. A per-run experiment entry would be taken from one arbitrary run for
        all. The table's metric columns are then the runs' scalar tags."""
        if self.writer is None:
            return
        finite = {k: v for k, v in metrics.items() if v is not None and math.isfinite(v)}
        _, start, end = hparams_summary(swept_hparams(hparams, swept or {}), finite)
        if failed:
            end = _with_status(end, Status.STATUS_FAILURE)
        file_writer = _event_file_writer(self.writer)
        for summary in (start, end):
            file_writer.add_summary(summary)  # type: ignore[attr-defined]
        for tag, value in finite.items():
            self.writer.add_scalar(tag, value, step)

    def close(self) -> None:
        if self._writer is not None:  # (one never written to is not opened to be closed)
            self._writer.close()
