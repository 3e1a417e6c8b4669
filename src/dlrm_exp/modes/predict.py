"""``mode=predict``: click probabilities of every valid row of a Criteo TSV file, as Parquet
(``data=parquet`` input: :mod:`dlrm_exp.modes.predict_parquet`).

``python -m dlrm_exp mode=predict checkpoint=PATH data=criteo_tsv data.path=FILE`` loads the
checkpoint's weights onto a one-process model and streams the input: blocks of lines are
parsed (the ``data=criteo_tsv`` parser and transforms), scored ``predict.batch_size`` rows at a
time and appended to the Parquet file as row groups, so memory does not grow with the file.

Output schema (``predictions.parquet`` in the run folder, or ``predict.output``), one row per
valid input row, in input order:

========== ======= ============================================================
column     type    meaning
========== ======= ============================================================
file       string  the input file
line       int64   the row's 1-based line number in that file
probability float32 the predicted click probability, sigmoid(logit), in (0, 1)
label      int8    the row's label (0 or 1), only for labeled input
========== ======= ============================================================

Rows to score usually carry no label (Criteo's ``test.txt`` layout: 13 integer and 26
categorical fields); ``predict.has_label`` says which layout the files have, or (null) it is
detected per file from the widest of its first lines (39 fields: unlabeled, 40: labeled).
Rows that cannot be parsed are skipped and reported (counts by reason, first line numbers)
in ``predict_report.json`` and the summary, as ``data=criteo_tsv`` reports them; when more than
``data.max_skipped_fraction`` (1 %) of the rows are skipped the run fails with the counts.
"""

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torchrec.datasets.utils import Batch
from tqdm import tqdm

from dlrm_exp.config import Config, CriteoTsvDataConfig, ParquetDataConfig
from dlrm_exp.data.batches import make_batch
from dlrm_exp.data.criteo_tsv import (
    ReadReport,
    check_skipped_rows,
    criteo_id_kinds,
    decode_block,
)
from dlrm_exp.data.paths import resolve_paths
from dlrm_exp.data.preprocess.tsv_parse import (
    VALID,
    iter_blocks,
    iter_line_chunks,
    parse_block,
)
from dlrm_exp.distributed.launch import check_devices, process_group
from dlrm_exp.errors import ConfigError, DataError
from dlrm_exp.factories.experiment import build_experiment
from dlrm_exp.loop.checkpoint import find_checkpoint, load_model_weights
from dlrm_exp.modes.job import Job, ModeResult
from dlrm_exp.modes.predict_parquet import Logits, made_by, predict_parquet, read_inputs
from dlrm_exp.modes.setup import on_one_process, warn_unlike_training
from dlrm_exp.planning.tables import model_inputs, table_shapes
from dlrm_exp.util.files import check_writable, publish_file, write_json_atomic
from dlrm_exp.util.folder_lock import held_output_file

#: The Parquet schema of the predictions (see the module docstring); unlabeled input has no
#: ``label`` column.
SCHEMA = pa.schema(
    [
        ("file", pa.string()),
        ("line", pa.int64()),
        ("probability", pa.float32()),
        ("label", pa.int8()),
    ]
)
Result = TypeVar("Result")
UNLABELED_SCHEMA = SCHEMA.remove(SCHEMA.get_field_index("label"))
#: Fields of a labeled Criteo row (label, 13 integer, 26 categorical).
LABELED_FIELDS = 40
#: Lines looked at to detect whether a file is labeled.
_SNIFF_LINES = 1000


