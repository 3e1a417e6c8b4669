"""Multirun (``-m``): the sweep summary (``summary.csv``, ``summary.md``) of the runs'
records (:mod:`dlrm_exp.record.runs`), written by a Hydra callback when the sweep ends.

Columns, labels and number formats come from :mod:`dlrm_exp.record.metric_table`.
"""

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from dlrm_exp.record.compare import (
    STATS_FILE,
    ConfigStats,
    config_stats,
    has_repeats,
    stats_markdown,
    write_stats,
)
from dlrm_exp.record.jobs_not_run import clear_notes, jobs_not_run
from dlrm_exp.record.metric_table import METRICS, fmt, markdown_lines, shown
from dlrm_exp.record.run_record import COMPLETED, FAILED, INTERRUPTED, UNFINISHED
from dlrm_exp.record.run_values import write_run_values
from dlrm_exp.record.runs import RunRecord, load_runs, mode_name, saved_sweep_values
from dlrm_exp.record.sweep_heading import heading_lines
from dlrm_exp.util.files import write_csv_atomic, write_text_atomic
from dlrm_exp.util.text import first_few

#: The metric columns of ``summary.csv``, in order (keys of the metric table).
CSV_METRICS = (
    "val_auroc", "test_auroc", "final_test_auroc", "best_epoch", "val_ne", "test_ne",
    "samples_per_sec", "fwd_bytes_per_step", "bwd_bytes_per_step", "allreduce_bytes_per_step",
    "step_ms_p50", "matmul_peak_pct", "peak_rss_gib", "peak_gpu_gib", "table_bytes_per_rank",
    "table_rows", "managed_rows_held", "wall_seconds",
)  # fmt: skip
#: The metric columns of ``summary.md`` (optional ones only where a run has them:
#: :func:`~dlrm_exp.record.metric_table.shown`).
TABLE_METRICS = tuple(k for k in CSV_METRICS if k != "test_ne")


def summary_row(run: RunRecord) -> dict[str, Any]:
    """One summary row: run name, status, quality, speed, bytes/step, memory, wall time; the
    precision each collective ran in (``qcomms_ran``), the tables' weight dtypes
    (``tables_ran``) and sharding types (``sharding_ran``), the dense part's precision
    (``dense_ran``), and what ran instead of what the run
    asked (``substituted``, empty when nothing was substituted)."""
    m = run.metrics
    completed = m.status == COMPLETED
    return {
        "run": run.name,
        "status": run.status,
        **{key: METRICS[key].read(m) for key in CSV_METRICS},
        "qcomms_ran": m.qcomms_ran if completed else "",
        "tables_ran": m.tables_ran if completed else "",
        "sharding_ran": m.sharding_ran if completed else "",
        "dense_ran": (m.dense_precision or "fp32") if completed else "",  # (review: only in JSON)
        "substituted": m.substituted,
        "weights_from": m.weights_from if completed else "",
        "error": m.error or "",
        # absolute: the report, run from another folder, rewrote them relative to its own
        # (a baseline's paths then depended on where it ran: review)
        "path": str(run.path.absolute()),
        "profile": ";".join(str(run.path.absolute() / name) for name in m.profile),
    }


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """The summary as a GitHub markdown table, with the failed jobs' errors and the profiled
    runs' trace files (``train.profile``) listed below. A run in which something ran other
    than asked is labelled by what ran: ``qcomms=fp8 (ran qcomms: reduce_scatter FP16/BF16)``;
    where the completed runs' plans used different sharding types (``sharding=auto`` planning
    fp16 tables otherwise than fp32 ones), each run whose name does not say its sharding type
    (or says ``auto``) says what was planned (``planned: row_wise``: it showed only in
    summary.csv; what-ran review)."""
    keys = shown(TABLE_METRICS, lambda k: any(row[k] is not None for row in rows))
    planned = {row["sharding_ran"] for row in rows if row.get("sharding_ran")}
    headers = ["run", "status"] + [METRICS[k].label for k in keys]
    cells_of = []
    for row in rows:
        label = row["run"] + (f" (ran {row['substituted']})" if row.get("substituted") else "")
        if row.get("weights_from"):  # its settings did not train them
            label += f" (weights from {row['weights_from']})"
        chose = "sharding=" not in row["run"] or "sharding=auto" in row["run"]  # the planner
        if len(planned) > 1 and row.get("sharding_ran") and chose:
            label += f" (planned: {row['sharding_ran']})"
        cells = [label, row["status"]]
        cells += [fmt(row[k], METRICS[k].spec) for k in keys]
        cells_of.append(cells)
    lines = markdown_lines(headers, cells_of)
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
            # (a run shorter than the profile schedule lists its memory timeline alone)
            ["", "Profiles (the *.pt.trace.json traces open in https://ui.perfetto.dev):"]
            + profiles
            if profiles
            else []
        )
    )


