"""Configurations compared with statistics: seeds are repeats, every other swept key names a
configuration (:attr:`dlrm_exp.record.runs.RunRecord.config`).

Per configuration and metric: mean, sample sd, n and the 95 % Student t interval; against a
baseline configuration, the paired difference per seed with its 95 % interval and the paired
t-test's p-value (:mod:`dlrm_exp.record.stats`). ``summary_stats.csv`` holds the same numbers
in long form; the gate that checks a new set against a saved one is :mod:`dlrm_exp.record.gate`.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dlrm_exp.record.metric_table import METRICS, Metric, as_number, fmt, markdown_lines, shown
from dlrm_exp.record.run_record import COMPLETED, INTERRUPTED
from dlrm_exp.record.runs import (
    RunRecord,
    check_distinct_seeds,
    check_same_fixed,
    without_superseded,
)
from dlrm_exp.record.stats import Difference, Estimate, estimate, paired_difference
from dlrm_exp.util.files import write_csv_atomic
from dlrm_exp.util.text import first_few

STATS_FILE = "summary_stats.csv"

#: The metrics compared per configuration (keys of the metric table).
COMPARED = (
    "val_auroc", "test_auroc", "final_test_auroc", "val_ne", "val_logloss", "val_calibration",
    "samples_per_sec", "step_ms_p50", "fwd_bytes_per_step", "bwd_bytes_per_step",
    "allreduce_bytes_per_step", "peak_rss_gib", "peak_gpu_gib", "table_bytes_per_rank",
)  # fmt: skip
#: What ``--gate`` may name: the compared metrics with a better direction (calibration moves
#: either way, so no difference of it is a regression).
GATEABLE = tuple(k for k in COMPARED if METRICS[k].higher_is_better is not None)
#: What :func:`compare_to` gates on unless told otherwise: the quality metrics, which a rerun
#: with the same seeds reproduces; speed moves with the machine (opt in with ``--gate``).
DEFAULT_GATE = ("val_auroc", "test_auroc", "val_ne", "val_logloss")


@dataclass
class ConfigStats:
    """One configuration's repeats and their statistics."""

    config: str
    seeds: list[int]
    failed: list[str] = field(default_factory=list)
    #: the runs not completed that were interrupted (the rest of ``failed`` failed)
    interrupted: list[str] = field(default_factory=list)
    estimates: dict[str, Estimate] = field(default_factory=dict)
    vs_baseline: dict[str, Difference] = field(default_factory=dict)
    #: the configuration's identity (canonical overrides, as ``summary_runs.csv`` keys its
    #: runs; ``config`` may carry a note of what ran: review)
    config_id: str = ""


def _values(runs: Sequence[RunRecord], metric: Metric) -> dict[int, float]:
    out = {}
    for run in runs:
        value = as_number(metric.read(run.metrics))
        if value is not None and math.isfinite(value):
            out[run.seed] = value
    return out


def config_stats(runs: Sequence[RunRecord], baseline: str | None = None) -> list[ConfigStats]:
    """Statistics per configuration (by identity, ``RunRecord.config_id``) of the completed
    ``runs``, in first-seen order; a configuration whose runs all failed is kept, with its
    failed runs and no estimates (a failed run whose seed completed in another run is left
    out: :func:`~dlrm_exp.record.runs.without_superseded`). A configuration whose repeats
    all ran something else than
    asked is labelled by what ran (``qcomms=fp8 (ran qcomms: reduce_scatter FP16/BF16)``).
    The baseline (``baseline``: overrides such as ``qcomms=none``, else the first
    configuration with a completed run) comes first.

    Raises:
        ValueError: no configuration or several match ``baseline``, or none of its runs
            completed; two runs of one configuration have the same seed, or were run with
            other fixed overrides.
    """
    runs = without_superseded(runs)
    check_same_fixed(runs)
    check_distinct_seeds(runs)
    groups: dict[str, list[RunRecord]] = {}
    for run in runs:
        groups.setdefault(run.config_id, []).append(run)
    if not groups:
        return []
    names = list(groups)
    # one whose runs all failed cannot be the reference
    ran = [n for n in names if any(r.status == COMPLETED for r in groups[n])]
    if not baseline and ran:
        names.remove(ran[0])
        names.insert(0, ran[0])
    if baseline:
        matching = [name for name in names if groups[name][0].matches(baseline)]
        if not matching:
            have = first_few([groups[name][0].config for name in names], 4)
            raise ValueError(
                f"--baseline {baseline}: no configuration has these overrides (the runs' "
                f"configurations: {have})"
            )
        matching = [n for n in matching if n in ran] or matching
        if matching[0] not in ran:  # its runs all failed: every paired column would be empty
            raise ValueError(
                f"--baseline {baseline}: no run of {groups[matching[0]][0].config} completed "
                f"({len(groups[matching[0]])} failed or interrupted), so there is nothing to "
                "pair with: rerun it, or name another baseline"
            )
        if len(matching) > 1:
            which = "; ".join(groups[name][0].config for name in matching[:3])
            raise ValueError(
                f"--baseline {baseline}: {len(matching)} configurations have these overrides "
                f"({which}): name one, e.g. with every swept key"
            )
        names.remove(matching[0])
        names.insert(0, matching[0])
    base_runs = [r for r in groups[names[0]] if r.status == COMPLETED]
    return [_stats(groups[name], base_runs if i else None) for i, name in enumerate(names)]


