"""Seeds as repeats: the shared sweep (2 completed configurations x 3 seeds) gets mean +- CI
columns, the paired difference plot, and a --compare-to gate that fails on a planted regression
only."""

import csv
import json
import shutil

import pytest

from conftest import SWEEP_CONFIGS as CONFIGS
from conftest import SWEEP_RAN, SWEEP_REFUSED, SWEEP_RUNS
from dlrm_exp.record import report

pytestmark = pytest.mark.slow


def test_the_sweep_summary_has_statistics_per_configuration(record_sweep):
    folder, result = record_sweep
    text = (folder / "summary.md").read_text()
    assert f"{CONFIGS[0]}{SWEEP_RAN} (baseline) | 3 | 0." in text
    # what the sweep varied, held and compared against, read in the file alone (it opened
    # with the table: precision-sweep review)
    heading = text.split("\n\n| run |")[0].splitlines()
    assert heading[:4] == [
        "# Summary of runs",
        "",
        f"- 12 run(s) of 4 configuration(s), seed(s) 0, 1, 2, in `{folder.resolve()}`.",
        "- Varied: `sharding` = `tablewise`, `rowwise`; `optimizer.learning_rate` = `0.1`, `0.02`.",
    ]
    assert heading[4].startswith("- The same in every run: `qcomms=int8 data.num_train_sampl")
    assert heading[5:] == [
        f"- Paired differences are taken against `{CONFIGS[0]}{SWEEP_RAN}` (the first "
        "configuration with a completed run; `python -m dlrm_exp.report <folder> --baseline "
        "KEY=VALUE` picks another)."
    ]
    rows = list(csv.DictReader(open(folder / "summary_stats.csv")))
    other = {r["metric"]: r for r in rows if r["config"] == CONFIGS[1] + SWEEP_RAN}
    assert other["val_auroc"]["n"] == "3" and other["val_auroc"]["p_value"] != ""
    assert float(other["val_auroc"]["diff_vs_baseline"]) != 0  # the rates train differently
    assert float(other["val_auroc"]["ci_low"]) < float(other["val_auroc"]["mean"])
    assert other["test_auroc"]["diff_ci_low"] != "" and other["table_bytes_per_rank"]["mean"]
    # keyed as summary_runs.csv keys its runs: the config carries a note of what ran (review)
    with open(folder / "summary_runs.csv") as f:
        run_ids = {r["config_id"] for r in csv.DictReader(f)}
    assert other["val_auroc"]["config_id"] in run_ids
    # each job records the seed it ran (what the report pairs repeats by)
    seeds = [json.loads((folder / str(n) / "metrics.json").read_text())["seed"] for n in range(6)]
    assert seeds == [0, 1, 2, 0, 1, 2]


def _completed_jobs(folder, tmp_path):
    """A copy of the shared sweep holding only its completed (table-wise) jobs, reported."""
    copy = tmp_path / "completed"
    copy.mkdir()
    shutil.copy(folder / "multirun.yaml", copy / "multirun.yaml")
    for job in range(len(SWEEP_RUNS) - len(SWEEP_REFUSED)):
        shutil.copytree(folder / str(job), copy / str(job))
    assert report.main([str(copy)]) == 0
    return copy


