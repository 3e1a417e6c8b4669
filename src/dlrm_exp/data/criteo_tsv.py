"""Criteo Kaggle / Terabyte click-log TSV reader: lines parsed into raw columns (vectorized:
see :mod:`.preprocess.tsv_parse`), then decoded by the feature schema ``data.schema`` as
``data=parquet`` decodes its row groups (:func:`~dlrm_exp.data.decode.decode`): one code path
from columns to batches.

Format (Criteo Display Advertising Challenge): one impression per line, tab-separated,
``label I1..I13 C1..C26`` = 40 fields; ``label`` is 0 or 1, ``I*`` integer counts (may be
negative or empty), ``C*`` 32-bit hashes as up to 8 hex digits (may be empty).

Row handling:
  * rows with 14..39 fields lost their trailing empty fields and are right-padded to 40
    (valid ones are counted as ``rows_padded``);
  * empty fields are missing values: count 0, categorical hash 0 (as facebookresearch/dlrm and
    TorchRec's ``int(x or "0", 16)``); ``C*`` columns reach the schema as those integers (as
    Criteo's 8-digit spelling, ``""`` when empty, for the policies that hash strings:
    :func:`decode_block`);
  * then the schema: with the shipped ``criteo`` schema, dense ``log(1 + max(x, 0))``
    (facebookresearch/dlrm ``data_utils``: negative counts clipped to 0) and categoricals
    ``int(C, 16) % num_embeddings`` (``id_policy=hex_modulo``);
  * malformed rows are skipped and counted by reason, with the first line numbers kept:
    ``field_count`` (fewer than 14 or more than 40 fields), ``label`` (not 0/1), ``dense``
    (not an integer), ``categorical`` (not hex of at most 8 digits).
"""

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from dlrm_exp.config import (
    CRITEO_DENSE_COLUMNS,
    CRITEO_LABEL,
    CRITEO_SPARSE_COLUMNS,
    CriteoTsvDataConfig,
    FeatureSchema,
)
from dlrm_exp.data.batches import ClickData
from dlrm_exp.data.criteo_format import hex_digits
from dlrm_exp.data.decode import decode
from dlrm_exp.data.id_policy import KIND_SENSITIVE
from dlrm_exp.data.paths import resolve_inputs
from dlrm_exp.data.preprocess.tsv_parse import (
    MIN_FIELDS,
    NUM_FIELDS,
    REASONS,
    ParsedBlock,
    is_gzip,
    iter_blocks,
    parse_block,
)
from dlrm_exp.data.splits import fraction_rows
from dlrm_exp.errors import DataError
from dlrm_exp.util.rank_zero import is_rank_zero

log = logging.getLogger(__name__)