def has_label(file: Path, setting: bool | None) -> bool | None:
    """Whether ``file``'s rows start with a label: ``setting`` when given, else from the
    first lines: one of 40 fields (or more) labeled, all of 39 unlabeled (Criteo's
    ``test.txt``); None for a file with no line (it has no rows to tell by).

    Raises:
        DataError: the file cannot be read; or its widest line has fewer than 40 fields and
            some lines are narrower (trailing empty fields are cut in this file: a labeled
            row cut to 39 fields looks like an unlabeled one), so ``predict.has_label`` must
            say which it is.
    """
    if setting is not None:
        return setting
    data, _ = next(iter_line_chunks(file), (b"", 1))
    lines = [line for line in data.split(b"\n", _SNIFF_LINES)[:_SNIFF_LINES] if line.strip(b"\r")]
    if not lines:
        return None
    widths = [line.count(b"\t") + 1 for line in lines]
    widest = max(widths)
    if widest >= LABELED_FIELDS:
        return True
    if min(widths) == widest == LABELED_FIELDS - 1:
        return False
    raise DataError(
        f"{file}: its widest line among the first {len(lines)} has {widest} fields (the "
        f"narrowest {min(widths)}); a Criteo "
        f"row has {LABELED_FIELDS} with a label and {LABELED_FIELDS - 1} without, and trailing "
        "empty fields may be cut, so whether its rows start with a label cannot be told: set "
        "predict.has_label=true or predict.has_label=false"
    )


def _with_label_column(data: bytes) -> bytes:
    """Whole unlabeled lines with a ``0`` label field put in front, so the Criteo parser reads
    them (the label is not written); an empty line (or a lone ``\\r``) stays empty, no row."""
    return _LINE_START.sub(b"0\t", data)


#: The start of a line that holds something (not an empty line, nor a lone ``\r``).
_LINE_START = re.compile(rb"^(?=[^\n\r]|\r[^\n])", re.MULTILINE)


def run(cfg: Config, job: Job) -> ModeResult:
    """``mode=predict``: write the predictions and the report; print the summary."""
    report = run_predict(cfg, job)
    return ModeResult(summary=summary(report))


def _is_predictions(path: Path) -> bool:
    """Whether ``path`` is a Parquet file with a ``probability`` column (earlier predictions)."""
    try:
        return "probability" in pq.read_schema(path).names
    except (pa.ArrowException, OSError):
        return False


def _check_output(output: Path) -> None:
    """``predict.output`` is a file this run may write: a new file, or earlier predictions
    (which it replaces); never a folder, or another file (a run's ``metrics.json``, the input
    Parquet file) that would be lost.

    Raises:
        ConfigError: ``output`` is a folder, an existing file that holds no predictions, or a
            name that does not end in ``.parquet`` (``p.csv`` got Parquet: review).
    """
    if output.is_dir():
        raise ConfigError(
            f"predict.output={output} is a folder: name the file to write, e.g. "
            f"predict.output={output / 'predictions.parquet'}"
        )
    if output.exists() and not _is_predictions(output):
        raise ConfigError(
            f"predict.output={output} exists and holds no predictions (a Parquet file with a "
            "probability column): it would be replaced; name a new file"
        )
    if output.suffix != ".parquet":
        raise ConfigError(
            f"predict.output={output}: predictions are written as Parquet; name a .parquet "
            f"file, e.g. predict.output={output.with_suffix('.parquet')}"
        )
    check_writable(output.parent, "predict.output")


def run_predict(cfg: Config, job: Job) -> dict:
    """Score every valid row of ``data.path`` with ``cfg.checkpoint``; returns the report.

    Raises:
        ConfigError: ``predict.output`` names a folder or a file other than earlier
            predictions. (More than one process asked for runs on one: :func:`on_one_process`.)
        OutputFolderInUseError: another run writes the same ``predict.output``.
        CheckpointError: missing, partial, another model shape, other id policies or id types.
        DataError: an input cannot be read, or no row of it is valid.
    """
    on_one_process(cfg)
    check_devices(cfg.hardware)
    check_writable(job.run_dir)
    assert cfg.checkpoint is not None
    given = cfg.predict.output
    output = Path(given).expanduser() if given else job.run_dir / "predictions.parquet"
    _check_output(output)  # found now, not after scoring every row
    with held_output_file(output, "predict.output"):  # one writer of its .partial at a time
        return _predict(cfg, job, output)


