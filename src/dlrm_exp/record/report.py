"""``python -m dlrm_exp.report PATH [PATH ...]``: compare runs in a table and PNG plots.

PATH is a run folder, a sweep folder (``outputs/multirun/<date>/<time>``, every job in it) or a
glob of either. Prints the markdown comparison table and, per configuration (runs that differ
only by ``seed`` are its repeats), the statistics of :mod:`dlrm_exp.record.compare`; writes
``summary.md`` / ``summary.csv`` / ``summary_stats.csv`` and, with matplotlib, the plots into
``--out`` (default: the one PATH given, else ``./report``):

* ``throughput.png``: training samples/s, grouped by sharding (by the configuration without
  qcomms when the sweep varied more), one bar per qcomms precision, with 95 % Student t error
  bars over the repeats (runs that differ only by seed; none for a single run; a pair whose
  runs all failed is marked "failed");
* ``val_auroc.png``: validation AUROC against training step, one line per run;
* ``comm_bytes.png``: embedding collective bytes per training step (all ranks), forward and
  backward, grouped by precision (by the configuration without sharding when the sweep varied
  more), one bar per sharding (not drawn when no run sent any: one process each);
* ``auroc_diff.png``, only for sweeps with repeats: each configuration's val AUROC minus the
  baseline's (paired by seed), with its 95 % interval and the zero line.

``--baseline 'qcomms=none'`` picks the reference configuration (default: the first with a
completed run).
``--compare-to OLD`` (a saved sweep or report folder, its ``summary_runs.csv``, or the
``summary_stats.csv`` beside it) is the regression gate of :mod:`dlrm_exp.record.gate`:
configurations matched by their canonical overrides, runs paired by seed, a regression is a
``--gate`` metric (default: val/test AUROC, val NE, val log loss) worse by more than
its ``--tolerance`` (one number for all, ``<metric>=<number>`` for one, in its unit; repeated
for several) with its
whole 95 % interval on the worse side; a missing or failed
configuration, a NaN, or nothing compared fails it too. A gate for CI pipelines.

Exit status: 0; 1 when the ``--compare-to`` gate fails; 2 when a PATH does not exist or holds
no runs, two runs of a configuration share a seed, or a flag's file or configuration is not
there.
"""

import argparse
import glob
import io
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from dlrm_exp.record.compare import (  # noqa: E402
    DEFAULT_GATE,
    GATEABLE,
    ConfigStats,
    config_label,
    config_stats,
    has_repeats,
    stats_markdown,
)
from dlrm_exp.record.gate import GateResult, compare_runs, parse_tolerances  # noqa: E402
from dlrm_exp.record.run_record import COMPLETED, MISSING, RunMetrics  # noqa: E402
from dlrm_exp.record.run_values import baseline_file, read_run_values, run_values  # noqa: E402
from dlrm_exp.record.runs import (  # noqa: E402
    RunRecord,
    canonical_overrides,
    load_runs,
    named_by_difference,
    override_values,
    recorded_mode,
    saved_sweep_values,
)
from dlrm_exp.record.stats import estimate  # noqa: E402
from dlrm_exp.record.sweep import (  # noqa: E402
    RECORDING_MODES,
    summary_head,
    write_summary,
)
from dlrm_exp.util.files import write_bytes_atomic  # noqa: E402
from dlrm_exp.util.text import first_few  # noqa: E402

PLOTS = ("throughput.png", "val_auroc.png", "comm_bytes.png", "auroc_diff.png")


def _choice(run: RunRecord, group: str) -> str:
    """The run's option of ``group``: as recorded, else as overridden (a job killed outright,
    or one that failed before its failures recorded the choices, has none), else ``?``."""
    recorded = run.metrics.choices.get(group)
    return str(recorded or override_values(run.overrides).get(group, "?"))