@dataclass
class ReadReport:
    """What a read found. Line numbers are 1-based, per file. ``inputs``: the counts of each
    input of a split read (``data.path``, ``data.val_path``, ``data.test_path``: their own
    :meth:`as_dict` without files), so a check can hold only the rows it scores."""

    files: list[str] = field(default_factory=list)
    rows_read: int = 0
    rows_valid: int = 0
    rows_padded: int = 0
    skipped_by_reason: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    first_bad_lines: list[str] = field(default_factory=list)
    inputs: dict[str, dict[str, object]] = field(default_factory=dict)

    @property
    def rows_skipped(self) -> int:
        return sum(self.skipped_by_reason.values())

    def add_block(
        self, block: ParsedBlock, first_line: int, file_name: str, max_bad_lines: int
    ) -> None:
        """Count a parsed block whose first line is ``first_line`` of ``file_name``."""
        bad = np.flatnonzero(block.reasons >= 0)
        self.add_lines(
            len(block.labels),
            block.num_padded,
            bad,
            block.reasons[bad],
            first_line,
            file_name,
            max_bad_lines,
        )

    def add_lines(
        self,
        num_valid: int,
        num_padded: int,
        bad_lines: np.ndarray,
        bad_reasons: np.ndarray,
        first_line: int,
        file_name: str,
        max_bad_lines: int,
    ) -> None:
        """Count the rows of lines from ``first_line`` of ``file_name``: ``num_valid`` valid
        ones, and the rejected ones ``bad_lines`` (0-based within them) for ``bad_reasons``
        (indices in REASONS); empty lines among them are no rows."""
        self.rows_read += num_valid + len(bad_lines)
        self.rows_valid += num_valid
        self.rows_padded += num_padded
        counts = np.bincount(bad_reasons, minlength=len(REASONS))
        for name, count in zip(REASONS, counts, strict=True):
            self.skipped_by_reason[name] += int(count)
        room = max(max_bad_lines - len(self.first_bad_lines), 0)
        for i, reason in zip(bad_lines[:room], bad_reasons[:room], strict=True):
            self.first_bad_lines.append(f"{file_name}:{first_line + int(i)} ({REASONS[reason]})")

    def merge(self, other: "ReadReport", max_bad_lines: int) -> None:
        self.files += other.files
        self.rows_read += other.rows_read
        self.rows_valid += other.rows_valid
        self.rows_padded += other.rows_padded
        for k, v in other.skipped_by_reason.items():
            self.skipped_by_reason[k] += v
        self.first_bad_lines = (self.first_bad_lines + other.first_bad_lines)[:max_bad_lines]

    def as_dict(self) -> dict[str, object]:
        inputs = {"inputs": self.inputs} if self.inputs else {}
        return {"files": self.files, **self.counts(), **inputs}

    def counts(self) -> dict[str, object]:
        """The counts of :meth:`as_dict`, without the files and inputs (one input's entry of
        ``inputs``)."""
        return {
            "rows_read": self.rows_read,
            "rows_valid": self.rows_valid,
            "rows_padded": self.rows_padded,
            "rows_skipped": self.rows_skipped,
            "skipped_by_reason": dict(self.skipped_by_reason),
            "first_bad_lines": self.first_bad_lines,
        }


def inputs_read(read: dict[str, Any], keys: set[str]) -> dict[str, Any]:
    """The counts of a split read's ``inputs`` named by ``keys`` (e.g. ``{"data.val_path"}``)
    added up, as :func:`check_skipped_rows` takes them; the whole read when it has no
    ``inputs`` (one written before they were kept)."""
    chosen = [read["inputs"][k] for k in sorted(keys)] if "inputs" in read else [read]
    reasons: dict[str, int] = {}
    for one in chosen:
        for reason, n in one["skipped_by_reason"].items():
            reasons[reason] = reasons.get(reason, 0) + n
    return {
        "rows_read": sum(one["rows_read"] for one in chosen),
        "rows_skipped": sum(one["rows_skipped"] for one in chosen),
        "skipped_by_reason": reasons,
        "first_bad_lines": [line for one in chosen for line in one["first_bad_lines"]],
    }


#: The fixes :func:`check_skipped_rows` names unless told others: predict's (evaluate, training
#: and the converters give their own).
_SKIPPED_FIX = (
    "Unlabeled rows? predict with predict.has_label=false; to go on with the valid rows, raise "
    "data.max_skipped_fraction"
)


def check_skipped_rows(
    read: dict[str, Any],
    limit: float | None,
    what: str,
    fix: str = _SKIPPED_FIX,
    source: str = "data.path",
) -> None:
    """Refuse a read (``ReadReport.as_dict()``) that skipped more than ``limit`` of its rows
    (``data.max_skipped_fraction``; None: never); the message begins with ``source``, the
    input(s) read, and ``fix`` ends it.

    Raises:
        DataError: the counts, the reasons and the first skipped lines, and the fixes.
    """
    rows, skipped = int(read["rows_read"]), int(read["rows_skipped"])
    if limit is None or rows == 0 or skipped / rows <= limit:
        return
    reasons = ", ".join(f"{k} {v}" for k, v in read["skipped_by_reason"].items() if v)
    raise DataError(
        f"{source}: {skipped:,} of {rows:,} rows could not be {what} ({skipped / rows:.1%} > "
        f"data.max_skipped_fraction={limit}; {reasons}; first: "
        f"{', '.join(read['first_bad_lines'][:3])}). {fix}"
    )