def _predict(cfg: Config, job: Job, output: Path) -> dict:
    """:func:`run_predict` once ``output`` is checked and held: score, publish, report."""
    assert cfg.checkpoint is not None
    path = find_checkpoint(cfg.checkpoint)
    partial = output.with_name(output.name + ".partial")
    if isinstance(cfg.data, ParquetDataConfig):
        return _run_parquet(cfg, job, path, output, partial)
    assert isinstance(cfg.data, CriteoTsvDataConfig)
    files = resolve_paths(cfg.data.path, "data.path")
    report = ReadReport()
    labeled = _labeled_files(files, cfg.predict.has_label)
    schema = SCHEMA if all(labeled.values()) else UNLABELED_SCHEMA

    def write(model: Logits, made: dict[str, str]) -> None:
        with pq.ParquetWriter(partial, schema.with_metadata(made)) as writer:
            for file in files:
                _predict_file(cfg, file, labeled[file], model, writer, report)

    step, _ = _score(cfg, path, partial, write, criteo_id_kinds(cfg.data.feature_schema()))
    if report.rows_valid == 0:
        partial.unlink(missing_ok=True)
        reasons = ", ".join(f"{k} {v}" for k, v in report.skipped_by_reason.items() if v)
        raise DataError(
            f"data.path: no valid Criteo row in {', '.join(map(str, files))} "
            f"({report.rows_read:,} rows read, skipped: {reasons or 'none'}; "
            f"first: {', '.join(report.first_bad_lines[:3])}): a Criteo row is a label, "
            "13 integer and 26 hex fields, tab-separated"
        )
    try:
        check_skipped_rows(report.as_dict(), cfg.data.max_skipped_fraction, "scored")
    except DataError:
        partial.unlink(missing_ok=True)  # nothing is written
        raise
    publish_file(partial, output)  # synced: the report written next vouches for it
    result = {
        "checkpoint": str(path),
        "step": step,
        "output": str(output),
        "rows_written": report.rows_valid,
        "read": report.as_dict(),
    }
    write_json_atomic(job.run_dir / "predict_report.json", result)
    return result


def _logits_on(model: torch.nn.Module, device: torch.device) -> Logits:
    """``model``'s (B,) float32 click logits of a CPU batch, the batch moved to ``device``
    (a GPU job's model is there) and the logits back to the CPU for the output file."""

    def logits(batch: Batch) -> torch.Tensor:
        return model(batch.to(device))[1][1].float().cpu()

    return logits


def _score(
    cfg: Config,
    path: Path,
    partial: Path,
    write: Callable[[Logits, dict[str, str]], Result],
    id_kinds: dict[str, str],
) -> tuple[int, Result]:
    """The checkpoint at ``path`` loaded onto a one-process model in eval mode (refused if
    it was trained on other id policies or, for ``id_kinds``, ids of another type), and
    ``write(model, metadata)`` run under ``torch.no_grad()`` to fill ``partial`` (removed if
    it fails; ``metadata``: :func:`made_by`'s); returns the checkpoint's step and what
    ``write`` returned."""
    with process_group(cfg.hardware) as ctx:
        experiment = build_experiment(cfg, ctx, init_weights=False)
        saved = load_model_weights(
            path,
            experiment.model,
            table_shapes(cfg.model),
            cfg.data.id_policies(),
            id_kinds,
            inputs=model_inputs(cfg),
        )
        warn_unlike_training(saved, cfg, ctx.world_size, path)
        experiment.model.eval()
        partial.parent.mkdir(parents=True, exist_ok=True)
        try:
            with torch.no_grad():
                step = int(saved["step"])
                made = made_by(path, step)  # the file's metadata
                return step, write(_logits_on(experiment.model, ctx.device), made)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise


