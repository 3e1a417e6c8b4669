"""Parquet inputs of ``data=parquet``: finding the files, checking them against the feature
schema from their metadata, and cutting them into row-group segments.

Only the label column is read here (to find null or NaN labels, which drop their rows); every other
check uses the file footer: column names, types, row counts and null counts from the column
statistics (a list column whose statistics count a null or an empty list is read to count its
null lists). Rows are read later, a row group at a time (:mod:`dlrm_exp.data.parquet`).
"""

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dlrm_exp.config import FeatureSchema, IdPolicy
from dlrm_exp.data.decode import is_dense_type, is_label_type, refuse_non_clicks
from dlrm_exp.data.id_policy import KIND_SENSITIVE, is_id_type
from dlrm_exp.data.paths import resolve_paths
from dlrm_exp.errors import DataError
from dlrm_exp.util.files import write_via


@dataclass(frozen=True)
class Segment:
    """Rows ``[start, stop)`` of the valid rows (non-null label) of one row group.

    Attributes:
        path: the file.
        row_group: the row group's index in the file.
        start / stop: the slice, counted in valid rows.
        valid: the valid rows' positions in the row group, or None when every row is valid.
    """

    path: Path
    row_group: int
    start: int
    stop: int
    valid: np.ndarray | None = field(default=None, compare=False)

    def __len__(self) -> int:
        return self.stop - self.start

    def positions(self) -> np.ndarray:
        """Positions in the row group of this segment's rows, (n,) int64."""
        if self.valid is None:
            return np.arange(self.start, self.stop, dtype=np.int64)
        return self.valid[self.start : self.stop]


@dataclass
class ParquetScan:
    """What the footers and label columns of a list of files say.

    Attributes:
        segments: one segment per row group with valid rows, in file order.
        rows: rows in the files.
        null_labels: rows skipped for a null label.
        nulls: ``{column: null count}`` of the dense and sparse columns (filled with 0 /
            read as empty bags).
    """

    segments: list[Segment] = field(default_factory=list)
    rows: int = 0
    null_labels: int = 0
    nulls: dict[str, int] = field(default_factory=dict)


def resolve_parquet_paths(paths: list[str], key: str) -> list[Path]:
    """Files named by ``paths``: a file, a folder (its ``*.parquet`` files, sorted) or a glob.

    Raises:
        DataError: a path that matches nothing, or a folder without ``*.parquet`` files.
    """
    return resolve_paths(paths, key, folder_files="*.parquet", globs=True)


def scan_files(
    files: list[Path],
    schema: FeatureSchema,
    id_kinds: dict[str, tuple[str, Path]],
    key: str,
) -> ParquetScan:
    """Check ``files`` against ``schema`` and cut them into segments of valid rows (``key``:
    the option that named them, ``data.val_path``, for the messages).

    ``id_kinds`` (shared by the scans of one job's splits) records, per sparse column, whether
    the first file holding it stores integers or strings: a hashing policy maps ``123`` and
    ``"123"`` to different rows, so a later file storing the other kind is refused.

    Raises:
        DataError: a file that is not Parquet or is truncated, has no rows, lacks a schema
            column or holds one of the wrong type (or another id kind than an earlier file),
            has a label other than 0 / 1, or has no row with a label; each names the file and
            column.
    """
    scan = ParquetScan()
    strict = {f.column: f.num_embeddings for f in schema.sparse.values()
              if f.id_policy is IdPolicy.strict}  # fmt: skip
    for path in files:
        parquet = open_parquet(path)
        check_columns(path, parquet.schema_arrow, schema)
        check_id_kinds(path, parquet.schema_arrow, schema, id_kinds)
        if parquet.metadata.num_rows == 0:
            raise DataError(f"{path}: the file holds no rows")
        _count_nulls(parquet, path, schema, scan.nulls)
        leaves = _strict_leaves(parquet, strict)
        for group in range(parquet.num_row_groups):
            labels = read_row_group(parquet, path, group, [schema.label]).column(0)
            scan.rows += len(labels)
            has = labels.is_valid()
            if pa.types.is_floating(labels.type):  # NaN is no label either
                has = pc.and_(has, pc.invert(pc.is_nan(labels).fill_null(True)))
            _check_labels(path, group, labels.filter(has), schema.label)
            n = pc.sum(has.cast(pa.int64())).as_py() or 0
            if n == len(labels) and leaves:  # the statistics cover every row: all are read
                _check_strict_ranges(parquet, path, leaves, group)
            valid = None
            if n < len(labels):
                scan.null_labels += len(labels) - n
                valid = np.flatnonzero(has.to_numpy(zero_copy_only=False))
            if n:
                scan.segments.append(Segment(path, group, 0, n, valid))
    if not scan.segments:
        where = str(files[0]) if len(files) == 1 else f"{files[0]} and {len(files) - 1} more"
        raise DataError(f"{where} ({key}): no row has a label ({scan.rows} rows read)")
    return scan


