"""Counter-based random numbers: values that are pure functions of integer keys.

Used where a value must not depend on how work is split (synthetic per-id effects, table
initialization per row and column under any sharding). SplitMix64 finalizer (Steele, Lea and
Flood 2014, "Fast splittable pseudorandom number generators"), vectorized over uint64 numpy
arrays; arithmetic wraps mod 2**64.
"""

import numpy as np

_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finalizer of each uint64 in ``x``."""
    with np.errstate(over="ignore"):
        x = (x + np.uint64(0x9E3779B97F4A7C15)) & _MASK64
        x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK64
        x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK64
        return x ^ (x >> np.uint64(31))


def unit_interval(h: np.ndarray) -> np.ndarray:
    """Uniform (0, 1) float64 from the top 53 bits of uint64 hashes."""
    return ((h >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53


def stream_key(*parts: int) -> np.uint64:
    """One uint64 key from small non-negative integers (seed, feature, ...)."""
    key = np.uint64(0x243F6A8885A308D3)
    with np.errstate(over="ignore"):
        for part in parts:
            key = splitmix64(np.uint64(key) ^ np.uint64(part))
    return np.uint64(key)
