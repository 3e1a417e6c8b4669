"""Entry point: ``python -m dlrm_exp [group=option ...] [key=value ...]`` (or ``dlrm-exp``).

Composes the config with Hydra, converts it once to typed dataclasses (cross-field checks run
here, before any process group), runs the requested mode through the registry of
:mod:`dlrm_exp.modes` and prints its summary. User mistakes print one message and exit 1;
``HYDRA_FULL_ERROR=1`` shows the traceback.

Under ``-m`` (multirun) a job that fails, for any reason, records ``status: failed`` and its
error in its ``metrics.json`` and the sweep goes on; the sweep's summary lists it and the
process exits 1 at the end (:class:`dlrm_exp.record.sweep.SweepSummary`).
"""

import importlib.util
import logging
import math
import os
import shutil
import signal
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from dlrm_exp.config import Config, Mode, conf_dir, register_configs
from dlrm_exp.config.build import build_config
from dlrm_exp.config.config_files import (
    MULTIRUN_MODES,
    Chosen,
    check_config_files,
    check_option_file_keys,
    check_preset_data_keys,
    check_schema_choice,
    check_schema_feature_overrides,
    check_sweeper_param_keys,
    chosen_files,
    config_dirs,
    preset_choice,
    preset_sweep_params,
    preset_sweeps,
    presets_set_multirun,
)
from dlrm_exp.config.enum_values import check_enum_values
from dlrm_exp.config.keys import (
    check_basic_sweeper_sweeps,
    check_data_option_keys,
    check_group_additions,
    check_override_keys,
)
from dlrm_exp.config.store import DATA_OPTIONS
from dlrm_exp.distributed.env import (
    check_launcher_env,
    env_rank,
    launched_by_torchrun,
    launched_ranks,
)
from dlrm_exp.distributed.submitit_env import adopt_submitit_environment, in_submitit_task
from dlrm_exp.errors import (
    ConfigError,
    FinishedRunKeptError,
    Refusal,
    RunFolderInUseError,
    Terminated,
    UserError,
)
from dlrm_exp.modes import Job, run_mode
from dlrm_exp.record.jobs_not_run import note_not_run
from dlrm_exp.record.kept_record import KeptRecord
from dlrm_exp.record.run_record import (
    COMPLETED,
    RunMetrics,
    finished_record,
)
from dlrm_exp.record.runs import (
    differences_text,
    job_overrides,
    mode_name,
    override_differences,
    override_values,
    parsed_override_values,
    recorded_mode,
    run_name,
    saved_sweep_values,
    typed_task,
)
from dlrm_exp.record.sweep import summarize_interrupted_sweep
from dlrm_exp.util.folder_lock import held_run_folder, hold_run_folder, release_run_folders
from dlrm_exp.util.logs import configure_worker_logging, quiet_libraries, to_log_files

log = logging.getLogger("dlrm_exp")
register_configs()

#: The record of the folder ``hydra.run.dir=`` names, read before Hydra writes into it
#: (:func:`main`); put back when the run is refused before it starts (:func:`_refused`).
_kept_record: KeptRecord | None = None
#: The records of a sweep's existing job folders, by folder (absolute), read before Hydra
#: writes each job's ``.hydra/`` (:func:`_keep_record`).
_kept_job_records: dict[Path, KeptRecord] = {}
#: (multirun, folder, mode, train.resume) of the job this process started last: where an
#: interrupted run goes on, and from what.
_job_folder: tuple[bool, Path, str, str | None] | None = None


@hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="config")
def hydra_main(raw: DictConfig) -> float | None:
    """Hydra task: returns the mode's value (for sweepers: train's final validation AUROC;
    NaN for a failed job of a multirun, which Optuna-style sweepers record as a failed
    trial; a finished job kept by a rerun, its record's: :func:`_job_failed`)."""
    quiet_libraries()
    global _job_folder
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    if env_rank() == 0:  # a torchrun rank > 0 runs in "." (it writes no folder)
        resume = OmegaConf.select(raw, "train.resume")  # (the hint keeps a PATH: review)
        multirun = hydra_cfg.mode == RunMode.MULTIRUN
        _job_folder = (multirun, run_dir.absolute(), mode_name(raw), resume)
    if hydra_cfg.mode != RunMode.MULTIRUN:
        try:
            return _run(raw, run_dir, None)
        except (UserError, OmegaConfBaseException) as err:
            _refused(err)
            if _kept_record is None or not _kept_record.saved:  # (else an earlier run's log)
                to_log_files(f"Error: {err}", level=logging.ERROR)  # the folder says why
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            _report_refusal(err)
            sys.exit(1)
        except BaseException as err:  # a crash or an interruption under way
            _refused(err)
            if isinstance(err, Exception):
                _report_crash(err)
            raise
    # (from where the command ran: hydra.job.chdir=true runs the job in its own folder)
    sweep_dir = Path(hydra_cfg.runtime.cwd) / hydra_cfg.sweep.dir
    sweep = saved_sweep_values(sweep_dir)
    swept = list(sweep)
    task = typed_task(hydra_cfg)
    name = run_name(task, swept)  # the overrides as typed, as multirun.yaml's are read
    job_swept = parsed_override_values(task, swept)
    try:
        return _run(raw, run_dir, sweep_dir / name if swept else None, job_swept, sweep)
    except (KeyboardInterrupt, Terminated) as err:  # the sweep ends here; the job says why
        if env_rank() == 0:  # rank 0's record (the other tasks of a submitit job write none)
            _record_interruption(run_dir / "metrics.json", err)
        raise
    except Exception as err:  # one job's failure must not end the sweep
        return _job_failed(err, name, run_dir, sweep_dir, (task, swept))


