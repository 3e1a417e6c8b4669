"""The measured peaks: probed over several sizes, cached with their time, re-measured when old
or contradicted by a spot check; bounded by a theoretical peak; impossible fractions flagged."""

import json
from datetime import UTC, datetime, timedelta

import filelock
import pytest
import torch

from conftest import compose_cfg
from dlrm_exp.config import DensePrecision
from dlrm_exp.factories.precision import slow_precision_warning
from dlrm_exp.modes.train import _utilization_lines
from dlrm_exp.perf import peak as peak_module
from dlrm_exp.perf import theoretical_peak
from dlrm_exp.perf.flops import embedding_bytes_per_sample
from dlrm_exp.perf.peak import CPU_SIZES, Peak, measured_peak, probe
from dlrm_exp.perf.theoretical_peak import TheoreticalPeak, cpu_flags, cpu_peak, cuda_peak
from dlrm_exp.perf.utilization import utilization
from dlrm_exp.util import user_cache

CPU = torch.device("cpu")
NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def _peak(rate=1e11, at=NOW, key="k"):
    return Peak(rate, 5e10, "float32", key, at.isoformat(), {"512": rate / 2, "1024": rate})


def test_the_probe_takes_the_best_of_several_sizes_quickly(monkeypatch):
    monkeypatch.setattr(peak_module, "PROBE_SECONDS", 0.02)
    result = probe(CPU)
    assert result.matmul_flops_per_sec > 1e8 and result.copy_bytes_per_sec > 1e8
    assert result.dtype == "float32" and "threads" in result.key
    assert result.matmul_by_size and {int(n) for n in result.matmul_by_size} <= set(CPU_SIZES)
    assert result.matmul_flops_per_sec == max(result.matmul_by_size.values())
    assert datetime.fromisoformat(result.measured_at).utcoffset() == timedelta(0)


def test_the_probe_skips_sizes_that_would_take_longer_than_its_budget(monkeypatch):
    monkeypatch.setattr(peak_module, "COPY_BYTES", 2**20)
    sizes = []

    def slow(device, dtype, n, seconds, warm_up=True):
        sizes.append(n)
        # 1024 fits in twice the budget, 2048 (8x the work) does not
        return 2.0 * 1024**3 / (1.5 * seconds) * (1.2 if n == 1024 else 1.0)

    monkeypatch.setattr(peak_module, "matmul_rate", slow)
    result = probe(CPU)
    assert list(result.matmul_by_size) == ["512", "1024"] and sizes == [512, 1024]
    assert result.matmul_flops_per_sec == result.matmul_by_size["1024"]  # the best


def test_a_gpu_probes_only_the_sizes_that_fit_beside_its_tables():
    """The probe runs after training, the tables still on the GPU: its largest size (3 GiB
    of float32 operands and product) could run out of memory there and lose metrics.json."""
    from dlrm_exp.perf.peak import CUDA_SIZES, sizes_that_fit

    gib = 2**30
    assert sizes_that_fit(CUDA_SIZES, torch.float32, 80 * gib) == [4096, 8192, 16384]
    # 8192 in float32: 8192^2 x 3 x 4 bytes = 0.75 GiB, within half of 1.5 GiB free
    assert sizes_that_fit(CUDA_SIZES, torch.float32, int(1.5 * gib)) == [4096, 8192]
    assert sizes_that_fit(CUDA_SIZES, torch.float32, int(1.49 * gib)) == [4096]
    # bfloat16 operands take half, drawn in float32: 16384^2 x (3 x 2 + 4) = 2.5 GiB
    assert sizes_that_fit(CUDA_SIZES, torch.bfloat16, 5 * gib) == [4096, 8192, 16384]
    assert sizes_that_fit(CUDA_SIZES, torch.float32, 0) == []
    cached = Peak(1e12, 1e12, "float32", "k", NOW.isoformat(), {"4096": 1e15, "8192": 1e15})
    assert peak_module.spot_size(cached) == 8192
    assert peak_module.spot_size(cached, limit=4096) == 4096


