"""The one table of metrics a person reads: key, label, format and which way is better.

The run summary printed at the end of training, the sweep summary (``summary.md`` /
``summary.csv``) and the comparison with statistics (``summary_stats.csv``, ``--compare-to``)
all read their labels and number formats from here, and print a missing value as ``n/a``.

Quality metrics are per split (``val`` / ``test``): AUROC, log loss (nats), NE (normalized
entropy over the split's own click rate, TorchRec's convention; He et al. 2014, "Practical
Lessons from Predicting Clicks on Ads at Facebook", use the training set's: see
:mod:`dlrm_exp.loop.metrics`) and
calibration (mean prediction / click rate; ideal 1).
"""

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dlrm_exp.record.run_record import COMPLETED, RunMetrics

#: How a missing or undefined value is printed.
MISSING_VALUE = "n/a"


def as_number(value: Any) -> float | None:
    """``value`` (a metric as read from a record) as a float; None for anything that is not a
    number, a bool in an edited record too (NaN and inf stay as measured)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if number else None


def fmt(value: Any, spec: str) -> str:
    """``value`` formatted with ``spec``; ``n/a`` for None and NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING_VALUE
    return format(value, spec)


@dataclass(frozen=True)
class Metric:
    """A metric as people read it.

    Attributes:
        key: the column / ``summary_stats.csv`` name, e.g. ``val_auroc``.
        label: the header printed, e.g. ``val AUROC``.
        spec: the format spec of a value, e.g. ``.4f``.
        higher_is_better: True / False, or None when neither is (calibration: ideal 1).
        read: the value in a run's :class:`RunMetrics` (None when it has none).
    """

    key: str
    label: str
    spec: str
    higher_is_better: bool | None
    read: Callable[[RunMetrics], Any]

    def format(self, value: Any) -> str:
        """``value`` in this metric's format (``n/a`` when missing)."""
        return fmt(value, self.spec)


@dataclass(frozen=True)
class Quality:
    """A per-split quality metric (the key inside ``metrics.json``'s ``val`` / ``test``)."""

    key: str
    label: str
    spec: str
    higher_is_better: bool | None


#: Per-split quality metrics, in the order the run summary prints them.
QUALITY: tuple[Quality, ...] = (
    Quality("auroc", "AUROC", ".4f", True),
    Quality("logloss", "log loss", ".4f", False),
    Quality("ne", "NE", ".4f", False),
    Quality("calibration", "calibration", ".3f", None),
)
SPLITS = ("val", "test")


def split_line(split: str, values: dict[str, float], bayes: float | None = None) -> str:
    """One split's quality as the summaries print it: ``val  AUROC 0.8104 (Bayes-optimal
    0.8219) | log loss 0.4430 | NE 0.7757 | calibration 0.997 | 32,768 samples``."""
    cells = [f"{q.label} {fmt(values.get(q.key), q.spec)}" for q in QUALITY]
    if bayes is not None:
        cells[0] += f" (Bayes-optimal {fmt(bayes, '.4f')})"
    line = f"{split:<4} " + " | ".join(cells) + f" | {int(values['samples']):,} samples"
    return line + _one_class(values)


def _one_class(values: dict[str, float]) -> str:
    """Why AUROC and NE read ``n/a`` where the split holds one class (``positives``: 0, or
    every sample): without it, n/a was said for no reason (review)."""
    samples, positives = values.get("samples") or 0, values.get("positives")
    if not samples or positives not in (0, samples):
        return ""
    label, undefined = (0, "AUROC, NE and calibration") if positives == 0 else (1, "AUROC and NE")
    return f" (every row is label {label}: {undefined} are undefined)"


def _split_metric(split: str, q: Quality) -> Metric:
    return Metric(
        f"{split}_{q.key}",
        f"{split} {q.label}",
        q.spec,
        q.higher_is_better,
        lambda m: getattr(m, split).get(q.key),
    )


def _percent(fraction: float | None) -> float | None:
    return None if fraction is None else 100 * fraction


def _final_weights(split: str, key: str) -> Callable[[RunMetrics], Any]:
    """A split's metric of the run's final weights: ``final_weights`` when ``train.keep_best``
    restored the best validation's weights, else the reported split itself."""
    return lambda m: (m.final_weights.get(split) or getattr(m, split)).get(key)


_RUN_METRICS = (
    Metric(
        "final_test_auroc", "test AUROC final weights", ".4f", True, _final_weights("test", "auroc")
    ),
    Metric("best_epoch", "best epoch", ".2f", None, lambda m: m.best_epoch),
    Metric("samples_per_sec", "samples/s (all ranks)", ",.0f", True, lambda m: m.samples_per_sec),
    Metric(
        "fwd_bytes_per_step",
        "fwd bytes/step (all ranks)",
        ",.0f",
        False,
        lambda m: m.comm_bytes_per_step.get("forward"),
    ),
    Metric(
        "bwd_bytes_per_step",
        "bwd bytes/step (all ranks)",
        ",.0f",
        False,
        lambda m: m.comm_bytes_per_step.get("backward"),
    ),
    Metric(
        "allreduce_bytes_per_step",
        "DDP all-reduce bytes/step (all ranks)",
        ",.0f",
        False,
        lambda m: m.comm_bytes_per_step.get("allreduce"),
    ),
    Metric("step_ms_p50", "step p50 ms", ".1f", False, lambda m: m.step_time_ms.get("p50")),
    Metric(
        "matmul_peak_pct",
        "% of own-dtype matmul peak",
        ".1f",
        True,
        lambda m: _percent(m.utilization.get("fraction_of_matmul_peak")),
    ),
    Metric(
        "peak_rss_gib", "peak RSS GiB (max rank)", ".2f", False, lambda m: m.peak_rss_gib_max_rank
    ),
    Metric(
        "peak_gpu_gib", "peak GPU GiB (max rank)", ".2f", False, lambda m: m.peak_gpu_gib_max_rank
    ),
    Metric(
        "table_bytes_per_rank",
        "table bytes (max rank)",
        ",.0f",
        False,
        lambda m: max(m.embedding_bytes_per_rank, default=None),
    ),
    Metric("table_rows", "table rows", ",.0f", None, lambda m: sum(m.table_rows.values()) or None),
    Metric(
        "managed_rows_held",
        "MC rows held",
        ",.0f",
        None,
        lambda m: sum(m.managed_rows_held.values()) if m.managed_rows_held else None,
    ),
    Metric(
        "wall_seconds",
        "wall s",
        ".1f",
        False,
        lambda m: m.wall_seconds if m.status == COMPLETED else None,
    ),
)

#: Every metric by key: the per-split quality metrics, then the run's speed, bytes and memory.
METRICS: dict[str, Metric] = {
    m.key: m
    for m in [_split_metric(split, q) for split in SPLITS for q in QUALITY] + list(_RUN_METRICS)
}


#: Table columns left out when no run has a value (CPU runs hold no GPU memory; only
#: managed-collision tables hold rows of their own: the column was n/a in every other sweep).
OPTIONAL_METRICS = frozenset({"peak_gpu_gib", "managed_rows_held"})


def markdown_lines(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A GitHub markdown table: the header line, its rule, one line per row of cells."""
    return [
        "| " + " | ".join(cells) + " |"
        for cells in [list(header), ["---"] * len(header), *map(list, rows)]
    ]


def shown(keys: Sequence[str], has_value: Callable[[str], bool]) -> list[str]:
    """``keys`` less the :data:`OPTIONAL_METRICS` for which ``has_value(key)`` is false."""
    return [k for k in keys if k not in OPTIONAL_METRICS or has_value(k)]