def read_files(
    files: list[Path], schema: FeatureSchema, max_bad_lines: int
) -> tuple[ClickData, ReadReport]:
    """Read Criteo TSV ``files`` in order into one :class:`ClickData`, decoded by ``schema``.

    Args:
        files: TSV files (see :func:`resolve_paths`).
        schema: the feature schema over the columns ``label, I1..I13, C1..C26``, its tables
            sized (``data.schema`` once composed; :func:`~dlrm_exp.config.criteo_schema`).
        max_bad_lines: how many malformed line numbers to keep in the report.

    Raises:
        DataError: a file is not line-oriented text, no valid row was found, or the schema's
            id policy refuses ids (``strict``).
    """
    report = ReadReport()
    parts: list[ClickData] = []
    for path in files:
        file_report = ReadReport(files=[str(path)])
        pending: list[ParsedBlock] = []
        first = last = held = 0
        for buf, first_line in iter_blocks(path):
            block = parse_block(buf)
            file_report.add_block(block, first_line, str(path), max_bad_lines)
            first = first if pending else first_line
            pending.append(block)
            held += len(block.labels)
            last = first_line + block.num_lines - 1
            if held >= DECODE_ROWS:
                parts.append(
                    decode_block(merge_blocks(pending), schema, f"{path} lines {first}..{last}")
                )
                pending, held = [], 0
        if pending:
            parts.append(
                decode_block(merge_blocks(pending), schema, f"{path} lines {first}..{last}")
            )
        _warn_cut_last_line(path, last, file_report.rows_padded)
        report.merge(file_report, max_bad_lines)
    if report.rows_valid == 0:
        raise DataError(no_valid_row_message(files, report))
    return ClickData.concat(parts), report


def _warn_cut_last_line(path: Path, line: int, padded: int) -> None:
    """Warn when a plain file's last line (``line``) has no line end and fewer than 40 fields:
    the mark of a download or copy cut short, which reads as a row with its missing fields
    empty (counted as padded, like rows whose trailing empty fields were stripped). Gzip
    files are not looked at (their end is not at hand). Not said where other rows of the file
    were stripped too (``padded``: the rows read padded) and the last line ends in a whole
    id. Said by rank 0 (every rank reads)."""
    if is_gzip(path) or not is_rank_zero():
        return
    with path.open("rb") as file:
        file.seek(max(0, path.stat().st_size - (1 << 16)))
        tail = file.read()
    if not tail or tail.endswith(b"\n"):
        return
    last_line = tail[tail.rfind(b"\n") + 1 :]
    fields = last_line.count(b"\t") + 1
    # a file whose rows come stripped of trailing empty fields (``padded``: such rows, the
    # last line's too) ends in one when its last line ends in a whole id
    stripped = padded > 1 and _ends_in_whole_id(last_line, fields)
    if fields < NUM_FIELDS and not stripped:
        log.warning(
            "%s:%d, the last line, has no line end and %d of %d fields: cut short (an "
            "interrupted download or copy)? It was read with its missing fields empty",
            path, line, fields, NUM_FIELDS,
        )  # fmt: skip


def _ends_in_whole_id(line: bytes, fields: int) -> bool:
    """Whether a line of ``fields`` fields ends in a whole categorical id (8 hex digits, the
    width of Criteo's ids): a row whose trailing empty fields were stripped, as about half of
    the Kaggle rows are (the project's 1,000-row sample ends in one), not a line cut short,
    which ends inside an id or among the counts."""
    last = line.rsplit(b"\t", 1)[-1].strip(b"\r")
    return fields > MIN_FIELDS and len(last) == 8 and all(chr(c) in _HEX for c in last)


