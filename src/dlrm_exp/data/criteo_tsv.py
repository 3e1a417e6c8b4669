"""Criteo Kaggle / Terabyte click-log TSV reader, vectorized with pyarrow (no per-row loop).

Format (Criteo Display Advertising Challenge): one impression per line, tab-separated,
``label I1..I13 C1..C26`` = 40 fields; ``label`` is 0 or 1, ``I*`` integer counts (may be
negative or empty), ``C*`` 32-bit hashes as up to 8 hex digits (may be empty).

Row handling:
  * rows with 14..39 fields lost their trailing empty fields and are right-padded to 40
    (valid ones are counted as ``rows_padded``);
  * empty fields are missing values: dense 0, categorical hash 0 (as facebookresearch/dlrm);
  * dense transform: ``log(1 + max(x, 0))`` (facebookresearch/dlrm ``data_utils``: negative
    counts clipped to 0);
  * categoricals: ``int(C, 16) % num_embeddings`` of the feature's table;
  * malformed rows are skipped and counted by reason, with the first line numbers kept:
    ``field_count`` (fewer than 14 or more than 40 fields), ``label`` (not 0/1), ``dense``
    (not an integer), ``categorical`` (not hex of at most 8 digits).
"""

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from dlrm_exp.config import CRITEO_NUM_DENSE, CRITEO_NUM_SPARSE, CriteoTsvDataConfig
from dlrm_exp.data.batches import ClickData
from dlrm_exp.errors import DataError

NUM_FIELDS = 1 + CRITEO_NUM_DENSE + CRITEO_NUM_SPARSE  # 40
MIN_FIELDS = 1 + CRITEO_NUM_DENSE  # label and the 13 dense fields must be present
REASONS = ("field_count", "label", "dense", "categorical")
_DENSE_RE = r"^(-?[0-9]{1,18})?$"  # empty or an integer that fits int64
_HEX_RE = r"^[0-9a-fA-F]{0,8}$"  # empty or a 32-bit hex hash
_BLOCK_BYTES = 64 << 20

_HEX_LUT = np.zeros(256, dtype=np.uint32)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX_LUT[_c] = _i
    _HEX_LUT[ord(chr(_c).upper())] = _i


@dataclass
class ReadReport:
    """What a read found. Line numbers are 1-based, per file."""

    files: list[str] = field(default_factory=list)
    rows_read: int = 0
    rows_valid: int = 0
    rows_padded: int = 0
    skipped_by_reason: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    first_bad_lines: list[str] = field(default_factory=list)

    @property
    def rows_skipped(self) -> int:
        return sum(self.skipped_by_reason.values())

    def merge(self, other: "ReadReport", max_bad_lines: int) -> None:
        self.files += other.files
        self.rows_read += other.rows_read
        self.rows_valid += other.rows_valid
        self.rows_padded += other.rows_padded
        for k, v in other.skipped_by_reason.items():
            self.skipped_by_reason[k] += v
        self.first_bad_lines = (self.first_bad_lines + other.first_bad_lines)[:max_bad_lines]

    def as_dict(self) -> dict[str, object]:
        return {
            "files": self.files,
            "rows_read": self.rows_read,
            "rows_valid": self.rows_valid,
            "rows_padded": self.rows_padded,
            "rows_skipped": self.rows_skipped,
            "skipped_by_reason": dict(self.skipped_by_reason),
            "first_bad_lines": self.first_bad_lines,
        }


def resolve_paths(paths: Iterable[str], key: str) -> list[Path]:
    """Files named by ``paths``: a folder stands for its non-hidden files, sorted by name.

    Raises:
        DataError: a path does not exist, or a folder holds no file.
    """
    files: list[Path] = []
    for raw in paths:
        path = Path(raw).expanduser()
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
            if not found:
                raise DataError(f"{key}: folder {raw} holds no data file")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise DataError(f"{key}: no such file or folder: {raw} (from {os.getcwd()})")
    return files


def _hex_to_uint32(col: pa.Array) -> np.ndarray:
    """Parse up-to-8-digit hex strings (already validated) into uint32; empty -> 0."""
    padded = pc.utf8_lpad(col, width=8, padding="0")
    if len(padded) == 0:
        return np.zeros(0, dtype=np.uint32)
    padded = padded.combine_chunks() if isinstance(padded, pa.ChunkedArray) else padded
    offsets = np.frombuffer(padded.buffers()[1], dtype=np.int32)[padded.offset :]
    data = np.frombuffer(padded.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[len(padded)]]
    nibbles = _HEX_LUT[data.reshape(-1, 8)]
    shifts = np.arange(28, -1, -4, dtype=np.uint32)
    return (nibbles << shifts).sum(axis=1, dtype=np.uint64).astype(np.uint32)