def _run_parquet(cfg: Config, job: Job, path: Path, output: Path, partial: Path) -> dict:
    """``data=parquet``: every row scored (:mod:`dlrm_exp.modes.predict_parquet`)."""
    inputs = read_inputs(cfg)
    step, written = _score(
        cfg,
        path,
        partial,
        lambda model, made: predict_parquet(cfg, inputs, model, partial, made),
        inputs.id_kinds,
    )
    publish_file(partial, output)  # synced: the report written next vouches for it
    result = {"checkpoint": str(path), "step": step, "output": str(output)}
    result |= written
    write_json_atomic(job.run_dir / "predict_report.json", result)
    return result


def _labeled_files(files: list[Path], setting: bool | None) -> dict[Path, bool]:
    """Whether each file is labeled (:func:`has_label`).

    Raises:
        DataError: some files are labeled and some are not.
    """
    found = {file: has_label(file, setting) for file in files}
    kinds = {value for value in found.values() if value is not None}  # empty files: either
    default = next(iter(kinds)) if len(kinds) == 1 else True
    labeled = {file: default if value is None else value for file, value in found.items()}
    if len(kinds) > 1:
        raise DataError(
            "data.path: some files have a label column and some do not "
            f"({', '.join(f'{f.name}: {has}' for f, has in labeled.items())}); score them "
            "separately or set predict.has_label"
        )
    return labeled


def _predict_file(
    cfg: Config,
    file: Path,
    labeled: bool,
    model: Logits,
    writer: pq.ParquetWriter,
    report: ReadReport,
) -> None:
    """Stream one file through the model into ``writer``."""
    assert isinstance(cfg.data, CriteoTsvDataConfig)
    keys = cfg.model.feature_names
    bar = tqdm(
        total=file.stat().st_size,
        unit="B",
        unit_scale=True,
        desc=f"predict {file.name}",
        disable=not sys.stderr.isatty(),
        file=sys.stderr,
    )
    file_report = ReadReport(files=[str(file)])
    with bar:
        transform = None if labeled else _with_label_column
        for buf, first_line in iter_blocks(file, transform=transform):
            block = parse_block(buf)
            file_report.add_block(block, first_line, str(file), cfg.data.max_reported_bad_lines)
            bar.update(len(buf) - 8)
            if not len(block.labels):
                continue
            lines = first_line + np.flatnonzero(block.reasons == VALID)
            where = f"{file} lines {first_line}..{first_line + block.num_lines - 1}"
            data = decode_block(block, cfg.data.schema, where)
            probabilities = [
                torch.sigmoid(model(make_batch(data, start, start + step, keys)))
                for start, step in _chunks(len(data), cfg.predict.batch_size)
            ]
            columns = {
                "file": pa.array([str(file)] * len(lines), pa.string()),
                "line": pa.array(lines.astype(np.int64)),
                "probability": pa.array(torch.cat(probabilities).numpy()),
            }
            if labeled:
                columns["label"] = pa.array(block.labels.astype(np.int8))
            writer.write_table(pa.table(columns, schema=writer.schema))
    report.merge(file_report, cfg.data.max_reported_bad_lines)


def _chunks(rows: int, size: int) -> list[tuple[int, int]]:
    """(start, length) of consecutive chunks of at most ``size`` rows."""
    return [(start, min(size, rows - start)) for start in range(0, rows, size)]


def summary(report: dict) -> str:
    """The lines ``mode=predict`` prints."""
    if "read" not in report:  # data=parquet: every row is scored
        return (
            f"predicted {report['rows_written']:,} rows of {report['files']} file(s) with "
            f"{report['checkpoint']} (step {report['step']}): {report['output']}"
        )
    read = report["read"]
    return "\n".join(
        [
            f"predicted {report['rows_written']:,} rows with {report['checkpoint']} "
            f"(step {report['step']}): {report['output']}",
            f"data {read['rows_read']:,} rows read, {read['rows_valid']:,} valid, "
            f"{read['rows_padded']:,} padded, {read['rows_skipped']:,} skipped",
        ]
        + [f"  skipped: {line}" for line in read["first_bad_lines"]]
    )
