"""Raw ids to table rows, by a sparse feature's id policy (``data.schema.sparse.<f>.id_policy``).

``modulo`` hashes with a stable 64-bit function, never Python's ``hash`` (salted per process):
integers (their two's-complement bits) by SplitMix64's finalizer (Steele, Lea and Flood, "Fast
splittable pseudorandom number generators", OOPSLA 2014); strings by a polynomial hash of their
UTF-8 bytes, ``sum(b_i * P**i) mod 2**64`` with ``P`` the 64-bit FNV prime, mixed with the
length and finished by SplitMix64 (see :func:`string_hash64`), vectorized over Arrow's buffers.
The same id gives the same row on every rank, run and machine.

``hex_modulo`` is TorchRec's Criteo rule ``int(id, 16) % num_embeddings``: strings are read
as hexadecimal digits (vectorized over Arrow's buffers, see :func:`hex_values`), integers as
they are.

``managed_collision`` hashes the same way but keeps 63 bits
(:data:`~dlrm_exp.config.model.MANAGED_ID_RANGE`) instead of taking the modulo: those are the
raw ids TorchRec's ``MCHManagedCollisionModule`` maps to rows, spread evenly over its input
range, which row-wise sharding splits between the ranks.
"""

import numpy as np
import pyarrow as pa

from dlrm_exp.config import IdPolicy
from dlrm_exp.config.model import MANAGED_ID_RANGE
from dlrm_exp.errors import DataError
from dlrm_exp.util.hashing import splitmix64

#: The 64-bit FNV prime: the base of the polynomial string hash.
FNV_PRIME = np.uint64(0x100000001B3)


