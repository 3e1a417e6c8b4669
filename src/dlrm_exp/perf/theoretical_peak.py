"""The theoretical matmul peak that bounds the measured one (:mod:`dlrm_exp.perf.peak`).

On CPU: cores used x clock x FLOPs per cycle per core for the dtype.

- Cores used: the process's torch thread count, capped by the physical cores among the CPUs it
  may run on (``os.sched_getaffinity``; hyper-threads of one core share its FMA units).
- Clock: ``/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq`` (kHz), the highest clock a
  core reaches. Without it (most virtual machines) the largest ``cpu MHz`` of
  ``/proc/cpuinfo`` times :data:`TURBO_ALLOWANCE`: that value is the current or the nominal
  clock, below what the cores may boost to, and an upper bound must not be exceeded by a
  correct measurement.
- FLOPs per cycle per core (:data:`FP32_LANES`, :data:`MATRIX_UNITS`), from the flags of
  ``/proc/cpuinfo``: 2 FLOPs per fused multiply-add x vector lanes x 2 FMA ports. Two 512-bit
  FMA ports is the most any x86 core has (Intel 64 and IA-32 Architectures Optimization
  Reference Manual: Skylake-SP and later server cores; AMD Zen 1-5 have two FMA pipes, Zen 4
  splits 512-bit work into two 256-bit halves), so the table is an upper bound everywhere. A
  dtype without its own instructions is converted and computed in fp32, so fp32's number
  bounds it.

On CUDA: the dense (no sparsity) tensor-core or fp32 number of NVIDIA's data sheets for a few
known GPUs (:data:`CUDA_PEAKS`); ``float32`` uses the TF32 number when torch allows TF32 for
matmuls, else the fp32 one. An unknown GPU or CPU has no bound (None).
"""

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

CPUINFO = Path("/proc/cpuinfo")
MAX_FREQ = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")

#: FLOPs of one fused multiply-add per lane, and FMA ports assumed per core (the most of any
#: x86 core: an upper bound).
FLOPS_PER_FMA = 2
FMA_PORTS = 2
#: fp32 lanes of the widest vector unit, by ``/proc/cpuinfo`` flag, widest first: AVX-512
#: 512 bits, AVX / AVX2 256 bits, SSE 128 bits.
FP32_LANES = (("avx512f", 16), ("avx", 8), ("sse", 4))
#: Matrix or wider-than-fp32 units per dtype, by flag, fastest first: (flag, FLOPs per cycle
#: per core, what it is). AMX: 1024 BF16 / FP16 FLOPs per cycle per core (Intel AMX overview,
#: Sapphire Rapids and later). ``vdpbf16ps`` (AVX512_BF16) multiplies two bf16 pairs per fp32
#: lane (2 x 16 lanes x 2 x 2 ports); AVX512_FP16 has 32 fp16 lanes per 512-bit vector.
MATRIX_UNITS = {
    "bfloat16": (
        ("amx_bf16", 1024, "AMX-BF16 tiles"),
        ("avx512_bf16", 128, "AVX512-BF16 vdpbf16ps: 2 bf16 pairs x 16 lanes x 2 x 2 ports"),
    ),
    "float16": (
        ("amx_fp16", 1024, "AMX-FP16 tiles"),
        ("avx512_fp16", 128, "AVX512-FP16: 32 lanes x 2 x 2 ports"),
    ),
}
#: Headroom over a clock read from ``cpu MHz`` (current or nominal, not the maximum): the
#: largest max-turbo / base ratio of current server CPUs is below 2 (e.g. Xeon Platinum 8480+,
#: 2.0 -> 3.8 GHz, Intel ARK; EPYC 7B13 2.45 -> 3.5 GHz).
TURBO_ALLOWANCE = 2.0

#: Dense peak FLOP/s of known GPUs from NVIDIA's data sheets (sparsity numbers halved), by a
#: substring of ``torch.cuda.get_device_name``, most specific first: fp32, tf32, bf16 / fp16.
CUDA_PEAKS = (
    ("H100 PCIe", {"float32": 51e12, "tf32": 378e12, "bfloat16": 756.5e12, "float16": 756.5e12}),
    ("H100", {"float32": 67e12, "tf32": 494.5e12, "bfloat16": 989.5e12, "float16": 989.5e12}),
    ("H200", {"float32": 67e12, "tf32": 494.5e12, "bfloat16": 989.5e12, "float16": 989.5e12}),
    ("A100", {"float32": 19.5e12, "tf32": 156e12, "bfloat16": 312e12, "float16": 312e12}),
    ("V100", {"float32": 15.7e12, "tf32": 15.7e12, "bfloat16": 15.7e12, "float16": 125e12}),
)


@dataclass(frozen=True)
class TheoreticalPeak:
    """An upper bound of the matmul rate one process can reach.

    Attributes:
        flops_per_sec: the bound, FLOP/s.
        basis: how it was computed, e.g. ``2 cores x 3.50 GHz (cpuinfo_max_freq) x 32
            FLOP/cycle (avx: 8 fp32 lanes x 2 FMA x 2 ports)``.
    """

    flops_per_sec: float
    basis: str


def parse_cpuinfo(text: str) -> list[dict[str, str]]:
    """The processor blocks of a ``/proc/cpuinfo`` text, one ``{field: value}`` per CPU."""
    blocks: list[dict[str, str]] = []
    for chunk in text.strip().split("\n\n"):
        block = {}
        for line in chunk.splitlines():
            name, sep, value = line.partition(":")
            if sep:
                block[name.strip()] = value.strip()
        if block:
            blocks.append(block)
    return blocks


