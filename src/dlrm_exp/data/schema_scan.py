"""What a sample of Parquet files says about each column, and the feature schema it suggests
(``mode=schema``).

Roles: the label is named (or found by its usual names); strings, dictionaries and lists of
ids are sparse features; floats and booleans are dense; integers are sparse when their name
says id (``id``, ``*_id``, ``*.id``, ``*Id``) and dense counts otherwise. Distinct ids of the
whole input are estimated from the sample with the GEE estimator (Charikar, Chaudhuri, Motwani and
Narasayya, "Towards estimation error guarantees for distinct values", PODS 2000):
``d + (sqrt(N / n) - 1) * f1`` for ``d`` distinct ids in a sample of ``n`` of ``N`` values,
``f1`` of them seen once (exact when the sample is everything).
"""

import logging
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dlrm_exp.data.decode import is_dense_type, is_label_type, refuse_non_clicks
from dlrm_exp.data.id_policy import is_id_type
from dlrm_exp.data.parquet_files import open_parquet
from dlrm_exp.errors import DataError
from dlrm_exp.util.text import first_few

log = logging.getLogger(__name__)

#: Column names taken as the label when ``schema_scan.label`` is not given.
LABEL_NAMES = ("label", "click", "clicked", "is_click", "y")
#: Integer columns whose name says id are sparse: ``id``, ``item_id``, ``item-id``, ``item.id``,
#: ``itemId``, ``item_ID``, ``item_Id``, ``itemID``, ``Id``, ``id_item`` (not ``paid``, ``PAID``).
_ID_NAME = re.compile(r"(^(id|ID|Id)$|[_.\-](id|ID|Id)$|[a-z]I[dD]$|^id_)")


@dataclass
class ColumnStats:
    """One column of the sample.

    Attributes:
        name / type: the column and its Arrow type.
        role: ``label``, ``dense``, ``sparse`` or ``skip`` (a type no role takes, or another
            column with a label's name: as an input it could leak the target).
        nulls: null (or, in a float column, NaN) entries in the sample.
        rows: rows in the sample.
        distinct: distinct ids in the sample (sparse).
        distinct_estimate: estimated distinct ids of the whole input (sparse, GEE).
        min / max: of the values (numeric columns and integer ids).
        mean_length / p99_length: ids per row (list features).
        multi_hot: a list feature.
        log1p: suggested for a dense column of (mostly) non-negative skewed or large values
            (:func:`suggests_log1p`).
        num_embeddings / id_policy: the suggestion for a sparse feature.
    """

    name: str
    type: str
    role: str
    nulls: int
    rows: int
    distinct: int | None = None
    distinct_estimate: int | None = None
    min: float | None = None
    max: float | None = None
    mean_length: float | None = None
    p99_length: float | None = None
    multi_hot: bool = False
    log1p: bool = False
    num_embeddings: int | None = None
    id_policy: str | None = None