#: Hexadecimal digit values by ASCII code; 255 marks a byte that is not a digit.
_HEX_DIGITS = np.full(256, 255, dtype=np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX_DIGITS[_c] = _i
    _HEX_DIGITS[ord(chr(_c).upper())] = _i
#: Most hexadecimal digits of an id: 16 (64 bits).
MAX_HEX_DIGITS = 16


#: Said after a strict policy's advice, which only a training run can follow: evaluate and
#: predict refuse a checkpoint's tables with other rows or policies (own-data review: the
#: advice led to a second refusal).
_TRAINED = (
    " when training; a trained model keeps its tables' rows and policies: to score these "
    "rows with its checkpoint, leave them out of the file, or train again with that change"
)


def _string_bytes(strings: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The UTF-8 bytes of a string array without nulls: ``(data, offsets, lengths, position)``:
    all bytes (M,) uint8, each string's start (N + 1,) int64 into them, its length (N,) and each
    byte's position (M,) within its string."""
    offset_type = np.int64 if pa.types.is_large_string(strings.type) else np.int32
    n = len(strings)
    _, offsets_buffer, data_buffer = strings.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=offset_type)[
        strings.offset : strings.offset + n + 1
    ].astype(np.int64)
    first, last = int(offsets[0]), int(offsets[-1])
    data = (
        np.frombuffer(data_buffer, dtype=np.uint8)[first:last]
        if data_buffer
        else np.zeros(0, np.uint8)
    )
    offsets -= first
    lengths = np.diff(offsets)
    position = np.arange(last - first) - np.repeat(offsets[:-1], lengths)
    return data, offsets, lengths, position


def hex_values(strings: pa.Array, where: str) -> np.ndarray:
    """The hexadecimal strings (without nulls) as integers (N,) uint64, as Python's
    ``int(s or "0", 16)`` (upper or lower case; no sign, prefix or spaces).

    Raises:
        DataError: strings that are not 1 to 16 hexadecimal digits (or empty), with their
            count and the first one.
    """
    n = len(strings)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    data, offsets, lengths, position = _string_bytes(strings)
    digits = _HEX_DIGITS[data]
    owner = np.repeat(np.arange(n), lengths)
    bad = (np.bincount(owner[digits == 255], minlength=n) > 0) | (lengths > MAX_HEX_DIGITS)
    if bad.any():
        first = strings[int(np.flatnonzero(bad)[0])].as_py()
        raise DataError(
            f"{where}: {int(bad.sum())} of {n} ids are not hexadecimal numbers of at most "
            f"{MAX_HEX_DIGITS} digits (first: {first!r}) under id_policy=hex_modulo; use "
            "id_policy=modulo to hash them as strings"
        )
    shift = (4 * (np.repeat(lengths, lengths) - 1 - position)).astype(np.uint64)
    terms = digits.astype(np.uint64) << shift
    sums = np.concatenate([np.zeros(1, np.uint64), np.cumsum(terms, dtype=np.uint64)])
    return sums[offsets[1:]] - sums[offsets[:-1]]


def string_hash64(strings: pa.Array) -> np.ndarray:
    """Stable 64-bit hashes (N,) uint64 of a string array without nulls:
    ``splitmix64(poly ^ splitmix64(length))`` with ``poly = sum(b_i * FNV_PRIME**i) mod 2**64``
    over the UTF-8 bytes ``b_i``."""
    n = len(strings)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    data, offsets, lengths, position = _string_bytes(strings)
    longest = int(lengths.max()) if n else 0
    with np.errstate(over="ignore"):
        steps = np.full(max(longest - 1, 0), FNV_PRIME, dtype=np.uint64)
        powers = np.concatenate([np.ones(1, np.uint64), np.cumprod(steps, dtype=np.uint64)])
        terms = data.astype(np.uint64) * powers[position]
        sums = np.concatenate([np.zeros(1, np.uint64), np.cumsum(terms, dtype=np.uint64)])
        poly = sums[offsets[1:]] - sums[offsets[:-1]]
    return splitmix64(poly ^ splitmix64(lengths.astype(np.uint64)))


#: The policies that hash an integer id and the same digits as a string to different rows
#: (``hex_modulo`` takes integers as the decoded value of the hexadecimal string, so
#: preprocessed integer days and raw TSV strings agree; ``strict`` refuses strings).
KIND_SENSITIVE = (IdPolicy.modulo, IdPolicy.managed_collision)


def is_id_type(arrow_type: pa.DataType) -> bool:
    """Whether a column of ``arrow_type`` holds ids: integers, strings or their dictionary."""
    if pa.types.is_dictionary(arrow_type):
        return is_id_type(arrow_type.value_type)
    return (
        pa.types.is_integer(arrow_type)
        or pa.types.is_string(arrow_type)
        or pa.types.is_large_string(arrow_type)
    )


def to_rows(ids: pa.Array, policy: IdPolicy, num_embeddings: int, where: str) -> np.ndarray:
    """Table rows (N,) int64 of non-null ``ids`` (integers or strings) under ``policy`` (raw
    ids under ``managed_collision``).

    Args:
        ids: the ids, without nulls.
        policy: ``strict`` (integer ids in ``[0, num_embeddings)``), ``modulo`` (stable hash
            modulo ``num_embeddings``), ``hex_modulo`` (``int(id, 16) % num_embeddings``,
            integers as they are) or ``managed_collision`` (the stable hash modulo
            :data:`~dlrm_exp.config.model.MANAGED_ID_RANGE`: raw ids for the table's
            managed-collision module, which maps them to rows).
        num_embeddings: rows of the table.
        where: ``"<file>: column <c>"``, for the error.

    Raises:
        DataError: ``strict`` ids that are strings or outside ``[0, num_embeddings)``, with
            their count and the first such value; ``hex_modulo`` strings that are not
            hexadecimal (see :func:`hex_values`).
    """
    if pa.types.is_dictionary(ids.type):  # the values used, not unused dictionary entries
        ids = ids.dictionary_decode()
    strings = not pa.types.is_integer(ids.type)
    if policy is IdPolicy.strict:
        if strings:
            raise DataError(
                f"{where} holds strings, but id_policy=strict takes integer rows in "
                f"[0, {num_embeddings}): use id_policy=modulo to hash them{_TRAINED}"
            )
        raw = ids.to_numpy(zero_copy_only=False)
        rows = raw.astype(np.int64, copy=False)
        if pa.types.is_unsigned_integer(ids.type):  # ids of 2**63 and more would wrap negative
            bad = raw >= num_embeddings
        else:
            bad = (rows < 0) | (rows >= num_embeddings)
        if bad.any():
            raise DataError(
                f"{where}: {int(bad.sum())} of {len(rows)} ids outside [0, {num_embeddings}) "
                f"under id_policy=strict (first: {int(raw[bad][0])}); give the table more rows "
                "(data.schema's num_embeddings; for Criteo files model.num_embeddings_per_feature) "
                "or hash the ids (id_policy=modulo; hex_modulo for Criteo's hexadecimal ids)"
                + _TRAINED
            )
        return rows
    if policy is IdPolicy.hex_modulo:
        if strings:
            return (hex_values(ids, where) % np.uint64(num_embeddings)).astype(np.int64)
        raw = ids.to_numpy(zero_copy_only=False)
        if raw.dtype == np.uint64:  # Python's % on values beyond int64
            return (raw % np.uint64(num_embeddings)).astype(np.int64)
        return np.mod(raw.astype(np.int64, copy=False), num_embeddings)
    if strings:
        hashed = string_hash64(ids)
    else:
        raw = ids.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        hashed = splitmix64(raw.view(np.uint64))
    if policy is IdPolicy.managed_collision:
        return (hashed % np.uint64(MANAGED_ID_RANGE)).astype(np.int64)
    return (hashed % np.uint64(num_embeddings)).astype(np.int64)
