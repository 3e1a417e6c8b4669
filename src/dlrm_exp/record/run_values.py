"""``summary_runs.csv``: every run's value of every compared metric, in long form, so that a
later comparison can pair runs by seed (``summary_stats.csv`` keeps only aggregates).

One row per run and metric: ``config_id`` (the canonical overrides,
:func:`dlrm_exp.record.runs.canonical_overrides`), ``config`` (as typed), ``seed``, ``status``
(``completed`` / ``failed`` / ``missing``), ``metric`` (a key of the metric table), ``value``
(empty where the run has none; ``nan`` / ``inf`` as measured) and the run folder. A run that did
not complete keeps its rows, so a baseline records its failures too.
"""

import csv
import io
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlrm_exp.record.compare import COMPARED
from dlrm_exp.record.metric_table import METRICS, as_number
from dlrm_exp.record.run_record import COMPLETED
from dlrm_exp.record.runs import RunRecord, recanonical
from dlrm_exp.util.files import write_csv_atomic

RUNS_FILE = "summary_runs.csv"
COLUMNS = ["config_id", "config", "seed", "status", "metric", "value", "path"]
#: Written since the gate notes runs whose fixed (not swept) overrides differ; optional when
#: read (older files lack it).
FIXED = "fixed"
#: Written since the gate notes runs that ran differently (:attr:`RunMetrics.ran`, as JSON);
#: optional when read.
RAN = "ran"


@dataclass
class RunValues:
    """One run's compared metrics (``None``: the run has no value for it); in ``fixed``, its
    overrides that were not swept (canonical ``key=value,...``; None: a baseline written
    before they were recorded), and in ``ran``, what it ran
    (:attr:`~dlrm_exp.record.run_record.RunMetrics.ran`; None: not recorded, or a run that
    did not complete): the gate compares both between the two sides."""

    config_id: str
    config: str
    seed: int
    status: str
    path: str
    values: dict[str, float | None] = field(default_factory=dict)
    fixed: str | None = None
    ran: dict[str, str] | None = None


def run_values(runs: Iterable[RunRecord]) -> list[RunValues]:
    """The :class:`RunValues` of run records (every status)."""
    return [
        RunValues(
            run.config_id,
            run.config,
            run.seed,
            run.status,
            str(run.path),
            {key: as_number(METRICS[key].read(run.metrics)) for key in COMPARED},
            run.fixed,
            run.metrics.ran if run.status == COMPLETED else None,
        )
        for run in runs
    ]


def write_run_values(out_dir: Path, runs: Sequence[RunRecord]) -> Path:
    """Write ``summary_runs.csv`` into ``out_dir``; return its path."""
    path = out_dir / RUNS_FILE
    rows = [
        {
            "config_id": run.config_id, "config": run.config, "seed": run.seed,
            "status": run.status, "metric": metric,
            "value": "" if value is None else repr(value), "path": run.path,
            FIXED: run.fixed or "",
            RAN: "" if run.ran is None else json.dumps(run.ran, sort_keys=True),
        }
        for run in run_values(runs)
        for metric, value in run.values.items()
    ]  # fmt: skip
    write_csv_atomic(path, [*COLUMNS, FIXED, RAN], rows)
    return path


def baseline_file(path: Path) -> Path:
    """The ``summary_runs.csv`` that ``--compare-to PATH`` names: the file itself, the one in
    a sweep or report folder, or the one beside a ``summary_stats.csv``.

    Raises:
        FileNotFoundError: there is none (a baseline saved before per-run values were kept:
            run the report on its sweep folder once to write it).
    """
    candidate = path / RUNS_FILE if path.is_dir() else path
    if candidate.name != RUNS_FILE:
        candidate = candidate.parent / RUNS_FILE
    if not candidate.is_file():
        raise FileNotFoundError(
            f"--compare-to {path}: no {RUNS_FILE} there (the per-run values the gate pairs by "
            f"seed); write it with: python -m dlrm_exp.report <the baseline's sweep folder>"
        )
    return candidate


def read_run_values(path: Path) -> list[RunValues]:
    """The runs saved in a ``summary_runs.csv``, in file order.

    Raises:
        ValueError: naming the file (and line): it is not UTF-8, lacks the columns of a
            ``summary_runs.csv``, holds no run, ends mid-row (a copy cut short), a run lacks
            a metric's row that others have (cut at a line end), or a row has too few fields
            or a seed or value that is not a number. A cut-off baseline was
            compared as far as it went, a gated metric dropped, and the gate passed (review).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} is not a {RUNS_FILE} (not UTF-8 text: {err.reason})") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, [])
    if set(COLUMNS) - set(header):
        raise ValueError(f"{path} is not a {RUNS_FILE} (columns {', '.join(COLUMNS)})")
    if not text.endswith("\n"):
        raise ValueError(f"{path} ends mid-row: a copy cut short? Write it again with "
                         "python -m dlrm_exp.report <the baseline's folders>")  # fmt: skip
    runs: dict[str, RunValues] = {}
    for fields in reader:
        if len(fields) < len(header):
            raise ValueError(f"{path}:{reader.line_num}: {len(fields)} of {len(header)} fields")
        row = dict(zip(header, fields, strict=False))
        run = runs.get(row["path"])
        if run is None:  # a run's first row (one row per metric): its identity read once
            run = runs[row["path"]] = RunValues(
                recanonical(row["config_id"]),
                row["config"],
                _number(path, reader.line_num, "seed", row["seed"], int),
                row["status"],
                row["path"],
                fixed=None if row.get(FIXED) is None else recanonical(row[FIXED]),
                ran=_ran(path, reader.line_num, row.get(RAN)),
            )
        value = row["value"]
        run.values[row["metric"]] = (
            _number(path, reader.line_num, "value", value, float) if value else None
        )
    if not runs:
        raise ValueError(f"{path} holds no run (a {RUNS_FILE} has a row per run and metric)")
    every = set().union(*(run.values for run in runs.values()))
    for run in runs.values():  # each run has a row per metric: a copy cut at a line end
        if lacking := sorted(every - set(run.values)):  # dropped metrics without a word
            raise ValueError(
                f"{path}: run {run.path} has no row for {', '.join(lacking)}, which the other "
                "runs have: a copy cut short? Write it again with python -m dlrm_exp.report "
                "<the baseline's folders>"
            )
    return list(runs.values())


def _ran(path: Path, line: int, text: str | None) -> dict[str, str] | None:
    """A row's ``ran`` cell: None where empty or absent (an older file).

    Raises:
        ValueError: naming the file and line, for a cell that is not a JSON object.
    """
    if not text:
        return None
    try:
        ran = json.loads(text)
    except json.JSONDecodeError:
        ran = None
    if not isinstance(ran, dict):
        raise ValueError(f"{path}:{line}: ran {text[:60]!r} is not a JSON object")
    return {str(k): str(v) for k, v in ran.items()}


def _number(path: Path, line: int, column: str, text: str, kind: type) -> Any:
    """``kind(text)``, or a ValueError naming the file, line and column."""
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"{path}:{line}: {column} {text!r} is not a number") from None


def is_finite(value: float | None) -> bool:
    """A value that can be compared (not missing, NaN or infinite)."""
    return value is not None and math.isfinite(value)