def test_report_draws_the_difference_plot_and_the_gate_passes_a_rerun(
    record_sweep, tmp_path, capsys
):
    folder, _ = record_sweep
    completed = _completed_jobs(folder, tmp_path)
    out = tmp_path / "report"
    assert report.main([str(completed), "--out", str(out), "--compare-to", str(completed)]) == 0
    png = (out / "auroc_diff.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000  # a drawn figure
    assert (out / "summary_stats.csv").exists()
    capsys.readouterr()
    flipped = report.main(
        [str(folder), "--out", str(out), "--baseline", "optimizer.learning_rate=0.02"]
    )
    assert flipped == 0
    baseline = "| sharding=tablewise,optimizer.learning_rate=0.02 (ran qcomms: no embedding "
    printed = capsys.readouterr().out
    assert baseline + "collective) (baseline) |" in printed  # the one asked
    chosen = "(chosen with `--baseline optimizer.learning_rate=0.02`).\n"
    assert chosen in (out / "summary.md").read_text()
    assert chosen in printed  # the report prints the heading too (it did not: diff review)
    assert report.main([str(folder), "--baseline", "qcomms=fp8"]) == 2
    no_match = capsys.readouterr().err  # names what there is to choose from
    assert "no configuration has these overrides (the runs' configurations: sharding=" in no_match
    # as parsed: 0.020 is 0.02 (the typed text did not match); not Hydra syntax: exit 2, no
    # traceback (Hydra's parse error is no ValueError)
    parsed = "optimizer.learning_rate=0.020"
    assert report.main([str(folder), "--out", str(out), "--baseline", parsed]) == 0
    assert baseline + "collective) (baseline) |" in capsys.readouterr().out
    assert report.main([str(folder), "--baseline", "qcomms"]) == 2
    assert "--baseline qcomms: not key=value overrides" in capsys.readouterr().err


def test_the_gate_fails_on_the_refused_configurations(record_sweep, tmp_path, capsys):
    """The whole sweep against itself: its row-wise configurations never completed."""
    folder, _ = record_sweep
    saved = tmp_path / "saved"
    shutil.copytree(folder, saved)
    assert report.main([str(folder), "--out", str(tmp_path / "r"), "--compare-to", str(saved)]) == 1
    failures = capsys.readouterr().out.split("gate FAILED")[1]
    assert "sharding=rowwise,optimizer.learning_rate=0.1: 3 of 3 runs did not complete" in failures


def test_compare_to_fails_on_a_planted_regression(record_sweep, tmp_path, capsys):
    folder, _ = record_sweep
    completed = _completed_jobs(folder, tmp_path)
    path = completed / "summary_runs.csv"
    rows = list(csv.DictReader(open(path)))
    for row in rows:  # the saved runs were 0.2 better on every seed: today's is a regression
        if row["metric"] == "val_auroc" and row["config"] == CONFIGS[1]:
            row["value"] = str(float(row["value"]) + 0.2)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    args = [str(completed), "--out", str(tmp_path / "r"), "--compare-to", str(path)]
    assert report.main(args) == 1
    assert f"{CONFIGS[1]} val AUROC" in capsys.readouterr().out.split("gate FAILED")[1]
    assert report.main([*args, "--tolerance", "0.3"]) == 0


def test_a_metric_with_a_non_finite_seed_says_how_many_it_averaged():
    from dlrm_exp.record.compare import ConfigStats, stats_markdown
    from dlrm_exp.record.stats import estimate

    stats = [
        ConfigStats("qcomms=none", [0, 1, 2], estimates={"val_auroc": estimate([0.8, 0.81, 0.79])}),
        ConfigStats("qcomms=fp16", [0, 1, 2], estimates={"val_auroc": estimate([0.8, 0.81])}),
    ]
    rows = stats_markdown(stats).splitlines()
    assert "(n=2: missing or non-finite left out)" in rows[3] and "left out" not in rows[2]
    stats[0].estimates["val_logloss"] = estimate([0.45, 0.46, 0.44])  # gated by default: shown
    assert "| val log loss |" in stats_markdown(stats).splitlines()[0]


def test_paired_differences_of_speed_memory_and_ne_get_their_own_table():
    """The seed also changes the data, so NE's unpaired interval (0.9530 +- 0.1925) hid a
    paired difference of -0.00159 [-0.00259, -0.00060] shown only in summary_stats.csv
    (precision-sweep review)."""
    from dlrm_exp.record.compare import ConfigStats, stats_markdown
    from dlrm_exp.record.stats import paired_difference

    base = ConfigStats("train.dense_precision=fp32", [0, 1, 2])
    ne = paired_difference([0.951, 0.961, 0.941], [0.9526, 0.9626, 0.9426])
    speed = paired_difference([26000.0, 27000.0, 25500.0], [25000.0, 26000.0, 25000.0])
    paired = {"val_ne": ne, "samples_per_sec": speed}
    bf16 = ConfigStats("train.dense_precision=bf16", [0, 1, 2], vs_baseline=paired)
    rows = stats_markdown([base, bf16]).splitlines()
    header = next(r for r in rows if r.startswith("| configuration | val NE - baseline"))
    assert "samples/s (all ranks) - baseline [95% CI]" in header
    (row,) = [r for r in rows if r.startswith("| train.dense_precision=bf16 | -0.00160 [")]
    assert "+833 [" in row  # samples/s signed, in their own format
    assert "| val NE - baseline" not in stats_markdown([base]).replace("\n", "")  # no others


def test_a_difference_says_how_many_seeds_it_paired():
    """A NaN seed of the baseline left a difference over 2 pairs labelled like one over 3."""
    from dlrm_exp.record.compare import ConfigStats, stats_markdown
    from dlrm_exp.record.stats import estimate, paired_difference

    stats = [
        ConfigStats("qcomms=none", [0, 1, 2], estimates={"val_auroc": estimate([0.8, 0.81])}),
        ConfigStats(
            "qcomms=fp16",
            [0, 1, 2],
            estimates={"val_auroc": estimate([0.801, 0.811, 0.79])},
            vs_baseline={"val_auroc": paired_difference([0.801, 0.811], [0.8, 0.81])},
        ),
    ]
    rows = stats_markdown(stats).splitlines()
    assert "; 2 of 3 seeds paired)" in rows[3]
