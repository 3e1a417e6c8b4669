"""Write Criteo-format TSV click logs: for benchmarks, tests and trying the pipeline without
the real data.

The rows follow the Criteo Display Advertising Challenge layout (``label I1..I13 C1..C26``,
tab-separated, ``C*`` as 8 lower-case hex digits) with the real logs' quirks at chosen rates:
empty fields, negative counts, and rows whose trailing empty fields were stripped. Values are
random, not a model of the real distribution: use them for speed and format checks, not for
quality numbers.
"""

import gzip
from pathlib import Path

import numpy as np

from dlrm_exp.config import CRITEO_NUM_DENSE, CRITEO_NUM_SPARSE

_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def hex_digits(values: np.ndarray) -> np.ndarray:
    """uint32 (N,) -> (N, 8) uint8 ASCII lower-case hex digits: Criteo's spelling of an id."""
    shifts = np.arange(28, -1, -4, dtype=np.uint32)
    return _HEX[(values[:, None] >> shifts) & 0xF]


def criteo_lines(
    num_rows: int,
    seed: int = 0,
    empty_rate: float = 0.05,
    strip_trailing_rate: float = 0.0,
    positive_rate: float = 0.25,
    vocab_size: int = 100_000,
) -> list[str]:
    """``num_rows`` Criteo-format lines (without newlines).

    Args:
        num_rows: rows to make.
        seed: numpy seed; the same arguments give the same lines.
        empty_rate: probability that a dense or categorical field is empty.
        strip_trailing_rate: probability that a row loses its trailing empty fields (set the
            last three categoricals empty and strip them, as about half of the real rows are).
        positive_rate: probability of label 1.
        vocab_size: distinct categorical values per feature (hashes of ``0..vocab_size-1``).
    """
    rng = np.random.default_rng(seed)
    labels = (rng.random(num_rows) < positive_rate).astype(np.int64)
    dense = np.minimum(rng.geometric(0.05, size=(num_rows, CRITEO_NUM_DENSE)) - 2, 50_000)
    ids = rng.zipf(1.2, size=(num_rows, CRITEO_NUM_SPARSE)) % vocab_size
    feature_salt = rng.integers(0, 2**32, size=CRITEO_NUM_SPARSE, dtype=np.uint64)
    hashes = ((ids.astype(np.uint64) * 2654435761 + feature_salt) % 2**32).astype(np.uint32)
    hex_rows = hex_digits(hashes.reshape(-1)).reshape(num_rows, CRITEO_NUM_SPARSE, 8)
    dense_empty = rng.random((num_rows, CRITEO_NUM_DENSE)) < empty_rate
    sparse_empty = rng.random((num_rows, CRITEO_NUM_SPARSE)) < empty_rate
    strip = rng.random(num_rows) < strip_trailing_rate
    sparse_empty[strip, -3:] = True
    lines = []
    for i in range(num_rows):
        fields = [str(labels[i])]
        fields += ["" if e else str(v) for v, e in zip(dense[i], dense_empty[i], strict=True)]
        fields += [
            "" if e else h.tobytes().decode()
            for h, e in zip(hex_rows[i], sparse_empty[i], strict=True)
        ]
        line = "\t".join(fields)
        lines.append(line.rstrip("\t") if strip[i] else line)
    return lines


def write_criteo_tsv(path: Path, num_rows: int, **kwargs: float) -> Path:
    """Write :func:`criteo_lines` to ``path`` (gzip-compressed when it ends in ``.gz``)."""
    text = "\n".join(criteo_lines(num_rows, **kwargs)) + "\n"  # type: ignore[arg-type]
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".gz":
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path
