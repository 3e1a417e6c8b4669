"""The regression gate of ``python -m dlrm_exp.report NEW --compare-to OLD``: a new set of runs
against a saved one (its ``summary_runs.csv``, :mod:`dlrm_exp.record.run_values`), per
configuration and metric.

Configurations are matched by identity (canonical overrides; where the two sets swept other
keys, by all their overrides but the seed), runs within one by seed. The
difference ``new - saved`` is paired by seed when the two sides share seeds (Student t on the
per-seed differences, ``n - 1`` degrees of freedom) and otherwise unpaired (Welch's t with
Welch-Satterthwaite degrees of freedom; the line says so). A gated metric *regressed* when
the mean difference is worse than ``tolerance`` and its whole 95 % interval lies on the worse
side of zero; with a single pair (no interval) the tolerance alone decides.

The gate also fails, with one line naming what is wrong, when a saved configuration has no
completed run in the new set; seeds pair, but a seed of the baseline has no run in the new set
(jobs not launched) or a completed new run's seed failed in the baseline (it would go
uncompared; a seed the baseline never ran gets a note); a run of a compared configuration did
not complete (counted as failed, never dropped); a gated metric is NaN or infinite; a gated
metric the baseline has is missing from a completed new run; the baseline holds one seed of a
configuration in two completed runs;
or nothing at all was compared (a metric that neither side has is skipped). A configuration only
in the new set is listed as new (with its runs that did not complete). Only metrics with a
better direction can be gated (calibration cannot: it moves either way).
"""

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from hydra.errors import HydraException

from dlrm_exp.record.compare import COMPARED, DEFAULT_GATE
from dlrm_exp.record.metric_table import METRICS, Metric
from dlrm_exp.record.run_record import COMPLETED
from dlrm_exp.record.run_values import RunValues, is_finite
from dlrm_exp.record.runs import (
    ALL,
    DEFAULTS,
    canonical_overrides,
    split_overrides,
    without_superseded,
)
from dlrm_exp.record.stats import Difference, paired_difference, welch_difference


@dataclass
class GateResult:
    """What the gate printed: ``lines`` (one per compared metric, plus notes),
    ``failures`` (each a reason to fail, regressions included) and ``compared``, the number of
    gated metrics compared (the others are shown, not counted)."""

    lines: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    compared: int = 0
    #: Gated comparisons worse on average whose interval still holds 0 (not significant).
    unsure: int = 0

    @property
    def passed(self) -> bool:
        """No failure and at least one gated metric compared."""
        return not self.failures and self.compared > 0


#: Why a baseline may name its configurations otherwise than new runs of them.
_OLDER_BASELINE = (
    "a baseline of single runs side by side written before 2026-11-27 named each by the "
    "overrides that differ between them only: write it again with python -m dlrm_exp.report "
    "<its folders>"
)


def _by_config(runs: Sequence[RunValues]) -> dict[str, list[RunValues]]:
    groups: dict[str, list[RunValues]] = {}
    for run in runs:
        groups.setdefault(run.config_id, []).append(run)
    return groups


def _paired_defaults(
    new: Mapping[str, list[RunValues]], saved: Mapping[str, list[RunValues]]
) -> str | None:
    """The baseline's configuration id when each side is one single run of the defaults (no
    override: each named by its folder, e.g. the same command before and after a change in
    outputs/v1 and outputs/v2), which are the same configuration; None otherwise."""
    if len(new) != 1 or len(saved) != 1:
        return None
    (new_id,), (saved_id,) = new, saved
    defaults = all(i.startswith(f"{DEFAULTS} ") for i in (new_id, saved_id))
    return saved_id if defaults and new_id != saved_id else None


def _whole_identity(runs: Sequence[RunValues]) -> str | None:
    """Every override the runs of one configuration ran with but the seed (its identity and
    the overrides that were not swept), canonical; None where they differ, a side does not
    record the latter (older baselines) or the identity is the defaults' folder."""
    wholes = set()
    for run in runs:
        if run.fixed is None or run.config_id.startswith(DEFAULTS):
            return None
        named = [] if run.config_id == ALL else split_overrides(run.config_id)
        try:
            wholes.add(canonical_overrides([*named, *split_overrides(run.fixed)]))
        except HydraException:
            return None
    return wholes.pop() if len(wholes) == 1 else None


