"""The machine's measured peaks: dense matmul FLOP/s and copy bandwidth, cached per machine.

A short probe in the calling process (its device, its torch thread count, the dense
precision's dtype): the best rate of repeated ``torch.mm`` of two n x n matrices (2 n^3 FLOPs
each) over several sizes (:data:`CPU_SIZES`, :data:`CUDA_SIZES`, on a GPU those that fit in
its free memory; a size is skipped once one
product would take longer than twice :data:`PROBE_SECONDS` at the best rate so far), and of
``Tensor.copy_`` of a 64 MiB buffer (read + write: 2 x 64 MiB each), about
:data:`PROBE_SECONDS` each: well under a second on CPU. On CUDA the probe runs on the device
after a synchronize, so it measures what this GPU reaches, not its data-sheet number
(:mod:`dlrm_exp.perf.theoretical_peak` has that).

The result is cached in ``$DLRM_EXP_CACHE_DIR/peak.json`` (default
``~/.cache/dlrm_exp/peak.json``) under a key of host, processor or GPU name, torch version,
thread count and dtype, with the UTC time it was measured (processes that probe at once merge
their entries under ``peak.json.lock``). A cached reading is used only while
it is younger than :data:`MAX_AGE` and a spot check (one matmul size and the copy, about
:data:`SPOT_SECONDS` each) agrees with its rates within :data:`SPOT_TOLERANCE`; otherwise it is
measured again. The returned :class:`Peak` says which happened and why.
"""

import logging
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import torch

from dlrm_exp.util.files import read_json_object
from dlrm_exp.util.user_cache import cache_path, store_entries

log = logging.getLogger(__name__)

#: Matrix sizes n of the matmul probe, smallest first.
CPU_SIZES = (512, 1024, 2048)
CUDA_SIZES = (4096, 8192, 16384)
#: Seconds spent on each matmul size and on the copy (after one warm-up run of the first size
#: and of the copy).
PROBE_SECONDS = 0.15
COPY_BYTES = 64 * 2**20
#: A cached reading older than this is measured again.
MAX_AGE = timedelta(days=1)
#: Seconds of the spot check of a cached reading, and the relative disagreement with the
#: cached rate beyond which the peak is measured again.
SPOT_SECONDS = 0.1
SPOT_TOLERANCE = 0.2
PROBED = "probed"
CACHED = "cached"


@dataclass(frozen=True)
class Peak:
    """Measured peaks of one process on one device, with their provenance.

    Attributes:
        matmul_flops_per_sec: best ``torch.mm`` rate over the sizes, FLOP/s.
        copy_bytes_per_sec: best ``copy_`` rate, bytes read + written per second.
        dtype: the matmul dtype (``float32`` / ``bfloat16``).
        key: the cache key (host, processor or GPU, torch, threads, dtype).
        measured_at: when the probe ran, ISO 8601 in UTC (``2025-01-31T12:00:00+00:00``).
        matmul_by_size: the best rate of each size probed, FLOP/s, by n (as a string).
        source: ``probed`` (measured in this process) or ``cached`` (read from the cache and
            confirmed by a spot check); not stored in the cache.
        reason: why it was probed, or the spot check that confirmed the cached reading.
    """

    matmul_flops_per_sec: float
    copy_bytes_per_sec: float
    dtype: str
    key: str
    measured_at: str
    matmul_by_size: dict[str, float] = field(default_factory=dict)
    source: str = PROBED
    reason: str = ""

    def cache_entry(self) -> dict[str, Any]:
        """What the cache stores of it: the measurement, not how this process got it."""
        entry = asdict(self)
        del entry["source"], entry["reason"]
        return entry


def cache_file() -> Path:
    """Where measured peaks are cached (:mod:`dlrm_exp.util.user_cache`)."""
    return cache_path("peak.json")


def _now() -> datetime:
    return datetime.now(UTC)


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