def _job_failed(
    err: Exception, name: str, run_dir: Path, sweep_dir: Path, job: tuple[list[str], list[str]]
) -> float:
    """A sweep's job ``name`` ended by ``err``: said on stderr (and in the job's log and
    record, where the folder's record is this job's), without ending the sweep. Returns the
    job's value for the sweeper: a finished run kept in its folder gives its record's val
    AUROC (what it returned when it ran, and what a resume with nothing left to train
    returns: a kept job was NaN, a failed trial to an Optuna-style sweeper: re-read); a
    failure, NaN. ``job``: its overrides and the sweep's swept keys."""
    if env_rank() > 0:  # a task of a several-task (submitit) job: rank 0 records the
        # job's failure (a record here would replace it); a raise would fail this task,
        # and the submitit launcher ends the whole sweep on a failed task (FailedJobError)
        print(f"Error in job {name} (rank {env_rank()}): {err}", file=sys.stderr)
        return math.nan
    if isinstance(err, _REFUSALS):  # its .hydra/ stood beside the folder's record (review)
        _put_back_record(run_dir)
    if isinstance(err, FinishedRunKeptError):
        other = _other_job(run_dir, sweep_dir, *job)
        if other is None:  # a sweep rerun to finish the rest: no error
            print(f"Job {name} kept: {err}", file=sys.stderr)
            return _kept_value(run_dir / "metrics.json")
        err = RunFolderInUseError(other)  # (it was kept as this job: sweeps review)
    user_error = isinstance(err, (UserError, OmegaConfBaseException))
    if not user_error:
        log.exception("job %s failed", name)
    message = str(err) if user_error else f"{type(err).__name__}: {err}"
    print(f"Error in job {name}: {message}", file=sys.stderr)
    in_use = isinstance(err, RunFolderInUseError)  # (its log is the other run's)
    if user_error and not in_use:  # (an unexpected error's traceback is logged already)
        to_log_files(f"Error: {message}", level=logging.ERROR)
    if not in_use:  # else the folder's record is another run's
        _record_failure(run_dir / "metrics.json", message, err)
    else:  # the summary must not read that record as this job's (sweeps review)
        note_not_run(sweep_dir, run_dir, name, message)
    return math.nan


def _other_job(run_dir: Path, sweep_dir: Path, task: list[str], swept: list[str]) -> str | None:
    """Why the finished record in a sweep job's folder is not this job's (whose overrides are
    ``task``; the sweep's swept keys ``swept``): the folder's ``.hydra/overrides.yaml`` (put
    back after the job was refused there) sets other values, of a swept key (a rerun with an
    edited list numbers its jobs otherwise) or of another (the same list run with other
    settings); None where they agree (:func:`override_differences`, as the summary compares
    the runs of one configuration), or it reads as none."""
    try:
        overrides = job_overrides(run_dir)
    except ValueError:
        return None
    differ = override_differences(overrides, task) if overrides else None
    if not differ:
        return None
    again = "sweep into another folder (hydra.sweep.dir=...)"
    if any(key in differ for key in swept):
        return (
            f"{run_dir} holds the record of {run_name(overrides, swept)}, a job of an earlier "
            f"sweep into {sweep_dir} that numbered its jobs otherwise: {again}, or run that "
            "sweep's list again"
        )
    return (
        f"{run_dir} holds the record of this job run with other settings "
        f"({differences_text(differ)}: there / here, - unset): {again}, or run it with that "
        "run's settings"
    )


def _kept_value(path: Path) -> float:
    """The val AUROC of the finished run's record ``path`` (NaN: none, or unreadable)."""
    try:
        auroc = RunMetrics.read(path).val.get("auroc")
    except (OSError, ValueError):
        return math.nan
    return float(auroc) if isinstance(auroc, (int, float)) else math.nan