@pytest.fixture
def fake_machine(tmp_path, monkeypatch):
    """A cache in ``tmp_path``, a clock at :data:`NOW`, a probe that counts its calls and a
    spot check that reads ``spot["factor"]`` times the cached rate."""
    monkeypatch.setenv("DLRM_EXP_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(peak_module, "_now", lambda: NOW)
    calls = []
    spot = {"factor": 1.0, "sizes": [], "copy_factor": 1.0}

    def fake_probe(device, dtype, sizes=None):
        calls.append(dtype)
        return _peak(1e11, key=peak_module.machine_key(device, dtype))

    def fake_rate(device, dtype, n, seconds, warm_up=True):
        spot["sizes"].append(n)
        return spot["factor"] * (1e11 if n == 1024 else 5e10)

    monkeypatch.setattr(peak_module, "probe", fake_probe)
    monkeypatch.setattr(peak_module, "matmul_rate", fake_rate)
    monkeypatch.setattr(
        peak_module, "copy_rate", lambda device, seconds: spot["copy_factor"] * 5e10
    )
    return tmp_path / "peak.json", calls, spot


def _cache(path, measured_at):
    key = peak_module.machine_key(CPU, torch.float32)
    path.write_text(json.dumps({key: _peak(1e11, measured_at, key).cache_entry()}))


def test_the_peak_is_probed_once_then_cached(fake_machine):
    path, calls, _ = fake_machine
    first = measured_peak(CPU)
    second = measured_peak(CPU)
    assert (first.source, second.source) == ("probed", "cached") and len(calls) == 1
    assert first.reason == "no cached reading" and "spot check n=1024" in second.reason
    assert second.measured_at == first.measured_at == NOW.isoformat()
    entry = json.loads(path.read_text())[first.key]
    assert entry["matmul_flops_per_sec"] == 1e11 and entry["measured_at"] == NOW.isoformat()
    assert "source" not in entry
    measured_peak(CPU, torch.bfloat16)  # another setting: probed
    assert len(calls) == 2


def test_an_entry_another_process_stored_while_this_one_probed_is_kept(fake_machine, monkeypatch):
    """The cache was read before the probe and written back after it: a bf16 entry that
    another rank stored meanwhile was dropped (review)."""
    path, _, _ = fake_machine
    probe = peak_module.probe

    def probe_beside_another_rank(device, dtype, sizes=None):
        other = _peak(2e11, key=peak_module.machine_key(device, torch.bfloat16))
        path.write_text(json.dumps({other.key: other.cache_entry()}))
        return probe(device, dtype, sizes)

    monkeypatch.setattr(peak_module, "probe", probe_beside_another_rank)
    measured_peak(CPU)
    assert set(json.loads(path.read_text())) == {
        peak_module.machine_key(CPU, torch.float32),
        peak_module.machine_key(CPU, torch.bfloat16),
    }


@pytest.mark.parametrize("error", [NotImplementedError, PermissionError, filelock.Timeout])
def test_a_cache_whose_lock_cannot_be_taken_is_still_written(fake_machine, monkeypatch, error):
    """A file system without flock (filelock raises NotImplementedError or times out) or
    another user's lock file: the entry was dropped, and every run probed again (review)."""
    path, calls, _ = fake_machine

    class NoLock:
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            raise error("no lock here")

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(user_cache, "FileLock", NoLock)
    measured_peak(CPU)
    assert measured_peak(CPU).source == "cached" and len(calls) == 1 and path.exists()


def test_a_probe_that_memory_cut_short_is_used_but_not_cached(fake_machine, monkeypatch):
    """A GPU with little free memory beside the tables probes only its small sizes: cached,
    that lower reading would stand for the machine for a day (review)."""
    path, calls, _ = fake_machine
    monkeypatch.setattr(peak_module, "memory_limited", lambda device, sizes: True)
    assert measured_peak(CPU).source == "probed" and not path.exists()
    monkeypatch.setattr(peak_module, "memory_limited", lambda device, sizes: False)
    assert measured_peak(CPU).source == "probed" and path.exists() and len(calls) == 2


def test_a_reading_older_than_a_day_is_measured_again(fake_machine):
    path, calls, _ = fake_machine
    _cache(path, NOW - timedelta(hours=23))
    assert measured_peak(CPU).source == "cached" and calls == []
    _cache(path, NOW - timedelta(hours=25))
    again = measured_peak(CPU)
    assert again.source == "probed" and len(calls) == 1 and "1 day, 1:00:00 old" in again.reason
    assert json.loads(path.read_text())[again.key]["measured_at"] == NOW.isoformat()


@pytest.mark.parametrize(
    ("factor", "source"), [(1.15, "cached"), (0.85, "cached"), (1.25, "probed"), (0.75, "probed")]
)
def test_a_spot_check_that_disagrees_by_more_than_20_percent_measures_again(
    fake_machine, factor, source
):
    path, calls, spot = fake_machine
    _cache(path, NOW - timedelta(hours=1))
    spot["factor"] = factor
    result = measured_peak(CPU)
    assert result.source == source and len(calls) == (source == "probed")
    assert spot["sizes"] == [1024]  # one size, compared with the cached rate of that size
    assert f"{factor - 1:+.0%}" in result.reason


def test_a_copy_bandwidth_that_moved_is_measured_again_though_the_matmul_agrees(fake_machine):
    """The fraction of the copy peak divides by the cached copy bandwidth too: it is spot
    checked as the matmul rate is (a probe taken while memory was busy is not kept a day)."""
    path, calls, spot = fake_machine
    _cache(path, NOW - timedelta(hours=1))
    spot["copy_factor"] = 1.3
    result = measured_peak(CPU)
    assert result.source == "probed" and len(calls) == 1
    assert "copy: 65.0 GB/s against the cached 50.0 GB/s (+30%)" in result.reason


def test_an_old_format_or_corrupt_cache_is_probed_again(fake_machine):
    path, calls, _ = fake_machine
    key = peak_module.machine_key(CPU, torch.float32)
    path.write_text(json.dumps({key: {"matmul_flops_per_sec": 1.0, "copy_bytes_per_sec": 1.0}}))
    assert measured_peak(CPU).source == "probed"
    path.write_text("{not json")
    assert measured_peak(CPU).source == "probed" and len(calls) == 2
    # edited entries: a date without its UTC offset, a rate that is a string or 0 (each
    # raised TypeError or ZeroDivisionError after training, and metrics.json was not written)
    good = _peak(1e11, NOW - timedelta(hours=1), key).cache_entry()
    for edit in (
        {"measured_at": (NOW - timedelta(hours=1)).replace(tzinfo=None).isoformat()},
        {"matmul_flops_per_sec": "1e11"},
        {"matmul_by_size": {"1024": 0.0}},
    ):
        path.write_text(json.dumps({key: {**good, **edit}}))
        assert measured_peak(CPU).source == "probed"
    assert len(calls) == 5


#: Two cores with two hyper-threads each, AVX-512 with BF16, reporting 2.0 GHz.
CPUINFO = "\n\n".join(
    f"processor\t: {cpu}\nmodel name\t: Test Xeon\nphysical id\t: 0\ncore id\t\t: {cpu // 2}\n"
    "cpu MHz\t\t: 2000.000\nflags\t\t: fpu sse sse2 avx fma avx2 avx512f avx512_bf16\n"
    for cpu in range(4)
)


def test_the_theoretical_peak_is_cores_times_clock_times_flops_per_cycle():
    fp32 = cpu_peak(8, "float32", CPUINFO, "3500000\n", {0, 1, 2, 3})
    assert fp32.flops_per_sec == 2 * 3.5e9 * 64  # 2 physical cores, 16 lanes x 2 FMA x 2 ports
    assert "2 cores x 3.50 GHz (cpuinfo_max_freq) x 64 FLOP/cycle" in fp32.basis
    assert (
        cpu_peak(8, "bfloat16", CPUINFO, "3500000", {0, 1, 2, 3}).flops_per_sec == 2 * 3.5e9 * 128
    )
    assert cpu_peak(1, "float32", CPUINFO, "3500000", {0, 1, 2, 3}).flops_per_sec == 3.5e9 * 64
    assert cpu_peak(8, "float32", CPUINFO, "3500000", {0, 1}).flops_per_sec == 3.5e9 * 64
    no_max = cpu_peak(8, "float32", CPUINFO, None, {0, 1, 2, 3})
    assert no_max.flops_per_sec == 2 * 2.0e9 * 2 * 64 and "turbo allowance" in no_max.basis
    avx2 = CPUINFO.replace(" avx512f avx512_bf16", "")
    assert cpu_peak(2, "bfloat16", avx2, "3000000", {0, 2}).flops_per_sec == 2 * 3e9 * 32
    amx = CPUINFO.replace("avx512_bf16", "avx512_bf16 amx_bf16")
    assert cpu_peak(2, "bfloat16", amx, "3000000", {0, 2}).flops_per_sec == 2 * 3e9 * 1024
    assert cpu_peak(2, "float64", CPUINFO, "3000000", {0}) is None
    assert cpu_peak(2, "float32", "processor\t: 0\nFeatures\t: asimd\n", "3000000", {0}) is None


def test_the_gpu_bound_comes_from_its_data_sheet():
    assert cuda_peak("NVIDIA H100 80GB HBM3", "bfloat16", tf32=False).flops_per_sec == 989.5e12
    assert cuda_peak("NVIDIA H100 PCIe", "bfloat16", tf32=False).flops_per_sec == 756.5e12
    assert cuda_peak("NVIDIA A100-SXM4-80GB", "float32", tf32=False).flops_per_sec == 19.5e12
    assert cuda_peak("NVIDIA A100-SXM4-80GB", "float32", tf32=True).flops_per_sec == 156e12
    assert cuda_peak("Some Future GPU", "bfloat16", tf32=False) is None


def test_utilization_is_per_rank_against_the_peak_and_its_bound():
    cfg = compose_cfg([])
    bound = TheoreticalPeak(4e9, "test bound")
    util = utilization(cfg, 2000.0, 2, _peak(1e9), bound)
    assert util.dense_flops_per_sec == util.dense_flops_per_sample * 1000.0
    assert util.fraction_of_matmul_peak == util.dense_flops_per_sec / 1e9
    assert util.fraction_of_theoretical_peak == util.dense_flops_per_sec / 4e9
    assert util.fraction_of_copy_peak == util.embedding_bytes_per_sample * 1000.0 / 5e10
    assert util.measurement_errors == [] and util.peak_measured_at == NOW.isoformat()
    assert util.theoretical_basis == "test bound"
    assert utilization(cfg, None, 1, _peak(1e9)).fraction_of_matmul_peak is None
    # the per-sample counts it divides are the training counts of this model, by hand for
    # TorchRec's quickstart shapes: 6 x (dense arch 13-512-256-64, over arch 415-512-512-256-1,
    # the interaction's 27 x 27 x 64 products) multiply-adds
    quick = compose_cfg(["model=quickstart"])
    macs = (
        (13 * 512 + 512 * 256 + 256 * 64) + (415 * 512 + 512 * 512 + 512 * 256 + 256) + 27 * 27 * 64
    )
    # less the first layer's input gradient, which autograd does not compute (the dense
    # features need none): 13 x 512 multiply-adds
    first = 2 * 13 * 512
    flops = utilization(quick, 1.0, 1, _peak(1e9)).dense_flops_per_sample
    assert flops == 6 * macs - first == 4_827_008
    # the symmetric interaction's backward is one bmm, not two: 2 x its forward, not 3 x (it
    # was counted 3 x, 93,312 FLOPs a sample too many)
    symmetric = compose_cfg(["model=quickstart", "train.symmetric_interaction=true"])
    flops = utilization(symmetric, 1.0, 1, _peak(1e9)).dense_flops_per_sample
    assert flops == 6 * macs - first - 2 * 27 * 27 * 64 == 4_827_008 - 93_312
    emb = embedding_bytes_per_sample(
        cfg.model, cfg.optimizer.sparse_optimizer, cfg.data.pooling_factors()
    )
    assert util.embedding_bytes_per_sample == emb > 0


def test_a_fraction_above_1_is_flagged_as_a_measurement_error():
    cfg = compose_cfg([])
    samples = 1e6  # far more FLOP/s than the 1 GFLOP/s peak
    util = utilization(cfg, samples, 1, _peak(1e9), TheoreticalPeak(1e12, "b"))
    assert util.fraction_of_matmul_peak is None and 0 < util.fraction_of_theoretical_peak <= 1
    (error,) = [e for e in util.measurement_errors if "measured matmul peak" in e]
    assert error.startswith("dense FLOP/s vs measured matmul peak: achieved") and "x)" in error
    above_bound = utilization(cfg, 1.0, 1, _peak(1e9), TheoreticalPeak(5e8, "b"))
    assert any("vs theoretical (b)" in e for e in above_bound.measurement_errors)
    assert above_bound.fraction_of_matmul_peak is None  # of an impossible peak: none reported
    lines = _utilization_lines(util.to_json())
    assert "n/a (measurement error) of the measured float32 matmul peak 1 GFLOP/s" in lines[0]
    assert all(line.startswith("warning: ") for line in lines[1:]) and len(lines) >= 2
    for line in lines:
        for number in line.split():
            assert not (number.endswith("%") and float(number.rstrip("%;),")) > 100)


def test_the_summary_names_the_peak_it_used():
    util = utilization(compose_cfg([]), 1000.0, 1, _peak(1e11), TheoreticalPeak(2e11, "b"))
    (line,) = _utilization_lines(util.to_json())
    assert f"of the measured float32 matmul peak 100 GFLOP/s (probed {NOW.isoformat()}; " in line
    assert "theoretical 200 GFLOP/s: " in line


def test_bf16_on_a_cpu_without_bf16_instructions_is_warned_about():
    avx2 = {"fpu", "avx2", "fma"}
    line = slow_precision_warning(DensePrecision.bf16, "cpu", avx2)
    assert line and "amx_bf16 or avx512_bf16 not in /proc/cpuinfo" in line
    assert slow_precision_warning(DensePrecision.bf16, "cpu", avx2 | {"avx512_bf16"}) is None
    assert slow_precision_warning(DensePrecision.bf16, "cpu", avx2 | {"amx_bf16"}) is None
    assert slow_precision_warning(DensePrecision.fp32, "cpu", avx2) is None
    assert slow_precision_warning(DensePrecision.bf16, "cuda", avx2) is None
    assert slow_precision_warning(DensePrecision.bf16, "cpu", None) is None  # unknown: silent


def test_cpu_flags_are_read_from_cpuinfo(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\n\nprocessor\t: 1\n")
    monkeypatch.setattr(theoretical_peak, "CPUINFO", cpuinfo)
    assert cpu_flags() == {"fpu", "avx2", "avx512_bf16"}
    monkeypatch.setattr(theoretical_peak, "CPUINFO", tmp_path / "absent")
    assert cpu_flags() is None


def test_a_peak_that_cannot_be_measured_after_training_is_a_measurement_error(monkeypatch):
    """The probe runs after training: running out of GPU memory there lost metrics.json."""
    from types import SimpleNamespace

    from dlrm_exp.modes import train

    def unavailable(cfg, device):
        raise peak_module.PeakUnavailable("no matmul probe size (4096 and up) fits")

    monkeypatch.setattr(train, "rank_peak", unavailable)
    run = SimpleNamespace(cfg=compose_cfg([]), ctx=SimpleNamespace(is_main=True, device=CPU))
    util = train._utilization(run, SimpleNamespace(samples_per_sec=1000.0))
    assert util == {"measurement_errors": ["matmul peak not measured: no matmul probe size "
                                           "(4096 and up) fits"]}  # fmt: skip
    assert _utilization_lines(util) == [f"warning: {util['measurement_errors'][0]}"]


def test_the_copy_probe_reads_memory_that_was_written(monkeypatch):
    """An untouched CPU buffer is the kernel's shared zero page: the copy probe read one cached
    page as 64 MiB and measured twice the real rate (94.7 against 48.7 GB/s here; review).
    While it copies, both of its buffers are resident."""
    page = __import__("os").sysconf("SC_PAGE_SIZE")

    def resident() -> int:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * page

    before = resident()
    grown = []

    def once(work, run, sync, seconds, warm_up=True):
        run()
        grown.append(resident() - before)
        return 1.0

    monkeypatch.setattr(peak_module, "_best_rate", once)
    peak_module.copy_rate(CPU, 0.0)
    assert grown[0] >= 1.9 * peak_module.COPY_BYTES