def _matched_by_whole(
    new: Mapping[str, list[RunValues]], saved: Mapping[str, list[RunValues]]
) -> dict[str, str]:
    """``{new id: saved id}`` of configurations named otherwise only because the two sets
    swept other keys: a rerun of one configuration of a baseline sweep (``-m seed=0,1
    optimizer.learning_rate=0.1`` against ``-m optimizer.learning_rate=0.1,0.05 seed=0,1``)
    is named ``(all runs)``, its value not swept, though every override is the same. Only
    configurations without a match by name, each whole identity once on its side."""
    new_whole = {c: _whole_identity(r) for c, r in new.items() if c not in saved}
    saved_whole = {c: _whole_identity(r) for c, r in saved.items() if c not in new}
    once = [w for w, n in Counter([*new_whole.values(), *saved_whole.values()]).items() if n == 2]
    return {
        n: s
        for n, nw in new_whole.items()
        for s, sw in saved_whole.items()
        if nw is not None and nw == sw and nw in once
    }


def _adopt_matched(
    new: dict[str, list[RunValues]], saved: Mapping[str, list[RunValues]], result: GateResult
) -> dict[str, list[RunValues]]:
    """``new`` with the configurations that match the baseline's otherwise than by id keyed
    by the baseline's id, saying so: single runs of the defaults in two folders
    (:func:`_paired_defaults`), and those :func:`_matched_by_whole` matches (labelled as the
    baseline does)."""
    paired = _paired_defaults(new, saved)
    if paired is not None:
        (new_runs,), (saved_runs,) = new.values(), saved.values()
        result.lines.append(
            f"the runs of the defaults in {new_runs[0].config} are compared with the "
            f"baseline's in {saved_runs[0].config}"
        )
        return {paired: new_runs}
    for new_id, saved_id in _matched_by_whole(new, saved).items():
        label = saved[saved_id][0].config
        result.lines.append(
            f"{new[new_id][0].config} is compared with the baseline's {label}: the same "
            "overrides, swept otherwise"
        )
        new[saved_id] = [replace(r, config=label) for r in new.pop(new_id)]
    return new


def _seed_values(runs: Sequence[RunValues], key: str) -> dict[int, float | None]:
    return {run.seed: run.values.get(key) for run in runs if run.status == COMPLETED}


def worse_by(metric: Metric, diff: float) -> float:
    """How much worse ``diff = new - saved`` is (negative: better; 0 without a direction)."""
    if metric.higher_is_better is None:
        return 0.0
    return -diff if metric.higher_is_better else diff


def difference(new: dict[int, float], saved: dict[int, float]) -> Difference:
    """``new - saved``: paired by the seeds both sides have, else Welch's unpaired t."""
    common = sorted(set(new) & set(saved))
    if common:
        return paired_difference([new[s] for s in common], [saved[s] for s in common])
    return welch_difference(list(new.values()), list(saved.values()))


def is_regression(metric: Metric, d: Difference, tolerance: float) -> bool:
    """Worse than ``tolerance`` and, when there is an interval, all of it on the worse side
    of zero."""
    if metric.higher_is_better is None or worse_by(metric, d.mean) <= tolerance:
        return False
    if d.ci_low is None or d.ci_high is None:
        return True
    return d.ci_high < 0 if metric.higher_is_better else d.ci_low > 0


def _worse_unsure(metric: Metric, d: Difference) -> bool:
    """Whether ``d`` has an interval that holds 0 while its mean lies on the worse side."""
    worse = metric.higher_is_better is not None and worse_by(metric, d.mean) > 0
    return d.ci_low is not None and not d.significant and worse


def _verdict(metric: Metric, d: Difference) -> str:
    if d.ci_low is None:
        return (
            "no interval (one seed paired)"
            if d.method == "paired"
            else "no interval (one run on a side)"
        )
    if metric.higher_is_better is None:
        return "moved" if d.significant else "within noise"
    side = "worse" if worse_by(metric, d.mean) > 0 else "better"
    if d.significant:
        return side
    if d.mean == 0:
        return "within noise"
    return f"{side} on average, not significant (more seeds would tell)"  # the interval holds 0


