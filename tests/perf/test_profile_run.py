"""End to end: the pipelines and dense precision that run on CPU (``train.profile`` is
checked with the 2-process fp32 run of ``tests/distributed/test_multiprocess.py``)."""

import pytest

from conftest import SMALL, compose_cfg
from dlrm_exp.modes.train import run_train

pytestmark = pytest.mark.slow


def test_the_base_pipeline_trains_in_bf16(tmp_path, monkeypatch):
    """``TrainPipelineBase`` (reset between phases) with the dense part in bf16: every split
    is evaluated in full, and the peak is measured in bf16."""
    monkeypatch.setenv("DLRM_EXP_CACHE_DIR", str(tmp_path / "cache"))
    cfg = compose_cfg([*SMALL, "train.pipeline=base", "train.dense_precision=bf16"])
    metrics = run_train(cfg, tmp_path / "run", {})
    assert metrics.steps == 32 and metrics.train_samples == 4096
    assert metrics.val["samples"] == 1024 and metrics.test["samples"] == 1024
    assert metrics.val["auroc"] > 0.55
    assert metrics.utilization["peak_dtype"] == "bfloat16"