_HEX = set("0123456789abcdefABCDEF")


#: Rows decoded by the schema at a time: parsing goes in cache-sized pieces, decoding in
#: larger ones, so the schema's per-column calls cost little per row.
DECODE_ROWS = 1 << 16


def merge_blocks(blocks: list[ParsedBlock]) -> ParsedBlock:
    """The valid rows of ``blocks`` as one block (``blocks[0]`` when alone); line counts
    summed, reasons concatenated."""
    if len(blocks) == 1:
        return blocks[0]
    return ParsedBlock(
        dense=np.concatenate([b.dense for b in blocks]),
        sparse=np.concatenate([b.sparse for b in blocks]),
        labels=np.concatenate([b.labels for b in blocks]),
        sparse_empty=np.concatenate([b.sparse_empty for b in blocks]),
        num_lines=sum(b.num_lines for b in blocks),
        num_padded=sum(b.num_padded for b in blocks),
        reasons=np.concatenate([b.reasons for b in blocks]),
    )


def criteo_id_kinds(schema: FeatureSchema) -> dict[str, str]:
    """``{feature: "string" | "integer"}`` of the :data:`KIND_SENSITIVE` features as
    :func:`decode_block` hands their ids to the policy: ``C`` columns as Criteo's hexadecimal
    strings, ``I`` columns (a count used as a feature) as integers."""
    return {
        name: "string" if f.column in CRITEO_SPARSE_COLUMNS else "integer"
        for name, f in schema.sparse.items()
        if f.id_policy in KIND_SENSITIVE
    }


def decode_block(block: ParsedBlock, schema: FeatureSchema, where: str) -> ClickData:
    """The valid rows of a parsed block (raw counts and hashes) decoded by ``schema``: dense
    (N, num_dense) float32, sparse (N, F) int64 in the schema's feature order.

    ``C*`` columns reach the schema as the integers they spell (empty: 0) for ``hex_modulo``
    and ``strict``, and as Criteo's spelling (8 lower-case hex digits, empty: ``""``) for the
    policies that hash strings, so a TSV line and the same line in Parquet (hex strings in
    that spelling, empty ones ``""``) give the same rows under every policy but ``strict``
    (which takes integer rows: Parquet hex strings are refused); ``I`` columns stay integers.

    Raises:
        DataError: ids the schema's id policy refuses (``where`` names the lines).
    """
    raw = {CRITEO_LABEL: block.labels}
    raw |= {c: block.dense[:, j] for j, c in enumerate(CRITEO_DENSE_COLUMNS)}
    raw |= {c: block.sparse[:, j] for j, c in enumerate(CRITEO_SPARSE_COLUMNS)}
    columns = {
        c: pa.array(np.ascontiguousarray(raw[c])) for c in [schema.label, *schema.feature_columns]
    }
    for name, kind in criteo_id_kinds(schema).items():
        feature = schema.sparse[name]
        if kind == "string":  # hash a C id as Criteo writes it, as in Parquet
            j = CRITEO_SPARSE_COLUMNS.index(feature.column)
            columns[feature.column] = _criteo_spelling(block.sparse[:, j], block.sparse_empty[:, j])
    rows = decode(pa.table(columns), schema, where)
    sparse = np.stack(rows.values, axis=1) if len(rows) else np.zeros((0, len(rows.values)))
    return ClickData.from_numpy(rows.dense, sparse, rows.labels)


def _criteo_spelling(values: np.ndarray, empty: np.ndarray) -> pa.Array:
    """Ids (N,) in [0, 2**32) as Criteo writes them: 8 lower-case hex digits, ``""`` where
    ``empty``."""
    keep = ~empty
    digits = hex_digits(values[keep].astype(np.uint32)).reshape(-1)
    offsets = np.zeros(len(values) + 1, dtype=np.int32)
    np.cumsum(keep * 8, out=offsets[1:])
    return pa.StringArray.from_buffers(
        len(values), pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(digits))
    )