def _describe(label: str, metric: Metric, d: Difference, old: float, new: float) -> str:
    how = f"paired by seed, n={d.n}" if d.method == "paired" else "unpaired (Welch), no common seed"
    interval = "" if d.ci_low is None else f" [{d.ci_low:+.3g}, {d.ci_high:+.3g}]"
    # the smallest mean difference that shows as significant; a true one of that size shows
    # only about half the time (review), so it is no "detectable" size
    detect = "" if d.half_width is None else f"; significant beyond +-{d.half_width:.2g}"
    return (
        f"{label} {metric.label}: {metric.format(old)} -> {metric.format(new)} "
        f"({d.mean:+.3g}{interval}, {how}{detect}): {_verdict(metric, d)}"
    )


def _compare_metric(
    label: str, key: str, new_runs: list[RunValues], saved_runs: list[RunValues], gated: bool,
    tolerance: float, result: GateResult,
) -> None:  # fmt: skip
    metric = METRICS[key]
    new, saved = _seed_values(new_runs, key), _seed_values(saved_runs, key)
    bad = [f"seed={s} ({v})" for s, v in new.items() if v is not None and not is_finite(v)]
    bad += [f"saved seed={s} ({v})" for s, v in saved.items() if v is not None and not is_finite(v)]
    if bad:
        if gated:
            result.failures.append(
                f"{label} {metric.label}: not a finite number in {', '.join(bad)}"
            )
        return
    new_f = {s: float(v) for s, v in new.items() if v is not None}
    saved_f = {s: float(v) for s, v in saved.items() if v is not None}
    # a completed run without a value the other runs have (paired or not): metrics.json
    # writes NaN and infinity as null, so "no value" may be a diverged run
    lost = sorted(s for s in new if s not in new_f)
    saved_lost = sorted(s for s in saved if s not in saved_f)
    why = " (missing, or not finite: metrics.json writes NaN as null)"
    if gated and saved_f and not new_f:
        result.failures.append(
            f"{label} {metric.label}: the baseline has it, the new set has none{why}"
        )
    elif gated and saved_f and lost:
        result.failures.append(
            f"{label} {metric.label}: the baseline has it, the new set has no value for "
            + ", ".join(f"seed={s}" for s in lost)
            + why
        )
    if gated and new_f and saved_f and saved_lost:
        result.failures.append(
            f"{label} {metric.label}: the baseline has no value for "
            + ", ".join(f"seed={s}" for s in saved_lost)
            + f", its other runs have{why}"
        )
    if not new_f or not saved_f:
        uncompared = _baseline_lacks(key, saved_runs) if gated and new_f else None
        result.failures += [f"{label} {metric.label}: {uncompared}"] if uncompared else []
        return
    d = difference(new_f, saved_f)
    common = sorted(set(new_f) & set(saved_f)) if d.method == "paired" else None
    old_mean = _mean(saved_f, common)
    new_mean = _mean(new_f, common)
    line = _describe(label, metric, d, old_mean, new_mean)
    if gated and is_regression(metric, d, tolerance):
        line += f"  REGRESSION (worse by more than {tolerance:g})"
        result.failures.append(line)
    elif gated:
        result.unsure += _worse_unsure(metric, d)
    result.lines.append(line)
    result.compared += gated


def _baseline_lacks(key: str, saved_runs: list[RunValues]) -> str | None:
    """Why a gated metric the new runs have goes uncompared, where the baseline has completed
    runs of the configuration (left uncompared, the gate passed without it: a baseline cut at
    a line end, review); None where none completed (said by the other checks)."""
    completed = [r for r in saved_runs if r.status == COMPLETED]
    if not completed:
        return None
    if any(key in r.values for r in completed):
        return (
            "the baseline has no value: its runs recorded no finite value (diverged, or not "
            "measured there)"
        )
    return (
        "the baseline has no value: it has no row for it (its runs predate the metric: leave "
        "it out of --gate or run the baseline again; a copy cut short: write it again with "
        "python -m dlrm_exp.report <its folders>)"
    )


def _mean(values: dict[int, float], seeds: list[int] | None) -> float:
    """The mean over ``seeds`` (the paired ones, so both sides' means match the difference),
    else over all."""
    picked = list(values.values()) if seeds is None else [values[s] for s in seeds]
    return sum(picked) / len(picked)


