"""``hardware.reuse_host_memory``: glibc's allocator keeps a step's freed buffers for the next.

A training step allocates and frees the same large host buffers every step: activations and
their gradients, the pooled embeddings (B x F x D floats: 13.6 MB at batch 2048 on TorchRec's
quickstart shapes). glibc's ``malloc`` serves a buffer above its mmap threshold (128 KiB,
raised as such buffers are freed, up to 32 MiB) with a fresh ``mmap`` and unmaps it on
``free``, and hands free memory above 128 KiB at the top of its heap back to the kernel: the
next step faults the same pages in again, each zeroed by the kernel. On a 2-core CPU that was
about 3,800-10,100 page faults and 8-23 ms of system time per step of the fast setting
(docs/results.md, "The fast setting", run 4).

:func:`apply_host_memory` sets, with ``mallopt(3)``, the mmap threshold to 32 MiB (the largest
value glibc's own dynamic threshold reaches on 64-bit, ``DEFAULT_MMAP_THRESHOLD_MAX``) and the
trim threshold to 64 MiB, so such buffers come from the heap and stay mapped: a process holds
up to 64 MiB of freed heap more than it uses. It is what Intel's PyTorch CPU tuning guide gets
by preloading jemalloc or tcmalloc, with nothing to install; a preloaded allocator, or glibc
settings given in the environment (``MALLOC_*_`` variables, ``GLIBC_TUNABLES``), are left as
they are. The returned line says what the process runs with (``metrics.json``
``host_allocator``).
"""

import ctypes
import os
import platform

#: ``mallopt`` parameters (glibc ``malloc.h``).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 * 2**20
TRIM_THRESHOLD_BYTES = 64 * 2**20
#: glibc's defaults of both thresholds (its dynamic mmap threshold starts there).
GLIBC_DEFAULT_BYTES = 128 * 2**10
#: Environment settings of the allocator that win over this module's.
ALLOCATOR_ENV = (
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "GLIBC_TUNABLES",
)
REUSED = (
    f"glibc malloc: mmap threshold {MMAP_THRESHOLD_BYTES // 2**20} MiB, "
    f"trim threshold {TRIM_THRESHOLD_BYTES // 2**20} MiB (hardware.reuse_host_memory)"
)
DEFAULTS = "glibc malloc defaults (hardware.reuse_host_memory=false)"
RESTORED = (
    "glibc malloc: both thresholds back at glibc's 128 KiB, without its dynamic mmap threshold "
    "(hardware.reuse_host_memory=false after a run in this process had set them)"
)

_state = {"set": False}


def _preloaded() -> str | None:
    """The allocator ``LD_PRELOAD`` names (jemalloc, tcmalloc, mimalloc), if any."""
    for lib in os.environ.get("LD_PRELOAD", "").replace(":", " ").split():
        if any(name in lib for name in ("jemalloc", "tcmalloc", "mimalloc")):
            return lib
    return None


def _mallopt(param: int, value: int) -> bool:
    return bool(ctypes.CDLL(None).mallopt(param, value))


def apply_host_memory(reuse: bool) -> str:
    """Set this process's allocator for ``hardware.reuse_host_memory`` and say what it runs
    with: the thresholds set, glibc's defaults, or why it was left alone (not glibc, a
    preloaded allocator, settings in the environment). mallopt settings last for the process:
    ``reuse=False`` after a run that set them puts both thresholds back at 128 KiB."""
    libc, _ = platform.libc_ver()
    if libc != "glibc":
        return f"unchanged: the C library is {libc or 'not glibc'}"
    preloaded = _preloaded()
    if preloaded:
        return f"unchanged: LD_PRELOAD allocator {preloaded}"
    given = [name for name in ALLOCATOR_ENV if name in os.environ]
    if given:
        return f"unchanged: glibc malloc as set by {', '.join(given)}"
    if reuse:
        _state["set"] = True
        mmap_ok = _mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
        trim_ok = _mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
        return REUSED if mmap_ok and trim_ok else "mallopt refused a threshold: glibc as it was"
    if not _state["set"]:
        return DEFAULTS
    _mallopt(M_MMAP_THRESHOLD, GLIBC_DEFAULT_BYTES)
    _mallopt(M_TRIM_THRESHOLD, GLIBC_DEFAULT_BYTES)
    return RESTORED


def release_free_heap() -> None:
    """Hand the free pages of glibc's heap back to the kernel (``malloc_trim(0)``), as a run's
    start in a process that ran others does: the free memory an earlier job left inside the
    heap (above the trim threshold, between live blocks) would count in this run's resident
    set. Nothing under another C library or a preloaded allocator."""
    if platform.libc_ver()[0] == "glibc" and _preloaded() is None:
        ctypes.CDLL(None).malloc_trim(0)
