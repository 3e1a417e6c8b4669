"""``mode=preprocess``: Criteo TSV click logs -> TorchRec's binary (npy) layout.

For every input file (plain or gzip), ``day_<n>_dense.npy`` float32 (N, 13),
``day_<n>_sparse.npy`` int64 (N, 26) and ``day_<n>_labels.npy`` int32 (N, 1): the names and
dtypes TorchRec's ``InMemoryBinaryCriteoIterDataPipe`` reads. ``n`` comes from the file name
(``day_7``, ``day_7.gz``, ``day_7.tsv``) or, for other names, from the position in
``data.path`` as listed (a folder's files sorted). Rows are handled as by
``data=criteo_tsv`` (:mod:`.tsv_parse`): short rows padded, malformed rows skipped and
counted with their line numbers.

A plain file is cut into 2 MiB byte ranges that ``preprocess.num_workers`` processes read,
parse and write into the day's npy files themselves (:mod:`.parse_blocks`); a gzip file is
decompressed here in 8 MiB blocks and sent to them. Only counts and bad line numbers come
back, and memory stays at a few blocks per worker whatever the file size.

Each finished day gets ``day_<n>.json`` (its read report, input size and
options), written last: a re-run skips days whose marker matches, so an interrupted conversion
resumes with the first unfinished day, and a partly written day never looks finished.
"""

import collections
import itertools
import logging
import multiprocessing
import os
import re
import sys
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from dlrm_exp.config import CategoricalTransform, DenseTransform, PreprocessConfig
from dlrm_exp.data.criteo_tsv import ReadReport, check_skipped_rows, no_valid_row_message
from dlrm_exp.data.paths import resolve_inputs
from dlrm_exp.data.preprocess.contiguous import contiguous_ids
from dlrm_exp.data.preprocess.npy_stream import NpyRowFile, NpyRowWriter
from dlrm_exp.data.preprocess.parse_blocks import (
    BlockResult,
    byte_ranges,
    install_chain,
    make_chain,
    run_block,
)
from dlrm_exp.data.preprocess.tsv_parse import (
    BLOCK_BYTES,
    NUM_DENSE,
    NUM_SPARSE,
    is_gzip,
    iter_line_chunks,
)
from dlrm_exp.errors import DataError
from dlrm_exp.util.files import read_json_object, write_json_atomic
from dlrm_exp.util.parent_death import die_with_parent
from dlrm_exp.util.text import first_few

log = logging.getLogger(__name__)

_DAY_NAME = re.compile(r"^day_(\d+)(\.[A-Za-z0-9.]*)?$")
_MAX_BAD_LINES = 20
_TORCHREC_CHUNK_ROWS = 1 << 20
RANGE_BYTES = 2 << 20  # plain files: byte range per block (more blocks than workers balance)


#: The settings each day's marker records (:meth:`Options.as_dict`): days converted with
#: other ones do not make one dataset.
MARKER_SETTINGS = ("dense_transform", "categorical", "table_sizes")


def marker_setting(marker: dict[str, Any]) -> str:
    """A day marker's settings (:data:`MARKER_SETTINGS`) as text, ``dense_transform=log1p,
    categorical=hash, table_sizes=[...]``: days of one folder must share it."""
    return ", ".join(f"{k}={marker[k]}" for k in MARKER_SETTINGS if marker.get(k) is not None)


@dataclass(frozen=True)
class Options:
    """What a conversion depends on (recorded in every day's marker), and the share of a
    day's rows that may be skipped (``data.max_skipped_fraction``; not recorded: it decides
    whether a day is written, not what)."""

    dense_transform: DenseTransform
    categorical: CategoricalTransform
    table_sizes: tuple[int, ...] | None  # for categorical=hash
    max_skipped_fraction: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """The settings a day's marker records (:data:`MARKER_SETTINGS`)."""
        return {
            "dense_transform": self.dense_transform.value,
            "categorical": self.categorical.value,
            "table_sizes": list(self.table_sizes) if self.table_sizes else None,
        }

    def sparse_name(self, day: int) -> str:
        """The file the day's conversion writes ids to (``contiguous`` re-indexes raw ids
        afterwards, over all days)."""
        raw = self.categorical is CategoricalTransform.contiguous
        return f"day_{day}_sparse_raw.npy" if raw else f"day_{day}_sparse.npy"


