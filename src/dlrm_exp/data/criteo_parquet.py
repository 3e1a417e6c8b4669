"""Criteo TSV to Parquet (``mode=preprocess preprocess.format=parquet``), with the feature
schema that reads it back.

Each TSV file becomes ``<stem>.parquet`` holding exactly the rows ``data=criteo_tsv`` trains
on, as that reader makes them through ``data.schema``
(:func:`~dlrm_exp.data.criteo_tsv.read_files`: malformed rows skipped and counted; with the
shipped schema, dense ``log(1 + max(x, 0))`` as float32 and categoricals
``int(C, 16) % num_embeddings`` of the model's tables): columns ``label`` (int8), the schema's
dense columns (float32) and its sparse columns (int64 table rows). The schema written beside
them, ``<output_dir>/conf/data/schema/criteo_preprocessed.yaml``, keeps the feature and table
names and sizes, takes the dense columns as they are (no second ``log1p``) and the rows with
``id_policy=strict``, so ``data=parquet`` with
``data.shuffle_row_groups=false`` on 1 process sees the same batches as ``data=criteo_tsv`` and
trains to the same AUROC. A file is read whole (as ``data=criteo_tsv`` reads it), written to a
temporary name and renamed.
"""

import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from dlrm_exp.config import FeatureSchema
from dlrm_exp.data.criteo_tsv import ReadReport, check_skipped_rows, read_files
from dlrm_exp.data.parquet_files import write_parquet_atomic
from dlrm_exp.errors import DataError
from dlrm_exp.util.files import write_text_atomic

log = logging.getLogger(__name__)

#: The schema's name: ``data/schema=criteo_preprocessed`` with ``--config-dir <out>/conf``.
SCHEMA_NAME = "criteo_preprocessed"
#: The key of a converted file's Parquet metadata that records its input (absolute path).
SOURCE_KEY = "dlrm_exp.source"


