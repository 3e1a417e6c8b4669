"""``mode=schema``: read a sample of Parquet files and write a feature schema the user edits,
``<run folder>/conf/data/schema/<name>.yaml``, used with
``--config-dir <run folder>/conf data=parquet data/schema=<name>``.

Each entry carries what was seen as a comment (type, nulls, distinct ids and their estimate for
the whole input, list lengths, value range). ``schema_report.json`` holds the same numbers.
The text is checked by parsing it as :class:`~dlrm_exp.config.FeatureSchema` before it is
written (to a temporary name, renamed), so a failure leaves no file, half or invalid.
"""

import json
import re
import shlex
from dataclasses import asdict

from dlrm_exp.config import Config, parse_schema
from dlrm_exp.data.parquet_files import resolve_parquet_paths
from dlrm_exp.data.schema_scan import ColumnStats, is_id_name, read_sample, scan_table
from dlrm_exp.errors import DataError
from dlrm_exp.modes.job import Job, ModeResult
from dlrm_exp.util.files import absolute_path, write_json_atomic, write_text_atomic
from dlrm_exp.util.text import first_few


def run(cfg: Config, job: Job) -> ModeResult:
    """Scan ``schema_scan.path`` and write the schema and ``schema_report.json``.

    Raises:
        DataError: no file, a file that is not Parquet, no label column, or no column that
            can be a dense or a sparse feature.
    """
    scan = cfg.schema_scan
    paths = scan.path if isinstance(scan.path, list) else [scan.path]
    files = resolve_parquet_paths([str(p) for p in paths], "schema_scan.path")
    table, total = read_sample(files, scan.sample_rows)
    columns = scan_table(table, total, scan.label, scan.max_num_embeddings)
    roles = {c.role for c in columns}
    if not {"dense", "sparse"} <= roles:
        missing = " and ".join(r for r in ("dense", "sparse") if r not in roles)
        raise DataError(f"{files[0]}: no {missing} column found; a DLRM needs both" + _why(columns))
    text = render_yaml(columns, files[0].name, table.num_rows, total)
    parse_schema(text)  # what data=parquet will compose must load
    target = job.run_dir / "conf" / "data" / "schema" / f"{scan.name}.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(target, text)
    report = {
        "files": [str(f) for f in files],
        "total_rows": total,
        "sample_rows": table.num_rows,
        "schema": str(target),
        "columns": [asdict(c) for c in columns],
    }
    write_json_atomic(job.run_dir / "schema_report.json", report)
    return ModeResult(summary="\n".join(_summary(columns, target, job, paths, scan.name)))


def _why(columns: list[ColumnStats]) -> str:
    """Why no column was taken as sparse: integer columns count as ids (sparse) only when
    their name says so; the ones taken as dense, and the way out."""
    integers = [c.name for c in columns if c.role == "dense" and "int" in c.type]
    if not integers:
        return ""
    return (
        f" (the integer columns {first_few(integers, 4)} were taken as dense counts: "
        "integers are ids only when the name says so, as id, user_id or itemId; a schema can "
        "still name them sparse: write it by hand, or use the one mode=preprocess writes "
        "beside its Parquet files)"
    )


def render_yaml(columns: list[ColumnStats], source: str, sample: int, total: int) -> str:
    """The schema as YAML, each entry with what was seen as a comment."""
    q = _quoted
    label = next(c for c in columns if c.role == "label")
    lines = [
        f"# Feature schema suggested by mode=schema from {sample:,} of {total:,} rows "
        f"({source}...).",
        "# Edit it: roles, num_embeddings, id_policy (strict | modulo), log1p.",
        f"label: {q(label.name)}  # {label.type}, {label.nulls} null in the sample",
        "dense:",
    ]
    for c in (c for c in columns if c.role == "dense"):
        seen = f"{c.type}, range [{_num(c.min)}, {_num(c.max)}], {c.nulls} null"
        if is_id_name(c.name) and "int" not in c.type:  # pandas writes ints with nulls as floats
            seen += "; an id saved as float? write it as int64 to use it as a sparse feature"
        lines.append(f"  - {{column: {q(c.name)}, log1p: {str(c.log1p).lower()}}}  # {seen}")
    lines.append("sparse:")
    used: set[str] = set()
    for c in (c for c in columns if c.role == "sparse"):
        entry = f"column: {q(c.name)}, num_embeddings: {c.num_embeddings}, id_policy: {c.id_policy}"
        if c.multi_hot:
            entry += f", multi_hot: true, pooling_factor: {max(c.mean_length or 0, 0.01):.2f}"
        seen = f"{c.type}, {c.distinct:,} distinct in the sample, ~{c.distinct_estimate:,} in all"
        if c.multi_hot:
            seen += f", {c.mean_length:.1f} ids per row (p99 {c.p99_length:.0f})"
        # quoted: YAML reads keys such as on, no, null as booleans or null
        lines.append(f"  {q(_feature_key(c.name, used))}: {{{entry}}}  # {seen}, {c.nulls} null")
    skipped = [c for c in columns if c.role == "skip"]
    if skipped:
        lines.append("# not used (no role takes their type, or a label's name: a target):")
        lines += [f"#   {c.name}: {c.type}" for c in skipped]
    return "\n".join(lines) + "\n"


def _quoted(name: str) -> str:
    """``name`` as a YAML string OmegaConf reads back as ``name``: JSON-quoted (a JSON string
    is a YAML one, whatever it holds), characters beyond the BMP as they are (JSON's
    surrogate pairs came back as two lone surrogates) and ``${`` escaped (OmegaConf took it
    for an interpolation)."""
    return json.dumps(name.replace("${", "\\${"), ensure_ascii=False)


def _feature_key(column: str, used: set[str]) -> str:
    """A feature name for ``column``: letters, digits and _ (TorchRec names modules after
    it), the column's own name where it already is one; ``_2``, ``_3``, ... when another
    column already took it (``a-b`` and ``a_b``), recorded in ``used``."""
    key = re.sub(r"[^A-Za-z0-9_]", "_", column)  # ASCII: \W keeps letters like é
    key = key if re.match(r"[A-Za-z_]", key) else f"f_{key}"
    unique, n = key, 2
    while unique in used:
        unique, n = f"{key}_{n}", n + 1
    used.add(unique)
    return unique


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:g}"


def _summary(
    columns: list[ColumnStats], target: object, job: Job, paths: list, name: str
) -> list[str]:
    count = {r: sum(c.role == r for c in columns) for r in ("dense", "sparse", "skip")}
    # absolute and quoted for the shell: a glob or list as typed failed pasted into zsh or
    # bash with failglob, and named files relative to another folder than --config-dir's
    # (install review)
    full = [str(absolute_path(str(p))) for p in paths]
    data_path = full[0] if len(full) == 1 else "[" + ",".join(full) + "]"
    return [
        f"schema: {count['dense']} dense columns, {count['sparse']} sparse features, label "
        f"{next(c.name for c in columns if c.role == 'label')}"
        + (f", {count['skip']} columns not used" if count["skip"] else ""),
        f"written: {target} (edit it; details in schema_report.json)",
        f"train with: python -m dlrm_exp --config-dir {shlex.quote(str(job.run_dir / 'conf'))} "
        f"data=parquet data/schema={name} {shlex.quote(f'data.path={data_path}')}",
    ]