def _group(run: RunRecord, group_by: str, bar_by: str) -> tuple[str, str]:
    """A run's x-axis group: its configuration (every swept key but ``seed``; a single run's
    overrides but ``seed``) without ``bar_by``, so runs that differ in anything else
    (``optimizer.learning_rate``) are not pooled; when nothing else is left (a sweep of
    ``bar_by`` and seeds), ``group_by=<its option>``. Returns (its identity: the canonical
    form, keys sorted and values normalized, so one configuration typed in two orders, or
    ``1`` and ``1.0``, is one group, as in the statistics; its label, as typed)."""
    values = override_values(run.overrides)
    keys = [k for k in run.config_keys if k != bar_by and k in values]
    label = ",".join(f"{k}={values[k]}" for k in keys) or f"{group_by}={_choice(run, group_by)}"
    return canonical_overrides(run.overrides, keys) or label, label


def bar_pairs(
    runs: Sequence[RunRecord], group_by: str, bar_by: str
) -> dict[tuple[str, str], list[RunRecord]]:
    """``{(group, bar option): runs}`` in first-seen order: the runs a bar pools (its repeats,
    which differ only by ``seed``); groups as :func:`_group` names them (each by the label
    its first run has)."""
    labels: dict[str, str] = {}
    pairs: dict[tuple[str, str], list[RunRecord]] = {}
    for run in runs:
        identity, label = _group(run, group_by, bar_by)
        group = labels.setdefault(identity, label)
        pairs.setdefault((group, _choice(run, bar_by)), []).append(run)
    return pairs


def _grouped_bars(
    ax: plt.Axes,
    runs: Sequence[RunRecord],
    group_by: str,
    bar_by: str,
    value: Callable[[RunMetrics], float | None],
    scale: float = 1.0,
) -> str:
    """One bar per (group, bar) pair of :func:`bar_pairs`: the mean over its completed runs
    that have the value, with a 95 % Student t error bar only when 2 or more do (the legend's
    title says so, with the runs per bar: they were unlabelled; review); a pair with no value
    is an empty bar labelled "failed" when none of its runs completed, else "n/a" (completed
    without it: e.g. no samples/s from a run no longer than its warm-up). The values are
    never negative: the axis starts at 0 (an interval of 2 seeds reached -200,000 samples/s).
    Returns what the x-axis shows: ``group_by``, or "configuration" where the groups are
    the other swept settings (for the title)."""
    pairs = bar_pairs(runs, group_by, bar_by)
    groups = list(dict.fromkeys(group for group, _ in pairs))
    bars = list(dict.fromkeys(bar for _, bar in pairs))
    width = 0.8 / max(len(bars), 1)
    # one option: the legend says all runs share it (it read as if the option had been
    # compared: review)
    every = " (every run)" if len(bars) == 1 else ""
    counts: list[int] = []  # runs behind each bar that has an error bar
    for j, bar in enumerate(bars):
        first = next(group for group, option in pairs if option == bar)  # its legend entry
        of_bar = [r for (_, option), match in pairs.items() if option == bar for r in match]
        for i, group in enumerate(groups):
            match = pairs.get((group, bar), [])
            x = i + (j - (len(bars) - 1) / 2) * width
            label = f"{bar_by}={bar}{every}{_ran_note(of_bar, bar_by)}" if group == first else None
            numbers = [value(r.metrics) for r in match if r.status == COMPLETED]
            numbers = [n / scale for n in numbers if n is not None]
            if numbers:
                e = estimate(numbers)
                error = e.half_width if e.half_width is not None else None
                counts += [len(numbers)] if error is not None else []
                ax.bar(x, e.mean, width, yerr=error, capsize=3, color=f"C{j}", label=label)
            elif match:
                completed = any(r.status == COMPLETED for r in match)
                ax.bar(x, 0, width, color=f"C{j}", label=label)
                ax.annotate("n/a" if completed else "failed", (x, 0), ha="center",
                            va="bottom", rotation=90, fontsize="small",
                            color="tab:gray" if completed else "tab:red")  # fmt: skip
    ticks, keys = _tick_labels(groups)
    ax.set_xticks(range(len(groups)), ticks)
    plt.setp(ax.get_xticklabels(), rotation=25, ha="right", fontsize="small")
    if keys:
        ax.set_xlabel(keys, fontsize="small")
    _, high = ax.get_ylim()
    ax.set_ylim(0, high * 1.15)  # headroom: the legend above the bars
    runs_per_bar = "-".join(str(n) for n in sorted({min(counts), max(counts)})) if counts else ""
    title = f"bars: mean; whiskers: 95 % t interval, {runs_per_bar} runs" if counts else None
    ax.legend(fontsize="small", loc="upper right", title=title, title_fontsize="small")
    ax.grid(axis="y", alpha=0.3)
    by_setting = all(g.startswith(f"{group_by}=") and "," not in g for g in groups)
    return group_by if by_setting else "configuration"


