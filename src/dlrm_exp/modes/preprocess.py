"""``mode=preprocess``: Criteo TSV to TorchRec's npy layout, or to Parquet with its feature
schema, with a report of what was read."""

import shlex
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dlrm_exp.config import Config, CriteoTsvDataConfig, PreprocessFormat
from dlrm_exp.data.criteo_parquet import SCHEMA_NAME, write_criteo_parquet
from dlrm_exp.data.paths import resolve_paths
from dlrm_exp.data.preprocess.convert import REPORT_FILE, run_preprocess, summary_lines
from dlrm_exp.errors import DataError, DiskFullError
from dlrm_exp.modes.job import Job, ModeResult
from dlrm_exp.util.files import check_writable, out_of_space, write_json_atomic
from dlrm_exp.util.folder_lock import held_run_folder


def run(cfg: Config, job: Job) -> ModeResult:
    """Convert ``data.path`` into ``preprocess.output_dir``; ``preprocess_report.json`` goes to
    the run folder.

    Raises:
        ConfigError: ``preprocess.output_dir`` cannot be created or written.
        RunFolderInUseError: another run is converting into ``preprocess.output_dir``.
        DataError: an input cannot be read (see :func:`run_preprocess`), or
            ``preprocess.output_dir`` is a file, a folder ``data.path`` names or the folder of
            one of its files.
    """
    assert isinstance(cfg.data, CriteoTsvDataConfig)  # Config.__post_init__ checked it (and
    # that data.val_path / data.test_path are unset: only data.path is converted)
    assert cfg.preprocess.output_dir  # Config.__post_init__ requires it for mode=preprocess
    _refuse_output_among_inputs(cfg.data.path, cfg.preprocess.output_dir)
    out = Path(cfg.preprocess.output_dir).expanduser()
    # found now, not after reading every row; one message for both formats
    check_writable(out, "preprocess.output_dir")
    # one conversion at a time there: its writers use fixed temporary names (day_<n>_*.tmp)
    with held_run_folder(out, "preprocess.output_dir"), _disk_full_said(out):
        if cfg.preprocess.format is PreprocessFormat.parquet:
            return _to_parquet(cfg, job, out)
        report = run_preprocess(
            cfg.data.path, cfg.preprocess, cfg.model.table_sizes, cfg.data.max_skipped_fraction
        )
    write_json_atomic(job.run_dir / REPORT_FILE, report)
    return ModeResult(summary=summary_lines(report))


@contextmanager
def _disk_full_said(out: Path) -> Iterator[None]:
    """A write that fails for want of space in ``out`` is one line saying what stays (a
    53-line traceback ending in ENOSPC: crash review)."""
    try:
        yield
    except OSError as err:
        if not out_of_space(err):
            raise
        size = sum(p.stat().st_size for p in out.glob("*") if p.is_file()) / 2**20
        raise DiskFullError(  # (the unfinished day's files are gone by now: its space is free)
            f"preprocess.output_dir={out}: its disk ran full; the days converted before stay "
            f"(their markers; {size:.1f} MiB in the folder): free some space, then the same "
            "command converts the rest"
        ) from None


def _refuse_output_among_inputs(data_paths: list[str], output_dir: str) -> None:
    """A folder named in ``data.path`` is read whole (every file in it), so outputs written
    there, or beside a file it names, would be read as input by a later run.

    Raises:
        DataError: ``output_dir`` is a file, one of the folders ``data_paths`` names, or the
            folder of a file it names.
    """
    out = Path(output_dir).expanduser().resolve()
    if out.is_file():
        raise DataError(f"preprocess.output_dir={output_dir} is a file: name a folder")
    for raw in data_paths:
        path = Path(raw).expanduser().resolve()
        if path == out or (path.is_file() and path.parent == out):
            where = "the folder data.path reads" if path == out else "the folder of data.path's"
            raise DataError(
                f"preprocess.output_dir={output_dir} is {where} {raw}: the outputs would sit "
                "among the inputs, and a later data.path naming the folder would read them as "
                "input files; write them to another folder"
            )


def _in_input_order(report: dict) -> str:
    """``data.path`` for the written files in the order of their inputs (a folder would be
    read sorted by name: ``day_10`` before ``day_9``, moving the validation and test rows to
    another day than ``data=criteo_tsv`` takes them from)."""
    return "[" + ",".join(str(f["output"]) for f in report["files"]) + "]"


def _to_parquet(cfg: Config, job: Job, out: Path) -> ModeResult:
    """``preprocess.format=parquet`` into ``out`` (``preprocess.output_dir``, checked): see
    :mod:`dlrm_exp.data.criteo_parquet`."""
    assert isinstance(cfg.data, CriteoTsvDataConfig)
    started = time.perf_counter()
    report = write_criteo_parquet(
        resolve_paths(cfg.data.path, "data.path"),
        out,
        cfg.data.schema,
        cfg.preprocess.row_group_size,
        cfg.data.max_reported_bad_lines,
        cfg.data.max_skipped_fraction,
        cfg.preprocess.overwrite,
    )
    report["seconds"] = time.perf_counter() - started
    write_json_atomic(job.run_dir / REPORT_FILE, report)
    read = report["read"]
    lines = [
        f"{Path(f['input']).name} -> {f['output']}: {f['rows']:,} rows" for f in report["files"]
    ]
    lines += [
        f"{read['rows_valid']:,} rows written ({read['rows_skipped']:,} skipped, "
        f"{read['rows_padded']:,} padded) in {report['seconds']:.1f} s; schema {report['schema']}",
        f"train with: python -m dlrm_exp --config-dir {shlex.quote(str(out / 'conf'))} "
        f"data=parquet data/schema={SCHEMA_NAME} "
        f"{shlex.quote(f'data.path={_in_input_order(report)}')} data.shuffle_row_groups=false",
    ]
    return ModeResult(summary="\n".join(lines))