def day_numbers(files: list[Path]) -> dict[int, Path]:
    """Day number of each input file: from a ``day_<n>`` name, else its position.

    Raises:
        DataError: two files map to the same day.
    """
    days: dict[int, Path] = {}
    for index, path in enumerate(files):
        match = _DAY_NAME.match(path.name)
        day = int(match.group(1)) if match else index
        if day in days:
            raise DataError(f"data.path: {days[day]} and {path} would both become day_{day}")
        days[day] = path
    return dict(sorted(days.items()))


#: A day's marker, written last by its conversion.
_MARKER_NAME = re.compile(r"day_(\d+)\.json")
#: The record of a finished re-index over every day (``categorical=contiguous``).
CONTIGUOUS_MARKER = "contiguous.json"
#: The report of a conversion: in the output folder, and in the run folder of mode=preprocess.
REPORT_FILE = "preprocess_report.json"
#: The days a conversion under way will write (``{"days": [...]}``), written before the
#: first and removed when the run ends well: an interrupted run's days missing from the
#: folder are told, not taken for a folder of fewer days (training then validated on the
#: wrong day: review).
PENDING_FILE = "preprocess_pending.json"


def _marker(out_dir: Path, day: int) -> Path:
    return out_dir / f"day_{day}.json"


def _source_facts(path: Path) -> dict[str, Any]:
    stat = path.stat()
    return {"source": str(path.resolve()), "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def converted_days(folder: Path) -> dict[int, dict[str, Any]]:
    """The days ``mode=preprocess`` finished in ``folder``: ``{day: its marker's content}``
    (a marker that cannot be read counts as none)."""
    done = {}
    for marker in folder.glob("day_*.json"):
        match = _MARKER_NAME.fullmatch(marker.name)
        if not match:
            continue
        content = read_json_object(marker)
        if content is not None:
            done[int(match.group(1))] = content
    return done


def is_finished(
    out_dir: Path, day: int, path: Path, options: Options, done: dict[str, Any] | None
) -> bool:
    """True when ``day``'s marker content ``done`` (:func:`converted_days`; None: no marker)
    records this very input and these options, and its files are there."""
    if done is None:
        return False
    expected = {**_source_facts(path), **options.as_dict()}
    names = (f"day_{day}_dense.npy", options.sparse_name(day), f"day_{day}_labels.npy")
    return all(done.get(k) == v for k, v in expected.items()) and all(
        (out_dir / name).is_file() for name in names
    )


def _other_source(done: dict[str, Any] | None, path: Path) -> str | None:
    """The input another conversion made a day of (its marker content ``done``'s
    ``source``), when it is not ``path``: converting ``path`` would silently replace that
    day's files."""
    source = (done or {}).get("source")
    return source if source and source != str(path.resolve()) else None


def _torchrec_dense(raw_path: Path, out_path: Path, minimum: int) -> None:
    """TorchRec's transform ``log(x - min + 2)`` in float32, ``min`` over the whole file,
    streamed from the raw counts in chunks."""
    raw = np.load(raw_path, mmap_mode="r")
    with NpyRowWriter(out_path, np.float32, NUM_DENSE) as writer:
        for lo in range(0, raw.shape[0], _TORCHREC_CHUNK_ROWS):
            shifted = (raw[lo : lo + _TORCHREC_CHUNK_ROWS] - (minimum - 2)).astype(np.float32)
            writer.append(np.log(shifted, dtype=np.float32))
    del raw
    raw_path.unlink()


@dataclass
class _DayTally:
    """What the finished blocks of one file add up to, counted in file order."""

    path: Path
    report: ReadReport
    first_line: int = 1
    rows: int = 0
    minimum: int | None = None

    def add(self, done: BlockResult) -> None:
        """Count one finished block (its lines follow those counted so far)."""
        self.report.add_lines(
            done.num_valid,
            done.num_padded,
            done.bad_lines,
            done.bad_reasons,
            self.first_line,
            str(self.path),
            _MAX_BAD_LINES,
        )
        self.first_line += done.num_lines
        self.rows += done.num_valid
        if done.dense_min is not None:
            self.minimum = (
                done.dense_min if self.minimum is None else min(self.minimum, done.dense_min)
            )


def _check_day_rows(path: Path, day: int, tally: "_DayTally", options: Options) -> None:
    """Refuse a day without a valid row (as ``data=criteo_tsv`` does) or one that skipped more
    than ``options.max_skipped_fraction`` of its rows: its files are not finished.

    Raises:
        DataError: with the counts, reasons and first bad lines.
    """
    if tally.rows == 0:
        message = no_valid_row_message([path], tally.report)
        raise DataError(f"{message}; nothing written for day_{day}")
    check_skipped_rows(
        tally.report.as_dict(),
        options.max_skipped_fraction,
        f"converted (nothing written for day_{day})",
        "Unlabeled rows (Criteo's test.txt)? convert only labeled files; to keep the valid "
        "rows, raise data.max_skipped_fraction",
    )


def convert_file(
    path: Path,
    day: int,
    out_dir: Path,
    options: Options,
    pool: Executor | None,
    workers: int,
    bar: tqdm,
    sequence: Iterator[int],
) -> dict[str, Any]:
    """Convert one TSV file into ``day``'s three npy files; returns its report. Blocks go to
    ``pool`` (``workers`` processes) or, without one, are parsed here; ``sequence`` numbers
    blocks across files (:mod:`.parse_blocks`).

    Raises:
        DataError: the file cannot be read as text (binary, broken gzip), holds no valid row
            (nothing is written for its day), or changed while it was read (no marker).
    """
    started = time.perf_counter()
    source = _source_facts(path)  # as read: the marker must not vouch for a later file
    tally = _DayTally(path, ReadReport(files=[str(path)]))
    torchrec = options.dense_transform is DenseTransform.torchrec
    dense_path = out_dir / (f"day_{day}_dense_raw.npy" if torchrec else f"day_{day}_dense.npy")
    outputs = (
        NpyRowFile(dense_path, np.int64 if torchrec else np.float32, NUM_DENSE),
        NpyRowFile(out_dir / options.sparse_name(day), np.int64, NUM_SPARSE),
        NpyRowFile(out_dir / f"day_{day}_labels.npy", np.int32, 1),
    )
    try:
        _run_blocks(path, outputs, options, pool, workers, bar, sequence, tally)
        _check_day_rows(path, day, tally, options)
        _retire_day(out_dir, day, options)
        for output in outputs:
            output.finish(tally.rows)
    except BaseException:
        for output in outputs:
            output.abort()
        raise
    if torchrec:
        _torchrec_dense(dense_path, out_dir / f"day_{day}_dense.npy", tally.minimum or 0)
    if _source_facts(path) != source:
        raise DataError(
            f"{path} changed while day_{day} was converted (size or modification time): its "
            "files are left without a marker; convert it again once it is complete"
        )
    return _finish_day(out_dir, day, source, options, tally.report, started)


def _retire_day(out_dir: Path, day: int, options: Options) -> None:
    """What vouches for the day's finished files goes just before they are replaced (their new
    rows parsed and checked, aside in ``.tmp`` files): an interrupted run must not leave a
    marker that says the old files are finished beside some of the new ones, nor (converting
    without contiguous ids) raw ids of an earlier contiguous run that a later one would
    re-index over these; and the re-index record goes (this day's ids change). A day refused
    or interrupted before this keeps its earlier files, marker and re-index (hours on the 1TB
    days)."""
    _marker(out_dir, day).unlink(missing_ok=True)
    if options.categorical is not CategoricalTransform.contiguous:
        (out_dir / f"day_{day}_sparse_raw.npy").unlink(missing_ok=True)
    else:
        (out_dir / CONTIGUOUS_MARKER).unlink(missing_ok=True)


def _run_blocks(
    path: Path,
    outputs: tuple[NpyRowFile, ...],
    options: Options,
    pool: Executor | None,
    workers: int,
    bar: tqdm,
    sequence: Iterator[int],
    tally: _DayTally,
) -> None:
    """Parse every block of ``path`` into ``outputs``, at most ``2 x workers`` in flight."""
    in_flight: collections.deque[Future] = collections.deque()
    depth = 2 * max(workers, 1)  # blocks in flight: bounds memory, keeps workers busy
    log1p = options.dense_transform is DenseTransform.log1p
    for index, source in enumerate(_block_sources(path)):
        args = (next(sequence), index == 0, source, outputs, log1p, options.table_sizes)
        in_flight.append(_submit(pool, args, path))
        _drain(in_flight, depth, tally, bar)
    _drain(in_flight, 0, tally, bar)


def _block_sources(path: Path) -> Iterable[tuple[Path, int, int] | bytes]:
    """A gzip file's decompressed blocks, or a plain file's byte ranges."""
    if is_gzip(path):
        return (data for data, _ in iter_line_chunks(path, BLOCK_BYTES))
    return byte_ranges(path, RANGE_BYTES)


def _submit(pool: Executor | None, args: tuple, path: Path) -> Future:
    """One block to ``pool``, or parsed here (a finished Future) without one."""
    if pool is None:
        job: Future = Future()
        job.set_result(run_block(*args, str(path)))
        return job
    return pool.submit(run_block, *args, str(path))


def _drain(in_flight: collections.deque[Future], keep: int, tally: _DayTally, bar: tqdm) -> None:
    """Wait for the oldest blocks, in order, until ``keep`` are left in flight."""
    while len(in_flight) > keep:
        done: BlockResult = in_flight.popleft().result()
        tally.add(done)
        bar.update(done.num_lines)


def _finish_day(
    out_dir: Path,
    day: int,
    source: dict[str, Any],
    options: Options,
    report: ReadReport,
    started: float,
) -> dict[str, Any]:
    """The day's report, written last as its marker (:func:`is_finished`); ``source`` is the
    input's facts as they were when reading began (:func:`_source_facts`)."""
    seconds = time.perf_counter() - started
    result = {
        "day": day,
        **source,
        **options.as_dict(),
        **report.as_dict(),
        "seconds": seconds,
        "rows_per_sec": report.rows_read / seconds if seconds > 0 else None,
    }
    write_json_atomic(_marker(out_dir, day), result)
    return result


def _remove_leftovers(out_dir: Path) -> None:
    """Remove the ``day_*.npy.tmp`` files a killed conversion left (``kill -9``, the OOM
    killer, a power loss: a finished day was then skipped, and its unfinished files stayed for
    good, tens of GB on the 1TB days: data review). Nothing else writes them: the folder is
    this run's (``mode=preprocess`` holds its lock)."""
    left = sorted(out_dir.glob("day_*.npy.tmp"))
    if not left:
        return
    size = sum(p.stat().st_size for p in left)
    for path in left:
        path.unlink(missing_ok=True)
    log.warning(
        "removed %d unfinished file(s) an interrupted conversion left in %s (%s, %.1f MiB)",
        len(left), out_dir, first_few([p.name for p in left], 3), size / 2**20,
    )  # fmt: skip


def _writable_folder(out_dir: Path) -> None:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / ".dlrm_exp_write_test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise DataError(f"preprocess.output_dir: cannot write to {out_dir} ({err})") from None


def preprocess_files(
    files: list[Path],
    out_dir: Path,
    cfg: PreprocessConfig,
    table_sizes: list[int],
    progress: bool | None = None,
    max_skipped_fraction: float | None = None,
) -> dict[str, Any]:
    """Convert ``files`` into ``out_dir``; returns (and writes) ``preprocess_report.json``.

    Args:
        files: Criteo TSV files, plain or gzip.
        out_dir: output folder (created).
        cfg: the ``preprocess`` group.
        table_sizes: rows per table, used when ``cfg.categorical`` is ``hash``.
        progress: tqdm bar on stderr (None: only when stderr is a terminal).
        max_skipped_fraction: a day skipping more of its rows is refused, not written (None:
            never).

    Raises:
        DataError: unreadable input, clashing day numbers, an unwritable ``out_dir``, or a day
            whose skipped rows exceed ``max_skipped_fraction``.
    """
    options = Options(
        cfg.dense_transform,
        cfg.categorical,
        tuple(table_sizes) if cfg.categorical is CategoricalTransform.hash else None,
        max_skipped_fraction,
    )
    days = day_numbers(files)
    _writable_folder(out_dir)
    _remove_leftovers(out_dir)
    done = converted_days(out_dir)
    _check_same_settings_as(done, sorted(set(done) - set(days)), options, out_dir)
    started = time.perf_counter()
    todo = _days_to_convert(days, done, out_dir, options, cfg.overwrite)
    # an earlier unfinished run's days this one does not convert stay pending (they were
    # forgotten, and the folder trained without them: diff review)
    earlier = Pending.read(out_dir).without(set(days) | set(done))
    earlier.adding(list(todo)).write(out_dir)  # (a refusal above leaves the folder as is)
    pool = _worker_pool(cfg.num_workers, files)
    show = sys.stderr.isatty() if progress is None else progress
    try:
        reports = _convert_days(todo, out_dir, options, cfg, pool, show, earlier)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    contiguous = None
    if options.categorical is CategoricalTransform.contiguous:
        contiguous = _reindex(out_dir, list(days), cfg.frequency_threshold, bool(reports))
    skipped = [day for day in days if day not in todo]
    summary = _summary(out_dir, options, reports, skipped, started, contiguous)
    write_json_atomic(out_dir / REPORT_FILE, summary)
    earlier.write(out_dir)
    return summary


def _worker_pool(num_workers: int, files: list[Path]) -> ProcessPoolExecutor | None:
    """``num_workers`` forked parse processes, or None when one block's worth of input (or
    ``num_workers=1``) is parsed inline."""
    # fork, as torch's DataLoader workers: the workers need only numpy and start at once.
    parallel = num_workers > 1 and sum(p.stat().st_size for p in files) > RANGE_BYTES
    if not parallel:
        return None
    fork = multiprocessing.get_context("fork")
    return ProcessPoolExecutor(
        num_workers,
        mp_context=fork,
        initializer=_parse_worker,
        initargs=(make_chain(fork), os.getpid()),
    )


def _parse_worker(chain: tuple[Any, Any, Any], parent: int) -> None:
    """Pool initializer: the row-offset chain (:func:`install_chain`); the worker ends with
    its ``parent`` (:func:`~dlrm_exp.util.parent_death.die_with_parent`). SIGTERM keeps its
    default action in the forked worker: the CLI's handler acts only in its own process."""
    install_chain(chain)
    die_with_parent(parent)


def _check_same_settings_as(
    done: dict[int, dict[str, Any]], others: list[int], options: Options, out_dir: Path
) -> None:
    """The days ``others`` of ``out_dir`` this run leaves as they are (``done``: their
    markers) were converted with this run's settings: a mix is refused by
    ``data=criteo_npy``, and was written only to be (npy review). Else a warning names them
    (read with this run's days).

    Raises:
        DataError: naming the days, their settings and this run's.
    """
    mine = marker_setting(options.as_dict())
    mixed = [d for d in others if marker_setting(done[d]) != mine]
    if mixed:
        theirs = marker_setting(done[mixed[0]])
        raise DataError(
            f"preprocess.output_dir={out_dir} holds "
            f"{first_few([f'day_{d}' for d in mixed], 4)} converted with {theirs}, and this "
            f"run converts with {mine}: data=criteo_npy reads no folder of days converted "
            "otherwise; convert into another preprocess.output_dir, or every day of this "
            "folder with the same settings"
        )
    if others:  # (after the refusal, which it contradicted: review)
        log.warning(
            "preprocess.output_dir=%s also holds %s from other inputs: data=criteo_npy reads "
            "them with this run's days",
            out_dir,
            ", ".join(f"day_{d}" for d in others),
        )


def _days_to_convert(
    days: dict[int, Path],
    done: dict[int, dict[str, Any]],
    out_dir: Path,
    options: Options,
    overwrite: bool,
) -> dict[int, Path]:
    """The days of ``days`` not already finished (``done``: the markers found, see
    :func:`converted_days`; ``overwrite``: every day), all checked before any is converted.

    Raises:
        DataError: a day's marker records another input, which converting would replace.
    """
    todo = {}
    for day, path in days.items():
        if not overwrite and is_finished(out_dir, day, path, options, done.get(day)):
            continue
        other = None if overwrite else _other_source(done.get(day), path)
        if other is not None:
            raise DataError(
                f"preprocess.output_dir={out_dir} already holds day_{day} converted from "
                f"{other}; {path} would replace it: use another preprocess.output_dir, name "
                "the file day_<n> for a free day, or preprocess.overwrite=true"
            )
        todo[day] = path
    return todo


def _convert_days(
    todo: dict[int, Path],
    out_dir: Path,
    options: Options,
    cfg: PreprocessConfig,
    pool: Executor | None,
    show: bool,
    earlier: "Pending",
) -> list[dict[str, Any]]:
    """Convert the days ``todo`` (:func:`_days_to_convert`); returns their reports. A day
    refused (nothing written for it: the folder keeps what it had) leaves pending only the
    days after it, with why (:class:`Pending`; ``earlier``: an earlier run's, kept): a
    folder that failed to gain one day still trains (preprocess review)."""
    reports: list[dict[str, Any]] = []
    sequence = itertools.count()
    with tqdm(unit="rows", unit_scale=True, disable=not show, desc="preprocess") as bar:
        for day, path in todo.items():
            bar.set_postfix_str(f"day_{day} <- {path.name}")
            try:
                reports.append(
                    convert_file(path, day, out_dir, options, pool, cfg.num_workers, bar, sequence)
                )
            except DataError as err:
                held = [d for d in todo if d > day]
                earlier.refusing(day, f"{path}: {err}", held).write(out_dir)
                raise
    return reports


@dataclass(frozen=True)
class RefusedDay:
    """A day a conversion refused (nothing written for it), why, and the days after it that
    run then did not write (``held``)."""

    day: int
    why: str
    held: tuple[int, ...]

    @property
    def short_why(self) -> str:
        """``why`` cut to 200 characters for a message (``...`` where cut)."""
        return self.why if len(self.why) <= 200 else f"{self.why[:200]}..."


@dataclass(frozen=True)
class Pending:
    """The days conversions into a folder set out to write and have not
    (:data:`PENDING_FILE`: ``{"days": [...], "refused": [{"day", "why", "held"}, ...]}``),
    and the refusals that held some of them up (each with its own days: one shared cause
    named a day already left out or mended, and blamed it for days it never held up: diff
    review).

    Attributes:
        days: the day numbers still to write.
        refusals: the refused days, each with the pending days it held up.
        unreadable: a record is there but does not read (its days unknown).
    """

    days: tuple[int, ...] = ()
    refusals: tuple[RefusedDay, ...] = ()
    unreadable: bool = False

    @classmethod
    def read(cls, folder: Path) -> "Pending":
        """The record in ``folder`` (none: nothing pending; one that does not read, or holds
        other than day numbers: ``unreadable``)."""
        if not (folder / PENDING_FILE).exists():
            return cls()
        record = read_json_object(folder / PENDING_FILE) or {}
        try:
            days = tuple(sorted(int(d) for d in record["days"]))
            refusals = tuple(
                RefusedDay(int(r["day"]), str(r["why"]), tuple(int(h) for h in r["held"]))
                for r in record.get("refused", [])
            )
        except (KeyError, TypeError, ValueError):
            return cls(unreadable=True)
        return cls(days, refusals)

    def without(self, gone: set[int]) -> "Pending":
        """These pending days but ``gone`` (converted by this run, or finished); a refusal
        stays while its day is not among them and it still holds a pending day up, or held
        none (the last day's: the folder reads without it, and says so)."""
        kept = tuple(d for d in self.days if d not in gone)
        refusals = tuple(
            RefusedDay(r.day, r.why, tuple(h for h in r.held if h in kept))
            for r in self.refusals
            if r.day not in gone and (not r.held or any(h in kept for h in r.held))
        )
        return Pending(kept, refusals)

    def adding(self, days: list[int]) -> "Pending":
        """These pending days and ``days``."""
        return Pending(tuple(sorted({*self.days, *days})), self.refusals)

    def refusing(self, day: int, why: str, held: list[int]) -> "Pending":
        """These days and ``held``, which the refusal of ``day`` (``why``) held up."""
        refusal = RefusedDay(day, why, tuple(held))
        return replace(self.adding(held), refusals=(*self.refusals, refusal))

    def held_by(self, day: int) -> RefusedDay | None:
        """The refusal that held pending ``day`` up, if one did."""
        return next((r for r in self.refusals if day in r.held), None)

    def left_out(self, days: Iterable[int]) -> list[RefusedDay]:
        """The refused days not among the folder's ``days`` (converted), in day order."""
        converted = set(days)
        return sorted((r for r in self.refusals if r.day not in converted), key=lambda r: r.day)

    def write(self, folder: Path) -> None:
        """Record these days and refusals in ``folder``, or remove the record where there are
        none.

        Raises:
            OSError: the record cannot be written or removed (the folder read-only, full).
        """
        if self.days or self.refusals:
            refused = [{"day": r.day, "why": r.why, "held": list(r.held)} for r in self.refusals]
            write_json_atomic(folder / PENDING_FILE, {"days": list(self.days), "refused": refused})
        else:
            (folder / PENDING_FILE).unlink(missing_ok=True)


def _summary(
    out_dir: Path,
    options: Options,
    reports: list[dict[str, Any]],
    skipped: list[int],
    started: float,
    contiguous: dict[str, Any] | None,
) -> dict[str, Any]:
    """``preprocess_report.json``: totals over the days this run converted and each one's
    report (``days``), and every day the folder holds, this run's or earlier ones', with its
    report from its marker (``folder_days``, ``folder_rows_valid``: a re-run, or a run that
    added a day, left only its own days, and a finished interrupted conversion none: npy
    review)."""
    seconds = time.perf_counter() - started
    rows = sum(r["rows_read"] for r in reports)
    folder = [marker for _, marker in sorted(converted_days(out_dir).items())]
    return {
        "output_dir": str(out_dir),
        **options.as_dict(),
        "days_converted": [r["day"] for r in reports],
        "days_skipped_finished": skipped,
        "rows_read": rows,
        "rows_valid": sum(r["rows_valid"] for r in reports),
        "rows_padded": sum(r["rows_padded"] for r in reports),
        "rows_skipped": sum(r["rows_skipped"] for r in reports),
        "seconds": seconds,
        "rows_per_sec": rows / seconds if seconds > 0 else None,
        "contiguous": contiguous,
        "days": reports,
        "folder_days": folder,
        "folder_rows_valid": sum(int(m.get("rows_valid", 0)) for m in folder),
    }


#: A day's raw ids kept for re-indexing: ``day_<n>_sparse_raw.npy``.
_RAW_DAY = re.compile(r"day_(\d+)_sparse_raw\.npy$")


def _reindex(out_dir: Path, days: list[int], threshold: int, changed: bool) -> dict[str, Any]:
    """``categorical=contiguous``: re-index every day's raw ids into ``day_<n>_sparse.npy``
    unless ``contiguous.json`` records this very pass (same days and threshold, no day
    converted again). Returns the marker's content.

    The days are this run's and every other day whose raw ids ``out_dir`` holds: converting
    day 23 alone after days 0-22 must map an id to the row it has on those days (TorchRec's
    ``sparse_to_contiguous`` maps over all days at once), so the earlier days are re-indexed
    with it."""
    marker = out_dir / CONTIGUOUS_MARKER
    present = {int(m.group(1)) for f in out_dir.glob("day_*_sparse_raw.npy")
               if (m := _RAW_DAY.match(f.name))}  # fmt: skip
    days = sorted(present | set(days))
    wanted = {"days": days, "frequency_threshold": threshold}
    if not changed and marker.is_file():
        done = read_json_object(marker) or {}
        outputs = all((out_dir / f"day_{d}_sparse.npy").is_file() for d in days)
        if outputs and all(done.get(k) == v for k, v in wanted.items()):
            return done
    marker.unlink(missing_ok=True)
    sizes = contiguous_ids(
        [out_dir / f"day_{d}_sparse_raw.npy" for d in days],
        [out_dir / f"day_{d}_sparse.npy" for d in days],
        threshold,
    )
    done = {**wanted, "num_embeddings_per_feature": sizes}
    write_json_atomic(marker, done)
    return done


def summary_lines(summary: dict[str, Any]) -> str:
    """What ``mode=preprocess`` prints at the end."""
    lines = []
    for r in summary["days"]:
        skipped = ", ".join(f"{k} {v}" for k, v in r["skipped_by_reason"].items() if v)
        lines.append(
            f"day_{r['day']} <- {Path(r['source']).name}: {r['rows_valid']:,} rows "
            f"({r['rows_padded']:,} padded, {r['rows_skipped']:,} skipped"
            + (f": {skipped}" if skipped else "")
            + f") at {r['rows_per_sec']:,.0f} rows/s"
        )
        if r["first_bad_lines"]:
            lines.append(f"  first bad lines: {', '.join(r['first_bad_lines'][:5])}")
    if summary["days_skipped_finished"]:
        days = ", ".join(f"day_{d}" for d in summary["days_skipped_finished"])
        lines.append(f"already finished (preprocess.overwrite=true to redo): {days}")
    rate = summary["rows_per_sec"]
    folder = summary["folder_days"]
    lines.append(
        f"{summary['rows_valid']:,} rows written to {summary['output_dir']} in "
        f"{summary['seconds']:.1f} s"
        + (f" ({rate:,.0f} rows/s)" if rate else "")
        + f"; it holds {len(folder)} day(s), {summary['folder_rows_valid']:,} rows"
    )
    if summary.get("contiguous"):
        sizes = ",".join(str(n) for n in summary["contiguous"]["num_embeddings_per_feature"])
        lines.append(
            "contiguous ids (frequency_threshold "
            f"{summary['contiguous']['frequency_threshold']}): train with "
            f"model.num_embeddings_per_feature=[{sizes}]"
        )
    lines.append(f"report: {Path(summary['output_dir']) / REPORT_FILE}")
    return "\n".join(lines)


def run_preprocess(
    data_paths: list[str],
    cfg: PreprocessConfig,
    table_sizes: list[int],
    max_skipped_fraction: float | None = None,
) -> dict:
    """The ``mode=preprocess`` entry: resolve ``data.path`` and convert (``max_skipped_fraction``:
    see :func:`preprocess_files`).

    Raises:
        DataError: see :func:`preprocess_files`; a day over ``max_skipped_fraction``.
    """
    assert cfg.output_dir is not None
    files = resolve_inputs({"data.path": data_paths})["data.path"]
    out_dir = Path(cfg.output_dir).expanduser()
    return preprocess_files(
        files, out_dir, cfg, table_sizes, max_skipped_fraction=max_skipped_fraction
    )