def no_valid_row_message(files: list[Path], report: ReadReport) -> str:
    """One line: what was read, why every row was refused, and what to check."""
    names = ", ".join(str(f) for f in files)
    if report.rows_read == 0:
        blank = any(f.is_file() and f.stat().st_size > 0 for f in files)
        return f"no valid Criteo row in {names}: the file(s) are empty" + (
            " or hold empty lines only" if blank else ""
        )
    if report.skipped_by_reason["field_count"] == report.rows_read and _cr_line_ends(files):
        advice = (
            "its lines end in \\r alone (old Mac line ends), so it reads as one line: convert "
            "them, e.g. tr '\\r' '\\n'"
        )
    elif report.skipped_by_reason["field_count"] == report.rows_read:
        advice = (
            "every line has the wrong number of fields: Criteo lines hold 14 to 40 "
            "tab-separated fields (label, 13 counts, 26 hex ids); is the file tab-separated?"
        )
    else:
        advice = "are these Criteo click logs (label, 13 counts, 26 hex ids)?"
    skipped = {k: v for k, v in report.skipped_by_reason.items() if v}
    bad = (
        f"; first bad lines: {', '.join(report.first_bad_lines)}" if report.first_bad_lines else ""
    )
    return (
        f"no valid Criteo row in {names}: read {report.rows_read} line(s), skipped {skipped}"
        f"{bad}; {advice}"
    )


def _cr_line_ends(files: list[Path]) -> bool:
    """Whether the first plain file's first 64 KiB end lines in ``\\r`` and never ``\\n``."""
    plain = [f for f in files if f.is_file() and not is_gzip(f)]
    if not plain:
        return False
    with plain[0].open("rb") as file:
        head = file.read(1 << 16)
    return b"\r" in head and b"\n" not in head


def load_criteo_tsv(
    cfg: CriteoTsvDataConfig, scored: tuple[str, ...] | None = None
) -> tuple[ClickData, ClickData, ClickData, ReadReport]:
    """Train, validation and test splits from ``cfg`` (see :class:`CriteoTsvDataConfig`),
    decoded by ``cfg.schema``.

    Without ``val_path`` / ``test_path``, the rows of ``path`` are split in file order:
    the first ``1 - val_fraction - test_fraction`` train, then validation, then test.
    ``scored``: the only splits the job reads (``mode=evaluate``; None: all): ``path`` is not
    read when none of them comes from it (its splits are then empty).

    Raises:
        DataError: missing path, empty folder, unreadable file, or no valid row.
    """
    max_bad = cfg.max_reported_bad_lines
    files = resolve_inputs(cfg.read_inputs(scored))
    if "data.path" in files:
        main, report = read_files(files["data.path"], cfg.schema, max_bad)
        report.inputs["data.path"] = report.counts()
    else:  # every scored split has files of its own (a training day need not be decoded)
        width = (len(cfg.schema.dense), len(cfg.schema.sparse))
        main = ClickData.from_numpy(np.zeros((0, width[0])), np.zeros((0, width[1])), np.zeros(0))
        report = ReadReport()
    n = len(main)
    n_val = 0 if cfg.val_path else fraction_rows(n, cfg.val_fraction)
    n_test = 0 if cfg.test_path else fraction_rows(n, cfg.test_fraction)
    n_train = n - n_val - n_test
    train = main.rows(0, n_train)
    val = main.rows(n_train, n_train + n_val)
    test = main.rows(n_train + n_val, n)
    for key in ("data.val_path", "data.test_path"):
        if key in files:  # (a split not scored: its file not read)
            split, split_report = read_files(files[key], cfg.schema, max_bad)
            report.merge(split_report, max_bad)
            report.inputs[key] = split_report.counts()
            if key == "data.val_path":
                val = split
            else:
                test = split
    return train, val, test, report