def read_sample(files: list[Path], sample_rows: int) -> tuple[pa.Table, int]:
    """The first ``sample_rows`` rows of ``files``, read in batches, of the columns every file
    has (in the first file's order: files may order them otherwise; a column some files lack
    is left out with a warning, since a schema naming it could not read those files), and the
    total row count of the files (from their footers).

    Raises:
        DataError: a file is not Parquet, a row group cannot be read, or the files share no
            column.
    """
    total, seen, lacking = 0, {}, {}  # seen: column -> files having it; lacking: -> a file
    for path in files:  # the footers first: which columns every file has
        parquet = open_parquet(path)
        total += parquet.metadata.num_rows
        for name in parquet.schema_arrow.names:
            seen[name] = seen.get(name, 0) + 1
        for name in seen:
            if name not in parquet.schema_arrow.names:
                lacking.setdefault(name, path)
    common = [n for n, count in seen.items() if count == len(files)]
    if not common:
        raise DataError(f"{files[0]}...: the files have no column in common")
    if len(common) < len(seen):
        left = [n for n in seen if n not in common]
        where = [f"{lacking[n].name} lacks {n}" if n in lacking else f"{files[0].name} lacks {n}"
                 for n in left[:3]]  # fmt: skip
        log.warning(
            "mode=schema: column(s) %s left out: not in every file (%s)",
            first_few(left), "; ".join(where),
        )  # fmt: skip
    parts: list[tuple[Path, pa.Table]] = []
    taken = 0
    for path in files:
        if taken >= sample_rows:
            break
        parquet = open_parquet(path, buffered=True)
        for part in _first_rows(parquet, path, sample_rows - taken, common):
            parts.append((path, part))
            taken += part.num_rows
    if not taken:
        raise DataError(f"{files[0]}: the files hold no rows")
    try:
        table = pa.concat_tables([part for _, part in parts], promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
        raise DataError(_types_differ(parts, err)) from None
    return table.slice(0, sample_rows), total


def _merge(name: str, kinds: list[pa.DataType]) -> bool:
    """Whether column ``name`` of types ``kinds`` merges as the sample's tables do."""
    try:
        pa.unify_schemas([pa.schema([(name, k)]) for k in kinds], promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return False
    return True


def _types_differ(parts: list[tuple[Path, pa.Table]], err: Exception) -> str:
    """Which file holds which type of each column whose types differ (pyarrow's merge error
    named neither file: review)."""
    seen: dict[str, dict[pa.DataType, Path]] = {}
    for path, part in parts:
        for column in part.schema:
            seen.setdefault(column.name, {}).setdefault(column.type, path)
    differ = [
        f"column {name!r} is " + ", ".join(f"{kind} in {path}" for kind, path in kinds.items())
        for name, kinds in seen.items()
        if len(kinds) > 1 and not _merge(name, list(kinds))  # (decimal and double merge)
    ]
    return (
        f"the files' column types differ: {first_few(differ)} ({err}): a column holds one type "
        "in every file (write them again with one type, or scan the files of one type)"
    )


#: Rows read at a time while sampling (a row group may hold tens of millions).
_SAMPLE_BATCH_ROWS = 65536


def _first_rows(
    parquet: pq.ParquetFile, path: Path, rows: int, columns: list[str]
) -> Iterator[pa.Table]:
    """The first ``rows`` rows of ``columns`` of ``parquet`` (opened from ``path``), read a
    batch of
    :data:`_SAMPLE_BATCH_ROWS` at a time: whole row groups took all of a large one into
    memory to sample a few rows of it.

    Raises:
        DataError: the file cannot be read (naming it).
    """
    try:
        batches = parquet.iter_batches(batch_size=min(rows, _SAMPLE_BATCH_ROWS), columns=columns)
        for batch in batches:
            yield pa.Table.from_batches([batch])
            rows -= batch.num_rows
            if rows <= 0:
                return
    except (pa.ArrowException, OSError) as err:
        raise DataError(f"{path}: cannot be read ({err})") from None


def scan_table(
    table: pa.Table, total_rows: int, label: str | None, max_num_embeddings: int
) -> list[ColumnStats]:
    """Statistics, role and suggestion of every column of ``table`` (a sample of
    ``total_rows`` rows).

    Raises:
        DataError: ``label`` is not a column, or none (or several) of :data:`LABEL_NAMES` is;
            or a column name occurs twice.
    """
    twice = sorted({n for n in table.column_names if table.column_names.count(n) > 1})
    if twice:
        raise DataError(
            f"the files name columns {twice} twice: a schema names a column once (rename them)"
        )
    label = _find_label(table.column_names, label)
    out = []
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        stats = ColumnStats(name, str(column.type), _role(name, column.type, label),
                            column.null_count, len(column))  # fmt: skip
        if stats.role in ("label", "dense"):
            _numeric(stats, column)
        elif stats.role == "sparse":
            _sparse(stats, column, total_rows, max_num_embeddings)
        out.append(stats)
    return out


def is_id_name(name: str) -> bool:
    """Whether a column's name says it holds ids (``user_id``, ``itemId``, ``id``)."""
    return bool(_ID_NAME.search(name))


def _find_label(names: list[str], label: str | None) -> str:
    if label is not None:
        if label not in names:
            raise DataError(f"schema_scan.label={label}: no such column (columns: {names})")
        return label
    found = [n for n in names if n.lower() in LABEL_NAMES]
    if len(found) != 1:
        raise DataError(
            f"cannot tell the label column ({found or 'none'} of {names} has a label's name): "
            "set schema_scan.label=<click column>"
        )
    return found[0]


def _role(name: str, kind: pa.DataType, label: str) -> str:
    if name == label:
        return "label"
    if name.lower() in LABEL_NAMES:  # another target (a second label): an input would leak it
        return "skip"
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return "sparse" if is_id_type(kind.value_type) else "skip"
    if pa.types.is_integer(kind):
        return "sparse" if is_id_name(name) else "dense"
    if is_dense_type(kind) and not pa.types.is_null(kind):  # (no values: nothing to learn)
        return "dense"
    return "sparse" if is_id_type(kind) else "skip"


#: A dense column whose 99th percentile exceeds this is taken as counts to compress.
LOG1P_P99 = 10.0


def suggests_log1p(low: float, high: float, p99: float) -> bool:
    """Whether a dense column of range [``low``, ``high``] and 99th percentile ``p99`` gets
    ``log1p`` (``log(1 + max(x, 0))``, DLRM's transform of Criteo's counts): its values are
    non-negative, or their few negatives small beside the maximum (at most 1 % of it, as
    Criteo's I2 has -3..-1; the transform reads them as 0), and either skewed (maximum over
    10x the 99th percentile) or large (99th percentile over :data:`LOG1P_P99`), beyond the
    unit scale an MLP takes raw: the Kaggle sample's I2, I5, I6 ranged to 3,472, 893,008 and
    4,638, and left raw they trained a model worse than the base rate (NE 1.17; 0.97 with
    log1p)."""
    non_negative = low >= 0 or -low <= 0.01 * high
    return non_negative and (high > 10 * max(p99, 1.0) or p99 > LOG1P_P99)


def _numeric(stats: ColumnStats, column: pa.Array) -> None:
    if pa.types.is_decimal(column.type) and stats.role == "dense":  # read as float64
        column = column.cast(pa.float64())
    kind = column.type
    if not is_label_type(kind):
        raise DataError(f"label column {stats.name!r} is {kind}: a click label is 0 / 1 or boolean")
    values = column.drop_null()
    if pa.types.is_boolean(values.type):
        values = values.cast(pa.int8())
    if not len(values):
        return
    x = values.to_numpy(zero_copy_only=False).astype(np.float64)
    missing = np.isnan(x)  # NaN is no null to pyarrow (Polars and Spark write it); training
    stats.nulls += int(missing.sum())  # reads it as missing, and so does the scan
    x = x[~missing]
    if not len(x):
        return
    if stats.role == "label":  # training would refuse the schema's own data
        refuse_non_clicks(x, "schema_scan.path (the rows sampled)", stats.name)
    stats.min, stats.max = float(x.min()), float(x.max())
    p99 = float(np.quantile(x, 0.99))
    stats.log1p = stats.role == "dense" and suggests_log1p(stats.min, stats.max, p99)


def _sparse(stats: ColumnStats, column: pa.Array, total_rows: int, cap: int) -> None:
    ids = column
    if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
        stats.multi_hot = True
        # ids per row as training pools them: a null id inside a list is dropped
        flat, parents = pc.list_flatten(column), pc.list_parent_indices(column)
        kept = parents.filter(flat.is_valid()).to_numpy(zero_copy_only=False)
        lengths = np.bincount(kept, minlength=len(column))
        stats.mean_length = float(lengths.mean()) if len(lengths) else 0.0
        stats.p99_length = float(np.quantile(lengths, 0.99)) if len(lengths) else 0.0
        ids = flat
    ids = ids.drop_null()
    if pa.types.is_dictionary(ids.type):
        ids = ids.cast(ids.type.value_type)
    counts = pc.value_counts(ids).field("counts").to_numpy(zero_copy_only=False)
    n, d, f1 = len(ids), len(counts), int((counts == 1).sum())
    scale = total_rows / stats.rows if stats.rows else 1.0
    estimate = d if scale <= 1 else d + (math.sqrt(scale) - 1) * f1
    stats.distinct, stats.distinct_estimate = d, int(round(estimate))
    integer = pa.types.is_integer(ids.type)
    if integer and n:
        stats.min, stats.max = float(pc.min(ids).as_py()), float(pc.max(ids).as_py())
    wanted = _round_up(max(1.25 * stats.distinct_estimate, 1))
    if integer and n and stats.min >= 0 and stats.max + 1 <= min(wanted, cap) and scale <= 1:
        stats.num_embeddings, stats.id_policy = int(stats.max) + 1, "strict"
    else:
        stats.num_embeddings, stats.id_policy = min(wanted, cap), "modulo"


def _round_up(x: float) -> int:
    """``x`` rounded up to two significant digits (1234 -> 1300)."""
    digits = max(int(math.floor(math.log10(x))) - 1, 0)
    step = 10**digits
    return int(math.ceil(x / step) * step)
