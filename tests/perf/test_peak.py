"""The measured peaks: probed once per machine and setting, then read from the cache."""

import json

import torch

from dlrm_exp.perf import peak as peak_module
from dlrm_exp.perf.peak import Peak, measured_peak, probe
from dlrm_exp.perf.utilization import utilization


def test_the_probe_measures_positive_rates_quickly(monkeypatch):
    monkeypatch.setattr(peak_module, "PROBE_SECONDS", 0.05)
    result = probe(torch.device("cpu"))
    assert result.matmul_flops_per_sec > 1e8 and result.copy_bytes_per_sec > 1e8
    assert result.dtype == "float32" and "threads" in result.key


def test_the_peak_is_probed_once_then_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("DLRM_EXP_CACHE_DIR", str(tmp_path))
    calls = []

    def fake_probe(device, dtype):
        calls.append(dtype)
        return Peak(1e11, 5e10, "float32", peak_module.machine_key(device, dtype))

    monkeypatch.setattr(peak_module, "probe", fake_probe)
    first = measured_peak(torch.device("cpu"))
    second = measured_peak(torch.device("cpu"))
    assert first == second and len(calls) == 1
    assert (
        json.loads((tmp_path / "peak.json").read_text())[first.key]["matmul_flops_per_sec"] == 1e11
    )
    measured_peak(torch.device("cpu"), torch.bfloat16)  # another setting: probed
    assert len(calls) == 2


def test_a_corrupt_cache_is_probed_again(tmp_path, monkeypatch):
    monkeypatch.setenv("DLRM_EXP_CACHE_DIR", str(tmp_path))
    (tmp_path / "peak.json").write_text("{not json")
    monkeypatch.setattr(peak_module, "probe", lambda device, dtype: Peak(2.0, 3.0, "float32", "k"))
    assert measured_peak(torch.device("cpu")).matmul_flops_per_sec == 2.0


def test_utilization_is_per_rank_against_the_peak():
    from conftest import compose_cfg

    cfg = compose_cfg([])
    util = utilization(cfg, samples_per_sec=2000.0, world_size=2, peak=Peak(1e9, 1e10, "f", "k"))
    assert util.dense_flops_per_sec == util.dense_flops_per_sample * 1000.0
    assert util.fraction_of_matmul_peak == util.dense_flops_per_sec / 1e9
    assert util.fraction_of_copy_peak == util.embedding_bytes_per_sample * 1000.0 / 1e10
    assert utilization(cfg, None, 1, Peak(1e9, 1e10, "f", "k")).fraction_of_matmul_peak is None