def _missing_seeds(
    label: str, new_runs: list[RunValues], saved_runs: list[RunValues]
) -> tuple[list[str], list[str]]:
    """(failure lines, note lines) when seeds pair but not all of them. Failures: seeds of
    the baseline with no run in the new set, and completed new runs whose seed failed in the
    baseline (a worse run there passed unseen: review). A note: completed new runs whose seed
    the baseline never ran (repeats added for power), which no paired difference counts. With
    no common seed at all the sides are compared unpaired, by design."""
    new_seeds = {r.seed for r in new_runs}
    saved_seeds = {r.seed for r in saved_runs if r.status == COMPLETED}
    if not saved_seeds & new_seeds:
        return [], []
    failures, notes = [], []
    missing = sorted(saved_seeds - new_seeds)
    if missing:
        failures.append(
            f"{label}: seed(s) {', '.join(map(str, missing))} of the baseline have no run in "
            "the new set (jobs not launched?): the comparison would rest on fewer seeds"
        )
    failed = {r.seed for r in saved_runs if r.status != COMPLETED}
    unpaired = sorted({r.seed for r in new_runs if r.status == COMPLETED} - saved_seeds)
    if unpaired_failed := [s for s in unpaired if s in failed]:
        failures.append(
            f"{label}: seed(s) {', '.join(map(str, unpaired_failed))} failed in the baseline, "
            "so the new runs of them would not be compared: run them into the baseline again "
            "(python -m dlrm_exp.report <its folders> writes it)"
        )
    if extra := [s for s in unpaired if s not in failed]:
        notes.append(
            f"{label}: note: seed(s) {', '.join(map(str, extra))} of the new set have no run in "
            "the baseline: not compared (the paired difference is over the common seeds)"
        )
    return failures, notes


def _fixed_differ(label: str, new_runs: list[RunValues], saved_runs: list[RunValues]) -> str | None:
    """A note when the two sides ran this configuration with other overrides that were not
    swept (``model=tiny`` against ``model=mlperf``): the same name, maybe not the same
    experiment. None when they agree or a side does not record them (older baselines)."""
    new = {r.fixed for r in new_runs if r.fixed is not None}
    saved = {r.fixed for r in saved_runs if r.fixed is not None}
    if not new or not saved or new == saved:
        return None
    whole = _whole_identity(new_runs)
    if whole is not None and whole == _whole_identity(saved_runs):  # swept otherwise
        return None

    def said(sets: set[str]) -> str:
        return " / ".join(sorted(sets)) or "no other overrides"

    return (
        f"{label}: note: the baseline ran it with {said(saved)}, the new set with {said(new)} "
        "(overrides that were not swept): the comparison may be of different experiments"
    )


def _ran_differ(label: str, new_runs: list[RunValues], saved_runs: list[RunValues]) -> str | None:
    """A note when the completed runs of the two sides ran this configuration differently
    (:attr:`~dlrm_exp.record.run_record.RunMetrics.ran`: ``threads_per_rank 2 -> 1``): the
    same overrides, not the same run (2 threads against 1 passed a speed gate unsaid;
    what-ran review). Only what both sides recorded is compared; None when it agrees."""

    def values(runs: list[RunValues], key: str) -> str:
        return " / ".join(sorted({r.ran[key] for r in runs if r.ran and key in r.ran}))

    keys = [k for r in new_runs if r.ran for k in r.ran]
    changes = [
        f"{key} {old} -> {new}"
        for key in dict.fromkeys(keys)
        if (old := values(saved_runs, key)) and (new := values(new_runs, key)) and old != new
    ]
    if not changes:
        return None
    return f"{label}: note: ran differently from the baseline: {'; '.join(changes)}"


def _config_failures(label: str, runs: list[RunValues]) -> str | None:
    failed = [r for r in runs if r.status != COMPLETED]
    if not failed:
        return None
    which = ", ".join(f"seed={r.seed} {r.status} ({r.path})" for r in failed)
    return f"{label}: {len(failed)} of {len(runs)} runs did not complete: {which}"