def write_criteo_parquet(
    files: list[Path],
    output_dir: Path,
    schema: FeatureSchema,
    row_group_size: int,
    max_bad_lines: int = 5,
    max_skipped_fraction: float | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Convert ``files`` into ``output_dir`` through ``schema`` (``data.schema``, its tables
    sized; no managed-collision feature: those ids are mapped by the model, not the reader)
    and write the schema; returns the report
    (``files``: input -> output and rows; ``read``: the merged read report; ``schema``).

    Raises:
        DataError: a file cannot be read or holds no valid row (see ``read_files``), skips
            more than ``max_skipped_fraction`` of its rows (``data.max_skipped_fraction``;
            nothing written for it: unlabeled rows read shifted by a column are mostly
            skipped, the rest would be written as valid), two files would get the same output
            name, ``output_dir`` holds files converted with other settings (its schema
            differs), or an output file converted from another input (each file records its
            input, :data:`SOURCE_KEY`; replaced only with ``overwrite``:
            ``preprocess.overwrite``).
    """
    text = schema_text(schema)
    earlier = output_dir / "conf" / "data" / "schema" / f"{SCHEMA_NAME}.yaml"
    targets = _targets(files, output_dir, earlier, text)
    if not overwrite:
        _refuse_other_inputs(files, targets)
    report = ReadReport()
    outputs = []
    for source, target in zip(files, targets, strict=True):
        data, file_report = read_files([source], schema, max_bad_lines)
        check_skipped_rows(
            file_report.as_dict(),
            max_skipped_fraction,
            f"converted (nothing written for {target.name})",
            "Unlabeled rows (Criteo's test.txt)? convert only labeled files; to keep the valid "
            "rows, raise data.max_skipped_fraction",
        )
        report.merge(file_report, max_bad_lines)
        columns = {schema.label: pa.array(data.labels.numpy().astype("int8"))}
        dense, sparse = data.dense.numpy(), data.sparse.numpy()
        columns |= {d.column: pa.array(dense[:, j]) for j, d in enumerate(schema.dense)}
        columns |= {
            schema.sparse[name].column: pa.array(sparse[:, j])
            for j, name in enumerate(schema.feature_names)
        }
        table = pa.table(columns).replace_schema_metadata({SOURCE_KEY: _source_name(source)})
        write_parquet_atomic(table, target, row_group_size)
        outputs.append({"input": str(source), "output": str(target), "rows": len(data)})
    write_text_atomic(earlier, text)  # the schema, after the files it describes
    return {"files": outputs, "read": report.as_dict(), "schema": str(earlier)}


def _source_name(source: Path) -> str:
    """The input a Parquet file records (:data:`SOURCE_KEY`): its absolute path."""
    return str(source.resolve())


def _refuse_other_inputs(files: list[Path], targets: list[Path]) -> None:
    """Each output that exists was converted from the same input (its recorded
    :data:`SOURCE_KEY`), so converting again replaces only what came from it.

    Raises:
        DataError: naming the file, the input it holds and the one that would replace it.
    """
    for source, target in zip(files, targets, strict=True):
        if not target.exists():
            continue
        try:
            metadata = pq.read_schema(target).metadata or {}
        except (OSError, pa.ArrowException):
            metadata = {}
        held = metadata.get(SOURCE_KEY.encode(), b"").decode(errors="replace")
        if not held:  # converted before files recorded their input: replaced, said once
            log.warning("%s records no input (an older conversion): %s replaces it", target,
                        source)  # fmt: skip
        elif held != _source_name(source):
            was = f"converted from {held}"
            raise DataError(
                f"preprocess.output_dir holds {target} ({was}); {source} would replace it: "
                "write to another preprocess.output_dir, or set preprocess.overwrite=true to "
                "replace it"
            )


def _targets(files: list[Path], output_dir: Path, earlier: Path, text: str) -> list[Path]:
    """The Parquet file of each input in ``output_dir`` (created), after checking the folder
    holds no conversion with other settings (``earlier``, its schema, differs from ``text``)
    and no two inputs share an output; warns of files from other inputs there.

    Raises:
        DataError: either refusal, naming the folder or the inputs.
    """
    if earlier.is_file() and earlier.read_text(encoding="utf-8") != text:
        raise DataError(
            f"preprocess.output_dir={output_dir} holds Parquet files converted with other "
            f"settings (table sizes or transforms: {earlier}); this run's would be read with "
            "them as one dataset: write to another preprocess.output_dir"
        )
    targets = [output_dir / f"{source.name.split('.')[0]}.parquet" for source in files]
    if len(set(targets)) < len(targets):
        raise DataError(
            "data.path: several input files would be written to the same Parquet file ("
            + ", ".join(f"{s} -> {t.name}" for s, t in zip(files, targets, strict=True))
            + "): give files whose names differ before the first dot"
        )
    output_dir.mkdir(parents=True, exist_ok=True)
    others = sorted(p.name for p in set(output_dir.glob("*.parquet")) - set(targets))
    if others:
        log.warning(
            "preprocess.output_dir=%s also holds %s from other inputs: a data.path naming the "
            "folder reads them with this run's files (the command printed below names only "
            "this run's)",
            output_dir,
            ", ".join(others),
        )
    return targets


def schema_text(schema: FeatureSchema) -> str:
    """The ``criteo_preprocessed.yaml`` of files converted through ``schema``: its transforms
    done (no ``log1p``, ``id_policy=strict``), and in a comment the source's transforms, so
    that two conversions with other settings give other texts."""
    log1p = "".join("1" if d.log1p else "0" for d in schema.dense)
    policies = sorted({f.id_policy.value for f in schema.sparse.values()})
    lines = [
        "# Criteo rows converted by mode=preprocess preprocess.format=parquet: dense values",
        "# and table rows as data=criteo_tsv's schema made them.",
        f"# source: dense log1p {log1p}, id policies {', '.join(policies)}",
        f"label: {schema.label}",
        "dense:",
        *(f"  - {{column: {d.column}, log1p: false}}" for d in schema.dense),
        "sparse:",
        *(
            f"  {name}: {{column: {f.column}, table: {schema.table_of(name)}, "
            f"num_embeddings: {f.num_embeddings}, id_policy: strict}}"
            for name, f in schema.sparse.items()
        ),
    ]
    return "\n".join(lines) + "\n"
