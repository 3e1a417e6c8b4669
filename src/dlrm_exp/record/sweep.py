"""Multirun (``-m``): run names from the swept overrides, the runs' records, and the sweep
summary (``summary.csv``, ``summary.md``) written by a Hydra callback when the sweep ends.

A job folder (``outputs/multirun/<date>/<time>/<n>/``) holds ``.hydra/overrides.yaml`` and
``metrics.json``, whose ``status`` is ``completed`` or ``failed`` (with ``error``); a job that
left no ``metrics.json`` (killed outright) is reported as ``missing``. The run name of a job is
its value of every swept key, in command-line order, e.g. ``sharding=rowwise,qcomms=fp16``.
"""

import csv
import json
import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from dlrm_exp.record.compare import (
    ConfigStats,
    config_stats,
    has_repeats,
    stats_markdown,
    write_stats,
)
from dlrm_exp.record.run_record import COMPLETED, MISSING, RunMetrics

log = logging.getLogger(__name__)


#: The key whose swept values are repeats of one configuration, not configurations.
SEED = "seed"
#: The configuration name of runs that differ only by seed.
ALL = "(all runs)"


def _parse(overrides: Sequence[str]) -> list[Any]:
    return OverridesParser.create().parse_overrides(list(overrides))


def swept_keys(sweep_overrides: Sequence[str]) -> list[str]:
    """Keys that take several values in a multirun's command-line overrides (``a=x,y``,
    ``range(..)``, ``choice(..)``, globs), in the order given."""
    return [o.key_or_group for o in _parse(sweep_overrides) if o.is_sweep_override()]


def run_name(job_overrides: Sequence[str], swept: Sequence[str]) -> str:
    """``key=value,...`` of the swept keys for one job (all its overrides if none swept)."""
    values = {o.key_or_group: o.get_value_element_as_str() for o in _parse(job_overrides)}
    keys = [k for k in swept if k in values] or list(values)
    return ",".join(f"{k}={values[k]}" for k in keys)


def sweep_overrides(sweep_dir: Path) -> list[str]:
    """The command-line overrides of the multirun saved in ``sweep_dir/multirun.yaml``."""
    saved = sweep_dir / "multirun.yaml"
    if not saved.is_file():
        return []
    return list(OmegaConf.load(saved).hydra.overrides.task)


@dataclass
class RunRecord:
    """One run folder: its name, overrides and ``metrics.json`` (status ``missing`` if the
    folder has none); ``config`` names its configuration (every swept key but ``seed``) and
    ``seed`` the repeat."""

    path: Path
    name: str
    overrides: list[str]
    metrics: RunMetrics = field(default_factory=lambda: RunMetrics(status=MISSING))
    config: str = ""
    seed: int = 0

    @property
    def status(self) -> str:
        """``completed``, ``failed`` or ``missing`` (no ``metrics.json``)."""
        return self.metrics.status


def _job_overrides(run_dir: Path) -> list[str]:
    saved = run_dir / ".hydra" / "overrides.yaml"
    return list(OmegaConf.load(saved)) if saved.is_file() else []


def _job_number(path: Path) -> tuple[int, str]:
    return (int(path.name), "") if path.name.isdigit() else (1 << 30, path.name)


def varying_keys(jobs_overrides: Sequence[Sequence[str]]) -> list[str]:
    """Keys whose value differs between jobs, or that only some jobs have (for sweeps that
    saved no ``multirun.yaml``, such as Optuna's), in first-seen order."""
    values: dict[str, set[str | None]] = {}
    parsed = [
        {o.key_or_group: o.get_value_element_as_str() for o in _parse(overrides)}
        for overrides in jobs_overrides
    ]
    for job in parsed:
        for key in job:
            values.setdefault(key, set())
    for job in parsed:
        for key in values:
            values[key].add(job.get(key))
    return [key for key, seen in values.items() if len(seen) > 1]


def load_runs(paths: Iterable[Path]) -> list[RunRecord]:
    """Run records of run folders (holding ``.hydra/`` or ``metrics.json``) and of sweep
    folders (holding job folders with ``.hydra/``: every job, by job number)."""
    runs: list[RunRecord] = []
    for path in paths:
        jobs = sorted((p for p in path.iterdir() if (p / ".hydra").is_dir()), key=_job_number)
        if jobs:
            overrides = [_job_overrides(job) for job in jobs]
            swept = swept_keys(sweep_overrides(path)) or varying_keys(overrides)
            runs.extend(
                _record(job, swept, job_overrides)
                for job, job_overrides in zip(jobs, overrides, strict=True)
            )
        elif (path / ".hydra").is_dir() or (path / "metrics.json").is_file():
            runs.append(_record(path, [], _job_overrides(path)))
    return runs


def _record(run_dir: Path, swept: Sequence[str], overrides: list[str]) -> RunRecord:
    metrics_file = run_dir / "metrics.json"
    metrics = (
        RunMetrics.from_json(json.loads(metrics_file.read_text()))
        if metrics_file.is_file()
        else RunMetrics(status=MISSING)
    )
    name = run_name(overrides, swept) if overrides else run_dir.name
    values = {o.key_or_group: o.get_value_element_as_str() for o in _parse(overrides)}
    others = [k for k in swept if k != SEED]
    config = run_name(overrides, others) if others else ""
    if not others and SEED not in swept:  # a single run, or a sweep without seeds
        config = name or run_dir.name
    seed = int(values.get(SEED, 0))
    return RunRecord(run_dir, name or run_dir.name, overrides, metrics, config or ALL, seed)


