"""Train / validation / test splits from TorchRec's binary Criteo layout (``data=criteo_npy``).

Reads ``day_<n>_dense.npy`` float32 (N, 13), ``day_<n>_sparse.npy`` int (N, 26) and
``day_<n>_labels.npy`` int (N, 1) as written by ``mode=preprocess`` or by TorchRec's own
scripts, and splits them by the rules of :class:`~dlrm_exp.config.NpyDataset`:

* ``criteo_1tb``: days in order; every day but the last trains, the last (day 23 of the full
  set) is split at ``ceil(N / 2)``: validation first, test second, as TorchRec's
  ``InMemoryBinaryCriteoIterDataPipe`` does;
* ``criteo_kaggle``: the rows of every day in order, cut into 7 parts of ``N // 7`` rows (the
  first ``N % 7`` one row longer), as facebookresearch/dlrm splits the Kaggle ``train.txt``
  into days; parts 0..5 train, part 6 is split at ``ceil(N / 2)``: test first, validation
  second, as facebookresearch/dlrm's ``np.array_split`` gives them.

Batches are then cut by :func:`~dlrm_exp.data.batches.iter_batches`: global step ``i`` takes the
next ``world_size x batch_size`` rows and rank ``r`` its ``r``-th slice, so ranks never overlap.
"""

import hashlib
import json
import logging
import os
import re
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import torch

from dlrm_exp.config import CriteoNpyDataConfig, NpyDataset, OutOfRange
from dlrm_exp.data.batches import ClickData
from dlrm_exp.data.check_cache import (
    FileState,
    RememberedChecks,
    file_state,
    remembered_checks,
)
from dlrm_exp.data.preprocess.convert import (
    CONTIGUOUS_MARKER,
    PENDING_FILE,
    REPORT_FILE,
    Pending,
    converted_days,
    marker_setting,
)
from dlrm_exp.data.preprocess.tsv_parse import NUM_DENSE, NUM_SPARSE
from dlrm_exp.data.row_span import RowSpan
from dlrm_exp.data.splits import SCAN_WAIT, DataInfo
from dlrm_exp.errors import DataError
from dlrm_exp.util.cgroup import available_memory_bytes
from dlrm_exp.util.files import read_json_object
from dlrm_exp.util.rank_zero import is_rank_zero, on_rank_zero
from dlrm_exp.util.text import first_few

_DAY_FILE = re.compile(r"^day_(\d+)_dense\.npy$")
KAGGLE_PARTS = 7

log = logging.getLogger(__name__)


def find_days(folder: Path, table_sizes: list[int] | None = None) -> list[int]:
    """Day numbers with a complete ``day_<n>_{dense,sparse,labels}.npy`` triple, sorted; with
    ``table_sizes``, the model's, ids hashed for other sizes are refused
    (:func:`_check_hashed_for`).

    Raises:
        DataError: the folder is missing, holds no day, a day number is written with leading
            zeros (``day_01``: ``mode=preprocess`` and TorchRec write ``day_1``), a day
            lacks one of its files, or its ids were hashed for other ``table_sizes``.
    """
    if not folder.is_dir():
        what = "a file, not the folder of the day files" if folder.is_file() else "no such folder"
        raise DataError(f"data.path: {what}: {folder}")
    numbers = sorted(m.group(1) for p in folder.iterdir() if (m := _DAY_FILE.match(p.name)))
    if not numbers:
        raise DataError(
            f"data.path: {folder} holds no day_<n>_dense.npy: convert TSV files first with "
            "mode=preprocess data=criteo_tsv data.path=<tsv> preprocess.output_dir=<folder>"
        )
    padded = [n for n in numbers if n != str(int(n))]
    if padded:
        raise DataError(
            f"data.path: {folder} holds day_{padded[0]}_dense.npy: day numbers are written "
            f"without leading zeros (day_{int(padded[0])}_*.npy, as mode=preprocess and "
            "TorchRec write them); rename the files"
        )
    days = sorted(int(n) for n in numbers)
    for day in days:
        for kind in ("sparse", "labels"):
            if (folder / f"day_{day}_{kind}.npy").is_file():
                continue
            if kind == "sparse" and (folder / f"day_{day}_sparse_raw.npy").is_file():
                raise DataError(  # (a preprocess killed while re-indexing; crash review)
                    f"data.path: {folder}: day_{day}_sparse.npy is missing beside its raw ids "
                    f"(day_{day}_sparse_raw.npy): the re-index of contiguous ids over every "
                    "day did not finish; run the same mode=preprocess again, which finishes it"
                )
            raise DataError(f"data.path: day_{day}_{kind}.npy is missing in {folder}")
    _check_conversions(folder, days, table_sizes)
    return days