def _sync(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def _best_rate(
    work: float,
    run: Callable[[], None],
    sync: Callable[[], None],
    seconds: float,
    warm_up: bool = True,
) -> float:
    """The best ``work`` per second of ``run`` over about ``seconds`` (at least one timed run,
    after one untimed run when ``warm_up``)."""
    if warm_up:
        run()
        sync()
    best, spent = 0.0, 0.0
    while spent < seconds:
        start = time.perf_counter()
        run()
        sync()
        elapsed = time.perf_counter() - start
        spent += elapsed
        best = max(best, work / elapsed)
    return best


def matmul_rate(
    device: torch.device, dtype: torch.dtype, n: int, seconds: float, warm_up: bool = True
) -> float:
    """The best FLOP/s of ``torch.mm`` of two n x n ``dtype`` matrices over about ``seconds``."""
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    return _best_rate(2.0 * n**3, lambda: torch.mm(a, b), _sync(device), seconds, warm_up)


def copy_rate(device: torch.device, seconds: float) -> float:
    """The best bytes/s (read + write) of ``Tensor.copy_`` of a :data:`COPY_BYTES` buffer,
    both buffers written before, over about ``seconds``. On a CPU whose last-level cache holds
    both (128 MiB), that is the cache's bandwidth, not memory's."""
    # Written first: an untouched CPU buffer is the kernel's shared zero page, whose "reads"
    # come from one cached page (twice the real rate: review).
    src = torch.ones(COPY_BYTES // 4, device=device)
    dst = torch.zeros_like(src)
    return _best_rate(2.0 * COPY_BYTES, lambda: dst.copy_(src), _sync(device), seconds)


class PeakUnavailable(RuntimeError):
    """No matmul size of the probe fits in the GPU memory free beside the run's tables."""


def sizes_that_fit(sizes: tuple[int, ...], dtype: torch.dtype, free_bytes: int) -> list[int]:
    """The matmul sizes whose probe takes at most half of ``free_bytes``: two operands and the
    product in ``dtype``, plus the float32 operand each is drawn as when ``dtype`` is another
    (possibly none)."""
    itemsize = dtype.itemsize
    per_element = 3 * itemsize + (0 if itemsize == 4 else 4)
    return [n for n in sizes if n * n * per_element <= free_bytes // 2]


def probe_sizes(device: torch.device, dtype: torch.dtype) -> list[int]:
    """The matmul sizes to probe on ``device``: on a GPU those that fit beside what it holds
    (the probe runs after training, the tables still resident, in what the planner left
    free; the largest size takes 3 GiB in float32), its cache emptied first.

    Raises:
        PeakUnavailable: on a GPU, not even the smallest size fits.
    """
    if device.type != "cuda":
        return list(CPU_SIZES)
    torch.cuda.empty_cache()
    free = torch.cuda.mem_get_info(device)[0]
    sizes = sizes_that_fit(CUDA_SIZES, dtype, free)
    if not sizes:
        raise PeakUnavailable(
            f"no matmul probe size ({min(CUDA_SIZES)} and up) fits in the {free / 2**30:.2f} "
            "GiB this GPU has free beside the tables: the peak and its fractions are not measured"
        )
    return sizes


def memory_limited(device: torch.device, sizes: list[int]) -> bool:
    """Whether the GPU's free memory left sizes out of ``sizes`` (:func:`probe_sizes`): such a
    probe is not cached, as a run with room for every size would take its lower rates for
    the machine's."""
    return device.type == "cuda" and len(sizes) < len(CUDA_SIZES)


def probe(
    device: torch.device, dtype: torch.dtype = torch.float32, sizes: list[int] | None = None
) -> Peak:
    """Measure the matmul and copy peaks on ``device`` now (no cache)."""
    measured_at = _now().isoformat(timespec="seconds")
    rates: dict[str, float] = {}
    for n in probe_sizes(device, dtype) if sizes is None else sizes:
        if rates and 2.0 * n**3 / max(rates.values()) > 2 * PROBE_SECONDS:
            break  # one product would take longer than twice the budget (slow dtype)
        rates[str(n)] = matmul_rate(device, dtype, n, PROBE_SECONDS, warm_up=not rates)
    return Peak(
        max(rates.values()),
        copy_rate(device, PROBE_SECONDS),
        _dtype_name(dtype),
        machine_key(device, dtype),
        measured_at,
        rates,
    )


def spot_size(cached: Peak, limit: int | None = None) -> int:
    """The size the spot check of ``cached`` uses: the largest probed size (at most ``limit``,
    what fits in memory now) of which one product takes at most a quarter of
    :data:`SPOT_SECONDS` at its cached rate, else the smallest."""
    sizes = sorted(int(n) for n in cached.matmul_by_size)
    fits = [
        n
        for n in sizes
        if 2.0 * n**3 / cached.matmul_by_size[str(n)] <= SPOT_SECONDS / 4
        and (limit is None or n <= limit)
    ]
    return max(fits, default=sizes[0])


def check_cached(
    cached: Peak, device: torch.device, dtype: torch.dtype, limit: int | None = None
) -> tuple[bool, str]:
    """Whether ``cached`` can still be used, and why (its age, then a spot check of one matmul
    size, at most ``limit`` (default: the largest :func:`probe_sizes` allows), and of the copy
    bandwidth, each within :data:`SPOT_TOLERANCE` of the cached rate)."""
    age = _now() - datetime.fromisoformat(cached.measured_at)
    if not timedelta(0) <= age <= MAX_AGE:
        return False, f"cached reading of {cached.measured_at} is {age} old (limit {MAX_AGE})"
    n = spot_size(cached, max(probe_sizes(device, dtype)) if limit is None else limit)
    checks = (  # measured one after the other: a failed one ends the check (a probe follows)
        (f"n={n}", lambda: matmul_rate(device, dtype, n, SPOT_SECONDS),
         cached.matmul_by_size[str(n)], "GFLOP/s"),
        ("copy", lambda: copy_rate(device, SPOT_SECONDS), cached.copy_bytes_per_sec, "GB/s"),
    )  # fmt: skip
    lines = []
    for what, measure, ref, unit in checks:
        rate = measure()
        change = rate / ref - 1
        lines.append(
            f"{what}: {rate / 1e9:.1f} {unit} against the cached {ref / 1e9:.1f} {unit} "
            f"({change:+.0%})"
        )
        if abs(change) > SPOT_TOLERANCE:
            break
    return abs(change) <= SPOT_TOLERANCE, (  # the last one measured: all passed, or failed
        f"spot check {'; '.join(lines)} of {cached.measured_at} (limit +-{SPOT_TOLERANCE:.0%})"
    )


def _cached_peak(entry: Any) -> Peak | None:
    """A cache entry as a :class:`Peak`; None when it is missing or malformed (an older
    format, or edited: a date without its UTC offset, a rate that is not a positive number)."""
    if not isinstance(entry, dict):
        return None
    try:
        peak = Peak(**entry)
        if datetime.fromisoformat(peak.measured_at).tzinfo is None:
            return None
        if not peak.matmul_by_size or not all(str(int(n)) == n for n in peak.matmul_by_size):
            return None
        rates = (peak.matmul_flops_per_sec, peak.copy_bytes_per_sec, *peak.matmul_by_size.values())
        if not all(_positive(rate) for rate in rates):
            return None
    except (TypeError, ValueError):
        return None
    return peak


def _positive(value: Any) -> bool:
    """A finite number above 0 (not a bool or a string)."""
    return type(value) in (int, float) and 0 < value < float("inf")


def measured_peak(device: torch.device, dtype: torch.dtype = torch.float32) -> Peak:
    """The peak of this machine and setting: the cached one when young enough and confirmed by
    a spot check, else probed now (and cached, unless GPU memory left sizes out). An
    unreadable cache is probed again; one that cannot be written is left as it is.

    Raises:
        PeakUnavailable: see :func:`probe_sizes`.
    """
    sizes = probe_sizes(device, dtype)  # the GPU's free memory asked once
    limited = memory_limited(device, sizes)
    key = machine_key(device, dtype)
    path = cache_file()
    cached = read_json_object(path) or {}
    entry = _cached_peak(cached.get(key))
    reason = "no cached reading"
    if entry is not None:
        usable, reason = check_cached(entry, device, dtype, max(sizes))
        if usable:
            return replace(entry, source=CACHED, reason=reason)
    log.info("measuring the %s matmul peak: %s", _dtype_name(dtype), reason)
    peak = replace(probe(device, dtype, sizes), source=PROBED, reason=reason)
    if limited:
        log.info("the peak probe left out sizes that did not fit in GPU memory: not cached")
        return peak
    store_entries(path, {key: peak.cache_entry()})
    return peak