def _strict_leaves(parquet: pq.ParquetFile, strict: dict[str, int]) -> list[tuple[int, str, int]]:
    """``(leaf index, column, num_embeddings)`` of the file's id leaves under
    ``id_policy=strict`` (``strict``: column -> rows; a list column's ids are its
    ``<column>.list.element`` leaf)."""
    schema = parquet.metadata.schema
    leaves = []
    for i in range(len(schema) if strict else 0):
        at = schema.column(i).path
        name = next((c for c in strict if at == c or at.startswith(f"{c}.list.")), None)
        if name is not None:
            leaves.append((i, name, strict[name]))
    return leaves


def _check_strict_ranges(
    parquet: pq.ParquetFile, path: Path, leaves: list[tuple[int, str, int]], group: int
) -> None:
    """Refuse ``id_policy=strict`` ids outside ``[0, num_embeddings)`` in row group ``group``
    (every row labelled: all of them are read) from its column statistics (the footer's min
    and max, read without the data), before any training: decoding finds them only when the
    row group is read, for a separate test file after training. Columns written without
    statistics, and row groups with unlabelled rows (skipped, never decoded), are checked as
    they are decoded.

    Raises:
        DataError: naming the file, row group, column, its id range and the table's rows.
    """
    row_group = parquet.metadata.row_group(group)
    for i, name, rows in leaves:  # (:func:`_strict_leaves`)
        stats = row_group.column(i).statistics
        if stats is None or not stats.has_min_max:
            continue
        low, high = stats.min, stats.max
        if isinstance(low, int) and isinstance(high, int) and (low < 0 or high >= rows):
            raise DataError(
                f"{path} row group {group}: column {name!r} holds ids from {low} to {high}, "
                f"outside [0, {rows}) under id_policy=strict; give the table more rows "
                "(data.schema's num_embeddings) or hash the ids (id_policy=modulo)"
            )


def _check_labels(path: Path, group: int, labels: pa.Array, column: str) -> None:
    """Refuse labels other than 0 / 1 while scanning, before any training (decoding would find
    them only when their row group is read, for the test split after training).

    Raises:
        DataError: naming the file, row group, count and first bad value.
    """
    if not pa.types.is_boolean(labels.type):
        where = f"{path} row group {group}"
        refuse_non_clicks(labels.to_numpy(zero_copy_only=False), where, column)


def _id_kind(arrow_type: pa.DataType) -> str | None:
    """``integer`` or ``string``: how a sparse column (or its list's items) stores ids; None
    for a column of nulls only (typed ``null``: it stores none)."""
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return _id_kind(arrow_type.value_type)
    if pa.types.is_dictionary(arrow_type):
        return _id_kind(arrow_type.value_type)
    if pa.types.is_null(arrow_type):
        return None
    return "integer" if pa.types.is_integer(arrow_type) else "string"


