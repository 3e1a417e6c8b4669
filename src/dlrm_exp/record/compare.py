"""Configurations compared with statistics: seeds are repeats, every other swept key names a
configuration (:attr:`dlrm_exp.record.runs.RunRecord.config`).

Per configuration and metric: mean, sample sd, n and the 95 % Student t interval; against a
baseline configuration, the paired difference per seed with its 95 % interval and the paired
t-test's p-value (:mod:`dlrm_exp.record.stats`). ``summary_stats.csv`` holds the same numbers
in long form; :func:`compare_to` checks a new set against a saved one (a CI gate).
"""

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dlrm_exp.record.metric_table import METRICS, Metric, fmt
from dlrm_exp.record.run_record import COMPLETED
from dlrm_exp.record.runs import RunRecord
from dlrm_exp.record.stats import Estimate, PairedDifference, estimate, paired_difference

STATS_FILE = "summary_stats.csv"

#: The metrics compared per configuration (keys of the metric table).
COMPARED = (
    "val_auroc", "test_auroc", "val_ne", "val_logloss", "val_calibration", "samples_per_sec",
    "step_ms_p50",
)  # fmt: skip
#: What :func:`compare_to` gates on unless told otherwise: the quality metrics, which a rerun
#: with the same seeds reproduces; speed moves with the machine (opt in with ``--gate``).
DEFAULT_GATE = ("val_auroc", "test_auroc", "val_ne", "val_logloss")


@dataclass
class ConfigStats:
    """One configuration's repeats and their statistics."""

    config: str
    seeds: list[int]
    estimates: dict[str, Estimate] = field(default_factory=dict)
    vs_baseline: dict[str, PairedDifference] = field(default_factory=dict)


def _values(runs: Sequence[RunRecord], metric: Metric) -> dict[int, float]:
    out = {}
    for run in runs:
        value = metric.read(run.metrics)
        if isinstance(value, (int, float)) and math.isfinite(value):
            out[run.seed] = float(value)
    return out


def config_stats(runs: Sequence[RunRecord], baseline: str | None = None) -> list[ConfigStats]:
    """Statistics per configuration of the completed ``runs``, in first-seen order; the
    baseline (``baseline``: overrides such as ``qcomms=none``, else the first configuration)
    comes first.

    Raises:
        ValueError: no configuration matches ``baseline``.
    """
    groups: dict[str, list[RunRecord]] = {}
    for run in runs:
        if run.status == COMPLETED:
            groups.setdefault(run.config, []).append(run)
    if not groups:
        return []
    names = list(groups)
    if baseline:
        matching = [name for name in names if groups[name][0].matches(baseline)]
        if not matching:
            raise ValueError(f"--baseline {baseline}: no configuration has these overrides")
        names.remove(matching[0])
        names.insert(0, matching[0])
    base_runs = groups[names[0]]
    result = []
    for name in names:
        config_runs = sorted(groups[name], key=lambda r: r.seed)
        stats = ConfigStats(name, [r.seed for r in config_runs])
        for key in COMPARED:
            metric = METRICS[key]
            values = _values(config_runs, metric)
            if not values:
                continue
            stats.estimates[key] = estimate(list(values.values()))
            if name != names[0]:
                base = _values(base_runs, metric)
                common = sorted(set(values) & set(base))
                if common:
                    stats.vs_baseline[key] = paired_difference(
                        [values[s] for s in common], [base[s] for s in common]
                    )
        result.append(stats)
    return result


def has_repeats(stats: Sequence[ConfigStats]) -> bool:
    """Whether any configuration ran with more than one seed (then the statistics are shown)."""
    return any(len(s.seeds) > 1 for s in stats)