def _varied(runs: Sequence[RunRecord], group: str) -> bool:
    """Whether the ``runs`` chose more than one option of ``group`` (:func:`_choice`). Single
    runs reported together count every override as configuration: a set of them that all had
    ``qcomms=fp16`` was titled as comparing communication precisions (re-read). A run whose
    choice is unknown (``?``: a job killed before its record) is none (diff review)."""
    return len({_choice(run, group) for run in runs} - {"?"}) > 1


def _tick_labels(groups: Sequence[str]) -> tuple[list[str], str]:
    """Groups named ``k1=v1,k2=v2`` with the same keys: their values as tick labels and the
    keys as the axis label (the whole names overlapped; review); else the names as they are
    and no axis label."""
    parts = [g.split(",") for g in groups]
    if not all(all("=" in p for p in ps) for ps in parts):  # (a value with a comma)
        return list(groups), ""
    keys = {tuple(p.split("=", 1)[0] for p in ps) for ps in parts}
    if len(keys) != 1:
        return list(groups), ""
    return [", ".join(p.split("=", 1)[1] for p in ps) for ps in parts], ", ".join(keys.pop())


def _ran_note(runs: Sequence[RunRecord], setting: str) -> str:
    """What the completed ``runs`` ran for ``setting`` when it is not what they asked (the
    run's ``substitutions``), for a legend entry: `` (ran: <what>)`` when all ran the same
    other thing, `` (ran otherwise in some: summary.md)`` when some did, else ``""``."""
    done = [r.metrics for r in runs if r.status == COMPLETED]
    ran = [next((s.get("ran") for s in m.substitutions if s.get("setting") == setting), None)
           for m in done]  # fmt: skip
    if not done or all(r is None for r in ran):
        return ""
    if len(set(ran)) == 1:
        return f" (ran: {ran[0]})"
    return " (ran otherwise in some: summary.md)"


def save_figure(fig: Any, path: Path) -> None:
    """Write ``fig`` as PNG to ``path`` atomically (a report interrupted while plotting leaves
    the earlier plot, not a truncated one) and close it."""
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=120, format="png", bbox_inches="tight")  # (no label cut off)
    plt.close(fig)
    write_bytes_atomic(path, buffer.getvalue())


