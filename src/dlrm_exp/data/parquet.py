"""``data=parquet``: a user's click log in Parquet files, read a row group at a time by its
feature schema into TorchRec ``Batch``es.

Ranks split a split's rows as TorchRec's Criteo loaders do: rank ``r`` of ``W`` takes the
``r``-th contiguous ``N // W`` rows (the last ``N % W`` are dropped) and reads only the row
groups those rows lie in, so every rank runs the same steps and no row group is decoded by all.
With ``shuffle_row_groups`` the row groups are visited in another order each epoch (numpy
``default_rng((seed, epoch))``, the same on every rank). Memory holds the row group being read
plus less than one batch carried over, whatever the file size.
"""

import logging
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from torchrec.datasets.utils import Batch

from dlrm_exp.config import FeatureSchema, ParquetDataConfig
from dlrm_exp.data.batches import per_rank_sizes
from dlrm_exp.data.decode import Rows, decode
from dlrm_exp.data.parquet_files import (
    ParquetScan,
    Segment,
    feature_id_kinds,
    open_parquet,
    read_row_group,
    resolve_parquet_paths,
    scan_files,
)
from dlrm_exp.data.paths import resolve_inputs
from dlrm_exp.data.splits import SCAN_WAIT, DataInfo, DataSplits, fraction_rows
from dlrm_exp.util.rank_zero import on_rank_zero

log = logging.getLogger(__name__)