def _parse_block(
    lines: pa.Array, first_line: int, table_sizes: list[int], file_name: str, max_bad: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, ReadReport]:
    report = ReadReport(rows_read=len(lines))
    bad_reason = np.full(len(lines), -1, dtype=np.int8)

    n_fields = pc.add(pc.count_substring(lines, "\t"), 1).to_numpy(zero_copy_only=False)
    bad_reason[(n_fields < MIN_FIELDS) | (n_fields > NUM_FIELDS)] = 0
    ok = np.flatnonzero(bad_reason < 0)
    kept = lines.take(pa.array(ok))
    pads = pc.binary_repeat("\t", pa.array(NUM_FIELDS - n_fields[ok]))
    fields = pc.split_pattern(pc.binary_join_element_wise(kept, pads, ""), "\t")
    columns = [pc.list_element(fields, j) for j in range(NUM_FIELDS)]

    def mark(mask: np.ndarray, reason: int) -> None:
        idx = ok[mask & (bad_reason[ok] < 0)]
        bad_reason[idx] = reason

    label_ok = pc.is_in(columns[0], value_set=pa.array(["0", "1"])).to_numpy(zero_copy_only=False)
    mark(~label_ok, 1)
    dense_cols = columns[1 : 1 + CRITEO_NUM_DENSE]
    sparse_cols = columns[1 + CRITEO_NUM_DENSE :]
    for col in dense_cols:
        mark(~pc.match_substring_regex(col, _DENSE_RE).to_numpy(zero_copy_only=False), 2)
    for col in sparse_cols:
        mark(~pc.match_substring_regex(col, _HEX_RE).to_numpy(zero_copy_only=False), 3)

    good_in_ok = bad_reason[ok] < 0
    good = pa.array(np.flatnonzero(good_in_ok))
    labels = np.asarray(columns[0].take(good).to_numpy(zero_copy_only=False) == "1", np.float32)
    dense = np.empty((len(good), CRITEO_NUM_DENSE), dtype=np.float32)
    for j, col in enumerate(dense_cols):
        values = pc.cast(pc.if_else(pc.equal(col.take(good), ""), "0", col.take(good)), pa.int64())
        dense[:, j] = np.log1p(np.maximum(values.to_numpy(zero_copy_only=False), 0))
    sparse = np.empty((len(good), CRITEO_NUM_SPARSE), dtype=np.int64)
    for j, col in enumerate(sparse_cols):
        sparse[:, j] = _hex_to_uint32(col.take(good)).astype(np.int64) % table_sizes[j]

    report.rows_valid = len(good)
    report.rows_padded = int(np.sum(n_fields[ok[good_in_ok]] < NUM_FIELDS))
    for r, name in enumerate(REASONS):
        report.skipped_by_reason[name] = int(np.sum(bad_reason == r))
    for i in np.flatnonzero(bad_reason >= 0)[:max_bad]:
        report.first_bad_lines.append(
            f"{file_name}:{first_line + int(i)} ({REASONS[bad_reason[i]]})"
        )
    return dense, sparse, labels, report


def _line_blocks(path: Path) -> Iterable[pa.Array]:
    """The file's lines as string arrays, one per ~64 MiB block (bounded memory)."""
    reader = pacsv.open_csv(
        path,
        read_options=pacsv.ReadOptions(column_names=["line"], block_size=_BLOCK_BYTES),
        parse_options=pacsv.ParseOptions(
            delimiter="\x1f", quote_char=False, escape_char=False, ignore_empty_lines=False
        ),
        convert_options=pacsv.ConvertOptions(
            column_types={"line": pa.string()}, strings_can_be_null=False
        ),
    )
    for batch in reader:
        yield batch.column(0)


def read_files(
    files: list[Path], table_sizes: list[int], max_bad_lines: int
) -> tuple[ClickData, ReadReport]:
    """Read Criteo TSV ``files`` in order into one :class:`ClickData`.

    Args:
        files: TSV files (see :func:`resolve_paths`).
        table_sizes: rows of each of the 26 tables; categorical hashes are taken modulo these.
        max_bad_lines: how many malformed line numbers to keep in the report.

    Raises:
        DataError: a file is not line-oriented text, or no valid row was found.
    """
    report = ReadReport()
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for path in files:
        file_report = ReadReport(files=[str(path)])
        line = 1
        try:
            for lines in _line_blocks(path):
                dense, sparse, labels, block = _parse_block(
                    lines, line, table_sizes, str(path), max_bad_lines
                )
                line += len(lines)
                parts.append((dense, sparse, labels))
                file_report.merge(block, max_bad_lines)
        except pa.ArrowInvalid as err:
            if "Empty CSV file" in str(err):
                continue
            raise DataError(f"{path}: not a Criteo TSV text file ({err})") from None
        report.merge(file_report, max_bad_lines)
    if report.rows_valid == 0:
        raise DataError(
            f"no valid Criteo row in {', '.join(str(f) for f in files)}: read "
            f"{report.rows_read} line(s), skipped {report.skipped_by_reason}"
            + (
                f"; first bad lines: {', '.join(report.first_bad_lines)}"
                if report.first_bad_lines
                else ""
            )
        )
    dense = np.concatenate([p[0] for p in parts])
    sparse = np.concatenate([p[1] for p in parts])
    labels = np.concatenate([p[2] for p in parts])
    return ClickData.from_numpy(dense, sparse, labels), report


def load_criteo_tsv(
    cfg: CriteoTsvDataConfig, table_sizes: list[int]
) -> tuple[ClickData, ClickData, ClickData, ReadReport]:
    """Train, validation and test splits from ``cfg`` (see :class:`CriteoTsvDataConfig`).

    Without ``val_path`` / ``test_path``, the rows of ``path`` are split in file order:
    the first ``1 - val_fraction - test_fraction`` train, then validation, then test.

    Raises:
        DataError: missing path, empty folder, unreadable file, or no valid row.
    """
    max_bad = cfg.max_reported_bad_lines
    main, report = read_files(resolve_paths(cfg.path, "data.path"), table_sizes, max_bad)
    n = len(main)
    n_val = 0 if cfg.val_path else int(n * cfg.val_fraction)
    n_test = 0 if cfg.test_path else int(n * cfg.test_fraction)
    n_train = n - n_val - n_test
    train = main.rows(0, n_train)
    val = main.rows(n_train, n_train + n_val)
    test = main.rows(n_train + n_val, n)
    for key, paths in (("data.val_path", cfg.val_path), ("data.test_path", cfg.test_path)):
        if paths:
            split, split_report = read_files(resolve_paths(paths, key), table_sizes, max_bad)
            report.merge(split_report, max_bad)
            if key == "data.val_path":
                val = split
            else:
                test = split
    return train, val, test, report