def check_id_kinds(
    path: Path, arrow: pa.Schema, schema: FeatureSchema, kinds: dict[str, tuple[str, Path]]
) -> None:
    """Record the id kind of each sparse column and refuse a file that stores another than an
    earlier one, or strings under ``strict`` (which takes integer rows): from the file's
    schema, before any training (decoding would find it only when the row group is read,
    perhaps a test split after training).

    Raises:
        DataError: naming the column, the file(s) and the kinds.
    """
    for feature in schema.sparse.values():
        kind = _id_kind(arrow.field(feature.column).type)
        if kind is None:  # nulls only: empty bags, of no kind
            continue
        if feature.id_policy is IdPolicy.strict:
            if kind == "string":
                raise DataError(
                    f"{path}: column {feature.column!r} holds strings, but id_policy=strict "
                    f"takes integer rows in [0, {feature.num_embeddings}): use "
                    "id_policy=modulo to hash them"
                )
            continue
        first = kinds.setdefault(feature.column, (kind, path))
        if first[0] != kind:
            raise DataError(
                f"{path}: column {feature.column!r} holds {kind} ids, {first[1]} holds "
                f"{first[0]} ones: under id_policy={feature.id_policy.value} the id 123 and the "
                "string '123' look up different rows; write the column with one type in every "
                "file"
            )


def feature_id_kinds(kinds: dict[str, tuple[str, Path]], schema: FeatureSchema) -> dict[str, str]:
    """``{feature: "integer" | "string"}`` of the :data:`KIND_SENSITIVE` features, from the
    per-column record of :func:`scan_files`: what a checkpoint records and its users must
    share (under a hashing policy the two kinds give other rows for the same digits)."""
    return {
        name: kinds[f.column][0]
        for name, f in schema.sparse.items()
        if f.id_policy in KIND_SENSITIVE and f.column in kinds
    }


def open_parquet(path: Path, buffered: bool = False) -> pq.ParquetFile:
    """``pyarrow.parquet.ParquetFile`` of ``path``; ``buffered``: read column chunks through
    an 8 MiB buffer and without pre-buffering them whole (for reading a few rows of a large
    row group; pyarrow otherwise reads each column chunk in one call).

    Raises:
        DataError: the file is not Parquet or is truncated (pyarrow's reason, with the file).
    """
    options = {"pre_buffer": False, "buffer_size": 8 << 20} if buffered else {}
    try:
        return pq.ParquetFile(path, **options)
    except (pa.ArrowException, OSError) as err:
        hint = (  # (own-data review: a TSV given to mode=schema said only this)
            "; data=parquet and mode=schema read Parquet: convert CSV / TSV with pyarrow "
            "(pyarrow.csv.read_csv, then pyarrow.parquet.write_table); Criteo's TSV is "
            "data=criteo_tsv"
            if not _starts_as_parquet(path)
            else ""
        )
        raise DataError(f"{path}: not a readable Parquet file ({err}){hint}") from None


def read_row_group(
    parquet: pq.ParquetFile, path: Path, group: int, columns: list[str] | None
) -> pa.Table:
    """``columns`` (None: every column) of row group ``group`` of ``parquet`` (opened from
    ``path``).

    Raises:
        DataError: the file cannot be read (with the file and row group).
    """
    try:
        return parquet.read_row_group(group, columns=columns)
    except (pa.ArrowException, OSError) as err:
        raise DataError(f"{path}: row group {group} cannot be read ({err})") from None