def summary_row(run: RunRecord) -> dict[str, Any]:
    """One summary row: run name, status, quality, speed, bytes/step, memory, wall time."""
    m = run.metrics
    done = m.status == COMPLETED
    return {
        "run": run.name,
        "status": run.status,
        "val_auroc": m.val.get("auroc"),
        "test_auroc": m.test.get("auroc"),
        "val_ne": m.val.get("ne"),
        "test_ne": m.test.get("ne"),
        "samples_per_sec": m.samples_per_sec,
        "fwd_bytes_per_step": m.comm_bytes_per_step.get("forward"),
        "bwd_bytes_per_step": m.comm_bytes_per_step.get("backward"),
        "step_ms_p50": m.step_time_ms.get("p50"),
        "matmul_peak_pct": _percent(m.utilization.get("fraction_of_matmul_peak")),
        "peak_rss_gib": m.peak_rss_gib_max_rank,
        "wall_seconds": m.wall_seconds if done else None,
        "error": m.error or "",
        "path": str(run.path),
        "profile": ";".join(str(run.path / name) for name in m.profile),
    }


def _percent(fraction: float | None) -> float | None:
    return None if fraction is None else 100 * fraction


_FORMATS = {
    "val_auroc": ".4f",
    "test_auroc": ".4f",
    "val_ne": ".4f",
    "test_ne": ".4f",
    "samples_per_sec": ",.0f",
    "fwd_bytes_per_step": ",.0f",
    "bwd_bytes_per_step": ",.0f",
    "step_ms_p50": ".1f",
    "matmul_peak_pct": ".1f",
    "peak_rss_gib": ".2f",
    "wall_seconds": ".1f",
}
_MD_HEADERS = {
    "run": "run",
    "status": "status",
    "val_auroc": "val AUROC",
    "test_auroc": "test AUROC",
    "val_ne": "val NE",
    "samples_per_sec": "samples/s",
    "fwd_bytes_per_step": "fwd bytes/step",
    "bwd_bytes_per_step": "bwd bytes/step",
    "step_ms_p50": "step p50 ms",
    "matmul_peak_pct": "% matmul peak",
    "peak_rss_gib": "peak RSS GiB",
    "wall_seconds": "wall s",
}


def _cell(key: str, value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return format(value, _FORMATS[key]) if key in _FORMATS else str(value)


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """The summary as a GitHub markdown table, with the failed jobs' errors and the profiled
    runs' trace files (``train.profile``) listed below."""
    keys = list(_MD_HEADERS)
    lines = [
        "| " + " | ".join(_MD_HEADERS[k] for k in keys) + " |",
        "| " + " | ".join("---" for _ in keys) + " |",
    ]
    lines += ["| " + " | ".join(_cell(k, row[k]) for k in keys) + " |" for row in rows]
    errors = [f"- {row['run']}: {row['error']}" for row in rows if row["error"]]
    profiles = [
        f"- {row['run']}: " + ", ".join(f"[{Path(f).name}]({f})" for f in row["profile"].split(";"))
        for row in rows
        if row.get("profile")
    ]
    return "\n".join(
        lines
        + ([""] + errors if errors else [])
        + (
            ["", "Profiles (open the traces in https://ui.perfetto.dev):"] + profiles
            if profiles
            else []
        )
    )


def write_summary(
    out_dir: Path, runs: Sequence[RunRecord], stats: Sequence[ConfigStats] = ()
) -> list[dict[str, Any]]:
    """Write ``summary.csv`` and ``summary.md`` (with ``stats``, the per-configuration
    statistics of :mod:`dlrm_exp.record.compare`, also ``summary_stats.csv`` and their table)
    into ``out_dir``; return the per-run rows."""
    rows = [summary_row(run) for run in runs]
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "summary.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else [])
        writer.writeheader()
        writer.writerows(rows)
    text = markdown_table(rows) + "\n"
    if stats:
        write_stats(out_dir, stats)
    if has_repeats(stats):
        text += "\n" + stats_markdown(stats) + "\n"
    (out_dir / "summary.md").write_text(text)
    return rows


class SweepSummary(Callback):
    """Hydra callback: at the end of a multirun, summarise every job of the sweep folder and
    print the table; if a job did not complete, end the process with exit status 1 (after
    Hydra finished the sweep, so every job ran)."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        runs = load_runs([sweep_dir])
        stats = config_stats(runs)
        rows = write_summary(sweep_dir, runs, stats)
        print(markdown_table(rows))
        if has_repeats(stats):
            print()
            print(stats_markdown(stats))
        print(f"sweep summary: {sweep_dir / 'summary.md'} and summary.csv")
        print(f"compare runs: tensorboard --logdir {sweep_dir}")
        failed = [row["run"] for row in rows if row["status"] != COMPLETED]
        if failed:
            print(f"{len(failed)} of {len(rows)} jobs did not complete: {', '.join(failed)}")
            raise SystemExit(1)
