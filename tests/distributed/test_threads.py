"""Each rank's thread count is its share of the cores unless set, and a run whose step times
vary wildly says so in its summary."""

import os

import torch

from conftest import compose_cfg
from dlrm_exp.distributed.launch import rank_threads
from dlrm_exp.modes.train import _contention_warning
from dlrm_exp.record.run_record import RunMetrics


def test_threads_default_to_the_cores_shared_by_the_ranks(monkeypatch):
    before = torch.get_num_threads()
    try:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        cores = len(os.sched_getaffinity(0))
        hardware = compose_cfg().hardware
        assert rank_threads(hardware, 2) == max(1, cores // 2) == torch.get_num_threads()
        assert rank_threads(hardware, 4 * cores) == 1
        monkeypatch.setenv("OMP_NUM_THREADS", "3")
        assert rank_threads(hardware, 2) == 3
        pinned = compose_cfg(["hardware.threads_per_rank=2"]).hardware
        assert rank_threads(pinned, 2) == 2 == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def test_wildly_varying_step_times_are_named_in_the_summary():
    calm = RunMetrics(step_time_ms={"p50": 10.0, "p90": 12.0}, threads_per_rank=1)
    assert _contention_warning(calm) == []
    starved = RunMetrics(step_time_ms={"p50": 10.0, "p90": 80.0}, threads_per_rank=2, world_size=2)
    (line,) = _contention_warning(starved)
    assert line.startswith("warning: step times vary 8x (p50 10.0 ms, p90 80.0 ms)")
    assert "another process competing for the cores" in line and "OMP_NUM_THREADS" in line