def plot_throughput(runs: Sequence[RunRecord], path: Path) -> None:
    """Grouped bars of training samples/s (all ranks): x = sharding (or the configuration
    without qcomms, :func:`bar_pairs`), one bar per qcomms (its repeats averaged), written as
    PNG to ``path``."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    x = _grouped_bars(ax, runs, "sharding", "qcomms", lambda m: m.samples_per_sec)
    ax.set_ylabel("training throughput (samples/s, all ranks)")
    qcomms = " and communication precision (qcomms)" if _varied(runs, "qcomms") else ""
    ax.set_title(f"Throughput by {x}{qcomms}")
    fig.tight_layout()
    save_figure(fig, path)


def val_auroc_curves(
    runs: Sequence[RunRecord], per_step: Mapping[Path, float] = MappingProxyType({})
) -> dict[tuple, list[str]]:
    """``{((step, val AUROC), ...): [names of the runs with exactly that curve]}`` (with
    ``per_step``, ``{run folder: samples a step, all ranks}`` of :func:`_samples_per_step`:
    samples, not steps)."""
    curves: dict[tuple, list[str]] = {}
    for run in runs:
        points = _val_points(run, per_step)
        if points:
            curves.setdefault(points, []).append(run.name)
    return curves


def _val_points(
    run: RunRecord, per_step: Mapping[Path, float] = MappingProxyType({})
) -> tuple[tuple[float, float], ...]:
    """A run's ``(step, val AUROC)`` points, those of its validations that have both; where
    ``per_step`` names the run, the step as that many samples (:func:`_samples_per_step`)."""
    scale = per_step.get(run.path, 1.0)
    return tuple(
        (h["step"] * scale, h["auroc"])
        for h in run.metrics.val_history
        if h.get("auroc") is not None and h.get("step") is not None
    )


def _samples_per_step(runs: Sequence[RunRecord]) -> dict[Path, float]:
    """``{run folder: samples a step (all ranks)}`` where the runs' global batches differ
    (another world size or ``train.batch_size``): their steps are then no common axis (a
    2-process run's curve looked twice as fast as the same run on 1 process: review); empty
    where they agree, or where a run's cannot be told (no step trained)."""
    batches = {
        run.path: run.metrics.train_samples / run.metrics.steps
        for run in runs
        if run.metrics.steps and run.metrics.train_samples
    }
    if len(batches) < len(runs) or len({round(b) for b in batches.values()}) < 2:
        return {}
    return batches


def _curve_label(names: Sequence[str]) -> str:
    """The legend entry of runs sharing one curve: every name up to two, then a count (a legend
    of eight names runs off the figure)."""
    if len(names) <= 2:
        return " = ".join(names) + (" (identical)" if len(names) == 2 else "")
    return f"{names[0]} and {len(names) - 1} more runs (identical)"


def plot_val_auroc(runs: Sequence[RunRecord], path: Path) -> None:
    """Validation AUROC against training step (``val_history``), PNG: one line per run, runs
    whose curves are identical sharing one line labelled with all their names; where several
    configurations are compared and one has repeats (seeds), one line per configuration, the
    mean over its seeds at each step, said where fewer seeds reached a step (16 runs of a
    precision sweep were 16 lines whose colours repeated and whose seed-to-seed spread hid
    the levers: review). Lines differ by colour, marker and dash; the legend sits beside the
    axes; steps are whole numbers. Runs of other global batches (world size, batch size) are
    plotted against training samples instead (:func:`_samples_per_step`)."""
    fig, ax = plt.subplots(figsize=(10, 4.5))
    per_step = _samples_per_step(runs)
    means, title = _mean_curves(runs, per_step), None
    if means:  # the configurations by their values, the keys as the legend's title
        labels, keys = _tick_labels([label for label, _, _ in means])
        lines = [(points, f"{name} ({note})") for (_, points, note), name in zip(
            means, labels, strict=True)]  # fmt: skip
        title = _wrapped(keys, 60) if keys else None
    else:
        curves = val_auroc_curves(runs, per_step).items()
        lines = [(p, _curve_label(names)) for p, names in curves]
    markers, dashes = "os^Dvx*P", ("-", "--", ":", "-.")
    for k, (points, label) in enumerate(lines):
        steps, aurocs = zip(*points, strict=True)
        ax.plot(steps, aurocs, marker=markers[k % len(markers)], color=f"C{k % 10}",
                linestyle=dashes[k // 10 % len(dashes)], label=label)  # fmt: skip
    ax.set_xlabel("training samples (all ranks)" if per_step else "training step")
    ax.set_ylabel("validation AUROC")
    ax.set_title("Validation AUROC during training")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    if lines:
        ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.02, 1.0), title=title,
                  title_fontsize="x-small")  # fmt: skip
    fig.tight_layout()
    save_figure(fig, path)


def _mean_curves(
    runs: Sequence[RunRecord], per_step: Mapping[Path, float]
) -> list[tuple[str, tuple, str]]:
    """``[(configuration label, ((step, mean val AUROC), ...), note)]``, one per configuration
    (``config_id``; labelled as the statistics label it, what ran included) when there are two
    or more and one has two or more runs with a validation history; ``[]`` otherwise. Each
    step's mean is over the completed runs that validated there; the note says ``mean of N``
    and the steps fewer runs reached (early stopping ends seeds at other steps: diff review)."""
    groups: dict[str, list[RunRecord]] = {}
    for run in runs:  # completed runs, as the statistics count them (review)
        if run.status == COMPLETED and _val_points(run):
            groups.setdefault(run.config_id, []).append(run)
    if len(groups) < 2 or all(len(group) < 2 for group in groups.values()):
        return []
    curves = []
    for group in groups.values():
        by_step: dict[float, list[float]] = {}
        points_of = (_val_points(run, per_step) for run in group)
        for step, auroc in (point for points in points_of for point in points):
            by_step.setdefault(step, []).append(auroc)
        steps = sorted(by_step)
        points = tuple((step, sum(by_step[step]) / len(by_step[step])) for step in steps)
        fewer = [f"{step:g}" for step in steps if len(by_step[step]) < len(group)]
        shown = first_few(fewer, 3)
        at = "sample(s)" if per_step else "step(s)"
        note = f"mean of {len(group)}" + (f"; fewer at {at} {shown}" if fewer else "")
        curves.append((config_label(group), points, note))
    return curves


def _sent_embedding_bytes(metrics: RunMetrics) -> bool:
    """Whether a run's embedding collectives sent any bytes forward or backward."""
    return any(metrics.comm_bytes_per_step.get(phase) for phase in ("forward", "backward"))


def plot_comm_bytes(runs: Sequence[RunRecord], path: Path) -> None:
    """Measured embedding collective MiB per training step (all ranks), forward and backward
    panels: x = qcomms (or the configuration without sharding, :func:`bar_pairs`), one bar
    per sharding; PNG."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    for ax, phase in zip(axes, ("forward", "backward"), strict=True):
        x = _grouped_bars(
            ax, runs, "qcomms", "sharding", lambda m, p=phase: m.comm_bytes_per_step.get(p), 2**20
        )
        ax.set_title(f"{phase} embedding collectives")
    # each collective's larger side, summed over ranks: a rank's own share counted too (it
    # said "sent", about twice what left 2 ranks: review)
    axes[0].set_ylabel("collective MiB per training step\n(all ranks, own share included)")
    fig.suptitle(f"Communication volume by {'precision (qcomms)' if x == 'qcomms' else x}")
    fig.tight_layout()
    save_figure(fig, path)


def plot_auroc_diff(stats: Sequence[ConfigStats], path: Path) -> None:
    """Each configuration's val AUROC minus the baseline's, paired by seed: the mean with its
    95 % interval as a horizontal error bar, and the zero line; PNG. A difference resting on
    one paired seed has no interval: a hollow gray marker, its label saying so. Drawn only for
    sweeps with repeats (seeds). The configurations are named by their values, the keys in the
    axis label (:func:`_tick_labels`; the whole names were cut off at the figure's edge:
    review), wrapped."""
    rows = [
        (s.config, s.vs_baseline["val_auroc"]) for s in stats[1:] if "val_auroc" in s.vs_baseline
    ]
    baseline = stats[0].config if stats else "?"
    names, keys = _tick_labels([baseline, *(name for name, _ in rows)])
    fig, ax = plt.subplots(figsize=(9, 0.7 * max(len(rows), 1) + 2.0))
    labels = []
    for y, ((_, d), name) in enumerate(zip(rows, names[1:], strict=True)):
        if d.ci_low is None or d.ci_high is None:  # one paired seed: no interval to draw
            ax.plot(d.mean, y, "o", markerfacecolor="none", color="tab:gray")
            labels.append(_wrapped(f"{name} (n={d.n}, no interval)"))
            continue
        color = "tab:red" if d.significant else "tab:blue"
        xerr = [[d.mean - d.ci_low], [d.ci_high - d.mean]]
        ax.errorbar(d.mean, y, xerr=xerr, fmt="o", capsize=4, color=color)
        labels.append(_wrapped(name))
    ax.axvline(0.0, color="black", linewidth=1)
    ax.set_yticks(range(len(rows)), labels, fontsize="small")
    if keys:
        ax.set_ylabel(_wrapped(keys), fontsize="small")
    ax.set_xlabel(f"val AUROC - baseline ({_wrapped(names[0])}), 95 % CI paired by seed")
    ax.set_title("AUROC difference to the baseline (red: interval excludes 0)")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path)


def _wrapped(text: str, width: int = 40) -> str:
    """``text`` broken into lines of at most ``width`` characters, for a plot's labels."""
    return "\n".join(textwrap.wrap(text, width)) or text


def expand(paths: Sequence[str]) -> list[Path]:
    """Paths with globs expanded (a path that exists as written is taken as it is). Raises
    FileNotFoundError naming a path that matches nothing."""
    out: list[Path] = []
    for raw in paths:
        # a folder named with brackets (model.dense_arch_layer_sizes=[512,256,64]) is itself
        magic = glob.has_magic(raw) and not Path(raw).exists()
        matches = sorted(glob.glob(raw)) if magic else [raw]
        if not matches or not all(Path(m).exists() for m in matches):
            raise FileNotFoundError(f"no run or sweep folder at {raw}")
        out.extend(Path(m) for m in matches)
    return out


def report(
    paths: Sequence[str],
    out: Path | None = None,
    baseline: str | None = None,
    keep: Path | None = None,
) -> tuple[str, Path, list[RunRecord]]:
    """Build the tables and plots; returns (markdown, output folder, the runs). ``keep``: a
    file the report must not overwrite (the ``--compare-to`` baseline's ``summary_runs.csv``).

    Raises:
        FileNotFoundError: a path does not exist or no runs were found.
        ValueError: no configuration matches ``baseline``, two runs of one configuration
            share a seed, or the output folder holds ``keep``.
    """
    folders = expand(paths)
    runs, passed_over = _measured(named_by_difference(load_runs(folders)))
    if not runs:
        raise FileNotFoundError(
            f"no runs under {', '.join(paths)} (expected run folders with metrics.json or "
            f"sweep folders with multirun.yaml){passed_over}"
        )
    out = out or (folders[0] if len(folders) == 1 else Path("report"))
    if keep is not None and keep.parent.resolve() == out.resolve():
        raise ValueError(
            f"--compare-to {keep.parent} is the report's output folder: writing the new "
            "summary there would replace the baseline it is compared with (a second run would "
            "compare the new set with itself); give --out another folder"
        )
    stats = config_stats(runs, baseline)
    rows = write_summary(out, runs, stats, baseline)
    completed = [r for r in runs if r.status == COMPLETED]
    plot_throughput(runs, out / PLOTS[0])
    plot_val_auroc(completed, out / PLOTS[1])
    text = summary_head(runs, rows, stats, baseline)
    if any(_sent_embedding_bytes(run.metrics) for run in completed):
        plot_comm_bytes(runs, out / PLOTS[2])
    else:  # one process (or data_parallel tables only): bars of zero bytes say nothing
        (out / PLOTS[2]).unlink(missing_ok=True)
        text += (
            f"\n\n(no {PLOTS[2]}: no run sent embedding collective bytes: one process each, "
            "or data_parallel tables only; sweep with hardware.nproc_per_node=2 and sharded "
            "tables to measure them)"
        )
    text += f"\n\n({passed_over.lstrip('; ')})" if passed_over else ""
    text += _auroc_diff(stats, out / PLOTS[3], folders)
    return text, out, runs


def _auroc_diff(stats: Sequence[ConfigStats], path: Path, folders: Sequence[Path]) -> str:
    """Draw ``auroc_diff.png`` where a configuration beside the baseline has repeats (else
    remove one an earlier report drew); returns the report's text about it: the statistics
    table, or why there is no plot."""
    compared = [s for s in stats[1:] if "val_auroc" in s.vs_baseline]
    if has_repeats(stats) and compared:
        plot_auroc_diff(stats, path)
        return "\n\n" + stats_markdown(stats)
    path.unlink(missing_ok=True)
    if has_repeats(stats):  # the baseline's repeats alone: an empty plot was drawn (review)
        return (
            f"\n\n{stats_markdown(stats)}\n\n(no {PLOTS[3]}: no configuration but the "
            "baseline has a val AUROC)"
        )
    seeds = next((v for f in folders if (v := _swept(f).get("seed"))), [])
    if len(seeds) > 1:  # swept, but not all ran (it advised sweeping them: crash review)
        return (
            f"\n\n(no {PLOTS[3]}: no configuration has repeats yet: of the sweep's seeds "
            f"{','.join(seeds)}, not all ran)"
        )
    return f"\n\n(no {PLOTS[3]}: no configuration has repeats; sweep seed=0,1,2 for them)"


def _swept(folder: Path) -> dict[str, list[str]]:
    """A sweep folder's swept values (``multirun.yaml``); none where it has none or it does
    not read (the runs' own loading says so)."""
    try:
        return saved_sweep_values(folder)
    except (ValueError, OSError):
        return {}


def _measured(runs: list[RunRecord]) -> tuple[list[RunRecord], str]:
    """``runs`` less the finished ones of modes that record no measurements (``mode=predict``,
    ``export``, ``plan``, ...: their files are their result; a glob of ``outputs/*`` listed
    them as ``missing``, as if killed), and a note naming those passed over ("" if none). A
    failed or interrupted one, which records why, stays."""
    kept, other = [], []
    for run in runs:
        mode = (recorded_mode(run.path) or "train") if run.status == MISSING else "train"
        (kept if mode in RECORDING_MODES else other).append((run, mode))
    if not other:
        return [run for run, _ in kept], ""
    named = ", ".join(f"{run.path} (mode={mode})" for run, mode in other[:3])
    more = f" and {len(other) - 3} more" if len(other) > 3 else ""
    return [run for run, _ in kept], (
        f"; passed over {len(other)} run folder(s) of modes that record no measurements, "
        f"their files are their result: {named}{more}"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m dlrm_exp.report", description=__doc__.split("\n")[0]
    )
    parser.add_argument("paths", nargs="+", help="run folders, sweep folders or globs")
    parser.add_argument("--out", type=Path, default=None, help="where to write plots and tables")
    parser.add_argument(
        "--baseline", default=None, help="overrides naming the reference, e.g. qcomms=none"
    )
    parser.add_argument(
        "--compare-to",
        type=Path,
        default=None,
        help="a saved sweep or report folder (its summary_runs.csv): the regression gate",
    )
    parser.add_argument(
        "--tolerance",
        action="append",
        default=None,
        help="a gated metric worse by at most this never fails the gate: one number for "
        "every metric, or <metric>=<number> for one (in --gate), in its unit; repeat it for "
        "several (--gate val_auroc samples_per_sec --tolerance 0.0005 --tolerance "
        "samples_per_sec=500; default 0)",
    )
    parser.add_argument(
        "--gate", nargs="+", default=list(DEFAULT_GATE), choices=list(GATEABLE),
        help="metrics whose regression fails --compare-to",
    )  # fmt: skip
    return parser


def _print_gate(result: GateResult, saved: Path, tolerances: dict[str, float]) -> int:
    print(f"\ncompared with {saved}:")
    print("\n".join(result.lines))
    if result.passed:
        beyond = ", ".join(f"{k}={v:g}" if k else f"{v:g}" for k, v in tolerances.items())
        beyond += "" if "" in tolerances else ", others 0"  # (review: read as every metric's)
        more = f" ({result.unsure} worse on average, not significant)" if result.unsure else ""
        print(f"gate passed: {result.compared} gated comparisons, none worse beyond {beyond}{more}")
        return 0
    print(f"gate FAILED ({len(result.failures)}):")
    print("\n".join(f"  {line}" for line in result.failures))
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (see the module docstring); returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        tolerances = parse_tolerances(args.tolerance or ["0"], args.gate)
        saved = baseline_file(args.compare_to) if args.compare_to else None
        saved_runs = read_run_values(saved) if saved else []
        table, out, runs = report(args.paths, args.out, args.baseline, keep=saved)
    except (OSError, ValueError) as err:  # a path missing or unwritable (--out a file)
        print(f"Error: {err}", file=sys.stderr)
        return 2
    print(table)
    print(f"plots: {', '.join(str(out / p) for p in PLOTS if (out / p).exists())}")
    if saved is None:
        return 0
    result = compare_runs(run_values(runs), saved_runs, tolerances, args.gate)
    return _print_gate(result, saved, tolerances)


if __name__ == "__main__":
    sys.exit(main())