def flops_per_cycle(flags: Iterable[str], dtype: str) -> tuple[int, str] | None:
    """FLOPs per cycle of one core in ``dtype`` matmuls, and what gives them (see the module
    docstring for the table and its sources); None for an unknown dtype or vector unit."""
    flags = set(flags)
    if dtype not in ("float32", "bfloat16", "float16"):
        return None
    for flag, flops, what in MATRIX_UNITS.get(dtype, ()):
        if flag in flags:
            return flops, what
    for flag, lanes in FP32_LANES:
        if flag in flags:
            convert = "" if dtype == "float32" else f", {dtype} computed in fp32"
            what = f"{flag}: {lanes} fp32 lanes x {FLOPS_PER_FMA} FMA x {FMA_PORTS} ports{convert}"
            return lanes * FLOPS_PER_FMA * FMA_PORTS, what
    return None


def cpu_flags() -> set[str] | None:
    """The ``flags`` of this machine's first CPU in ``/proc/cpuinfo``; None where it cannot be
    read (not Linux) or names none."""
    text = _read(CPUINFO)
    if text is None:
        return None
    flags = next((b["flags"].split() for b in parse_cpuinfo(text) if "flags" in b), None)
    return set(flags) if flags else None


def has_matmul_unit(flags: Iterable[str], dtype: str) -> bool:
    """Whether a CPU with ``flags`` multiplies ``dtype`` (``bfloat16``, ``float16``) in its own
    instructions (:data:`MATRIX_UNITS`), rather than in fp32 after converting."""
    return any(flag in set(flags) for flag, _, _ in MATRIX_UNITS.get(dtype, ()))


def physical_cores(blocks: list[dict[str, str]], allowed: set[int]) -> int:
    """Distinct physical cores (``physical id``, ``core id``) among the ``allowed`` CPUs; the
    number of allowed CPUs when cpuinfo does not say."""
    cores = {
        (b.get("physical id"), b.get("core id"))
        for b in blocks
        if b.get("processor", "").isdigit() and int(b["processor"]) in allowed
    }
    if not cores or (None, None) in cores:
        return len(allowed)
    return len(cores)


def cpu_clock_hz(blocks: list[dict[str, str]], max_freq_khz: str | None) -> tuple[float, str]:
    """The clock bound, Hz, and where it came from: ``cpuinfo_max_freq`` (kHz) when given, else
    the largest ``cpu MHz`` x :data:`TURBO_ALLOWANCE`.

    Raises:
        ValueError: neither gives a clock.
    """
    if max_freq_khz and max_freq_khz.strip().isdigit():
        return int(max_freq_khz) * 1e3, "cpuinfo_max_freq"
    mhz = [float(b["cpu MHz"]) for b in blocks if "cpu MHz" in b]
    if not mhz:
        raise ValueError("no clock in cpuinfo")
    return max(mhz) * 1e6 * TURBO_ALLOWANCE, f"cpu MHz x {TURBO_ALLOWANCE:g} turbo allowance"


def cpu_peak(
    threads: int, dtype: str, cpuinfo: str, max_freq_khz: str | None, allowed: set[int]
) -> TheoreticalPeak | None:
    """The bound of ``threads`` torch threads on the ``allowed`` CPUs, from a ``/proc/cpuinfo``
    text and a ``cpuinfo_max_freq`` text (kHz; None when absent). None when the flags, dtype
    or clock are unknown."""
    blocks = parse_cpuinfo(cpuinfo)
    flags = next((b["flags"].split() for b in blocks if "flags" in b), [])
    per_cycle = flops_per_cycle(flags, dtype)
    if per_cycle is None:
        return None
    try:
        clock, clock_source = cpu_clock_hz(blocks, max_freq_khz)
    except ValueError:
        return None
    cores = min(threads, physical_cores(blocks, allowed))
    flops, what = per_cycle
    return TheoreticalPeak(
        cores * clock * flops,
        f"{cores} cores x {clock / 1e9:.2f} GHz ({clock_source}) x {flops} FLOP/cycle ({what})",
    )


def cuda_peak(name: str, dtype: str, tf32: bool) -> TheoreticalPeak | None:
    """The data-sheet bound of the GPU called ``name`` in ``dtype`` (``tf32``: fp32 matmuls may
    use TF32 tensor cores); None for an unknown GPU or dtype."""
    for model, peaks in CUDA_PEAKS:
        if model in name:
            kind = "tf32" if dtype == "float32" and tf32 else dtype
            if kind not in peaks:
                return None
            return TheoreticalPeak(peaks[kind], f"{model} data sheet, dense {kind}")
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def theoretical_peak(device: torch.device, dtype: torch.dtype) -> TheoreticalPeak | None:
    """The bound of this process on ``device`` in ``dtype`` (CPU: its torch thread count and
    CPU affinity, this machine's ``/proc/cpuinfo``); None when unknown."""
    name = str(dtype).removeprefix("torch.")
    if device.type == "cuda":
        tf32 = torch.backends.cuda.matmul.allow_tf32
        return cuda_peak(torch.cuda.get_device_name(device), name, tf32)
    cpuinfo = _read(CPUINFO)
    if cpuinfo is None:
        return None
    if hasattr(os, "sched_getaffinity"):
        allowed = os.sched_getaffinity(0)
    else:
        allowed = set(range(os.cpu_count() or 1))
    return cpu_peak(torch.get_num_threads(), name, cpuinfo, _read(MAX_FREQ), allowed)
