"""``hardware.reuse_host_memory``: with it a step's freed 12 MiB buffers are served again
without page faults, with glibc's thresholds put back every such buffer faults its pages in
again; an allocator chosen in the environment is left alone."""

import os
import platform
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from dlrm_exp.distributed import host_memory
from dlrm_exp.distributed.host_memory import (
    ALLOCATOR_ENV,
    DEFAULTS,
    RESTORED,
    REUSED,
    apply_host_memory,
)

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
#: Allocates three 12 MiB buffers a step (the size of the pooled embeddings at batch 2048 on
#: TorchRec's quickstart shapes), frees them, and prints the page faults of steps 11-20.
STEPS = """
import resource, sys, torch
from dlrm_exp.distributed.host_memory import apply_host_memory
print(apply_host_memory(True))
if sys.argv[1] == "restored":
    print(apply_host_memory(False))
def step():
    buffers = [torch.empty(3 * 2**20).fill_(1.0) for _ in range(3)]
for _ in range(10):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""
STEP_PAGES = 3 * 12 * 2**20 // resource.getpagesize()


def _faults(mode: str) -> tuple[list[str], int]:
    """What a fresh process printed: its allocator lines and the page faults of 10 steps."""
    env = {k: v for k, v in os.environ.items() if k not in (*ALLOCATOR_ENV, "LD_PRELOAD")}
    out = subprocess.run(
        [sys.executable, "-c", STEPS, mode], env=env, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    return out[:-2], int(out[-2])


def _huge_pages_always() -> bool:
    path = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    return path.exists() and "[always]" in path.read_text()


@glibc
def test_freed_buffers_are_reused_without_page_faults():
    lines, faults = _faults("reused")
    assert lines == [REUSED] and faults < STEP_PAGES / 10  # 10 steps: not one buffer's pages
    lines, faults = _faults("restored")  # glibc's 128 KiB thresholds: every buffer is mmapped
    assert lines == [REUSED, RESTORED]
    if not _huge_pages_always():  # huge pages would fault 2 MiB at a time
        assert faults > 9 * STEP_PAGES


def test_an_allocator_chosen_in_the_environment_is_left_alone(monkeypatch):
    for name in (*ALLOCATOR_ENV, "LD_PRELOAD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(host_memory, "_mallopt", lambda *_: pytest.fail("mallopt called"))
    monkeypatch.setattr(host_memory.platform, "libc_ver", lambda: ("glibc", "2.36"))
    monkeypatch.setattr(host_memory, "_state", {"set": False})
    assert apply_host_memory(False) == DEFAULTS  # never set in this process: nothing to do
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")
    assert apply_host_memory(True) == (
        "unchanged: LD_PRELOAD allocator /usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
    )
    monkeypatch.delenv("LD_PRELOAD")
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=0")
    assert apply_host_memory(True) == "unchanged: glibc malloc as set by GLIBC_TUNABLES"
    monkeypatch.setattr(host_memory.platform, "libc_ver", lambda: ("", ""))
    assert apply_host_memory(True) == "unchanged: the C library is not glibc"