def stats_markdown(stats: Sequence[ConfigStats]) -> str:
    """Mean +- 95 % CI half-width (n) per configuration, and the paired difference of val
    AUROC to the baseline (the first row) with its interval and p-value."""
    keys = [
        "val_auroc",
        "test_auroc",
        "val_ne",
        "val_calibration",
        "samples_per_sec",
        "step_ms_p50",
    ]
    header = ["configuration", "n"] + [METRICS[k].label for k in keys]
    header += ["val AUROC - baseline [95% CI]", "p (paired t)"]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    for i, s in enumerate(stats):
        cells = [s.config + (" (baseline)" if i == 0 else ""), str(len(s.seeds))]
        for key in keys:
            e, spec = s.estimates.get(key), METRICS[key].spec
            if e is None:
                cells.append("n/a")
            elif e.half_width is None:
                cells.append(fmt(e.mean, spec))
            else:
                cells.append(f"{fmt(e.mean, spec)} +- {fmt(e.half_width, spec)}")
        d = s.vs_baseline.get("val_auroc")
        if d is None:
            cells += ["", ""]
        else:
            interval = "" if d.ci_low is None else f" [{d.ci_low:+.5f}, {d.ci_high:+.5f}]"
            mark = " *" if d.significant else ""
            cells += [f"{d.mean:+.5f}{interval}{mark}", fmt(d.p_value, ".3g")]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        "Mean +- half-width of the 95 % Student t interval over seeds; differences are paired "
        "by seed (paired t-test); * marks an interval that excludes 0."
    )
    return "\n".join(lines)


STATS_COLUMNS = [
    "config", "metric", "n", "mean", "sd", "ci_low", "ci_high",
    "diff_vs_baseline", "diff_ci_low", "diff_ci_high", "p_value",
]  # fmt: skip


def write_stats(out_dir: Path, stats: Sequence[ConfigStats]) -> Path:
    """``summary_stats.csv``: one row per configuration and metric (long form)."""
    path = out_dir / STATS_FILE
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=STATS_COLUMNS)
        writer.writeheader()
        for s in stats:
            for key, e in s.estimates.items():
                d = s.vs_baseline.get(key)
                writer.writerow(
                    {
                        "config": s.config, "metric": key, "n": e.n, "mean": e.mean,
                        "sd": e.sd, "ci_low": e.ci_low, "ci_high": e.ci_high,
                        "diff_vs_baseline": d.mean if d else None,
                        "diff_ci_low": d.ci_low if d else None,
                        "diff_ci_high": d.ci_high if d else None,
                        "p_value": d.p_value if d else None,
                    }
                )  # fmt: skip
    return path


def _half_width(mean: float, high: str | float | None) -> float:
    return 0.0 if high in (None, "") else float(high) - mean


def compare_to(
    stats: Sequence[ConfigStats],
    baseline_csv: Path,
    tolerance: float = 0.0,
    gate: Sequence[str] = DEFAULT_GATE,
) -> tuple[list[str], list[str]]:
    """Compare ``stats`` with a saved ``summary_stats.csv``: a metric *moved* when its means
    differ by more than the combined half-width ``sqrt(h_new^2 + h_saved^2)`` of the two 95 %
    intervals; a moved ``gate`` metric is a *regression* when it moved the wrong way by more
    than ``tolerance``. Returns (one line per compared metric, the regressions).

    Raises:
        FileNotFoundError / ValueError: no such file, or not a summary_stats.csv.
    """
    with open(baseline_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or set(STATS_COLUMNS) - set(rows[0]):
        raise ValueError(f"{baseline_csv} is not a {STATS_FILE}")
    saved = {(r["config"], r["metric"]): r for r in rows}
    lines, regressions = [], []
    for s in stats:
        for key, e in s.estimates.items():
            old = saved.get((s.config, key))
            if old is None:
                continue
            metric, old_mean = METRICS[key], float(old["mean"])
            diff = e.mean - old_mean
            noise = math.hypot(
                _half_width(e.mean, e.ci_high), _half_width(old_mean, old["ci_high"])
            )
            moved = abs(diff) > noise
            worse = metric.higher_is_better is not None and (
                (diff < 0) if metric.higher_is_better else (diff > 0)
            )
            verdict = "within noise"
            if moved:
                verdict = (
                    "worse"
                    if worse
                    else "better"
                    if metric.higher_is_better is not None
                    else "moved"
                )
            line = (
                f"{s.config} {metric.label}: {metric.format(old_mean)} -> "
                f"{metric.format(e.mean)} ({diff:+.3g}, noise +-{noise:.3g}): {verdict}"
            )
            if moved and worse and key in gate and abs(diff) > tolerance:
                line += "  REGRESSION"
                regressions.append(line)
            lines.append(line)
    return lines, regressions
