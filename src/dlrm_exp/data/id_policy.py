"""Raw ids to table rows, by a sparse feature's id policy (``data.schema.sparse.<f>.id_policy``).

``modulo`` hashes with a stable 64-bit function, never Python's ``hash`` (salted per process):
integers (their two's-complement bits) by SplitMix64's finalizer (Steele, Lea and Flood, "Fast
splittable pseudorandom number generators", OOPSLA 2014), strings by the first 8 bytes of their
BLAKE2b digest (hashlib), read little-endian. The same id gives the same row on every rank,
run and machine.
"""

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dlrm_exp.config import IdPolicy
from dlrm_exp.errors import DataError
from dlrm_exp.util.hashing import splitmix64


def blake2b64(text: str) -> int:
    """The first 8 bytes of BLAKE2b(text as UTF-8), as an unsigned little-endian integer."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


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
    """Table rows (N,) int64 of non-null ``ids`` (integers or strings) under ``policy``.

    Args:
        ids: the ids, without nulls.
        policy: ``strict`` (integer ids in ``[0, num_embeddings)``) or ``modulo`` (stable hash
            modulo ``num_embeddings``).
        num_embeddings: rows of the table.
        where: ``"<file>: column <c>"``, for the error.

    Raises:
        DataError: ``strict`` ids that are strings or outside ``[0, num_embeddings)``, with
            their count and the first such value.
    """
    if pa.types.is_dictionary(ids.type):
        return (
            to_rows(ids.dictionary, policy, num_embeddings, where)[
                ids.indices.to_numpy(zero_copy_only=False)
            ]
            if len(ids)
            else np.zeros(0, dtype=np.int64)
        )
    strings = not pa.types.is_integer(ids.type)
    if policy is IdPolicy.strict:
        if strings:
            raise DataError(
                f"{where} holds strings, but id_policy=strict takes integer rows in "
                f"[0, {num_embeddings}): use id_policy=modulo to hash them"
            )
        rows = ids.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        bad = (rows < 0) | (rows >= num_embeddings)
        if bad.any():
            raise DataError(
                f"{where}: {int(bad.sum())} of {len(rows)} ids outside [0, {num_embeddings}) "
                f"under id_policy=strict (first: {int(rows[bad][0])}); raise num_embeddings or "
                "use id_policy=modulo"
            )
        return rows
    if strings:
        encoded = pc.dictionary_encode(ids)
        unique = np.fromiter(
            (blake2b64(s) for s in encoded.dictionary.to_pylist()),
            dtype=np.uint64,
            count=len(encoded.dictionary),
        )
        hashed = unique[encoded.indices.to_numpy(zero_copy_only=False)]
    else:
        raw = ids.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        hashed = splitmix64(raw.view(np.uint64))
    return (hashed % np.uint64(num_embeddings)).astype(np.int64)
