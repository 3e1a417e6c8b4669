"""``mode=preprocess``: Criteo TSV to TorchRec's npy layout, with a report of what was read."""

from dlrm_exp.config import Config, CriteoTsvDataConfig
from dlrm_exp.data.preprocess.convert import run_preprocess, summary_lines
from dlrm_exp.modes.job import Job, ModeResult
from dlrm_exp.util.files import write_json_atomic


def run(cfg: Config, job: Job) -> ModeResult:
    """Convert ``data.path`` into ``preprocess.output_dir``; ``preprocess_report.json`` goes to
    the run folder.

    Raises:
        DataError: an input cannot be read (see :func:`run_preprocess`).
    """
    assert isinstance(cfg.data, CriteoTsvDataConfig)  # Config.__post_init__ checked it
    report = run_preprocess(cfg.data.path, cfg.preprocess, cfg.model.table_sizes)
    write_json_atomic(job.run_dir / "preprocess_report.json", report)
    return ModeResult(summary=summary_lines(report))
