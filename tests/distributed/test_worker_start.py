"""launch_workers on CPU forks its workers from a server that imported the training code once
(dlrm_exp.distributed.worker_start); each launch's workers still get that launch's
environment and working directory, with the launcher's own variables on top."""

import os
import signal

import pytest
import torch.distributed as dist

from conftest import compose_cfg
from dlrm_exp.distributed.launch import launch_workers
from dlrm_exp.errors import WorkerFailedError


def probe(key: str, launcher_pid: int) -> tuple:
    """What a worker sees: ``key``'s value, its working directory, its rank, and whether it was
    forked from the server (its parent is not the launching process)."""
    forked = os.getppid() != launcher_pid
    return os.environ.get(key), os.getcwd(), os.environ["RANK"], os.environ["MASTER_PORT"], forked


def test_each_launch_gets_its_own_environment_and_working_directory(tmp_path, monkeypatch):
    hardware = compose_cfg(["hardware.nproc_per_node=2"]).hardware
    monkeypatch.setenv("DLRM_EXP_PROBE", "first")
    first = launch_workers(probe, ("DLRM_EXP_PROBE", os.getpid()), hardware)
    assert first[:3] == ("first", os.getcwd(), "0") and first[4]
    monkeypatch.setenv("DLRM_EXP_PROBE", "second")  # the server still has "first"
    monkeypatch.setenv("MASTER_PORT", "1")  # the launcher's own value wins
    monkeypatch.chdir(tmp_path)
    second = launch_workers(probe, ("DLRM_EXP_PROBE", os.getpid()), hardware)
    assert second[:3] == ("second", str(tmp_path), "0") and second[3] != "1" and second[4]
    monkeypatch.delenv("DLRM_EXP_PROBE")
    assert launch_workers(probe, ("DLRM_EXP_PROBE", os.getpid()), hardware)[0] is None


def killed_in_a_collective() -> None:
    """Rank 1 dies by SIGKILL (as by the out-of-memory killer) while rank 0 waits for it in a
    collective, which then fails with 'Connection closed by peer'."""
    dist.init_process_group("gloo")
    dist.barrier()
    if os.environ["RANK"] == "1":
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()


def test_the_failure_named_is_the_rank_that_died_not_the_peer_that_lost_it():
    hardware = compose_cfg(["hardware.nproc_per_node=2"]).hardware
    with pytest.raises(WorkerFailedError, match=r"^rank 1 failed: killed by signal SIGKILL$"):
        launch_workers(killed_in_a_collective, (), hardware)