def day_files(folder: Path) -> list[Path]:
    """The files of the days :func:`find_days` finds in ``folder``, sorted by name as earlier
    versions listed a folder's files (day by day, every npy checkpoint's digest moved: diff
    review): what a checkpoint's digest of ``data.path`` is of
    (:func:`~dlrm_exp.data.input_digests`), not the reports ``mode=preprocess`` rewrites nor
    the raw ids a contiguous-id preprocess keeps beside the days (``day_<n>_sparse_raw.npy``:
    deleting them changed the digest, and a resume forgot its validations: re-read).

    Raises:
        DataError: as :func:`find_days`.
    """
    return sorted(folder / f"day_{day}_{kind}.npy" for day in find_days(folder) for kind in _KINDS)


def conversion_records(folder: Path) -> dict[str, str]:
    """What ``mode=preprocess``'s records of ``folder`` (its days' markers and the contiguous
    re-index, read once) say a checkpoint records of it: ``conversion``, a digest (SHA-1, 10
    hex digits) of how its days were converted (each marker's input, options and counts, not
    its timing, and the re-index), and ``ids``, how its ids map to table rows (``raw``, or
    ``hash <digest>`` of the table sizes hashed for, or ``contiguous <digest>`` of the
    re-index's days, threshold and sizes; left out for days of mixed mappings). Empty for a
    folder without markers (TorchRec's own scripts), or none at all. Days converted
    again in place keep their names and sizes, and another folder of other ids looks up other
    rows than training did (npy review)."""
    markers = converted_days(folder)  # (neither raises: a folder gone lists nothing)
    reindex = read_json_object(folder / CONTIGUOUS_MARKER)
    if not markers:
        return {}
    timeless = {  # (a day converted again from the same input is the same day)
        day: {k: v for k, v in m.items() if k not in ("seconds", "rows_per_sec")}
        for day, m in sorted(markers.items())
    }
    records = {"conversion": _digest([timeless, reindex])}
    contiguous = reindex or {}
    kinds = {str(m.get("categorical")) for m in markers.values()}
    if len(kinds) == 1:
        kind = kinds.pop()
        detail = {
            "hash": [markers[min(markers)].get("table_sizes")],
            "contiguous": [contiguous.get(k) for k in ("days", "frequency_threshold",
                                                       "num_embeddings_per_feature")],
        }.get(kind)  # fmt: skip
        records["ids"] = kind if detail is None else f"{kind} {_digest(detail)}"
    return records