def summary_head(
    runs: Sequence[RunRecord],
    rows: Sequence[dict[str, Any]],
    stats: Sequence[ConfigStats] = (),
    baseline: str | None = None,
) -> str:
    """``summary.md``'s heading (:func:`~dlrm_exp.record.sweep_heading.heading_lines`) and its
    table of the runs' ``rows`` (:func:`summary_row`), as the sweep and the report print
    them."""
    return "\n".join([*heading_lines(runs, stats, baseline), "", markdown_table(rows)])


def write_summary(
    out_dir: Path,
    runs: Sequence[RunRecord],
    stats: Sequence[ConfigStats] = (),
    baseline: str | None = None,
) -> list[dict[str, Any]]:
    """Write ``summary.csv``, ``summary.md`` and ``summary_runs.csv`` (every run's values, what
    a later ``--compare-to`` pairs by seed; :mod:`dlrm_exp.record.run_values`) into
    ``out_dir``, with ``stats`` (the per-configuration statistics of
    :mod:`dlrm_exp.record.compare`) also ``summary_stats.csv`` and their table; return the
    per-run rows. The tables are built before any file is written, so one that cannot be
    built leaves the folder's earlier summary whole, not half replaced (review).
    ``summary.md`` opens with :func:`~dlrm_exp.record.sweep_heading.heading_lines`
    (``baseline``: the ``--baseline`` the statistics were computed with)."""
    rows = [summary_row(run) for run in runs]
    text = summary_head(runs, rows, stats, baseline) + "\n"
    if has_repeats(stats):
        text += "\n" + stats_markdown(stats) + "\n"
    out_dir.mkdir(parents=True, exist_ok=True)
    write_csv_atomic(out_dir / "summary.csv", list(rows[0]) if rows else [], rows)
    write_run_values(out_dir, runs)
    if stats:
        write_stats(out_dir, stats)
    else:  # an earlier summary's statistics, of other runs (sweeps review)
        (out_dir / STATS_FILE).unlink(missing_ok=True)
    write_text_atomic(out_dir / "summary.md", text)
    return rows


#: The modes whose jobs write a ``metrics.json`` of measurements, which the summary tabulates.
#: The others (``plan``, ``verify``, ``predict``, ``export``, ``preprocess``) write their own
#: files; only a failed or interrupted job leaves a ``metrics.json`` (``status: failed`` /
#: ``interrupted``).
RECORDING_MODES = ("train", "evaluate")


def _list_outputs(runs: Sequence[RunRecord], mode: str) -> bool:
    """A sweep of a mode that records no measurements: each job's folder, or its error;
    returns whether a job failed or was interrupted."""
    unfinished = [run for run in runs if run.status in UNFINISHED]
    print(f"mode={mode}: {len(runs)} jobs, each one's files in its folder:")
    for run in runs:
        error = run.metrics.error
        note = {FAILED: f" (failed: {error})", INTERRUPTED: f" ({error})"}.get(run.status, "")
        print(f"- {run.name}: {run.path}{note}")
    return _print_unfinished([f"{r.name} ({r.status})" for r in unfinished], len(runs))


