"""Sweep summaries and the report show the best validation's weights beside the final ones
(``train.keep_best``): the final weights' test AUROC with its statistics per configuration,
and the epoch of the best validation per run."""

import csv

import pytest
import yaml

from conftest import write_job
from dlrm_exp.record import report


def _job(folder, number: int, overrides: list[str], test: float, final_test: float, epoch):
    kept = test != final_test
    metrics = {
        "status": "completed",
        "val": {"auroc": test + 0.001},
        "test": {"auroc": test},
        "best_epoch": epoch,
        "weights": "best" if kept else "final",
        "final_weights": {"val": {"auroc": final_test}, "test": {"auroc": final_test}}
        if kept
        else {},
    }
    write_job(folder, number, overrides, metrics)


def test_the_report_gives_best_and_final_weights_per_configuration(tmp_path):
    """``-m train.epochs=1,4 seed=0,1``: one epoch keeps its final weights; four epochs stop
    early and keep epoch 1's, whose test AUROC beats the final weights' by about 0.03."""
    folder = tmp_path / "sweep"
    folder.mkdir()
    typed = ["train.epochs=1,4", "seed=0,1"]
    (folder / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {"overrides": {"task": typed}}}))
    _job(folder, 0, ["train.epochs=1", "seed=0"], 0.700, 0.700, 1.0)
    _job(folder, 1, ["train.epochs=1", "seed=1"], 0.710, 0.710, 1.0)
    _job(folder, 2, ["train.epochs=4", "seed=0"], 0.705, 0.675, 1.0)
    _job(folder, 3, ["train.epochs=4", "seed=1"], 0.712, 0.680, 2.0)
    assert report.main([str(folder)]) == 0
    with open(folder / "summary.csv") as f:
        runs = {r["run"]: r for r in csv.DictReader(f)}
    assert runs["train.epochs=4,seed=1"]["final_test_auroc"] == "0.68"
    assert runs["train.epochs=4,seed=1"]["best_epoch"] == "2.0"
    assert runs["train.epochs=1,seed=0"]["final_test_auroc"] == "0.7"  # its final weights
    with open(folder / "summary_stats.csv") as f:
        stats = {(r["config"], r["metric"]): r for r in csv.DictReader(f)}
    four = "train.epochs=4"
    assert float(stats[(four, "test_auroc")]["mean"]) == pytest.approx(0.7085)
    assert float(stats[(four, "final_test_auroc")]["mean"]) == pytest.approx(0.6775)
    assert float(stats[(four, "final_test_auroc")]["diff_vs_baseline"]) == pytest.approx(-0.0275)
    summary = (folder / "summary.md").read_text()
    assert "test AUROC final weights" in summary and "best epoch" in summary
