"""One block of a Criteo TSV file, parsed and written by whichever process runs it.

``mode=preprocess`` cuts a plain file into byte ranges; a worker reads its own range (a line
belongs to the block holding its first byte), parses it (:func:`~.tsv_parse.convert_block`)
and writes its valid rows straight into the day's npy files at their row offset. Only a small
:class:`BlockResult` travels back, so the coordinating process neither copies the input nor
the output. Gzip files cannot be cut by offset: their blocks are decompressed by the
coordinator and sent as bytes, and written the same way.

The row offset of block ``i`` is known once block ``i - 1`` knows its valid rows: a chain of
shared counters (:func:`make_chain`, installed in each worker by :func:`install_chain`) hands
it on, so parsing runs in parallel and only the claim of the offset is in order.
"""

import multiprocessing
import os
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

import numpy as np

from dlrm_exp.data.preprocess.npy_stream import NpyRowFile
from dlrm_exp.data.preprocess.tsv_parse import (
    BOM,
    MAX_LINE_BYTES,
    ParsedBlock,
    convert_block,
    line_too_long,
    parse_pieces,
)
from dlrm_exp.errors import DataError

_RING = 64  # chain slots: more than the blocks ever in flight
_chain: tuple[Any, Any, Any] | None = None


@dataclass
class BlockResult:
    """What the coordinator needs of a written block.

    Attributes:
        num_lines: lines in the block, valid or not.
        num_valid: rows written.
        num_padded: written rows that had fewer than 40 fields.
        bad_lines: (num_bad,) int32 rejected lines, 0-based within the block.
        bad_reasons: (num_bad,) int8 their reasons (indices into ``tsv_parse.REASONS``).
        dense_min: smallest raw count written (for ``dense_transform=torchrec``), else None.
    """

    num_lines: int
    num_valid: int
    num_padded: int
    bad_lines: np.ndarray
    bad_reasons: np.ndarray
    dense_min: int | None


def make_chain(ctx: BaseContext | None = None) -> tuple[Any, Any, Any]:
    """Shared ``(sequence, rows_after, condition)`` ring for :func:`_claim_rows`."""
    ctx = ctx or multiprocessing.get_context("fork")
    return (
        ctx.Array("q", [-1] * _RING, lock=False),
        ctx.Array("q", _RING, lock=False),
        ctx.Condition(),
    )


def install_chain(chain: tuple[Any, Any, Any]) -> None:
    """Pool initializer: the chain this process claims row offsets from."""
    global _chain
    _chain = chain


def _claim_rows(seq_no: int, first_of_file: bool, count: int) -> int:
    """Row offset of block ``seq_no`` (0 for a file's first block), after block
    ``seq_no - 1`` claimed its own; publishes the offset after this block."""
    if _chain is None:
        install_chain(make_chain())
    assert _chain is not None
    sequence, rows_after, cond = _chain
    with cond:
        start = 0
        if not first_of_file:
            prev = (seq_no - 1) % _RING
            while sequence[prev] != seq_no - 1:
                cond.wait()
            start = rows_after[prev]
        rows_after[seq_no % _RING] = start + count
        sequence[seq_no % _RING] = seq_no
        cond.notify_all()
    return start


def read_range(path: Path, start: int, end: int) -> bytes:
    """The lines of ``path`` whose first byte lies in ``[start, end)``, each ending in
    ``\\n`` (supplied for a last line without one).

    Raises:
        DataError: the file cannot be read, or its last line here runs on over
            :data:`~dlrm_exp.data.preprocess.tsv_parse.MAX_LINE_BYTES` (a file with ``\\r``
            line ends: read whole into one worker, it ran out of memory).
    """
    try:
        with open(path, "rb") as f:
            f.seek(max(start - 1, 0))
            data = f.read(end - max(start - 1, 0))
            if start > 0:  # the line holding byte start - 1 is the previous block's
                cut = data.find(b"\n")
                data = data[cut + 1 :] if cut >= 0 else b""
            else:  # a UTF-8 byte-order mark is no row data (as iter_line_chunks drops it)
                data = data.removeprefix(BOM)
            if data and not data.endswith(b"\n"):
                tail = [data]
                unfinished = len(data) - data.rfind(b"\n") - 1  # bytes of the last line so far
                line_start = f.tell() - unfinished
                while True:
                    if unfinished > MAX_LINE_BYTES:
                        raise line_too_long(
                            path, f"the line at byte {line_start:,}", b"".join(tail)
                        )
                    chunk = f.read(1 << 16)
                    unfinished += len(chunk)
                    newline = chunk.find(b"\n")
                    if newline >= 0 or not chunk:
                        tail.append(chunk[: newline + 1] if newline >= 0 else b"\n")
                        break
                    tail.append(chunk)
                data = b"".join(tail)
    except OSError as err:
        raise DataError(f"{path}: cannot read ({err})") from None
    return data


def run_block(
    seq_no: int,
    first_of_file: bool,
    source: tuple[Path, int, int] | bytes,
    outputs: tuple[NpyRowFile, NpyRowFile, NpyRowFile],
    log1p: bool,
    table_sizes: tuple[int, ...] | None,
    name: str,
) -> BlockResult:
    """Read (a ``(path, start, end)`` range) or take (bytes) one block, parse it, write its
    rows into ``outputs`` (dense, sparse, labels) at its offset.

    Raises:
        DataError: the block is not text (NUL bytes) or cannot be read; ``name`` is the file
            named in the message.
    """
    try:
        data = read_range(*source) if isinstance(source, tuple) else source
        pieces: list[ParsedBlock] = [
            convert_block(piece, log1p, table_sizes) for piece in parse_pieces(data, name)
        ]
    except BaseException:
        _claim_rows(seq_no, first_of_file, 0)  # the next block must not wait for this one
        raise
    start = _claim_rows(seq_no, first_of_file, sum(len(p.labels) for p in pieces))
    for piece in pieces:
        for output, rows in zip(outputs, (piece.dense, piece.sparse, piece.labels), strict=True):
            output.write_rows(start, rows)
        start += len(piece.labels)
    reasons = np.concatenate([p.reasons for p in pieces]) if pieces else np.zeros(0, np.int8)
    bad = np.flatnonzero(reasons >= 0).astype(np.int32)
    mins = [int(p.dense.min()) for p in pieces if len(p.dense)]
    return BlockResult(
        num_lines=len(reasons),
        num_valid=sum(len(p.labels) for p in pieces),
        num_padded=sum(p.num_padded for p in pieces),
        bad_lines=bad,
        bad_reasons=reasons[bad],
        dense_min=min(mins) if mins and not log1p else None,
    )


def byte_ranges(path: Path, block_bytes: int) -> list[tuple[Path, int, int]]:
    """``(path, start, end)`` ranges of ``block_bytes`` covering the file."""
    size = os.path.getsize(path)
    return [(path, lo, min(lo + block_bytes, size)) for lo in range(0, size, block_bytes)]