def _print_unfinished(names: Sequence[str], jobs: int) -> bool:
    """Print which of the sweep's ``jobs`` did not complete (``names``); returns whether any."""
    if names:
        print(f"{len(names)} of {jobs} jobs did not complete: {', '.join(names)}")
    return bool(names)


def summarize_sweep(config: DictConfig) -> bool:
    """Summarise every job of the sweep folder of ``config`` and print the table (a mode that
    records no measurements: its jobs' folders); returns whether a job did not complete.

    Raises:
        ValueError: a job's ``metrics.json`` or the sweep's ``multirun.yaml`` is not one
            (:func:`~dlrm_exp.record.runs.load_runs`).
        OSError: the summary files cannot be written.
    """
    sweep_dir = Path(config.hydra.sweep.dir)
    not_run = jobs_not_run(sweep_dir)
    others = {Path(note["folder"]) for note in not_run}  # records of other jobs there
    runs = [run for run in load_runs([sweep_dir]) if run.path.absolute() not in others]
    runs = _this_sweeps(runs, sweep_dir)
    for note in not_run:
        print(f"Job {note['job']} did not run: {note['why']}")
    mode = mode_name(config)
    if mode not in RECORDING_MODES:
        return _list_outputs(runs, mode) or bool(not_run)
    try:
        stats = config_stats(runs)
    except ValueError as err:  # two runs of one configuration with one seed
        print(f"Error: {err}")
        stats = None
    rows = write_summary(sweep_dir, runs, stats or [])
    print(summary_head(runs, rows, stats or []))
    if stats and has_repeats(stats):
        print()
        print(stats_markdown(stats))
    written = ["summary.csv", "summary_runs.csv", *(["summary_stats.csv"] if stats else [])]
    print(f"sweep summary: {sweep_dir / 'summary.md'} and {', '.join(written)} beside it")
    print(f"compare runs: tensorboard --logdir {sweep_dir}")
    unfinished = [row["run"] for row in rows if row["status"] != COMPLETED]
    unfinished += [f"{note['job']} (did not run)" for note in not_run]
    return _print_unfinished(unfinished, len(rows) + len(not_run)) or stats is None


#: The config of the multirun under way in this process (Hydra's basic launcher runs the jobs
#: here), for :func:`summarize_interrupted_sweep`; None when none is.
_running: DictConfig | None = None


def summarize_interrupted_sweep() -> DictConfig | None:
    """After Ctrl-C (or a signal turned into :class:`~dlrm_exp.errors.Terminated`) ended a
    multirun, whose ``on_multirun_end`` then never comes: the summary of the jobs that
    finished (the interrupted job as ``interrupted``), and how many did not start; returns
    the sweep's config (its folder and launcher). Does nothing (None) when no multirun was
    under way; a summary that cannot be written is reported in one line, and the
    interruption stays what ends the process."""
    global _running
    config, _running = _running, None
    if config is None:
        return None
    print("The sweep was interrupted; the jobs that finished:")
    try:
        summarize_sweep(config)
        _print_not_started(Path(config.hydra.sweep.dir), mode_name(config))
    except Exception as err:  # noqa: BLE001 - the interruption, not this, must end the process
        print(f"(no sweep summary: {type(err).__name__}: {err})")
    return config


def planned_jobs(sweep_dir: Path, saved: dict[str, Any] | None = None) -> int | None:
    """How many jobs the sweep's ``multirun.yaml`` asks for: the product of its swept values
    (1: none swept), as Hydra's basic sweeper runs them; None where it does not say (no file,
    another sweeper: Optuna's trials are no product, diff review). ``saved``: its ``hydra``
    node as :func:`_saved_hydra` read it, if it was."""
    if not (sweep_dir / "multirun.yaml").is_file():
        return None
    target = _setting(_saved_hydra(sweep_dir) if saved is None else saved, "sweeper", "_target_")
    if target is not None and not str(target).endswith("BasicSweeper"):
        return None
    values = saved_sweep_values(sweep_dir)
    if not all(values.values()):  # (an interval)
        return None
    return math.prod(len(v) for v in values.values())


