"""``mode=predict`` on ``data=parquet``: one click probability per input row, streamed a row
group at a time into Parquet.

Every row is scored, whatever its label (a null or missing label is fine: rows to score
usually have none); features go through the schema as in training (nulls read as 0 / empty
bags, the id policies). Output (``predictions.parquet`` in the run folder, or
``predict.output``), in input order:

=========== ======= ======================================================
column      type    meaning
=========== ======= ======================================================
file        string  the input file
row         int64   the row's 0-based index in that file
probability float32 the predicted click probability, sigmoid(logit)
label       int8    the row's label where the files have the label column
=========== ======= ======================================================

The file is written under a temporary name and renamed when complete.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch
from torchrec.datasets.utils import Batch

from dlrm_exp.config import Config, ParquetDataConfig
from dlrm_exp.data.decode import decode
from dlrm_exp.data.parquet_files import (
    check_columns,
    check_id_kinds,
    feature_id_kinds,
    has_label_column,
    open_parquet,
    read_row_group,
    resolve_parquet_paths,
)
from dlrm_exp.errors import DataError

OUTPUT = pa.schema(
    [
        ("file", pa.string()),
        ("row", pa.int64()),
        ("probability", pa.float32()),
        ("label", pa.int8()),
    ]
)

log = logging.getLogger(__name__)


#: A trained model as prediction uses it: a CPU batch in, its (B,) click logits on the CPU out.
Logits = Callable[[Batch], torch.Tensor]


@dataclass(frozen=True)
class PredictInputs:
    """The files to score, checked from their footers before the model is loaded.

    Attributes:
        files: ``data.path``'s files, in order.
        labeled: whether each file has the schema's label column.
        id_kinds: ``{feature: "integer" | "string"}`` of the hashed features
            (:func:`~dlrm_exp.data.parquet_files.feature_id_kinds`), which the checkpoint's
            record must match.
    """

    files: list[Path]
    labeled: dict[Path, bool]
    id_kinds: dict[str, str]


def read_inputs(cfg: Config) -> PredictInputs:
    """Resolve ``data.path`` and check every file's footer against the schema.

    Raises:
        DataError: a file is not Parquet, lacks a feature column (the label may be absent),
            or stores a column's ids as another kind than an earlier file.
    """
    assert isinstance(cfg.data, ParquetDataConfig)
    schema = cfg.data.schema
    files = resolve_parquet_paths(cfg.data.path, "data.path")
    labeled, kinds = {}, {}
    for path in files:
        arrow = open_parquet(path).schema_arrow
        check_columns(path, arrow, schema, require_label=False)
        check_id_kinds(path, arrow, schema, kinds)
        labeled[path] = has_label_column(arrow, schema)
        index = arrow.get_field_index(schema.label)
        if not labeled[path] and index >= 0 and not pa.types.is_null(arrow.field(index).type):
            log.warning(  # (it was refused, though predict needs no label: own-data review)
                "%s: column %r (data.schema's label) is %s, not labels: its rows are scored, "
                "their label written as null",
                path,
                schema.label,
                arrow.field(index).type,
            )
    return PredictInputs(files, labeled, feature_id_kinds(kinds, schema))


def made_by(checkpoint: Path, step: int) -> dict[str, str]:
    """The key-value metadata predictions carry: the checkpoint that scored the rows
    (``dlrm_exp.checkpoint``: the folder, resolved) and its step (``dlrm_exp.step``, since a
    ``best`` folder is replaced as its run trains on): the file says which model made it, as
    ``predict_report.json`` beside it cannot once it is written elsewhere (reviews)."""
    return {"dlrm_exp.checkpoint": str(checkpoint.resolve()), "dlrm_exp.step": str(step)}


def predict_parquet(
    cfg: Config, inputs: PredictInputs, model: Logits, output: Path, made: dict[str, str]
) -> dict[str, int]:
    """Score every row of ``inputs`` (from :func:`read_inputs`) with ``model`` (in eval mode,
    under ``no_grad``; ``made``: the file's metadata, :func:`made_by`) into
    ``output`` (a ``.partial`` file the caller renames); returns ``{"files": n,
    "rows_written": n}``.

    Raises:
        DataError: a row group cannot be read or decoded, or holds a label that is no 0/1.
    """
    assert isinstance(cfg.data, ParquetDataConfig)
    schema = cfg.data.schema
    files, labeled = inputs.files, inputs.labeled
    # a label column where any file has one, null for the rows of files without (a file of
    # rows to score beside labelled ones dropped every file's labels: review)
    out_schema = (OUTPUT if any(labeled.values()) else OUTPUT.remove(3)).with_metadata(made)
    keys = cfg.model.feature_names
    rows = 0
    with pq.ParquetWriter(output, out_schema) as writer:
        for path in files:
            parquet = open_parquet(path)
            columns = schema.feature_columns + [schema.label] * labeled[path]
            start = 0
            for group in range(parquet.num_row_groups):
                table = read_row_group(parquet, path, group, columns)
                if table.num_rows == 0:
                    continue
                if not labeled[path]:
                    table = table.append_column(schema.label, pa.nulls(table.num_rows, pa.int8()))
                where = f"{path} row group {group}"
                decoded = decode(table, schema, where)
                size = cfg.predict.batch_size
                probability = [
                    torch.sigmoid(model(decoded.slice(lo, lo + size).batch(keys)))
                    for lo in range(0, len(decoded), size)
                ]
                out = {
                    "file": pa.array([str(path)] * table.num_rows, pa.string()),
                    "row": pa.array(np.arange(start, start + table.num_rows, dtype=np.int64)),
                    "probability": pa.array(torch.cat(probability).numpy()),
                }
                if len(out_schema) == 4:
                    out["label"] = _output_labels(table.column(schema.label), where)
                writer.write_table(pa.table(out, schema=out_schema))
                start += table.num_rows
            rows += start
    return {"files": len(files), "rows_written": rows}


def _output_labels(labels: pa.ChunkedArray, where: str) -> pa.ChunkedArray:
    """A row group's label column as the output's int8 labels; a float NaN (no label, as
    training reads it) becomes null. (``decode`` already refused labels other than 0 / 1;
    what can still fail the cast is an infinite one, which it reads as 0.)

    Raises:
        DataError: a label that int8 cannot hold, naming ``where``.
    """
    if pa.types.is_floating(labels.type):
        labels = pc.if_else(pc.is_nan(labels), pa.scalar(None, labels.type), labels)
    try:
        return labels.cast(pa.int8())
    except pa.ArrowInvalid as err:
        raise DataError(
            f"{where}: a label cannot be written as a 0/1 label ({err}); labels are 0 or 1 "
            "(null or NaN: none)"
        ) from None
