"""End to end: ``train.profile`` traces per rank, utilization in metrics.json, and the
pipelines and dense precision that run on CPU."""

import csv
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, SMALL

pytestmark = pytest.mark.slow


def _run(args: list[str], tmp_path) -> subprocess.CompletedProcess:
    env = {**os.environ, "DLRM_EXP_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run(
        [sys.executable, "-m", "dlrm_exp", *SMALL, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_profile_writes_a_trace_per_rank_with_torchrec_events(tmp_path):
    run_dir = tmp_path / "run"
    result = _run(
        [
            "train.profile=true",
            "train.max_steps=30",
            "hardware.nproc_per_node=2",
            "sharding=rowwise",
            f"hydra.run.dir={run_dir}",
        ],
        tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for rank in (0, 1):
        trace = json.loads((run_dir / "profile" / f"rank{rank}.pt.trace.json").read_text())
        names = {event.get("name", "") for event in trace["traceEvents"]}
        assert any(n.startswith("## start_sparse_data_dist") for n in names)  # input dist
        assert any(n.startswith("## all2all_data:kjt") for n in names)
        assert any("split_embedding_codegen_lookup" in n for n in names)  # FBGEMM lookup
        assert any(n.startswith("## backward") for n in names)
        with open(run_dir / "profile" / f"rss_rank{rank}.csv") as f:
            rows = list(csv.DictReader(f))
        assert [int(r["step"]) for r in rows] == list(range(1, 13))  # wait 5 + warm-up 2 + 5
        assert all(int(r["rss_bytes"]) > 0 for r in rows)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert "profile/rank1.pt.trace.json" in metrics["profile"]
    util = metrics["utilization"]
    assert util["dense_flops_per_sample"] > 0 and util["peak_matmul_flops_per_sec"] > 0
    assert util["fraction_of_matmul_peak"] == pytest.approx(
        util["dense_flops_per_sec"] / util["peak_matmul_flops_per_sec"]
    )
    assert util["dense_flops_per_sec"] == pytest.approx(
        util["dense_flops_per_sample"] * metrics["samples_per_sec"] / 2
    )
    assert "of the measured float32 matmul peak" in result.stdout
    assert (tmp_path / "cache" / "peak.json").is_file()


def test_the_base_pipeline_trains_in_bf16(tmp_path):
    """``TrainPipelineBase`` (reset between phases) with the dense part in bf16: every split
    is evaluated in full, and the peak is measured in bf16."""
    run_dir = tmp_path / "run"
    result = _run(
        ["train.pipeline=base", "train.dense_precision=bf16", f"hydra.run.dir={run_dir}"],
        tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["steps"] == 32 and metrics["train_samples"] == 4096
    assert metrics["val"]["samples"] == 1024 and metrics["test"]["samples"] == 1024
    assert metrics["val"]["auroc"] > 0.55
    assert metrics["utilization"]["peak_dtype"] == "bfloat16"