def config_label(runs: Sequence[RunRecord]) -> str:
    """A configuration's name (its first run's) and, where every completed run of it ran
    something else than asked, what: ``qcomms=fp8 (ran qcomms: reduce_scatter FP16/BF16)``."""
    ran = {r.metrics.substituted for r in runs if r.status == COMPLETED}
    return runs[0].config + (f" (ran {ran.pop()})" if len(ran) == 1 and "" not in ran else "")


def _stats(runs: list[RunRecord], base_runs: list[RunRecord] | None) -> ConfigStats:
    completed = sorted((r for r in runs if r.status == COMPLETED), key=lambda r: r.seed)
    failed = [r.name for r in runs if r.status != COMPLETED]
    label = config_label(runs)
    stats = ConfigStats(label, [r.seed for r in completed], failed, config_id=runs[0].config_id)
    stats.interrupted = [r.name for r in runs if r.status == INTERRUPTED]
    for key in COMPARED:
        metric = METRICS[key]
        values = _values(completed, metric)
        if not values:
            continue
        stats.estimates[key] = estimate(list(values.values()))
        if base_runs is not None:
            base = _values(base_runs, metric)
            common = sorted(set(values) & set(base))
            if common:
                stats.vs_baseline[key] = paired_difference(
                    [values[s] for s in common], [base[s] for s in common]
                )
    return stats


def has_repeats(stats: Sequence[ConfigStats]) -> bool:
    """Whether any configuration ran with more than one seed (then the statistics are shown)."""
    return any(len(s.seeds) > 1 for s in stats)


def _not_completed(stats: ConfigStats) -> str:
    """`` (1 failed, 1 interrupted)`` of a configuration's runs that did not complete (an
    interrupted run was counted as failed: sweeps review); ``""`` for none."""
    failed = len(stats.failed) - len(stats.interrupted)
    counts = [
        f"{n} {what}"
        for n, what in ((failed, "failed"), (len(stats.interrupted), "interrupted"))
        if n
    ]
    return f" ({', '.join(counts)})" if counts else ""


def stats_markdown(stats: Sequence[ConfigStats]) -> str:
    """Mean +- 95 % CI half-width (n) per configuration (quality, speed, bytes per step,
    memory), and the paired differences of val and test AUROC to the baseline (the first row)
    with their intervals and p-values; those of :data:`PAIRED_SHOWN` in a second table."""
    keys = [
        "val_auroc",
        "test_auroc",
        "final_test_auroc",
        "val_ne",
        "val_logloss",  # gated by default: shown where its failure would be read
        "val_calibration",
        "samples_per_sec",
        "step_ms_p50",
        "fwd_bytes_per_step",
        "bwd_bytes_per_step",
        "allreduce_bytes_per_step",
        "peak_rss_gib",
        "peak_gpu_gib",
        "table_bytes_per_rank",
    ]
    keys = shown(keys, lambda k: any(k in s.estimates for s in stats))
    header = ["configuration", "n"] + [METRICS[k].label for k in keys]
    header += [f"{split} AUROC - baseline [95% CI]" for split in ("val", "test")]
    rows = []
    for i, s in enumerate(stats):
        cells = [s.config + (" (baseline)" if i == 0 else ""), f"{len(s.seeds)}{_not_completed(s)}"]
        for key in keys:
            e, spec = s.estimates.get(key), METRICS[key].spec
            # a seed whose value is missing, NaN or infinite is left out: say so, or n misleads
            left_out = f" (n={e.n}: missing or non-finite left out)" if e is not None else ""
            fewer = "" if e is None or e.n == len(s.seeds) else left_out
            if e is None:
                cells.append("n/a")
            elif e.half_width is None:
                cells.append(fmt(e.mean, spec) + fewer)
            else:
                cells.append(f"{fmt(e.mean, spec)} +- {fmt(e.half_width, spec)}{fewer}")
        cells += [
            _difference_cell(s.vs_baseline.get(f"{split}_auroc"), len(s.seeds))
            for split in ("val", "test")
        ]
        rows.append(cells)
    lines = markdown_lines(header, rows) + _differences_table(stats)
    lines.append("")
    lines.append(
        "Mean +- half-width of the 95 % Student t interval over the completed seeds (n; failed "
        "and interrupted runs are counted beside it, never averaged); differences are paired by"
        " seed (paired t-test), and the half-width of their interval is the smallest mean "
        "difference that shows as significant (a true difference of that size shows only about "
        "half the time); * marks an interval that excludes 0: at 95 %, about 1 in 20 "
        "differences with no true effect is marked by chance, so with many configurations and "
        "metrics expect some (review)."
    )
    return "\n".join(lines)