def _digest(record: Any) -> str:
    """SHA-1 (10 hex digits) of ``record`` as sorted JSON."""
    return hashlib.sha1(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()[:10]


def _check_pending(folder: Path, done: dict[int, dict[str, Any]]) -> None:
    """The days ``mode=preprocess`` runs set out to write (:class:`Pending`) all have their
    markers (``done``).

    Raises:
        DataError: naming the days missing, the refused day that held them up where one
            did, and the fix.
    """
    pending = Pending.read(folder)
    record = folder / PENDING_FILE
    missing = [d for d in pending.days if d not in done]
    if not missing and not pending.unreadable:
        return
    refusal = next((r for d in missing if (r := pending.held_by(d)) is not None), None)
    if refusal is not None:  # (the same command fails again: "run it again" was no fix)
        held = [f"day_{d}" for d in refusal.held if d in missing]
        why = refusal.short_why
        cause = f"refused day_{refusal.day} ({why}) and did not write {first_few(held, 4)} after it"
        fix = f"mend day_{refusal.day}'s file or leave it out of data.path and run it again"
    else:
        days = first_few([f"day_{d}" for d in missing], 4) if missing else "days (unreadable)"
        cause = f"set out to write {days} here and did not finish (it was interrupted, or is "
        cause += "still running)"
        fix = "run that command again, which finishes it"
    raise DataError(
        f"data.path: {folder}: a mode=preprocess run {cause}; {fix}, or remove {record} to "
        "read the days that are there"
    )


def _check_conversions(folder: Path, days: list[int], table_sizes: list[int] | None) -> None:
    """In a folder ``mode=preprocess`` wrote (it holds its day markers), every day's
    conversion finished (its ``day_<n>.json``, written last) and, with contiguous ids, so did
    the re-index over all days (``contiguous.json``, listing them). A folder of TorchRec's own
    scripts (no marker) is taken as it is. A conversion under way or interrupted
    (``preprocess_pending.json``) is refused while one of its days lacks its marker: those
    days are not in ``days``, and the folder read as one of fewer days validated on the
    wrong one (review).

    Raises:
        DataError: naming the unfinished days (or the re-index) and the fix.
    """
    done = converted_days(folder)
    _check_pending(folder, done)
    if not done and not (folder / REPORT_FILE).is_file():
        return
    unfinished = [day for day in days if day not in done]
    if unfinished:
        unreadable = [f"day_{d}.json" for d in unfinished if (folder / f"day_{d}.json").exists()]
        has = (  # a marker that is there but does not read: said so (review)
            f"has no readable day_<n>.json ({', '.join(unreadable)} does not read as a JSON object)"
            if unreadable
            else "has no day_<n>.json"
        )
        raise DataError(
            f"data.path: {folder}: mode=preprocess wrote this folder, but "
            f"{', '.join(f'day_{d}' for d in unfinished)} {has} beside its npy "
            "files (written last): if mode=preprocess was converting it, run that command "
            "again, which finishes it; npy files from elsewhere (TorchRec's scripts) belong in "
            "a folder of their own"
        )
    markers = {day: done[day] for day in days}
    _check_same_settings(folder, markers)
    if table_sizes is not None:
        _check_hashed_for(folder, markers, table_sizes)
    contiguous = [d for d in days if done[d].get("categorical") == "contiguous"]
    record = read_json_object(folder / CONTIGUOUS_MARKER) or {}
    missing = [f"day_{d}" for d in contiguous if d not in record.get("days", [])]
    if missing:
        raise DataError(
            f"data.path: {folder}: the re-index of contiguous ids over every day did not "
            f"finish ({CONTIGUOUS_MARKER} does not list {', '.join(missing)}): run the same "
            "mode=preprocess again, which finishes it"
        )
    if contiguous and table_sizes is not None:
        _warn_smaller_tables(folder, record.get("num_embeddings_per_feature"), table_sizes)


def _warn_smaller_tables(folder: Path, ids: Any, table_sizes: list[int]) -> None:
    """One warning (rank 0) when a contiguous-id folder's features have more ids (``ids``:
    its ``contiguous.json``'s ``num_embeddings_per_feature``) than this model's tables have
    rows: those ids are then hashed into the tables, or refused with
    ``data.out_of_range=error``, without a word before (npy review)."""
    if not isinstance(ids, list) or len(ids) != len(table_sizes) or not is_rank_zero():
        return
    pairs = enumerate(zip(ids, table_sizes, strict=True))
    over = [f"cat_{i} {n:,} > {t:,}" for i, (n, t) in pairs if n > t]
    if over:
        log.warning(
            "data.path: %s holds contiguous ids for tables of %s rows; %d of this model's "
            "tables are smaller (%s): their ids share rows. Set model.num_embeddings_per_"
            "feature=%s to give every id its own",
            folder, ids, len(over), first_few(over), ids,
        )  # fmt: skip


def _check_hashed_for(
    folder: Path, markers: dict[int, dict[str, Any]], table_sizes: list[int]
) -> None:
    """Ids that ``mode=preprocess preprocess.categorical=hash`` hashed for tables of other
    sizes than this model's are refused: hashed again modulo these sizes, they would look up
    other rows than the same TSV rows do in training, evaluate and predict (a folder hashed for
    ``model=tiny`` trained under ``model.num_embeddings_cap=300`` without a word: review).

    Raises:
        DataError: naming both sizes and the fix.
    """
    hashed = {
        tuple(m["table_sizes"])
        for m in markers.values()
        if m.get("categorical") == "hash" and m.get("table_sizes")
    }
    if hashed and hashed != {tuple(table_sizes)}:
        sizes = min(hashed)  # (one: find_days refuses days converted otherwise)
        raise DataError(
            f"data.path: {folder} holds ids hashed for tables of {list(sizes)} rows "
            f"(mode=preprocess preprocess.categorical=hash), but this model's tables have "
            f"{table_sizes}: hashed again they would look up other rows than the same rows "
            "do in TSV training, evaluate and predict; train with the model it was hashed for, "
            "or preprocess again for this one (into another folder)"
        )


def _check_same_settings(folder: Path, markers: dict[int, dict[str, Any]]) -> None:
    """Every day of ``folder`` was converted with the same settings (a re-run of some days
    with another ``preprocess.dense_transform`` or ``categorical`` left the others as they were).

    Raises:
        DataError: naming the settings and the days of each.
    """
    groups: dict[str, list[int]] = {}
    for day, marker in sorted(markers.items()):
        groups.setdefault(marker_setting(marker), []).append(day)
    if len(groups) > 1:
        listed = "; ".join(
            f"{', '.join(f'day_{d}' for d in days)}: {setting}" for setting, days in groups.items()
        )
        raise DataError(
            f"data.path: {folder}: its days were converted with different settings ({listed}): "
            "convert every day with the same preprocess.* settings (into another folder, or "
            "with preprocess.overwrite=true)"
        )


#: The dtype kinds each file may hold (numpy ``dtype.kind``): dense counts as floats or
#: integers, table ids as integers, labels as 0 / 1 in any of them (or booleans).
_KINDS = {"dense": "fiu", "sparse": "iu", "labels": "fiub"}
#: What ``mode=preprocess`` writes, named in the dtype refusal.
_DTYPES = {"dense": "float32", "sparse": "int64", "labels": "int32"}
#: Rows of a labels file checked at a time (bounds the temporary arrays of the check).
_LABEL_CHUNK = 1 << 24


def _load_day(folder: Path, day: int, mmap: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One day's mapped (or read) dense, sparse and labels arrays, checked for shape, dtype
    and row count (the label values: :func:`_check_days_labels`).

    Raises:
        DataError: a file that is not a readable npy file, or has another shape or dtype, or
            the files disagreeing on the row count (each file's named).
    """
    mode = "c" if mmap else None  # copy-on-write: writable for torch, nothing read up front
    arrays = []
    for kind, columns in (("dense", NUM_DENSE), ("sparse", NUM_SPARSE), ("labels", 1)):
        path = folder / f"day_{day}_{kind}.npy"
        try:
            array = np.load(path, mmap_mode=mode, allow_pickle=False)
        except (ValueError, OSError, EOFError) as err:
            # numpy's own advice for a non-npy file ("load it unsafely using allow_pickle=")
            # would run code from the file: not passed on
            why = "not an npy array" if "allow_pickle" in str(err) else err or "empty file"
            raise DataError(f"{path}: not a readable npy file ({why})") from None
        if array.ndim != 2 or array.shape[1] != columns:
            raise DataError(f"{path}: shape {array.shape}, expected (rows, {columns})")
        if array.dtype.kind not in _KINDS[kind]:
            wanted = "integer" if kind == "sparse" else "numeric"
            raise DataError(
                f"{path}: dtype {array.dtype}, expected {wanted} (e.g. {_DTYPES[kind]})"
            )
        arrays.append(array)
    rows = [a.shape[0] for a in arrays]
    if len(set(rows)) != 1:
        counts = ", ".join(
            f"day_{day}_{kind}.npy {n:,}" for kind, n in zip(_KINDS, rows, strict=True)
        )
        raise DataError(f"{folder}: day_{day} files disagree on the row count: {counts}")
    return arrays[0], arrays[1], arrays[2]


def _check_days_labels(folder: Path, days: list[int], checks: RememberedChecks) -> None:
    """Every day's labels are 0 or 1, read through a mapping of their own (dropped after).
    Rank 0 reads them for every rank (:func:`load_criteo_npy`): the 1TB days hold 16 GiB of
    labels, which every rank of a job read from the shared file system before; a day's file
    that passed before, unchanged since, is not read again (``checks``,
    :mod:`~dlrm_exp.data.check_cache`).

    Raises:
        DataError: see :func:`_check_labels`.
    """
    for day in days:
        path = folder / f"day_{day}_labels.npy"
        checks.once(file_state("labels", path), partial(_check_labels_file, path))


def _check_labels_file(path: Path) -> None:
    """:func:`_check_labels` of ``path``'s labels, through a mapping of their own."""
    _check_labels(path, np.load(path, mmap_mode="r", allow_pickle=False))


def _check_labels(path: Path, labels: np.ndarray) -> None:
    """Every label is 0 or 1 (click / no click), read in chunks of :data:`_LABEL_CHUNK` rows
    (with ``mmap_mode`` too: that reads the labels files, 4 bytes a row as int32).

    Raises:
        DataError: naming the file, how many labels are neither 0 nor 1, and the first one's
            row and value.
    """
    bad, first, value = _count_bad(labels[:, 0], lambda chunk: (chunk != 0) & (chunk != 1))
    if first is not None:
        raise DataError(
            f"{path}: {bad:,} of {len(labels):,} labels are neither 0 nor 1 (first at row "
            f"{first[0]:,}: {value}); labels are clicks, 0 or 1"
        )


def check_dense(path: Path, dense: np.ndarray, first_row: int = 0) -> None:
    """Every dense value of ``dense`` (rows of ``path`` from ``first_row`` on) is finite, read
    in chunks of :data:`_LABEL_CHUNK` rows: a NaN or infinity makes every prediction of its
    batch NaN, so a validation or test split holding one reported no metric at all (training
    rows are left to ``train.on_nonfinite``, which stops at or skips their step).

    Raises:
        DataError: naming the file, how many values are not finite, and the first one's row,
            column and value.
    """
    bad, first, value = _count_bad(dense, lambda chunk: ~np.isfinite(chunk))
    if first is not None:
        raise DataError(
            f"{path}: {bad:,} dense value(s) not finite in rows {first_row:,} to "
            f"{first_row + len(dense) - 1:,} (first at row {first_row + first[0]:,}, column "
            f"{first[1]}: {value}); the dense features must be numbers: convert the day again "
            "(mode=preprocess) or mend the file"
        )


def _count_bad(array: np.ndarray, is_bad: Callable[[np.ndarray], np.ndarray]) -> tuple:
    """``(count, first index, first value)`` of the entries of ``array`` that ``is_bad`` marks
    (a bool array of a chunk's shape; the index is a tuple, row first; None and None when
    there are none), read in chunks of :data:`_LABEL_CHUNK` rows (a mapped file's rows once)."""
    count, first, value = 0, None, None
    for start in range(0, len(array), _LABEL_CHUNK):
        chunk = np.asarray(array[start : start + _LABEL_CHUNK])
        wrong = np.argwhere(is_bad(chunk))
        if len(wrong) and first is None:
            index = tuple(int(i) for i in wrong[0])
            first, value = (start + index[0], *index[1:]), chunk[index].item()
        count += len(wrong)
    return count, first, value


def held_out_rows(start: int, rows: int, held_out: tuple[int, int]) -> tuple[int, int] | None:
    """The rows ``held_out`` (first, end over all days) of a day of ``rows`` rows that begins
    at row ``start``, as ``(first, end)`` within the day; None when it holds none."""
    lo, hi = max(start, held_out[0]), min(start + rows, held_out[1])
    return (lo - start, hi - start) if lo < hi else None


#: Rows of a day's ids whose range is taken at once (about 200 MiB of int64 ids).
_RANGE_ROWS = 1 << 20


def _id_range(sparse: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """One day's ``(max, min)`` id of each feature, each (26,); None for an empty day. One
    pass over the day in blocks of :data:`_RANGE_ROWS` rows: a mapped day's ids are read from
    its file once (a whole-day max, then a min, read them twice)."""
    if not len(sparse):
        return None
    highs, lows = [], []
    for i in range(0, len(sparse), _RANGE_ROWS):
        block = np.asarray(sparse[i : i + _RANGE_ROWS])  # read once, both taken from memory
        highs.append(block.max(axis=0))
        lows.append(block.min(axis=0))
    return np.stack(highs).max(axis=0), np.stack(lows).min(axis=0)


def _check_ranges(
    ranges: list[tuple[np.ndarray, np.ndarray] | None], sizes: np.ndarray, days: list[int]
) -> None:
    """Refuse ids outside ``[0, table rows)`` over every day (``ranges``: :func:`_id_range`
    of each of ``days``), naming the first bad feature's id range over all days, the days
    that hold its bad ids, and how many features are out of range.

    Raises:
        DataError: some feature has an id below 0 or at least its table's row count.
    """
    held = [(day, r) for day, r in zip(days, ranges, strict=True) if r is not None]
    if not held:
        return
    high = np.max([r[0] for _, r in held], axis=0)
    low = np.min([r[1] for _, r in held], axis=0)
    bad = np.flatnonzero((high >= sizes) | (low < 0))
    if not len(bad):
        return
    f = int(bad[0])
    where = [day for day, (h, lo) in held if h[f] >= sizes[f] or lo[f] < 0]
    raise DataError(
        f"data.path: feature cat_{f} has ids in [{low[f]}, {high[f]}] but its table has "
        f"{sizes[f]} rows (out of range in {len(where)} of {len(held)} day(s): "
        f"{', '.join(f'day_{d}' for d in where)}; {len(bad)} of {len(sizes)} features out of "
        "range): set data.out_of_range=hash, or preprocess with preprocess.categorical=hash "
        "for this model"
    )


def _read_days(
    loaded: list[Any],
    folder: Path,
    days: list[int],
    table_sizes: list[int],
    policy: OutOfRange,
    held_out: tuple[int, int],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The days' rows one after the other as the model reads them: dense (N, 13) float32,
    table rows (N, 26) int64 (ids hashed modulo the table sizes, or range-checked, by
    ``policy``) and labels (N,) float32.

    ``loaded``: the days' mapped ``(dense, sparse, labels)`` arrays (:func:`_load_day`), in
    order; each entry is dropped once copied. The result is allocated once and filled day by
    day, so besides it at most one day's pages are held (not every day, then their
    concatenation, then the int64 ids and the hashed copy).

    Raises:
        DataError: a dense value of the validation and test rows (``held_out``: their
            first and end row over all days) is not finite (:func:`check_dense`); or
            (``out_of_range=error``) ids are out of range (checked over every day once all
            are read: :func:`_check_ranges`).
    """
    rows = [len(day[2]) for day in loaded]
    ranges = []
    total = sum(rows)
    dense = np.empty((total, NUM_DENSE), dtype=np.float32)
    sparse = np.empty((total, NUM_SPARSE), dtype=np.int64)
    labels = np.empty(total, dtype=np.float32)
    sizes = np.asarray(table_sizes, dtype=np.int64)
    start = 0
    for i, count in enumerate(rows):
        day_dense, day_sparse, day_labels = loaded[i]
        loaded[i] = None
        stop = start + count
        dense[start:stop] = day_dense
        part = held_out_rows(start, count, held_out)
        if part is not None:  # validation or test rows in this day
            held = dense[start + part[0] : start + part[1]]
            check_dense(folder / f"day_{days[i]}_dense.npy", held, part[0])
        sparse[start:stop] = day_sparse
        if policy is OutOfRange.error:  # from the copy: the day's file read once
            ranges.append(_id_range(sparse[start:stop]))
        labels[start:stop] = day_labels[:, 0]
        if policy is OutOfRange.hash:
            np.remainder(sparse[start:stop], sizes, out=sparse[start:stop])
        del day_dense, day_sparse, day_labels  # unmap this day before the next
        start = stop
    if policy is OutOfRange.error:
        _check_ranges(ranges, sizes, days)
    return dense, sparse, labels


#: Bytes a row read whole takes: 13 float32 dense values, 26 int64 table rows, the label.
ROW_BYTES = NUM_DENSE * 4 + NUM_SPARSE * 8 + 4
#: Bytes per training row a ``shuffle_training_set`` adds while it permutes: the int64 order
#: and the largest column's permuted copy (26 int64 ids).
SHUFFLE_BYTES = 8 + NUM_SPARSE * 8


def _check_read_fits(rows: int, shuffled: int, folder: Path) -> None:
    """Refuse to read the days whole when this host's ranks would need more than its available
    memory: every rank holds its own copy (:data:`ROW_BYTES` a row, plus
    :data:`SHUFFLE_BYTES` per ``shuffled`` training row), and ``np.empty`` would not fail but
    fill until the kernel kills the process, after hundreds of GB read (the Criteo 1TB days:
    1.05 TiB a rank).

    Raises:
        DataError: naming the bytes, the ranks and ``data.mmap_mode=true``.
    """
    ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))  # as the launcher set it
    need = (rows * ROW_BYTES + shuffled * SHUFFLE_BYTES) * ranks
    # a container's limit counts too: psutil reads the node's free memory
    available = available_memory_bytes(held=psutil.Process().memory_info().rss * ranks)
    if need <= available:
        return
    raise DataError(
        f"data.path={folder}: reading its {rows:,} rows whole takes {need / 2**30:,.1f} GiB "
        f"on this host ({ranks} rank(s), each its own copy"
        + (", with the training set's shuffle" if shuffled else "")
        + f"), more than its {available / 2**30:,.1f} GiB available: set data.mmap_mode=true "
        "(rows read from the files as batches need them)"
    )


#: Row ranges ``(start, stop)`` of the train, validation and test splits in the days' rows.
SplitBounds = tuple[tuple[int, int], tuple[int, int], tuple[int, int]]


def split_bounds(num_rows: int, dataset: NpyDataset, last_day_rows: int) -> SplitBounds:
    """The ``(start, stop)`` rows of train, validation and test in the concatenated days:
    train first; the last day (``criteo_1tb``) or part (``criteo_kaggle``) halved, its first
    ``ceil(n / 2)`` rows validation for TorchRec's ``InMemoryBinaryCriteoIterDataPipe`` but
    test for facebookresearch/dlrm (``test, val = np.array_split(last_part, 2)``).

    Raises:
        DataError: a split would hold no row (naming each split's count and the rule).
    """
    if dataset is NpyDataset.criteo_1tb:
        train_end = num_rows - last_day_rows
        rule = f"every day but the last trains, the last ({last_day_rows:,} rows) is halved"
    else:
        part, extra = divmod(num_rows, KAGGLE_PARTS)
        sizes = [part + (1 if i < extra else 0) for i in range(KAGGLE_PARTS)]
        train_end = sum(sizes[:-1])
        rule = f"6 of {KAGGLE_PARTS} parts train, the 7th is halved, test first"
    half = train_end + (num_rows - train_end + 1) // 2
    first, second = (train_end, half), (half, num_rows)
    val, test = (first, second) if dataset is NpyDataset.criteo_1tb else (second, first)
    counts = {"train": train_end, "val": val[1] - val[0], "test": test[1] - test[0]}
    if not all(counts.values()):
        raise DataError(
            f"data.path: data.dataset={dataset.value} splits {num_rows:,} rows into "
            + ", ".join(f"{split} {n:,}" for split, n in counts.items())
            + f" ({rule}): every split needs at least one row"
        )
    return (0, train_end), val, test


def load_criteo_npy(
    cfg: CriteoNpyDataConfig, table_sizes: list[int], seed: int
) -> tuple[ClickData, ClickData, ClickData, DataInfo]:
    """Train, validation and test splits, plus facts for ``metrics.json``.

    Raises:
        DataError: missing or inconsistent files, too few days for ``criteo_1tb``, or ids out
            of range with ``out_of_range=error``.
    """
    folder = Path(cfg.path).expanduser()
    days = find_days(folder, table_sizes)
    if cfg.dataset is NpyDataset.criteo_1tb and len(days) < 2:
        raise DataError(
            f"data.dataset=criteo_1tb needs at least 2 days (train days and the last day for "
            f"validation/test), found {[f'day_{d}' for d in days]} in {folder}: use "
            "data.dataset=criteo_kaggle to split one file"
        )
    loaded: list[Any] = [_load_day(folder, d, mmap=True) for d in days]  # headers only
    rows = sum(len(day[2]) for day in loaded)
    bounds = split_bounds(rows, cfg.dataset, len(loaded[-1][2]))
    train_end = bounds[0][1]
    shuffled = train_end if cfg.shuffle_training_set else 0
    held_out = (min(bounds[1][0], bounds[2][0]), max(bounds[1][1], bounds[2][1]))
    on_rank_zero(
        partial(_scan, cfg, folder, days, loaded, table_sizes, shuffled, held_out), SCAN_WAIT
    )
    if cfg.mmap_mode:
        return _mapped_splits(loaded, cfg, table_sizes, days, bounds)
    dense, sparse, labels = _read_days(
        loaded, folder, days, table_sizes, cfg.out_of_range, held_out
    )
    if cfg.shuffle_training_set:  # in place: one column's training rows copied at a time
        order = np.random.default_rng(seed).permutation(train_end)
        for column in (dense, sparse, labels):
            column[:train_end] = column[order]
    train, val, test = (
        ClickData(*(torch.from_numpy(column[lo:hi]) for column in (dense, sparse, labels)))
        for lo, hi in bounds
    )
    info = DataInfo.of_splits(train, val, test, days=days, dataset=cfg.dataset.value)
    return train, val, test, info


def _scan(
    cfg: CriteoNpyDataConfig,
    folder: Path,
    days: list[int],
    loaded: list[Any],
    table_sizes: list[int],
    shuffled: int,
    held_out: tuple[int, int],
) -> None:
    """What rank 0 reads for every rank (:func:`load_criteo_npy` broadcasts its verdict): read
    whole, whether the days fit (:func:`_check_read_fits`, first: it reads nothing); gaps in
    the day numbers (:func:`_warn_day_gaps`); the labels (:func:`_check_days_labels`);
    mapped, the validation and test rows' dense values (``held_out``: their first and end
    row; read whole, each rank checks the rows it copies) and, with ``out_of_range=error``,
    every day's id range.

    Raises:
        DataError: see the checks named.
    """
    if not cfg.mmap_mode:
        _check_read_fits(sum(len(day[2]) for day in loaded), shuffled, folder)
    _warn_day_gaps(folder, days)
    _warn_refused_days(folder, days)
    # the held-out files as mapped: their state is taken before the labels' long scan
    held = _held_out_parts(folder, days, [d[0] for d in loaded], held_out) if cfg.mmap_mode else []
    with remembered_checks() as checks:
        _check_days_labels(folder, days, checks)
        for state, check in held:
            checks.once(state, check)
    if cfg.mmap_mode and cfg.out_of_range is OutOfRange.error:
        sizes = np.asarray(table_sizes, dtype=np.int64)
        _check_ranges([_id_range(sparse) for _, sparse, _ in loaded], sizes, days)


def _warn_day_gaps(folder: Path, days: list[int]) -> None:
    """Warn when the day numbers of the folder skip some (an unfinished copy or conversion):
    the splits then fall on other days than the full set's (the last day found validates and
    tests), which ``metrics.json``'s ``data.days`` alone recorded."""
    missing = sorted(set(range(days[0], days[-1] + 1)) - set(days))
    if missing:
        log.warning(
            "data.path=%s holds days %s but not %s: training on the days found, the last of "
            "them split by data.dataset (an unfinished copy or mode=preprocess?)",
            folder, first_few([f"day_{d}" for d in days], 6),
            first_few([f"day_{d}" for d in missing], 6),
        )  # fmt: skip


def _warn_refused_days(folder: Path, days: list[int]) -> None:
    """Warn of each day a ``mode=preprocess`` run refused and wrote nothing for
    (:class:`Pending`'s refusals): the last day's left no pending day, and the folder read as
    one day shorter, its held-out day another than meant, without a word (data review)."""
    for refusal in Pending.read(folder).left_out(days):
        log.warning(
            "data.path=%s: a mode=preprocess run refused day_%d (%s) and wrote nothing for "
            "it: reading the days there, the last of them (day_%d) split by data.dataset; "
            "mend the day's file and run that command again, or remove %s to read the folder "
            "as it is without this warning",
            folder, refusal.day, refusal.short_why, days[-1], folder / PENDING_FILE,
        )  # fmt: skip


def _held_out_parts(
    folder: Path, days: list[int], dense: list[np.ndarray], held_out: tuple[int, int]
) -> list[tuple[FileState | None, Callable[[], None]]]:
    """The rows ``held_out`` (first, end over all days) of the mapped days' ``dense`` arrays,
    day by day: each part's file state and its :func:`check_dense` (on the 1TB days: the
    last day, 9.2 GB read; not again for an unchanged file that passed,
    :mod:`~dlrm_exp.data.check_cache`)."""
    parts, start = [], 0
    for day, array in zip(days, dense, strict=True):
        part = held_out_rows(start, len(array), held_out)
        if part is not None:
            path = folder / f"day_{day}_dense.npy"
            state = file_state("dense", path, part)
            parts.append((state, partial(check_dense, path, array[part[0] : part[1]], part[0])))
        start += len(array)
    return parts


def _mapped_splits(
    loaded: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
    cfg: CriteoNpyDataConfig,
    table_sizes: list[int],
    days: list[int],
    bounds: SplitBounds,
) -> tuple[ClickData, ClickData, ClickData, DataInfo]:
    """``mmap_mode``: splits as :class:`RowSpan` views of the mapped days (nothing copied), cut
    at ``bounds`` (:func:`split_bounds`); ids are hashed per batch (or were range-checked by
    :func:`_scan`), as are the validation and test rows' dense values."""
    sizes = np.asarray(table_sizes, dtype=np.int64)

    def ids(rows: np.ndarray) -> np.ndarray:
        return np.asarray(rows, dtype=np.int64) % sizes

    columns = [
        RowSpan([day[0] for day in loaded], lambda rows: np.asarray(rows, dtype=np.float32)),
        RowSpan([day[1] for day in loaded], ids),
        RowSpan(
            [day[2] for day in loaded],
            lambda rows: np.asarray(rows, dtype=np.float32).reshape(-1),
        ),
    ]
    train, val, test = (ClickData(*(c.span(lo, hi) for c in columns)) for lo, hi in bounds)
    info = DataInfo.of_splits(
        train, val, test, days=days, dataset=cfg.dataset.value, mmap_mode=True
    )
    return train, val, test, info
