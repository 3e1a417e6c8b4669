"""Criteo TSV to Parquet (``mode=preprocess preprocess.format=parquet``), with the feature
schema that reads it back.

Each TSV file becomes ``<stem>.parquet`` holding exactly the rows ``data=criteo_tsv`` trains
on, as that reader makes them (:func:`~dlrm_exp.data.criteo_tsv.read_files`: malformed rows
skipped and counted, dense ``log(1 + max(x, 0))`` as float32, categoricals
``int(C, 16) % num_embeddings`` of the model's tables): columns ``label`` (int8), ``I1..I13``
(float32), ``C1..C26`` (int64). The schema written beside them,
``<output_dir>/conf/data/schema/criteo_preprocessed.yaml``, takes the dense columns as they are
(no second ``log1p``) and the ids with ``id_policy=strict``, so ``data=parquet`` with
``data.shuffle_row_groups=false`` on 1 process sees the same batches as ``data=criteo_tsv`` and
trains to the same AUROC. A file is read whole (as ``data=criteo_tsv`` reads it), written to a
temporary name and renamed.
"""

from pathlib import Path
from typing import Any

import pyarrow as pa

from dlrm_exp.config import CRITEO_NUM_DENSE, CRITEO_NUM_SPARSE
from dlrm_exp.data.criteo_tsv import ReadReport, read_files
from dlrm_exp.data.parquet_files import write_parquet_atomic
from dlrm_exp.errors import DataError
from dlrm_exp.util.files import write_text_atomic

#: The schema's name: ``data/schema=criteo_preprocessed`` with ``--config-dir <out>/conf``.
SCHEMA_NAME = "criteo_preprocessed"


def write_criteo_parquet(
    files: list[Path],
    output_dir: Path,
    table_sizes: list[int],
    row_group_size: int,
    max_bad_lines: int = 5,
) -> dict[str, Any]:
    """Convert ``files`` into ``output_dir`` and write the schema; returns the report
    (``files``: input -> output and rows; ``read``: the merged read report; ``schema``).

    Raises:
        DataError: a file cannot be read or holds no valid row (see ``read_files``), or two
            files would get the same output name.
    """
    targets = [output_dir / f"{source.name.split('.')[0]}.parquet" for source in files]
    if len(set(targets)) < len(targets):
        raise DataError(
            "data.path: several input files would be written to the same Parquet file ("
            + ", ".join(f"{s} -> {t.name}" for s, t in zip(files, targets, strict=True))
            + "): give files whose names differ before the first dot"
        )
    output_dir.mkdir(parents=True, exist_ok=True)
    report = ReadReport()
    outputs = []
    for source, target in zip(files, targets, strict=True):
        data, file_report = read_files([source], table_sizes, max_bad_lines)
        report.merge(file_report, max_bad_lines)
        columns = {"label": pa.array(data.labels.numpy().astype("int8"))}
        dense, sparse = data.dense.numpy(), data.sparse.numpy()
        columns |= {f"I{j + 1}": pa.array(dense[:, j]) for j in range(CRITEO_NUM_DENSE)}
        columns |= {f"C{j + 1}": pa.array(sparse[:, j]) for j in range(CRITEO_NUM_SPARSE)}
        write_parquet_atomic(pa.table(columns), target, row_group_size)
        outputs.append({"input": str(source), "output": str(target), "rows": len(data)})
    schema = write_schema(output_dir / "conf" / "data" / "schema", table_sizes)
    return {"files": outputs, "read": report.as_dict(), "schema": str(schema)}


def write_schema(folder: Path, table_sizes: list[int]) -> Path:
    """``criteo_preprocessed.yaml`` for the converted files, atomically."""
    lines = [
        "# Criteo rows converted by mode=preprocess preprocess.format=parquet: dense values",
        "# already log(1 + max(x, 0)), ids already int(C, 16) % num_embeddings of the model.",
        "label: label",
        "dense:",
        *(f"  - {{column: I{j + 1}, log1p: false}}" for j in range(CRITEO_NUM_DENSE)),
        "sparse:",
        *(
            f"  cat_{j}: {{column: C{j + 1}, num_embeddings: {rows}, id_policy: strict}}"
            for j, rows in enumerate(table_sizes)
        ),
    ]
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{SCHEMA_NAME}.yaml"
    write_text_atomic(target, "\n".join(lines) + "\n")
    return target