class RunFolderLock(Callback):
    """Hydra callback: a single run holds its folder (:mod:`dlrm_exp.util.folder_lock`) before
    Hydra writes the folder's ``.hydra`` record and log, so a run refused there (another run
    started within the same second in the default folder) leaves the first run's record and
    log as they are: it prints the error and ends, exit status 1. A ``-m`` sweep holds its
    sweep folder so (before ``multirun.yaml``), and each job its own folder in :func:`_run`;
    torchrun ranks above 0 write no folder."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._hold(config, "hydra.run.dir")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """A sweep holds its sweep folder before Hydra writes ``multirun.yaml`` there (two
        sweeps started within one second shared it: their jobs were refused one by one)."""
        self._hold(config, "hydra.sweep.dir")

    @staticmethod
    def _hold(config: DictConfig, key: str) -> None:
        if env_rank() > 0:
            return
        folder = Path(str(OmegaConf.select(config, key)))
        try:
            hold_run_folder(folder)
        except RunFolderInUseError as err:
            print(f"Error: {err}", file=sys.stderr)
            sys.exit(1)
        except OSError as err:  # a file there, or under a file (Hydra would fail the same)
            why = "it is a file" if folder.is_file() else err.strerror or err
            print(f"Error: {key}={folder} cannot be a run folder: {why}", file=sys.stderr)
            sys.exit(1)


#: The errors that refuse a run before it starts (:class:`~dlrm_exp.errors.Refusal`, and
#: OmegaConf's for a config that does not compose).
_REFUSALS = (Refusal, OmegaConfBaseException)


def _is_multirun(args: list[str]) -> bool:
    """Whether the command line asks for a sweep: ``-m``, or Hydra's ``hydra.mode=MULTIRUN``
    in any of its forms (``++hydra.mode=...``, ``RunMode.MULTIRUN``, ``2``: the preset-sweep
    note said one job would run: diff review)."""
    return _has_multirun_flag(args) or any(
        a.lstrip("+~").partition("=")[::2] in _MULTIRUN_MODES for a in args
    )


#: ``hydra.mode`` overrides that make a command a sweep, as ``(key, value)``.
_MULTIRUN_MODES = {("hydra.mode", v) for v in MULTIRUN_MODES}


def _has_multirun_flag(args: list[str]) -> bool:
    """Whether the command line has the ``-m`` flag (Hydra refuses it beside a printing flag,
    not ``hydra.mode=MULTIRUN``)."""
    return "-m" in args or "--multirun" in args


def _refused(err: BaseException) -> None:
    """Put back the record of the folder ``hydra.run.dir=`` named (:class:`KeptRecord`) when
    ``err`` is one of :data:`_REFUSALS` and the run wrote no result there, or when the run
    failed under way and wrote no record (the folder's earlier record stays its run's)."""
    _put_back_record(failed=not isinstance(err, _REFUSALS))


def _put_back_record(run_dir: Path | None = None, failed: bool = False) -> None:
    """Put back the record of the folder ``hydra.run.dir=`` named, or of the sweep's job
    folder ``run_dir`` (:class:`KeptRecord`, read by :func:`_keep_record`: a refused or kept
    sweep job left its ``.hydra/`` beside the earlier job's record, which the summary then
    labelled with this job's overrides: review) if the run wrote no result there
    (``failed``: no record, see ``KeptRecord.restore``)."""
    kept = _kept_job_records.get(run_dir.absolute(), _kept_record) if run_dir else _kept_record
    if kept is None:
        return
    try:
        changed = kept.restore(failed)
    except OSError as write_error:
        log.warning("the record of %s was not put back: %s", kept.run_dir, write_error)
        return
    if changed:
        log.info("put back %s of the run in %s", ", ".join(changed), kept.run_dir)


def _report_refusal(err: Exception) -> None:
    """A single run's refusal, in one line on stderr. Under torchrun or TorchX, where every rank
    raises the refusals rank 0 broadcasts, rank 0 alone prints it (each rank printed the same
    line), and every rank records it for the elastic agent (:func:`_record_for_agent`)."""
    _record_for_agent(err)
    if env_rank() == 0 or not launched_by_torchrun():
        print(f"Error: {err}", file=sys.stderr)


def _report_crash(err: Exception) -> None:
    """A single run's crash (no refusal): its traceback into the run's log, so the folder says
    why it stopped (Hydra prints it on stderr only), and for the elastic agent
    (:func:`_record_for_agent`)."""
    trace = "".join(traceback.format_exception(err)).rstrip()
    to_log_files(f"the run failed (rank {env_rank()}):\n{trace}", level=logging.ERROR)
    _record_for_agent(err)


def _record_for_agent(err: Exception) -> None:
    """In a worker of torchrun or TorchX, ``err`` into the elastic agent's error file
    (``TORCHELASTIC_ERROR_FILE``): torchrun's summary then gives this rank's exception and
    traceback as the root cause, not ``error_file: <N/A>`` (Hydra catches the exception
    before torch's ``@record`` could see it). Elsewhere nothing."""
    if launched_by_torchrun():
        from torch.distributed.elastic.multiprocessing.errors import get_error_handler

        get_error_handler().record_exception(err)


def _choices() -> dict[str, str | None]:
    """The job's config group choices (``{"sharding": "rowwise", "experiment": None, ...}``);
    stacked presets (``experiment=[quickstart,fast]``, which Hydra leaves out of its
    choices) as typed (review)."""
    hydra_cfg = HydraConfig.get()
    choices = {k: None if v is None else str(v) for k, v in hydra_cfg.runtime.choices.items()}
    if choices.get("experiment") is None:  # (absent, or None beside a +experiment list)
        typed = typed_task(hydra_cfg)
        choices["experiment"] = override_values(typed).get("experiment")  # (+experiment=[a,b])
    return choices


def _signal(err: KeyboardInterrupt | Terminated) -> signal.Signals:
    """``SIGINT`` for Ctrl-C, else the signal :class:`Terminated` carries."""
    return signal.Signals(err.signum if isinstance(err, Terminated) else signal.SIGINT)


def _record_failure(path: Path, message: str, err: Exception) -> None:
    """A failed sweep job's ``metrics.json`` (status ``failed``), unless ``err`` refused the
    job before it started (a :class:`~dlrm_exp.errors.Refusal`: its data gone, a checkpoint
    it cannot use) and the folder holds a completed record: the job rerun in its folder
    (``train.resume=auto``) keeps its earlier run's results, which a failed record would
    replace for good. A failure once training ran (a NaN, a worker's) is recorded."""
    if isinstance(err, Refusal):
        try:
            completed = RunMetrics.read(path).status == COMPLETED
        except (OSError, ValueError):  # none, or not a record: nothing to keep
            completed = False
        if completed:
            log.warning("%s keeps the completed record of an earlier run of this job", path)
            return
    RunMetrics.failed(message, type(err).__name__, _choices()).write(path)


def _record_interruption(path: Path, err: KeyboardInterrupt | Terminated) -> None:
    """An interrupted sweep job's ``metrics.json`` (status ``interrupted``), so its summary
    and reports tell it from a job killed outright (``missing``); a record already there (the
    job rerun in its folder) is kept, unless it is an earlier attempt's that failed or was
    interrupted (its error then stood for this one's: diff review). Never raises: the
    interruption ends the process."""
    try:
        if not finished_record(path):  # (unreadable: kept)
            RunMetrics.interrupted(_signal(err).name, type(err).__name__).write(path)
    except OSError as write_error:
        log.warning("no interrupted record %s: %s", path, write_error)


def _run(
    raw: DictConfig,
    run_dir: Path,
    tensorboard_dir: Path | None,
    swept: dict[str, Any] | None = None,
    sweep: dict[str, list[str]] | None = None,
) -> float | None:
    """Convert the config, run its mode and print the summary; returns the mode's value.
    ``swept``: this job's values of the swept keys; ``sweep``: every value of each."""
    cfg = build_config(raw, sweep)
    if in_submitit_task():
        adopt_submitit_environment(cfg.hardware)
        if env_rank() > 0:  # like a torchrun rank > 0: warnings only, and not into the job's log
            configure_worker_logging(None)
        if cfg.mode is Mode.train:  # a requeued job continues from its newest checkpoint
            from dlrm_exp.loop.run_folder import requeued_resume

            cfg.train.resume = requeued_resume(cfg.train.resume)
    # rank 0 holds the folder (other ranks write into rank 0's, or none: torchrun's run in
    # "."); a launched job of several ranks (a submitit job's tasks, one job a process) in its
    # worker once they are connected, until the process ends (modes.setup.check_folder_first):
    # refused here, rank 0 left the other tasks waiting for it (launch review)
    several = launched_ranks() > 1
    with held_run_folder(run_dir) if env_rank() == 0 and not several else nullcontext():
        result = run_mode(cfg, Job(run_dir, _choices(), tensorboard_dir, swept or {}))
    if cfg.mode is Mode.train:  # a resume with nothing left to train keeps the folder's run's
        _put_back_record(run_dir)  # record: its config and plan describe it, not this job
    if result.summary is not None:
        print(result.summary, flush=True)
        to_log_files(result.summary)
    return result.value


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
        at = args.index("mode=preprocess")  # among the overrides: never a flag's value
        return [*args[:at], "data=criteo_tsv", *args[at:]]  # (first, -m broke it: review)
    return args


def _last_value(args: list[str], key: str) -> str | None:
    values = [a.split("=", 1)[1] for a in args if a.lstrip("+").startswith(f"{key}=")]
    return values[-1] if values else None


#: ``hydra/<group>=<option>`` choices of conf/ that need a Hydra plugin of an optional extra:
#: (plugin module, extra).
PLUGIN_OPTIONS = {
    ("hydra/sweeper", "lr_search"): ("hydra_plugins.hydra_optuna_sweeper", "optuna"),
    ("hydra/launcher", "local"): ("hydra_plugins.hydra_submitit_launcher", "launchers"),
    ("hydra/launcher", "slurm_gpu"): ("hydra_plugins.hydra_submitit_launcher", "launchers"),
}


#: Hydra's flags that print instead of running (``-c``/``--cfg`` take a value after them), each
#: with its long name: Hydra takes one of them at a time.
_PRINTING_FLAGS = {"--cfg": "--cfg", "-c": "--cfg", "--info": "--info", "-i": "--info",
                   "--shell-completion": "--shell-completion",
                   "-sc": "--shell-completion"}  # fmt: skip


def _printing_flags(args: list[str]) -> list[str]:
    """The command line's flags that print instead of running (:data:`_PRINTING_FLAGS`)."""
    return [a for a in args if a.split("=", 1)[0] in _PRINTING_FLAGS]


def _printing_kinds(flags: list[str]) -> set[str]:
    """The long names of printing ``flags`` (``-c`` and ``--cfg`` are one kind)."""
    return {_PRINTING_FLAGS[a.split("=", 1)[0]] for a in flags}


def check_flag_combination(args: list[str]) -> None:
    """Refuse ``-m`` with a flag that prints (``--cfg``, ``--info``, ``--shell-completion``):
    Hydra raised ``ValueError: Only one of --run, --multirun, --cfg, --info and
    --shell_completion can be specified`` as a traceback.

    Raises:
        ConfigError: naming the flags and the way to print one job's config.
    """
    printing = _printing_flags(args)
    if _has_multirun_flag(args) and printing:  # (hydra.mode=MULTIRUN prints: diff review)
        raise ConfigError(
            f"-m runs a sweep, {printing[0]} prints one config: drop -m (and give each swept "
            "key one value) to print a job's config, or drop the flag to run the sweep"
        )
    kinds = _printing_kinds(printing)
    if len(kinds) > 1:  # Hydra's own refusal was a traceback (review)
        raise ConfigError(
            f"{' and '.join(sorted(kinds))} each print something else: give one of them"
        )


def check_plugins(args: list[str]) -> None:
    """Refuse a ``hydra/sweeper=`` or ``hydra/launcher=`` option of conf/ whose Hydra plugin
    is not installed, naming the extra that brings it (Hydra's own error is "Could not load
    'hydra/sweeper/optuna'" with its search path).

    Raises:
        ConfigError: naming the option and ``pip install -e ".[<extra>]"``.
    """
    for (group, option), (module, extra) in PLUGIN_OPTIONS.items():
        if _last_value(args, group) == option and not _installed(module):
            raise ConfigError(
                f"{group}={option} needs a Hydra plugin that is not installed "
                f'({module.split(".")[-1]}): pip install -e ".[{extra}]"'
            )
    submits = _is_multirun(args) and not _printing_flags(args)
    if submits and _last_value(args, "hydra/launcher") == "slurm_gpu" and not shutil.which("srun"):
        raise ConfigError(
            "hydra/launcher=slurm_gpu submits the jobs to Slurm, but srun is not on this "
            "machine's PATH (no Slurm cluster here): run it on the cluster's login node, or "
            "hydra/launcher=local to run the jobs on this machine through submitit"
        )


def _check_launch_choices(args: list[str]) -> None:
    """A launcher or sweeper chosen on the command line applies to sweeps only: without ``-m``
    (or ``hydra.mode``, on the command line or in the preset or ``-cn`` primary config chosen:
    :func:`_sweeps`) the run trained in this process and its record named the launcher
    (launch review); submitit's local executor runs one node (its ``ValueError`` was a
    traceback).

    Raises:
        ConfigError: naming the choice and the way on.
    """
    if _writes_nothing(args):
        return
    for group in ("hydra/launcher", "hydra/sweeper"):
        option = _last_value(args, group)
        if option not in (None, "basic") and not _sweeps(args):  # (basic: runs here anyway)
            raise ConfigError(
                f"{group}={option} runs the jobs of a -m sweep; without -m this command runs "
                f"here, in this process: add -m (a sweep of one job), or leave {group} out"
            )
    nodes = _as_int(_last_value(args, "hydra.launcher.nodes"))
    launcher = _last_value(args, "hydra/launcher")
    if launcher in ("local", "submitit_local") and nodes is not None and nodes > 1:
        raise ConfigError(
            f"hydra/launcher={launcher} runs every job on this machine, one node: "
            f"hydra.launcher.nodes={nodes} needs hydra/launcher=slurm_gpu (or nodes=1, "
            "tasks_per_node = hardware.nproc_per_node)"
        )


def _sweeps(args: list[str]) -> bool:
    """Whether the command may sweep: ``-m`` or ``hydra.mode`` on it, or in the
    ``experiment=`` preset it chooses (a preset was let be whether it set it or not: diff
    review); a primary config of one's own (``-cn``, ``-cp``) is let be."""
    if _is_multirun(args) or _other_primary_config(args):  # (a primary config of one's own,
        return True  # its defaults' presets too: let be, as Hydra reads it)
    if _last_value(args, "experiment") is None:
        return False
    return presets_set_multirun(chosen_files(args, [conf_dir(), *config_dirs(args)]))


def _as_int(text: str | None) -> int | None:
    """An override's whole number (``2``, ``'2'``, ``2.0``); None for none or another value
    (an interpolation such as ``${hardware.nnodes}``, resolved later)."""
    try:
        value = float((text or "").strip("'\""))
    except ValueError:
        return None
    return int(value) if value.is_integer() else None


def _other_primary_config(args: list[str]) -> bool:
    """Whether the command names a primary config of its own (``-cn`` / ``--config-name``,
    ``-cp`` / ``--config-path``), whose defaults may pick other group options than
    conf/config.yaml's. ``-cd`` / ``--config-dir`` only adds a folder of options: the
    primary config stays conf/config.yaml (its data option check was lost: review)."""
    flags = ("-cn", "--config-name", "-cp", "--config-path")
    return any(a in flags or a.startswith(tuple(f"{f}=" for f in flags)) for a in args)


def _completing(args: list[str]) -> bool:
    """Whether the command asks Hydra's shell completion (``-sc install=bash``)."""
    return "--shell-completion" in _printing_kinds(_printing_flags(args))


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported (``find_spec`` raises, not returns None, when its
    parent package is missing too: no Hydra plugin at all installs ``hydra_plugins``)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def _writes_nothing(args: list[str]) -> bool:
    """Whether Hydra only prints (:data:`_PRINTING_FLAGS`, ``--help``, ``--hydra-help``) and
    writes no run folder."""
    helps = {"-h", "--help", "--hydra-help"}
    return bool(_printing_flags(args)) or any(a in helps for a in args)


def refuse_another_runs_folder(args: list[str]) -> None:
    """Refuse ``hydra.run.dir=<folder>`` of a run of another mode, before Hydra starts: Hydra
    would replace the ``.hydra/`` config that run records, and the mode its files (``mode=plan``
    a training run's ``plan.json``, ``mode=evaluate`` its ``metrics.json``). The same mode
    again (a training run resumed, an evaluation redone) is the folder's own business.

    Raises:
        ConfigError: naming the folder and both modes.
    """
    run_dir = _last_value(args, "hydra.run.dir")
    if run_dir is None or _is_multirun(args) or _writes_nothing(args):
        return
    recorded = recorded_mode(Path(run_dir))  # as Hydra takes the folder: no ~ expansion
    if recorded is None:
        return  # no run there (or nothing readable to keep)
    mode = _last_value(args, "mode") or Mode.train.value
    if recorded != mode:
        raise ConfigError(
            f"hydra.run.dir={run_dir} holds a mode={recorded} run, whose records (.hydra/ "
            f"config, files) mode={mode} would overwrite: leave hydra.run.dir unset (a new "
            "folder under outputs/) or name another folder"
        )


def _keep_record(args: list[str]) -> None:
    """Read the record of the run folder ``hydra.run.dir=`` names (a single run's), before
    Hydra replaces its ``.hydra/`` files (see :func:`_refused`); for a sweep into a
    ``hydra.sweep.dir=`` that holds jobs, each job folder's (:func:`_put_back_record`)."""
    global _kept_record, _kept_job_records
    run_dir = _last_value(args, "hydra.run.dir")
    single = not _is_multirun(args)
    # absolute now: hydra.job.chdir=true changes the working folder before a refusal
    _kept_record = KeptRecord(Path(run_dir).absolute()) if run_dir and single else None
    sweep_dir = None if single else _last_value(args, "hydra.sweep.dir")
    jobs = Path(sweep_dir).absolute().iterdir() if sweep_dir and Path(sweep_dir).is_dir() else []
    _kept_job_records = {job: KeptRecord(job) for job in jobs if job.name.isdigit()}


@contextmanager
def _stop_on_sigterm() -> Iterator[None]:
    """Within the block, SIGTERM (``kill``, a container stopping, a time limit) ends what
    this process runs as Ctrl-C does: :class:`Terminated` unwinds it (cleanup code runs, e.g.
    preprocess removes its unfinished files), a sweep gets the summary of its finished jobs,
    and the process ends in one line, exit 143. Only where SIGTERM still has its default
    action (which killed the process mid-step): a handler someone installed (submitit's)
    stays, and so does the default of torchrun's workers, whose agent stops them with
    SIGTERM. The default is put back after the block. A process forked inside the block (a
    preprocess or DataLoader worker) inherits the handler but not the block: there SIGTERM
    keeps its default action."""
    if launched_by_torchrun() or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    installer = os.getpid()

    def stop(signum: int, frame: object) -> None:
        if os.getpid() != installer:  # a forked child: die as SIGTERM would have it die
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise Terminated(signum)

    stop.stops_the_run = True  # type: ignore[attr-defined]  # (held during a save)
    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _launched_jobs_hint(sweep: DictConfig | None) -> str | None:
    """For a sweep whose jobs a submitit launcher started (none ran in this process), what
    an interruption of the launcher leaves: they run on to their end (their results come
    later), and the same ``-m`` command then runs those that did not finish. None otherwise
    (it gave a single run's hint, to a sweep whose jobs ran on: launch review)."""
    if sweep is None or _job_folder is not None:
        return None
    target = str(OmegaConf.select(sweep, "hydra.launcher._target_", default=""))
    if "submitit" not in target:
        return None
    folder = OmegaConf.select(sweep, "hydra.sweep.dir")
    return (
        f"the jobs the launcher started run on to their end (their logs in {folder}/.submitit; "
        "those still running are not yet in the summary above); the same -m command with "
        f"hydra.sweep.dir={folder} then runs those that did not finish"
    )


def _what_stays() -> str:
    """What an interrupted job keeps, for its mode (a preprocess was told of checkpoints and
    a sweep's jobs: npy review)."""
    mode = _job_folder[2] if _job_folder is not None else None
    if mode == "preprocess":
        return "the converted days stay; "
    if mode in (None, "train"):
        return (
            "what was finished stays (complete checkpoints, converted days; a sweep's "
            "unfinished job records status interrupted): "
        )
    return ""


def _continue_hint() -> str:
    """How to go on after an interruption: a training run continues with
    ``train.resume=auto`` in its own folder (the default folder is a new one each time, where
    auto finds nothing); preprocess run again converts only the unfinished days; the other
    modes write their files whole or not at all, so the same command runs again (it said to
    resume training for them too: crash review)."""
    if _job_folder is None:  # interrupted before a job started
        return (
            "the same command with hydra.run.dir=<its run folder> train.resume=auto continues "
            "training from the newest checkpoint, and mode=preprocess run again converts only "
            "the unfinished days (and re-indexes contiguous ids)"
        )
    multirun, job_dir, mode, resume = _job_folder
    if mode == "preprocess":
        return "the same command converts only the unfinished days (and re-indexes contiguous ids)"
    if mode != "train":
        return f"mode={mode} leaves no half-written output: run the same command again"
    from dlrm_exp.loop.checkpoint import complete_checkpoints  # (refusals need not load it)
    from dlrm_exp.loop.run_folder import resume_command

    fresh = resume in (None, "", "auto")
    if complete_checkpoints(job_dir):  # begun from train.resume=PATH: that PATH continues
        # it (continued_resume) and starts a sweep's other jobs from it (auto started them
        # afresh: review)
        again = resume_command(job_dir, multirun, auto=fresh)
        return f"{again} continues training from the newest checkpoint"
    # (it promised to continue where nothing could be: diff review); a job started from a
    # checkpoint (train.resume=PATH) starts from it again with the same command (auto threw
    # that away: diff review); a sweep's job, whose record marks it abandoned, runs again as
    # asked; a single run, which left no record beside its best, with auto
    again = resume_command(job_dir, multirun, auto=fresh and not multirun)
    start = "its start" if fresh else f"train.resume={resume}"
    return (
        f"it saved no step checkpoint (train.checkpoint_every_n_steps): {again} trains it "
        f"again from {start}"
    )


@contextmanager
def _one_line_refusal(ranks_known: bool = True) -> Iterator[None]:
    """A user mistake raised in the block is one ``Error:`` line and exit status 1; under
    torchrun printed by rank 0 alone and recorded for the elastic agent
    (:func:`_report_refusal`: every rank printed it, and torchrun's summary said
    ``error_file: <N/A>``: launch review). ``ranks_known=False``: before the launcher's
    environment is checked (a rank that is no number), every process prints it."""
    try:
        yield
    except UserError as err:
        if ranks_known:
            _report_refusal(err)
        else:
            print(f"Error: {err}", file=sys.stderr)
        sys.exit(1)


def _check_command(args: list[str]) -> None:
    """What the command line can be refused for before Hydra composes (rank 0 also checks
    the run folder it names).

    Raises:
        ConfigError: a sweep under torchrun, flags that conflict, a missing plugin, a bad
            config file or key (:func:`_check_keys_and_files`); RunFolderInUseError and the
            like from the run folder checks.
    """
    if launched_by_torchrun() and _is_multirun(args):
        raise ConfigError(
            "a -m sweep starts its own jobs: run it without torchrun / TorchX (each job "
            "launches its processes for hardware.nproc_per_node; on a cluster, "
            "hydra/launcher=slurm_gpu), or torchrun one job without -m"
        )
    if env_rank() == 0:  # other ranks write no run folder
        refuse_another_runs_folder(args)
        _keep_record(args)
    check_flag_combination(args)
    _check_launch_choices(args)  # (the command line's own: not a preset's choice)
    check_plugins(args)
    _check_keys_and_files(args)


def _check_keys_and_files(args: list[str]) -> None:
    """The command line's config files and override keys, before Hydra composes.

    Raises:
        ConfigError: a config file that does not read, an unknown key, a feature the chosen
            schema lacks, a key of another data option.
    """
    dirs = config_dirs(args)
    own = chosen_files(args, dirs)
    check_config_files(own)
    check_option_file_keys(own, Config)
    overrides = [a for a in args if not a.startswith("-")]
    check_override_keys(overrides, Config)
    check_enum_values(overrides, Config)
    if _other_primary_config(args):  # its defaults may add features and pick other data
        # (-cp's folder is not read; its interval was Hydra's traceback again: diff review)
        primary = list(own)  # (each use takes the primary config or the presets)
        preset = preset_choice([c for c in primary if not c.group], "experiment")
        if preset is not None and _last_value(args, "experiment") is None:  # (one its
            # defaults choose, the command line's replacing it: Hydra's traceback: diff review)
            primary += chosen_files([f"experiment={preset}"], [*dirs, conf_dir()])
        if any(not c.group for c in primary):
            _check_basic_sweeper(args, overrides, primary)
            _check_chosen_sweeper(args, primary)
        return
    check_group_additions(overrides)
    check_schema_choice(args, [conf_dir(), *dirs])
    # the shipped options too: their features are the ones an override names
    every = chosen_files(args, [conf_dir(), *dirs])
    _check_basic_sweeper(args, overrides, every)
    _check_chosen_sweeper(args, every)
    check_schema_feature_overrides(overrides, every)
    check_data_option_keys(overrides, DATA_OPTIONS, preset_choice(every, "data"))
    sweep = _is_multirun(args)
    check_preset_data_keys(args, every, DATA_OPTIONS, sweep)
    check_sweeper_param_keys(args, every)
    if not sweep and env_rank() == 0:  # (one job of the preset ran, without a word: review)
        for preset, keys in preset_sweeps(every):
            print(
                f"note: experiment={preset} is a sweep over {keys} key(s) (its hydra."
                "sweeper.params), which only -m runs: this runs one job of its settings",
                file=sys.stderr,
            )


def _check_chosen_sweeper(args: list[str], chosen: list[Chosen]) -> None:
    """The sweeper a chosen preset or primary config picks (not the command line) has its
    plugin: Hydra said "Could not load 'hydra/sweeper/optuna'" with its search path (diff
    review).

    Raises:
        ConfigError: see :func:`check_plugins`.
    """
    sweeper = preset_choice(chosen, "hydra/sweeper")
    if sweeper is not None and _last_value(args, "hydra/sweeper") is None:
        check_plugins([*args, f"hydra/sweeper={sweeper}"])


def _check_basic_sweeper(args: list[str], overrides: list[str], presets: list[Chosen]) -> None:
    """A ``-m`` sweep under Hydra's basic sweeper, which neither the command line nor a
    chosen preset replaces (a preset choosing ``lr_search`` was refused its ``interval``:
    diff review), sweeps no ``interval(...)``, on the command line or in a preset's
    ``hydra.sweeper.params``.

    Raises:
        ConfigError: see :func:`~dlrm_exp.config.keys.check_basic_sweeper_sweeps`.
    """
    if not _is_multirun(args) or _last_value(args, "hydra/sweeper") is not None:
        return
    if preset_choice(presets, "hydra/sweeper") is not None:
        return
    check_basic_sweeper_sweeps(overrides)
    for where, params in preset_sweep_params(presets):
        check_basic_sweeper_sweeps(params, f"{where}'s hydra.sweeper.params: ")


def main() -> None:
    """Console-script entry (``dlrm-exp``); a sweep with a failed job exits 1."""
    global _job_folder
    _job_folder = None  # (a second call in one process: not the first one's folder)
    with _one_line_refusal(ranks_known=False):  # every later env_rank() reads a number (a
        check_launcher_env()  # bad one was a raw traceback: review)
    if env_rank() > 0 and "MASTER_ADDR" in os.environ:
        sys.argv += list(_QUIET_RANK_OVERRIDES)
    if _completing(sys.argv[1:]):  # its "overrides" (install=bash, query=...) are Hydra's
        with _one_line_refusal():  # shell-completion commands, no config keys (review)
            check_flag_combination(sys.argv[1:])
        hydra_main()
        return
    sys.argv = [sys.argv[0], *_default_data_for_preprocess(sys.argv[1:])]
    with _one_line_refusal():
        _check_command(sys.argv[1:])
    try:
        with _stop_on_sigterm():
            hydra_main()
    except (KeyboardInterrupt, Terminated) as err:  # one line, not a traceback per frame
        signum = _signal(err)
        if env_rank() > 0:  # a torchrun rank: rank 0 says how to go on (this rank knew no
            # folder, and printed the placeholder hint beside rank 0's: launch review)
            print(f"Interrupted ({signum.name}) on rank {env_rank()}", file=sys.stderr)
            sys.exit(128 + signum)
        sweep = summarize_interrupted_sweep()
        hint = _launched_jobs_hint(sweep) or f"{_what_stays()}{_continue_hint()}"
        print(f"Interrupted ({signum.name}): {hint}", file=sys.stderr)
        sys.exit(128 + signum)
    finally:  # (a process that calls main again, as the tests do, holds no folder from before)
        release_run_folders()
