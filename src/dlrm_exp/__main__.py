"""Entry point: ``python -m dlrm_exp [group=option ...] [key=value ...]`` (or ``dlrm-exp``).

Composes the config with Hydra, converts it once to typed dataclasses (cross-field checks run
here, before any process group), runs the requested mode and prints a short summary.
User mistakes print one message and exit 1; ``HYDRA_FULL_ERROR=1`` shows the traceback.

Under ``-m`` (multirun) a job that fails, for any reason, records ``status: failed`` and its
error in its ``metrics.json`` and the sweep goes on; the sweep's summary lists it and the
process exits 1 at the end (:mod:`dlrm_exp.sweep`).
"""

import logging
import math
import os
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from dlrm_exp.config import Config, Mode, register_configs
from dlrm_exp.errors import UserError
from dlrm_exp.logs import quiet_libraries
from dlrm_exp.sweep import FAILED_JOBS, run_name, sweep_overrides, swept_keys
from dlrm_exp.tracking import write_json_atomic

CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")

log = logging.getLogger("dlrm_exp")
register_configs()


def _fmt(value: float | None, spec: str = ".4f") -> str:
    return (
        "n/a"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else format(value, spec)
    )


def summary(metrics: dict[str, Any], run_dir: Path, logdir: str = "outputs") -> str:
    """The lines printed at the end of a training run."""
    bayes = metrics.get("bayes_auroc") or {}
    lines = []
    for split in ("val", "test"):
        m = metrics[split]
        best = f" (Bayes-optimal {_fmt(bayes[split])})" if split in bayes else ""
        lines.append(
            f"{split:<4} AUROC {_fmt(m['auroc'])}{best} | log loss {_fmt(m['logloss'])} | "
            f"NE {_fmt(m['ne'])} | {int(m['samples']):,} samples"
        )
    lines.append(
        f"train {metrics['steps']} steps | {_fmt(metrics['samples_per_sec'], ',.0f')} samples/s "
        f"| peak memory {metrics['peak_memory_gib']:.2f} GiB | {metrics['wall_seconds']:.1f} s"
    )
    read = metrics["data"].get("read")
    if read:
        lines.append(
            f"data {read['rows_read']:,} rows read, {read['rows_valid']:,} valid, "
            f"{read['rows_padded']:,} padded, {read['rows_skipped']:,} skipped"
        )
    lines.append(f"run folder: {run_dir}")
    lines.append(f"compare runs: tensorboard --logdir {logdir}")
    return "\n".join(lines)


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def hydra_main(raw: DictConfig) -> float | None:
    """Hydra task: returns the final validation AUROC (for sweepers; NaN for a failed job of
    a multirun, which Optuna-style sweepers record as a failed trial)."""
    quiet_libraries()
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    if hydra_cfg.mode != RunMode.MULTIRUN:
        try:
            return _run_mode(raw, run_dir, None)
        except (UserError, OmegaConfBaseException) as err:
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            print(f"Error: {err}", file=sys.stderr)
            sys.exit(1)
    sweep_dir = Path(hydra_cfg.sweep.dir)
    swept = swept_keys(sweep_overrides(sweep_dir)) + list(hydra_cfg.sweeper.get("params") or {})
    name = run_name(list(hydra_cfg.overrides.task), swept)
    try:
        return _run_mode(raw, run_dir, sweep_dir / name if swept else None)
    except Exception as err:  # one job's failure must not end the sweep
        user_error = isinstance(err, (UserError, OmegaConfBaseException))
        if not user_error:
            log.exception("job %s failed", name)
        message = str(err) if user_error else f"{type(err).__name__}: {err}"
        print(f"Error in job {name}: {message}", file=sys.stderr)
        write_json_atomic(
            run_dir / "metrics.json",
            {"status": "failed", "error": message, "error_type": type(err).__name__},
        )
        return math.nan


def _run_mode(raw: DictConfig, run_dir: Path, tensorboard_dir: Path | None) -> float | None:
    """Convert the config, run its ``mode`` and print the summary; returns what the task
    returns (verify: the max deviation; train: val AUROC)."""
    cfg = OmegaConf.to_object(raw)
    assert isinstance(cfg, Config)
    choices = {k: str(v) for k, v in HydraConfig.get().runtime.choices.items()}
    if cfg.mode is Mode.verify:
        from dlrm_exp.verify import run_verify
        from dlrm_exp.verify import summary as verify_summary

        result = run_verify(cfg, run_dir)
        print(verify_summary(result))
        return result["max_rel_loss_deviation"]
    if cfg.mode is Mode.plan:
        from dlrm_exp.plan_mode import run_plan
        from dlrm_exp.plan_mode import summary as plan_summary

        record = run_plan(cfg, run_dir)
        print(plan_summary(record, run_dir))
        return None
    if cfg.mode is Mode.preprocess:
        from dlrm_exp.data.preprocess import run_preprocess, summary_lines

        report = run_preprocess(cfg.data.path, cfg.preprocess, cfg.model.table_sizes)
        write_json_atomic(run_dir / "preprocess_report.json", report)
        print(summary_lines(report))
        return None
    from dlrm_exp.run import run_train

    metrics = run_train(cfg, run_dir, choices, tensorboard_dir)
    if int(os.environ.get("RANK", "0")) == 0:
        logdir = str(tensorboard_dir.parent) if tensorboard_dir else "outputs"
        print(summary(metrics, run_dir, logdir))
    return metrics["val"]["auroc"]


#: Under torchrun every rank runs this entry point; ranks other than 0 compose the same config
#: but must not create run folders or log files: Hydra is told to write nothing for them.
_QUIET_RANK_OVERRIDES = (
    "hydra.output_subdir=null",
    "hydra/job_logging=disabled",
    "hydra/hydra_logging=disabled",
    "hydra.run.dir=.",
)


def _default_data_for_preprocess(args: list[str]) -> list[str]:
    """``mode=preprocess`` converts Criteo TSV: without a ``data=`` choice on the command line
    it takes ``data=criteo_tsv`` (the group default, synthetic, has no files to convert), so
    ``mode=preprocess data.path=<tsv> preprocess.output_dir=<dir>`` is enough."""
    chooses_data = any(a.lstrip("+~").startswith("data=") for a in args)
    if "mode=preprocess" in args and not chooses_data:
        return [*args, "data=criteo_tsv"]
    return args


def main() -> None:
    """Console-script entry (``dlrm-exp``)."""
    if int(os.environ.get("RANK", "0")) > 0 and "MASTER_ADDR" in os.environ:
        sys.argv += list(_QUIET_RANK_OVERRIDES)
    sys.argv = [sys.argv[0], *_default_data_for_preprocess(sys.argv[1:])]
    hydra_main()
    if FAILED_JOBS:
        sys.exit(1)


if __name__ == "__main__":
    main()