def _saved_hydra(sweep_dir: Path) -> dict[str, Any]:
    """The ``hydra`` node of the sweep's ``multirun.yaml`` as written (interpolations not
    resolved); empty where the file does not read as a config (the summary runs in Hydra's
    callback: no error of its own there)."""
    try:
        saved = OmegaConf.to_container(OmegaConf.load(sweep_dir / "multirun.yaml"), resolve=False)
    except (OSError, OmegaConfBaseException, ValueError):
        return {}
    hydra_node = saved.get("hydra") if isinstance(saved, dict) else None
    return hydra_node if isinstance(hydra_node, dict) else {}


def _setting(saved: dict[str, Any], node: str, key: str) -> Any:
    """``<node>.<key>`` of a saved ``hydra`` node; None where it is not there."""
    section = saved.get(node)
    return section.get(key) if isinstance(section, dict) else None


def _this_sweeps(runs: list[RunRecord], sweep_dir: Path) -> list[RunRecord]:
    """``runs`` but those in job folders numbered past this sweep's jobs
    (:func:`planned_jobs`): a rerun with a shorter list into the folder summarised an earlier
    sweep's later jobs as its own (diff review); said when any is left out."""
    saved = _saved_hydra(sweep_dir)
    planned = planned_jobs(sweep_dir, saved)
    # job folders named by job number (Hydra's default subdir; another, e.g. ${seed}, may be
    # a number too)
    if planned is None or _setting(saved, "sweep", "subdir") not in (None, "${hydra.job.num}"):
        return runs
    earlier = [r for r in runs if r.path.name.isdigit() and int(r.path.name) >= planned]
    if earlier:
        print(
            f"left out {len(earlier)} job folder(s) of an earlier sweep into this folder, "
            f"numbered past this sweep's {planned} jobs: "
            f"{first_few([f'{r.path.name} ({r.name})' for r in earlier], 3)}"
        )
    return [r for r in runs if r not in earlier]


def _print_not_started(sweep_dir: Path, mode: str) -> None:
    """How many of the sweep's jobs (the product of its swept values, as Hydra's basic
    sweeper runs them; ``multirun.yaml``) never started: the summary counted only the jobs
    that had a folder ("1 of 2 jobs did not complete" of a sweep of 3; crash review)."""
    planned = planned_jobs(sweep_dir)
    if planned is None:
        return
    started = sum(1 for job in sweep_dir.iterdir() if (job / ".hydra").is_dir())
    if planned > started:
        how = (  # (train.resume means nothing to the other modes: diff review)
            "runs them, and an interrupted job that saved no step checkpoint again from its "
            "start (one that did continues: with train.resume=auto, or the train.resume=PATH "
            "it began from); completed jobs are kept"
            if mode == "train"
            else "runs them"
        )
        print(
            f"{planned - started} of its {planned} jobs did not start: the same -m command "
            f"with the same hydra.sweep.dir {how}"
        )


class SweepSummary(Callback):
    """Hydra callback: at the end of a multirun, summarise every job of the sweep folder and
    print the table; if a job did not complete, end the process with exit status 1 (after
    Hydra finished the sweep, so every job ran). A sweep of a mode that records no
    measurements (``mode=plan`` and the like) lists its jobs' folders instead. A multirun that
    Ctrl-C ends gets its summary from :func:`summarize_interrupted_sweep`."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Remember the multirun for :func:`summarize_interrupted_sweep`; forget the jobs an
        earlier multirun into its folder did not run."""
        global _running
        _running = config
        clear_notes(Path(config.hydra.sweep.dir))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        global _running
        _running = None
        if summarize_sweep(config):
            raise SystemExit(1)
