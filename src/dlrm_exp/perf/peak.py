"""The machine's measured peaks: dense matmul FLOP/s and copy bandwidth, cached per machine.

A short probe in the calling process (its device, its torch thread count, the dense
precision's dtype): the best of repeated ``torch.mm`` of two n x n matrices (2 n^3 FLOPs each;
n = 1024 on CPU, 8192 on CUDA) and of ``Tensor.copy_`` of a 64 MiB buffer (read + write: 2 x
64 MiB each), for about 0.3 s each. On CUDA the probe runs on the device after a
synchronize, so it measures what this GPU reaches, not its data-sheet number.

The result is cached in ``$DLRM_EXP_CACHE_DIR/peak.json`` (default
``~/.cache/dlrm_exp/peak.json``) under a key of host, processor or GPU name, torch version,
thread count and dtype, so the probe runs once per machine and setting.
"""

import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from dlrm_exp.util.files import write_json_atomic

PROBE_SECONDS = 0.3
COPY_BYTES = 64 * 2**20


@dataclass(frozen=True)
class Peak:
    """Measured peaks of one process on one device.

    Attributes:
        matmul_flops_per_sec: best ``torch.mm`` rate, FLOP/s.
        copy_bytes_per_sec: best ``copy_`` rate, bytes read + written per second.
        dtype: the matmul dtype (``float32`` / ``bfloat16``).
        key: the cache key (host, processor or GPU, torch, threads, dtype).
    """

    matmul_flops_per_sec: float
    copy_bytes_per_sec: float
    dtype: str
    key: str


def cache_file() -> Path:
    """Where measured peaks are cached."""
    root = os.environ.get("DLRM_EXP_CACHE_DIR") or Path.home() / ".cache" / "dlrm_exp"
    return Path(root) / "peak.json"


def _processor(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def machine_key(device: torch.device, dtype: torch.dtype) -> str:
    """The cache key of a probe in this process on ``device``."""
    threads = torch.get_num_threads() if device.type == "cpu" else 0
    return (
        f"{platform.node()} | {_processor(device)} | torch {torch.__version__} | "
        f"{threads} threads | {_dtype_name(dtype)}"
    )


def _best_rate(work: float, run: Callable[[], None], sync: Callable[[], None]) -> float:
    """The best ``work`` per second of ``run`` over about :data:`PROBE_SECONDS`."""
    run()  # warm-up
    sync()
    best, spent = 0.0, 0.0
    while spent < PROBE_SECONDS:
        start = time.perf_counter()
        run()
        sync()
        elapsed = time.perf_counter() - start
        spent += elapsed
        best = max(best, work / elapsed)
    return best


def probe(device: torch.device, dtype: torch.dtype = torch.float32) -> Peak:
    """Measure the matmul and copy peaks on ``device`` now (no cache)."""
    n = 8192 if device.type == "cuda" else 1024
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    src = torch.empty(COPY_BYTES // 4, device=device)
    dst = torch.empty_like(src)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    matmul = _best_rate(2.0 * n**3, lambda: torch.mm(a, b), sync)
    copy = _best_rate(2.0 * COPY_BYTES, lambda: dst.copy_(src), sync)
    return Peak(matmul, copy, _dtype_name(dtype), machine_key(device, dtype))


def measured_peak(device: torch.device, dtype: torch.dtype = torch.float32) -> Peak:
    """The cached peak of this machine and setting, probing (and caching) it the first time.
    An unreadable cache is probed again; one that cannot be written is left as it is."""
    key = machine_key(device, dtype)
    path = cache_file()
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        cached = {}
    if isinstance(cached.get(key), dict):
        try:
            return Peak(**cached[key])
        except TypeError:
            pass
    peak = probe(device, dtype)
    cached[key] = asdict(peak)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, cached)
    except OSError:
        pass
    return peak
