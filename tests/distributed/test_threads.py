"""Each rank's thread count is its share of the cores unless set, and a run whose step times
vary wildly says so in its summary."""

import os

import pytest
import torch

from conftest import compose_cfg
from dlrm_exp.distributed.launch import rank_threads
from dlrm_exp.errors import ConfigError
from dlrm_exp.modes.train import _contention_warning
from dlrm_exp.record.run_record import RunMetrics


def test_threads_default_to_the_cores_shared_by_the_ranks(monkeypatch):
    before = torch.get_num_threads()
    try:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        cores = len(os.sched_getaffinity(0))
        hardware = compose_cfg().hardware
        assert rank_threads(hardware, 0, 2) == max(1, cores // 2) == torch.get_num_threads()
        assert rank_threads(hardware, 0, 4 * cores) == 1
        monkeypatch.setenv("OMP_NUM_THREADS", "3")
        assert rank_threads(hardware, 0, 2) == 3
        pinned = compose_cfg(["hardware.threads_per_rank=2"]).hardware
        assert rank_threads(pinned, 0, 2) == 2 == torch.get_num_threads()
        # a Slurm task (one rank) bound to its own cores has its share already: all of them;
        # one that shares a larger cpuset still divides it
        monkeypatch.delenv("OMP_NUM_THREADS")
        monkeypatch.setenv("SUBMITIT_EXECUTOR", "slurm")
        monkeypatch.setenv("SLURM_CPUS_PER_TASK", str(cores))
        assert rank_threads(hardware, 0, 2) == cores
        monkeypatch.setenv("SLURM_CPUS_PER_TASK", str(max(1, cores // 2)))
        assert rank_threads(hardware, 0, 2) == max(1, cores // 2)
        monkeypatch.delenv("SUBMITIT_EXECUTOR")
        monkeypatch.setenv("SLURM_CPUS_PER_TASK", str(cores))  # torchrun inside one task
        assert rank_threads(hardware, 0, 2) == max(1, cores // 2)
    finally:
        torch.set_num_threads(before)


def test_torchruns_one_thread_default_is_named_and_a_bad_value_refused(monkeypatch, caplog):
    before = torch.get_num_threads()
    try:
        for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "2"),
                           ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "1")):  # fmt: skip
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        hardware = compose_cfg().hardware
        share = len(os.sched_getaffinity(0))  # one local rank: every core
        assert rank_threads(hardware, 0, 1) == 1  # the environment's choice is kept
        named = [r.message for r in caplog.records if "torchrun sets it" in r.message]
        assert bool(named) == (share > 1)
        for bad in ("0", "two"):
            monkeypatch.setenv("OMP_NUM_THREADS", bad)
            with pytest.raises(ConfigError, match=f"OMP_NUM_THREADS='{bad}': give a positive"):
                rank_threads(hardware, 0, 1)
    finally:
        torch.set_num_threads(before)


def test_wildly_varying_step_times_are_named_in_the_summary():
    calm = RunMetrics(step_time_ms={"p50": 10.0, "p90": 12.0}, threads_per_rank=1)
    assert _contention_warning(calm) == []
    starved = RunMetrics(step_time_ms={"p50": 10.0, "p90": 80.0}, threads_per_rank=2, world_size=2)
    (line,) = _contention_warning(starved)
    assert line.startswith("warning: step times vary 8x (p50 10.0 ms, p90 80.0 ms)")
    assert "another process competing for the cores" in line and "OMP_NUM_THREADS" in line


def test_each_local_rank_takes_its_gpu_and_one_gpu_per_task_is_refused():
    """A launcher that binds one GPU to each task (Slurm --gpus-per-task) shows it as GPU 0:
    local ranks 1..7 asked for GPU 1..7 and failed with "invalid device ordinal"; taking GPU 0
    instead failed later, where TorchRec builds a sharded table whose plan places rank 1's
    shard on cuda:1 ("local shard tensor device=cuda:0"). Refused with the fix at start."""
    from dlrm_exp.distributed.launch import rank_gpu

    assert [rank_gpu(r, 8, 8) for r in range(8)] == list(range(8))  # the host's GPUs
    assert rank_gpu(0, 1, 1) == 0  # one rank on its host, one GPU
    with pytest.raises(ConfigError, match=r"local rank 3 of 8 on this host sees 1 GPU.*--gpus"):
        rank_gpu(3, 8, 1)
    with pytest.raises(ConfigError, match="local rank 3 sees 2 GPU"):
        rank_gpu(3, 4, 2)


@pytest.mark.parametrize("name", ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"])
def test_a_launcher_variable_that_is_no_number_is_one_error_line(cli_here, monkeypatch, name):
    """``LOCAL_WORLD_SIZE=abc`` was a raw ValueError traceback (error-path review)."""
    monkeypatch.setenv(name, "abc")
    result = cli_here(["train.max_steps=1"])
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip() == (
        f"Error: {name}='abc': a launcher variable must be a number >= 0; unset it (one "
        "process) or start the job with torchrun, which sets it"
    )