def parse_tolerances(items: Sequence[str], gate: Sequence[str] = DEFAULT_GATE) -> dict[str, float]:
    """``--tolerance`` items as ``{metric: tolerance}``: ``0.0005`` sets the one of every
    metric (key ``""``), ``samples_per_sec=500`` one metric's, in its unit (AUROC points,
    samples/s): one number for AUROC and speed would be zero for one of them.

    Raises:
        ValueError: an item is neither a number nor ``<metric>=<number>``; a number is negative
            or not finite; a metric is named twice (or two numbers for every metric); or the
            metric named is not in ``gate`` (its tolerance would change nothing: the gate
            compared it without failing on it).
    """
    out: dict[str, float] = {}
    for item in items:
        key, _, value = item.rpartition("=")
        if key and key not in METRICS:
            raise ValueError(f"--tolerance {item}: no metric {key} (one of {', '.join(METRICS)})")
        if key and key not in gate:
            raise ValueError(
                f"--tolerance {item}: {key} is not gated, so its tolerance would change "
                f"nothing; add it to --gate (now {' '.join(gate)})"
            )
        try:
            number = float(value)
        except ValueError:
            raise ValueError(
                f"--tolerance {item}: not a number or <metric>=<number>, e.g. 0.0005 "
                "samples_per_sec=500"
            ) from None
        if not number >= 0 or number == float("inf"):
            raise ValueError(f"--tolerance {item}: a tolerance is a finite number >= 0")
        if key in out:
            what = key or "every metric"
            raise ValueError(f"--tolerance {item}: a second tolerance for {what}")
        out[key] = number
    return out


def compare_runs(
    new: Sequence[RunValues],
    saved: Sequence[RunValues],
    tolerance: float | Mapping[str, float] = 0.0,
    gate: Sequence[str] = DEFAULT_GATE,
) -> GateResult:
    """Check ``new`` against ``saved`` (see the module docstring); every metric of
    :data:`~dlrm_exp.record.compare.COMPARED` is compared, those in ``gate`` can fail.

    ``tolerance``: one for every metric, or ``{metric: tolerance}`` with ``""`` for the
    others (:func:`parse_tolerances`), in each metric's unit."""
    result = GateResult()
    tolerances = {"": tolerance} if isinstance(tolerance, (int, float)) else dict(tolerance)
    new, saved = without_superseded(new), without_superseded(saved)  # a failed seed rerun
    new_groups, saved_groups = _by_config(new), _by_config(saved)
    new_groups = _adopt_matched(new_groups, saved_groups, result)
    for config_id, saved_runs in saved_groups.items():
        if config_id not in new_groups:
            result.failures.append(
                f"{saved_runs[0].config}: in the baseline, but no run of it in the new set"
            )
        seeds = Counter(run.seed for run in saved_runs if run.status == COMPLETED)
        twice = sorted(seed for seed, runs in seeds.items() if runs > 1)
        if twice:  # keyed by seed, the last would silently stand for both
            result.failures.append(
                f"{saved_runs[0].config}: the baseline holds seed(s) {', '.join(map(str, twice))} "
                "in two completed runs: one measurement would count as two repeats"
            )
    for config_id, new_runs in new_groups.items():
        label = new_runs[0].config
        problem = _config_failures(label, new_runs)
        if config_id not in saved_groups:  # nothing to regress from: said, not failed
            result.lines.append(f"{label}: new (not in the baseline)")
            result.lines += [problem] if problem else []
            continue
        if problem:
            result.failures.append(problem)
        failures, notes = _missing_seeds(label, new_runs, saved_groups[config_id])
        result.failures += failures
        result.lines += notes
        for differ in (_fixed_differ, _ran_differ):
            note = differ(label, new_runs, saved_groups[config_id])
            result.lines += [note] if note else []
        for key in COMPARED:
            tol = tolerances.get(key, tolerances.get("", 0.0))
            _compare_metric(label, key, new_runs, saved_groups[config_id], key in gate, tol, result)
    if result.compared == 0:
        result.failures.append(
            "nothing was compared: no gated metric of a configuration with completed runs on "
            "both sides "
            f"(new: {', '.join(sorted(new_groups)) or 'none'}; "
            f"baseline: {', '.join(sorted(saved_groups)) or 'none'}; {_OLDER_BASELINE})"
        )
    return result
