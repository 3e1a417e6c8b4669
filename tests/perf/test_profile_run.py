"""End to end: the pipelines and dense precision that run on CPU (``train.profile`` is
checked with the 2-process fp32 run of ``tests/distributed/test_multiprocess.py``)."""

import pytest
import torch

from conftest import SMALL, compose_cfg
from dlrm_exp.factories import experiment
from dlrm_exp.modes.train import run_train

pytestmark = pytest.mark.slow


def test_the_base_pipeline_trains_in_bf16(tmp_path, monkeypatch):
    """``TrainPipelineBase`` (reset between phases) with the dense part in bf16: the over
    arch's first Linear computes in bf16 in every forward of the run (a forward hook on the
    model that ``build_module`` wraps with :func:`apply_dense_precision`), every split is
    evaluated in full, and the peak is measured in bf16."""
    monkeypatch.setenv("DLRM_EXP_CACHE_DIR", str(tmp_path / "cache"))
    seen: list[torch.dtype] = []
    apply = experiment.apply_dense_precision

    def apply_and_watch_the_over_arch(module, *args, **kwargs):
        apply(module, *args, **kwargs)
        over_arch = module.model.over_arch
        linear = next(m for m in over_arch.modules() if isinstance(m, torch.nn.Linear))
        linear.register_forward_hook(lambda _m, _inputs, out: seen.append(out.dtype))

    monkeypatch.setattr(experiment, "apply_dense_precision", apply_and_watch_the_over_arch)
    cfg = compose_cfg([*SMALL, "train.pipeline=base", "train.dense_precision=bf16"])
    metrics = run_train(cfg, tmp_path / "run", {})
    assert metrics.steps == 32 and metrics.train_samples == 4096
    assert metrics.val["samples"] == 1024 and metrics.test["samples"] == 1024
    assert metrics.val["auroc"] > 0.55
    assert metrics.utilization["peak_dtype"] == "bfloat16"
    assert len(seen) >= metrics.steps and set(seen) == {torch.bfloat16}
