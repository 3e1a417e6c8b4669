"""A forked worker ends with its parent (crash review: a SIGKILLed preprocess left its parse
workers alive for good, holding the output folder's lock)."""

import multiprocessing
import os
import signal
import sys
import time

import pytest

from dlrm_exp.util.parent_death import die_with_parent

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux prctl")


def _grandchild(parent: int, ready) -> None:
    die_with_parent(parent)
    ready.send(os.getpid())
    time.sleep(60)  # what a parse worker waiting on its condition does


def _middle(ready, report) -> None:
    """A parent (as preprocess is) that forks the worker, then is killed by SIGKILL."""
    fork = multiprocessing.get_context("fork")
    worker = fork.Process(target=_grandchild, args=(os.getpid(), ready))
    worker.start()
    report.send(worker.pid)
    time.sleep(60)


def test_a_worker_ends_when_its_parent_is_killed():
    fork = multiprocessing.get_context("fork")
    ready_recv, ready_send = fork.Pipe(duplex=False)
    report_recv, report_send = fork.Pipe(duplex=False)
    parent = fork.Process(target=_middle, args=(ready_send, report_send))
    parent.start()
    worker = report_recv.recv()
    assert ready_recv.recv() == worker  # its prctl ran
    os.kill(parent.pid, signal.SIGKILL)
    parent.join()
    for _ in range(100):  # the kernel signals it when the parent is gone
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            return
        if _is_zombie(worker):  # ended, reaped by init (not our child)
            return
        time.sleep(0.05)
    os.kill(worker, signal.SIGKILL)
    pytest.fail("the worker outlived its killed parent")


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True