def write_parquet_atomic(table: pa.Table, path: Path, row_group_size: int) -> None:
    """``table`` as ``path`` in row groups of ``row_group_size`` rows, written to a hidden
    temporary name (which folder inputs skip) and renamed, so a crash leaves no half file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_via(path, lambda tmp: pq.write_table(table, tmp, row_group_size=row_group_size))


def check_columns(
    path: Path, arrow: pa.Schema, schema: FeatureSchema, require_label: bool = True
) -> None:
    """Every schema column exists in ``arrow`` (a file's schema) with a usable type (the
    label may be absent unless ``require_label``: rows to score have none; so may it be a
    column of nulls only, typed ``null``, see :func:`has_label_column`).

    Raises:
        DataError: ``<file>: column <c> (<role>) ...`` for the first missing or mistyped one.
    """
    wanted = []
    if require_label or has_label_column(arrow, schema):
        wanted.append((schema.label, "label", is_label_type))
    wanted += [(d.column, "dense", is_dense_type) for d in schema.dense]
    wanted += [
        (f.column, f"sparse feature {name}", _is_id_list if f.multi_hot else _is_id)
        for name, f in schema.sparse.items()
    ]
    for column, role, accepts in wanted:
        index = arrow.get_field_index(column)
        if index < 0:
            raise DataError(
                f"{path}: no column {column!r} ({role} in data.schema); the file has "
                f"{', '.join(arrow.names[:12])}{' ...' if len(arrow.names) > 12 else ''}"
            )
        kind = arrow.field(index).type
        if not accepts(kind):
            expected = {
                is_label_type: "numbers (int, float or bool)",
                is_dense_type: "numbers (int, float, decimal or bool)",
                _is_id: "one id per row (int or string)",
                _is_id_list: "a list of ids per row (list<int> or list<string>)",
            }[accepts]
            raise DataError(
                f"{path}: column {column!r} ({role}) is {kind}, data.schema expects "
                f"{expected}{_multi_hot_hint(role, kind, accepts)}"
            )


def _starts_as_parquet(path: Path) -> bool:
    """Whether ``path`` begins with Parquet's magic bytes ``PAR1`` or is empty (a file cut
    short still does; a CSV or TSV does not)."""
    try:
        with open(path, "rb") as f:
            start = f.read(4)
    except OSError:
        return True  # (unreadable: pyarrow's own reason says so)
    return start in (b"PAR1", b"")  # (an empty file: pyarrow says "size is 0 bytes")


def _multi_hot_hint(role: str, kind: pa.DataType, accepts: object) -> str:
    """Where a sparse feature's column holds lists but its schema entry says one id (or the
    other way), the key that says which (own-data review: not named)."""
    name = role.removeprefix("sparse feature ")
    if accepts is _is_id and _is_id_list(kind):
        return f": set data.schema.sparse.{name}.multi_hot=true for a list per row"
    if accepts is _is_id_list and _is_id(kind):
        return f": set data.schema.sparse.{name}.multi_hot=false for one id per row"
    return ""


def has_label_column(arrow: pa.Schema, schema: FeatureSchema) -> bool:
    """Whether a file's schema ``arrow`` has the label column with labels in it (numbers or
    booleans): a column of nulls only (pyarrow and pandas type it ``null``) is none, as for
    rows to score, and so is one of another type (strings), which training refuses
    (:func:`check_columns` with ``require_label``) and prediction leaves unread."""
    index = arrow.get_field_index(schema.label)
    return index >= 0 and is_label_type(arrow.field(index).type)


# A column holding only nulls in a file (a feature absent that day) is typed ``null`` by
# pyarrow and pandas, a list column of only null or empty lists ``list<null>``: its values
# read as 0 and its bags as empty, as the nulls of any other column.


def _is_id(kind: pa.DataType) -> bool:
    return is_id_type(kind) or pa.types.is_null(kind)


def _is_id_list(kind: pa.DataType) -> bool:
    return pa.types.is_null(kind) or (
        (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and _is_id(kind.value_type)
    )


def _count_nulls(
    parquet: pq.ParquetFile, path: Path, schema: FeatureSchema, nulls: dict[str, int]
) -> None:
    """Add the null counts of the dense and sparse columns: from the footer statistics of
    flat columns; for a list column, 0 when its ids' statistics count no null (a null list,
    an empty list and a null id each count there), else from its data; from the data of
    columns written without statistics.

    Raises:
        DataError: a column that must be read cannot be (the file and row group).
    """
    meta = parquet.metadata
    leaves = {meta.schema.column(j).path: j for j in range(meta.num_columns)}
    for column in schema.feature_columns:
        flat = column in leaves
        ids = [j for leaf, j in leaves.items() if leaf.startswith(f"{column}.")]
        leaf = leaves[column] if flat else ids[0] if len(ids) == 1 else None
        total = 0
        for group in range(meta.num_row_groups):
            stats = None if leaf is None else meta.row_group(group).column(leaf).statistics
            if stats is not None and stats.has_null_count and (flat or stats.null_count == 0):
                total += stats.null_count
            else:
                total += read_row_group(parquet, path, group, [column]).column(0).null_count
        nulls[column] = nulls.get(column, 0) + total