class ParquetSplit:
    """The rows of one split (train, val or test) as row-group segments, read lazily.

    ``len()`` is its row count; :meth:`batches` streams a rank's batches.
    """

    def __init__(self, segments: list[Segment], schema: FeatureSchema) -> None:
        self.segments = segments
        self.schema = schema
        self._columns = [schema.label, *schema.feature_columns]

    def __len__(self) -> int:
        return sum(len(s) for s in self.segments)

    def batches(
        self,
        batch_size: int,
        rank: int,
        world_size: int,
        keys: list[str],
        shuffle_seed: tuple[int, ...] | None = None,
        slices: int = 1,
        skip: int = 0,
    ) -> Iterator[Batch]:
        """Rank ``rank``'s batches: its contiguous share of the rows (in segment order, or the
        segments permuted by ``shuffle_seed``), in the batch sizes of
        :func:`~dlrm_exp.data.batches.per_rank_sizes`.

        ``slices > 1`` deals to ``world_size * slices`` parts of ``batch_size / slices`` rows
        and gives each step the rows of this rank's ``slices`` parts, part after part: with
        ``world_size=1, slices=W`` one process sees each global step exactly as W ranks do
        (``mode=verify``'s reference). ``skip`` starts at the ``skip``-th batch without reading
        the row groups of the batches before it (a resumed run's trained steps).
        """
        segments = self.segments
        if shuffle_seed is not None:
            order = np.random.default_rng(list(shuffle_seed)).permutation(len(segments))
            segments = [segments[i] for i in order]
        parts = [
            self._part_rows(segments, part, world_size * slices, batch_size // slices, skip)
            for part in range(rank * slices, (rank + 1) * slices)
        ]
        for rows in zip(*parts, strict=True):
            yield Rows.concat(list(rows)).batch(keys)

    def _part_rows(
        self, segments: list[Segment], part: int, num_parts: int, batch_size: int, skip: int
    ) -> Iterator[Rows]:
        """Part ``part`` of ``num_parts``: its contiguous share of ``segments``' rows, in the
        per-step sizes of :func:`~dlrm_exp.data.batches.per_rank_sizes`, from step ``skip``."""
        sizes = per_rank_sizes(len(self), batch_size, num_parts)
        share = sum(sizes)
        first = part * share + sum(sizes[:skip])
        sizes = sizes[skip:]
        pending: list[Rows] = []
        held = emitted = 0
        for rows in self._rank_rows(segments, first, (part + 1) * share):
            pending.append(rows)
            held += len(rows)
            while emitted < len(sizes) and held >= sizes[emitted]:
                merged = Rows.concat(pending)
                size = sizes[emitted]
                yield merged.slice(0, size)
                emitted += 1
                pending = [merged.slice(size, len(merged))] if len(merged) > size else []
                held -= size

    def _rank_rows(self, segments: list[Segment], lo: int, hi: int) -> Iterator[Rows]:
        """The decoded rows ``[lo, hi)`` of ``segments`` taken in order, a row group at a time
        (the :data:`OPEN_FILES` most recently used files kept open, so footers are read once
        per file while the descriptors stay bounded: shuffled row groups visit every file)."""
        files: OrderedDict[Path, pq.ParquetFile] = OrderedDict()
        offset = 0
        try:
            for segment in segments:
                first, last = max(lo, offset), min(hi, offset + len(segment))
                offset += len(segment)
                if first >= last:
                    continue
                start = segment.start + first - (offset - len(segment))
                part = Segment(
                    segment.path, segment.row_group, start, start + last - first, segment.valid
                )
                parquet = _opened(files, part.path)
                table = read_row_group(parquet, part.path, part.row_group, self._columns)
                table = table.take(pa.array(part.positions()))
                yield decode(table, self.schema, f"{part.path} row group {part.row_group}")
                if offset >= hi:
                    return
        finally:
            for parquet in files.values():
                parquet.close()


#: Parquet files a reader keeps open at once (each holds a file descriptor; the usual soft
#: limit is 1,024 per process).
OPEN_FILES = 64


def _opened(files: "OrderedDict[Path, pq.ParquetFile]", path: Path) -> pq.ParquetFile:
    """``path``'s open file from ``files`` (most recently used last), opening it and closing
    the least recently used one beyond :data:`OPEN_FILES`."""
    if path in files:
        files.move_to_end(path)
        return files[path]
    files[path] = open_parquet(path)
    if len(files) > OPEN_FILES:
        _, oldest = files.popitem(last=False)
        oldest.close()
    return files[path]


def load_parquet(cfg: ParquetDataConfig, scored: tuple[str, ...] | None = None) -> DataSplits:
    """The train / val / test splits of ``cfg`` (explicit files, or the last fractions of
    ``data.path``'s valid rows, validation first), checked against the schema. In a process
    group of several ranks, rank 0 reads the footers and labels for all (a collective: every
    rank calls it). ``scored``: the only splits the job reads (``mode=evaluate``; None: all):
    the other inputs are not scanned, their splits empty.

    Raises:
        DataError: see :func:`~dlrm_exp.data.parquet_files.scan_files` (on every rank).
    """
    schema = cfg.schema

    def scan_splits() -> tuple[dict[str, ParquetScan], dict[str, str]]:
        files = resolve_inputs(cfg.read_inputs(scored), resolve_parquet_paths)
        kinds: dict[str, tuple[str, Path]] = {}  # one id type per column over every split
        scans = {key: _scan(named, key, schema, kinds) for key, named in files.items()}
        return scans, feature_id_kinds(kinds, schema)

    scans, id_kinds = on_rank_zero(scan_splits, SCAN_WAIT)  # labels read once, not per rank
    # data.path unread: an evaluation of files of their own (Config.reads_data_path)
    segments = scans["data.path"].segments if "data.path" in scans else []
    total = sum(len(s) for s in segments)
    n_val = 0 if cfg.val_path else fraction_rows(total, cfg.val_fraction)
    n_test = 0 if cfg.test_path else fraction_rows(total, cfg.test_fraction)
    train, rest = _cut(segments, total - n_val - n_test)
    val, test = _cut(rest, n_val)
    if "data.val_path" in scans:
        val = scans["data.val_path"].segments
    if "data.test_path" in scans:
        test = scans["data.test_path"].segments
    splits = [ParquetSplit(s, schema) for s in (train, val, test)]
    info = DataInfo.of_splits(*splits, read=_report(scans), id_kinds=id_kinds)
    return DataSplits(*splits, info=info)


def _scan(
    files: list[Path], key: str, schema: FeatureSchema, kinds: dict[str, tuple[str, Path]]
) -> ParquetScan:
    scan = scan_files(files, schema, kinds, key)
    log.info(
        "%s: %d file(s), %d row groups, %d rows (%d without label, skipped)",
        key, len(files), len(scan.segments), scan.rows, scan.null_labels,
    )  # fmt: skip
    return scan


def _cut(segments: list[Segment], n: int) -> tuple[list[Segment], list[Segment]]:
    """The first ``n`` rows of ``segments`` and the rest, splitting one segment if needed."""
    head: list[Segment] = []
    for i, segment in enumerate(segments):
        if n <= 0:
            return head, segments[i:]
        if len(segment) <= n:
            head.append(segment)
            n -= len(segment)
            continue
        cut = segment.start + n
        first = Segment(segment.path, segment.row_group, segment.start, cut, segment.valid)
        second = Segment(segment.path, segment.row_group, cut, segment.stop, segment.valid)
        return head + [first], [second, *segments[i + 1 :]]
    return head, []


def _report(scans: dict[str, ParquetScan]) -> dict[str, object]:
    """The read report of ``metrics.json``'s ``data.read``: the files read (resolved, as
    ``data=criteo_tsv`` records them: a path given through ``${oc.env:...}`` was recorded
    nowhere, review), rows read, rows skipped for a null label, null dense values filled with
    0 and null sparse entries read as empty bags; over every input, and per input
    (``inputs``: ``data.path``, ``data.val_path``, ``data.test_path``, as ``criteo_tsv``'s:
    which file fed which split, and whose the nulls were, was not recorded: data review)."""
    inputs = {key: _input_report([scan]) for key, scan in scans.items()}
    return {**_input_report(list(scans.values())), "inputs": inputs}


def _input_report(scans: list[ParquetScan]) -> dict[str, Any]:
    """:func:`_report`'s counts over ``scans``."""
    nulls: dict[str, int] = {}
    for scan in scans:
        for column, count in scan.nulls.items():
            nulls[column] = nulls.get(column, 0) + count
    files = (str(segment.path) for scan in scans for segment in scan.segments)
    return {
        "files": list(dict.fromkeys(files)),
        "rows_read": sum(s.rows for s in scans),
        "skipped_null_label": sum(s.null_labels for s in scans),
        "row_groups": sum(len(s.segments) for s in scans),
        "nulls": {c: n for c, n in nulls.items() if n},
    }


__all__ = ["ParquetSplit", "load_parquet"]
