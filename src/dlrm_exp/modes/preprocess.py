"""``mode=preprocess``: Criteo TSV to TorchRec's npy layout, or to Parquet with its feature
schema, with a report of what was read."""

import time
from pathlib import Path

from dlrm_exp.config import Config, CriteoTsvDataConfig, PreprocessFormat
from dlrm_exp.data.criteo_parquet import SCHEMA_NAME, write_criteo_parquet
from dlrm_exp.data.paths import resolve_paths
from dlrm_exp.data.preprocess.convert import run_preprocess, summary_lines
from dlrm_exp.errors import DataError
from dlrm_exp.modes.job import Job, ModeResult
from dlrm_exp.util.files import write_json_atomic


def run(cfg: Config, job: Job) -> ModeResult:
    """Convert ``data.path`` into ``preprocess.output_dir``; ``preprocess_report.json`` goes to
    the run folder.

    Raises:
        DataError: an input cannot be read (see :func:`run_preprocess`), or
            ``preprocess.output_dir`` is a folder ``data.path`` names.
    """
    assert isinstance(cfg.data, CriteoTsvDataConfig)  # Config.__post_init__ checked it
    assert cfg.preprocess.output_dir  # Config.__post_init__ requires it for mode=preprocess
    _refuse_output_among_inputs(cfg.data.path, cfg.preprocess.output_dir)
    if cfg.preprocess.format is PreprocessFormat.parquet:
        return _to_parquet(cfg, job)
    report = run_preprocess(cfg.data.path, cfg.preprocess, cfg.model.table_sizes)
    write_json_atomic(job.run_dir / "preprocess_report.json", report)
    return ModeResult(summary=summary_lines(report))


def _refuse_output_among_inputs(data_paths: list[str], output_dir: str) -> None:
    """A folder named in ``data.path`` is read whole (every file in it), so outputs written
    there would be read as input by the next run.

    Raises:
        DataError: ``output_dir`` is one of the folders ``data_paths`` names.
    """
    out = Path(output_dir).expanduser().resolve()
    for raw in data_paths:
        if Path(raw).expanduser().resolve() == out:
            raise DataError(
                f"preprocess.output_dir={output_dir} is the folder data.path reads ({raw}): "
                "the next run would read this run's outputs as input files; write them to "
                "another folder"
            )


def _to_parquet(cfg: Config, job: Job) -> ModeResult:
    """``preprocess.format=parquet``: see :mod:`dlrm_exp.data.criteo_parquet`."""
    assert isinstance(cfg.data, CriteoTsvDataConfig) and cfg.preprocess.output_dir
    started = time.perf_counter()
    out = Path(cfg.preprocess.output_dir)
    report = write_criteo_parquet(
        resolve_paths(cfg.data.path, "data.path"),
        out,
        cfg.data.schema,
        cfg.preprocess.row_group_size,
        cfg.data.max_reported_bad_lines,
    )
    report["seconds"] = time.perf_counter() - started
    write_json_atomic(job.run_dir / "preprocess_report.json", report)
    read = report["read"]
    lines = [
        f"{Path(f['input']).name} -> {f['output']}: {f['rows']:,} rows" for f in report["files"]
    ]
    lines += [
        f"{read['rows_valid']:,} rows written ({read['rows_skipped']:,} skipped, "
        f"{read['rows_padded']:,} padded) in {report['seconds']:.1f} s; schema {report['schema']}",
        f"train with: python -m dlrm_exp --config-dir {out / 'conf'} data=parquet "
        f"data/schema={SCHEMA_NAME} data.path={out} data.shuffle_row_groups=false",
    ]
    return ModeResult(summary="\n".join(lines))
