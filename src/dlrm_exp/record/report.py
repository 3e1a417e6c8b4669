"""``python -m dlrm_exp.report PATH [PATH ...]``: compare runs in a table and PNG plots.

PATH is a run folder, a sweep folder (``outputs/multirun/<date>/<time>``, every job in it) or a
glob of either. Prints the markdown comparison table, writes ``summary.md`` / ``summary.csv``
and, with matplotlib, three plots into ``--out`` (default: the one PATH given, else
``./report``):

* ``throughput.png``: training samples/s, grouped by sharding, one bar per qcomms precision;
* ``val_auroc.png``: validation AUROC against training step, one line per run;
* ``comm_bytes.png``: embedding collective bytes per training step (all ranks), forward and
  backward, grouped by precision, one bar per sharding.

Exit status: 0, or 2 when a PATH does not exist or holds no runs.
"""

import argparse
import glob
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from dlrm_exp.record.run_record import COMPLETED, RunMetrics  # noqa: E402
from dlrm_exp.record.sweep import RunRecord, load_runs, markdown_table, write_summary  # noqa: E402

PLOTS = ("throughput.png", "val_auroc.png", "comm_bytes.png")


def _choice(run: RunRecord, group: str) -> str:
    return str(run.metrics.choices.get(group, "?"))


def _grouped_bars(
    ax: plt.Axes,
    runs: Sequence[RunRecord],
    group_by: str,
    bar_by: str,
    value: Callable[[RunMetrics], float | None],
    scale: float = 1.0,
) -> None:
    groups = list(dict.fromkeys(_choice(r, group_by) for r in runs))
    bars = list(dict.fromkeys(_choice(r, bar_by) for r in runs))
    width = 0.8 / max(len(bars), 1)
    for j, bar in enumerate(bars):
        heights = []
        for group in groups:
            match = [r for r in runs if _choice(r, group_by) == group and _choice(r, bar_by) == bar]
            numbers = [value(r.metrics) for r in match]
            numbers = [n for n in numbers if n is not None]
            heights.append(sum(numbers) / len(numbers) / scale if numbers else 0.0)
        positions = [i + (j - (len(bars) - 1) / 2) * width for i in range(len(groups))]
        ax.bar(positions, heights, width, label=f"{bar_by}={bar}")
    ax.set_xticks(range(len(groups)), [f"{group_by}={g}" for g in groups], rotation=20)
    ax.legend(fontsize="small")
    ax.grid(axis="y", alpha=0.3)


def plot_throughput(runs: Sequence[RunRecord], path: Path) -> None:
    """Grouped bars of training samples/s (all ranks): x = sharding, one bar per qcomms
    (runs with the same pair averaged), written as PNG to ``path``."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    _grouped_bars(ax, runs, "sharding", "qcomms", lambda m: m.samples_per_sec)
    ax.set_ylabel("training throughput (samples/s, all ranks)")
    ax.set_title("Throughput by sharding and communication precision")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_val_auroc(runs: Sequence[RunRecord], path: Path) -> None:
    """Validation AUROC against training step, one line per run (``val_history``), PNG."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for run in runs:
        history = run.metrics.val_history
        points = [(h["step"], h["auroc"]) for h in history if h.get("auroc") is not None]
        if points:
            steps, aurocs = zip(*points, strict=True)
            ax.plot(steps, aurocs, marker="o", label=run.name)
    ax.set_xlabel("training step")
    ax.set_ylabel("validation AUROC")
    ax.set_title("Validation AUROC during training")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_comm_bytes(runs: Sequence[RunRecord], path: Path) -> None:
    """Measured embedding collective MiB per training step (all ranks), forward and backward
    panels: x = qcomms, one bar per sharding; PNG."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    for ax, phase in zip(axes, ("forward", "backward"), strict=True):
        _grouped_bars(
            ax, runs, "qcomms", "sharding", lambda m, p=phase: m.comm_bytes_per_step.get(p), 2**20
        )
        ax.set_title(f"{phase} embedding collectives")
    axes[0].set_ylabel("MiB sent per training step (all ranks)")
    fig.suptitle("Communication volume by precision")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def expand(paths: Sequence[str]) -> list[Path]:
    """Paths with globs expanded. Raises FileNotFoundError naming a path that matches
    nothing."""
    out: list[Path] = []
    for raw in paths:
        matches = sorted(glob.glob(raw)) if glob.has_magic(raw) else [raw]
        if not matches or not all(Path(m).exists() for m in matches):
            raise FileNotFoundError(f"no run or sweep folder at {raw}")
        out.extend(Path(m) for m in matches)
    return out


def report(paths: Sequence[str], out: Path | None = None) -> tuple[str, Path]:
    """Build the table and plots; returns (markdown table, output folder).

    Raises:
        FileNotFoundError: a path does not exist or no runs were found.
    """
    folders = expand(paths)
    runs = load_runs(folders)
    if not runs:
        raise FileNotFoundError(
            f"no runs under {', '.join(paths)} (expected run folders with metrics.json or "
            "sweep folders with multirun.yaml)"
        )
    out = out or (folders[0] if len(folders) == 1 else Path("report"))
    rows = write_summary(out, runs)
    completed = [r for r in runs if r.status == COMPLETED]
    plot_throughput(completed, out / PLOTS[0])
    plot_val_auroc(completed, out / PLOTS[1])
    plot_comm_bytes(completed, out / PLOTS[2])
    return markdown_table(rows), out


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``PATH [PATH ...] [--out DIR]``; returns the exit status (0, or 2)."""
    parser = argparse.ArgumentParser(
        prog="python -m dlrm_exp.report", description=__doc__.split("\n")[0]
    )
    parser.add_argument("paths", nargs="+", help="run folders, sweep folders or globs")
    parser.add_argument("--out", type=Path, default=None, help="where to write plots and tables")
    args = parser.parse_args(argv)
    try:
        table, out = report(args.paths, args.out)
    except FileNotFoundError as err:
        print(f"Error: {err}", file=sys.stderr)
        return 2
    print(table)
    print(f"plots: {', '.join(str(out / p) for p in PLOTS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