def _difference_cell(d: Difference | None, seeds: int, spec: str = ".5f") -> str:
    """``+0.00123 [-0.00010, +0.00256] (p 0.07)``, `` *`` when the interval excludes 0; the
    pairs it rests on when fewer than the configuration's ``seeds`` (a seed the baseline lacks
    or whose value is not finite on either side). ``spec``: the numbers' format, signed."""
    if d is None:
        return ""
    interval = "" if d.ci_low is None else f" [{d.ci_low:+{spec}}, {d.ci_high:+{spec}}]"
    mark = " *" if d.significant else ""
    pairs = f"; {d.n} of {seeds} seeds paired" if d.n != seeds else ""
    return f"{d.mean:+{spec}}{interval}{mark} (p {fmt(d.p_value, '.3g')}{pairs})"


#: The metrics whose paired differences to the baseline get a table of their own beside
#: AUROC's columns, with the numbers' format: the seed also changes the data, so their unpaired
#: intervals hid paired effects that summary_stats.csv alone showed (precision-sweep review).
PAIRED_SHOWN = {
    "val_ne": ".5f",
    "val_logloss": ".5f",
    "samples_per_sec": ",.0f",
    "peak_rss_gib": ".3f",
    "table_bytes_per_rank": ",.0f",
}


def _differences_table(stats: Sequence[ConfigStats]) -> list[str]:
    """The paired differences to the baseline of :data:`PAIRED_SHOWN`, one row per other
    configuration (the metrics none of them has left out); no lines without such a row."""
    keys = [k for k in PAIRED_SHOWN if any(k in s.vs_baseline for s in stats[1:])]
    if not keys:
        return []
    header = ["configuration", *(f"{METRICS[k].label} - baseline [95% CI]" for k in keys)]
    rows = [
        [s.config, *(_difference_cell(s.vs_baseline.get(k), len(s.seeds), PAIRED_SHOWN[k])
                     for k in keys)]
        for s in stats[1:]
    ]  # fmt: skip
    return ["", *markdown_lines(header, rows)]


STATS_COLUMNS = [
    "config", "metric", "n", "mean", "sd", "ci_low", "ci_high",
    "diff_vs_baseline", "diff_ci_low", "diff_ci_high", "p_value", "diff_n", "config_id",
]  # fmt: skip


def write_stats(out_dir: Path, stats: Sequence[ConfigStats]) -> Path:
    """``summary_stats.csv``: one row per configuration and metric (long form)."""
    path = out_dir / STATS_FILE
    rows = [
        {
            "config": s.config, "metric": key, "n": e.n, "mean": e.mean,
            "sd": e.sd, "ci_low": e.ci_low, "ci_high": e.ci_high,
            "diff_vs_baseline": d.mean if d else None,
            "diff_ci_low": d.ci_low if d else None,
            "diff_ci_high": d.ci_high if d else None,
            "p_value": d.p_value if d else None,
            "diff_n": d.n if d else None,
            "config_id": s.config_id,
        }
        for s in stats
        for key, e in s.estimates.items()
        for d in [s.vs_baseline.get(key)]
    ]  # fmt: skip
    write_csv_atomic(path, STATS_COLUMNS, rows)
    return path
