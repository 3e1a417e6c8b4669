"""Shared helpers: compose the real config with Hydra's compose API, run the CLI."""

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from dlrm_exp.config import Config, conf_dir, register_configs
from parallel import check_groups, make_scheduler, set_up_worker

REPO = Path(__file__).resolve().parents[1]
#: A quick synthetic run: 32 steps of 128 rows on 1 process.
SMALL = [
    "data.num_train_samples=4096",
    "data.num_val_samples=1024",
    "data.num_test_samples=1024",
    "train.batch_size=128",
    "train.progress_bar=false",
]
GROUPS = ("model", "sharding", "optimizer", "qcomms", "data", "hardware")

register_configs()
#: The temp dir of this xdist worker (tests/parallel.py).
_TEMP_DIR = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        config.stash[_TEMP_DIR] = set_up_worker(worker)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _TEMP_DIR in config.stash:
        shutil.rmtree(config.stash[_TEMP_DIR], ignore_errors=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    check_groups(items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    return make_scheduler(config, log)


@pytest.fixture(autouse=True)
def _keeps_torch_threads():
    """Each test ends with the intra-op thread count it began with: a run in this process
    sets its rank's (``hardware.threads_per_rank``), which later tests of the worker would
    otherwise keep (two workers' runs then contend for the cores)."""
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def compose_raw(overrides: Sequence[str] = ()) -> DictConfig:
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def compose_cfg(overrides: Sequence[str] = ()) -> Config:
    cfg = OmegaConf.to_object(compose_raw(overrides))
    assert isinstance(cfg, Config)
    return cfg


def run_cli(
    args: Sequence[str], cwd: Path = REPO, timeout: int = 300, full_error: bool = False
) -> subprocess.CompletedProcess:
    """``python -m dlrm_exp ARGS`` in a subprocess; HYDRA_FULL_ERROR=1 only if ``full_error``."""
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    if full_error:
        env["HYDRA_FULL_ERROR"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "dlrm_exp", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def cli_here(capfd, monkeypatch, tmp_path):
    """``python -m dlrm_exp ARGS`` through the same entry point (:func:`dlrm_exp.cli.main`) in
    this process: for refusals and runs that start no workers, which in a subprocess would spend
    most of their time importing torch and TorchRec again. Returns a CompletedProcess: the exit
    code from ``SystemExit`` (0 when main returns), the output read at the file descriptors.
    ``HYDRA_FULL_ERROR`` is unset; the root logger's handlers (which Hydra replaces) are put
    back afterwards. It runs in the test's ``tmp_path`` unless told otherwise, so a run folder
    (``outputs/<date>/<time>``) never lands in the checkout."""
    from dlrm_exp import cli

    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)

    def run(args: Sequence[str], cwd: Path = tmp_path) -> subprocess.CompletedProcess:
        monkeypatch.setattr(sys, "argv", ["dlrm_exp", *args])
        monkeypatch.chdir(cwd)
        root = logging.getLogger()
        handlers, level = root.handlers[:], root.level
        capfd.readouterr()
        code = 0
        try:
            cli.main()
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
        finally:
            root.handlers[:] = handlers
            root.setLevel(level)
        out, err = capfd.readouterr()
        return subprocess.CompletedProcess(list(args), code, out, err)

    return run


def torchrec_criteo_rows(folder: Path, day: int, stage: str, batch_size: int, **kwargs):
    """(dense, labels, ids (N, 26)) of one day as TorchRec's ``InMemoryBinaryCriteoIterDataPipe``
    batches them on one rank (``stage`` train = all rows, val / test = the day's halves)."""
    import torch
    from torchrec.datasets.criteo import InMemoryBinaryCriteoIterDataPipe

    pipe = InMemoryBinaryCriteoIterDataPipe(
        stage=stage,
        dense_paths=[str(folder / f"day_{day}_dense.npy")],
        sparse_paths=[str(folder / f"day_{day}_sparse.npy")],
        labels_paths=[str(folder / f"day_{day}_labels.npy")],
        batch_size=batch_size,
        rank=0,
        world_size=1,
        **kwargs,
    )
    batches = list(pipe)
    return (
        torch.cat([b.dense_features for b in batches]),
        torch.cat([b.labels for b in batches]),
        torch.cat([b.sparse_features.values().reshape(26, -1).t() for b in batches]),
    )


SWEEP_TINY = [
    "data.num_train_samples=4096",
    "data.num_val_samples=1024",
    "data.num_test_samples=1024",
    "train.batch_size=128",
    "train.val_every_n_steps=16",
    "train.progress_bar=false",
]
#: The record sweep: 2 sharding types x 2 learning rates x 3 seeds with INT8 qcomms, one process
#: per job. Table-wise trains (no collective on one process: INT8 never encodes, and the runs
#: say so, ``SWEEP_RAN``); every row-wise job is refused (FBGEMM's INT8 row-wise codec fails on
#: gloo). Run names, in job order (Hydra's basic sweeper: the last key varies fastest).
SWEEP_RUNS = [
    f"sharding={s},optimizer.learning_rate={lr},seed={seed}"
    for s in ("tablewise", "rowwise")
    for lr in ("0.1", "0.02")
    for seed in (0, 1, 2)
]
SWEEP_REFUSED = SWEEP_RUNS[6:]
#: What the completed runs' labels add: on one process TorchRec runs no collective.
SWEEP_RAN = " (ran qcomms: no embedding collective)"
#: The configurations (every swept key but seed) that completed, in first-seen order.
SWEEP_CONFIGS = [
    "sharding=tablewise,optimizer.learning_rate=0.1",
    "sharding=tablewise,optimizer.learning_rate=0.02",
]


def write_job(folder: Path, name: str | int, overrides: list[str], metrics: dict) -> Path:
    """A run folder ``folder/name`` as a job leaves it, for the report's tests:
    ``.hydra/overrides.yaml`` (JSON is YAML) and ``metrics.json``."""
    job = folder / str(name)
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text(json.dumps(overrides))
    (job / "metrics.json").write_text(json.dumps(metrics))
    return job


@pytest.fixture(scope="session")
def record_sweep(tmp_path_factory):
    """The sweep the tests/record folder shares (``SWEEP_RUNS``). Returns (sweep folder, the
    finished ``python -m dlrm_exp -m ...``)."""
    sweep_dir = tmp_path_factory.mktemp("sweep")
    result = run_cli(
        [
            "-m",
            "sharding=tablewise,rowwise",
            "optimizer.learning_rate=0.1,0.02",
            "seed=0,1,2",
            "qcomms=int8",
            *SWEEP_TINY,
            f"hydra.sweep.dir={sweep_dir}",
        ],
        timeout=900,
    )
    return sweep_dir, result


@dataclass
class DefaultRun:
    """The default experiment (``python -m dlrm_exp``, no overrides) run from a wheel installed
    outside the checkout: what tests/test_install.py and tests/modes/test_e2e.py check."""

    site: Path  # where the wheel was installed
    cwd: Path  # the directory it ran in (not the checkout)
    env: dict[str, str]  # the environment it ran with (PYTHONPATH=site, HOME under tmp)
    result: subprocess.CompletedProcess
    run_dir: Path  # outputs/<date>/<time>/ under cwd


@pytest.fixture(scope="session")
def default_run(tmp_path_factory) -> DefaultRun:
    """Build a wheel (not an editable install) from a copy of src/ and conf/, install it into a
    folder, delete the copy (nothing may be read from a checkout) and run the default experiment
    from another directory. Shared: one training run serves the install and the quality tests."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    source = tmp_path / "source"
    for name in ("src", "conf"):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    build = [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist")]
    subprocess.run([*build, str(source)], check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("dlrm_exp-*.whl")
    site = tmp_path / "site"
    install = [*pip, "install", "--no-deps", "--target", str(site), str(wheel)]
    subprocess.run(install, check=True, capture_output=True)
    shutil.rmtree(source)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    if "OMP_NUM_THREADS" in os.environ:  # a test worker's share of the cores (tests/parallel.py)
        env["OMP_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"]
    result = subprocess.run(
        [sys.executable, "-m", "dlrm_exp"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    runs = sorted(elsewhere.glob("outputs/*/*"))
    return DefaultRun(site, elsewhere, env, result, runs[0] if runs else elsewhere / "missing")


def _train_each(cfgs: list, jobs: list, plans: list) -> list:
    """Worker entry of :func:`train_in_one_launch`: one process group, the jobs in turn."""
    from dlrm_exp.distributed.launch import init_worker, process_group
    from dlrm_exp.modes.train import train_worker

    records = []
    with process_group(cfgs[0].hardware):
        for cfg, job, plan in zip(cfgs, jobs, plans, strict=True):
            init_worker(job.run_dir / "dlrm_exp.log")  # each job logs into its own folder
            records.append(train_worker(cfg, job, plan=plan))
    return records


def train_in_one_launch(
    cfgs: Sequence[Config], run_dirs: Sequence[Path], choices: Sequence[dict] | None = None
) -> list:
    """Train several multi-process jobs of one hardware configuration with one start of the
    workers (what ``run_train`` does per job, with the same pre-flight plan), in order: each
    job writes its own run folder (a later job may resume from an earlier one's checkpoint);
    returns rank 0's records. Starting the workers (a fresh interpreter that imports torch and
    TorchRec per rank) costs more than a small job's training."""
    from dlrm_exp.distributed.launch import launch_workers
    from dlrm_exp.modes.job import Job
    from dlrm_exp.modes.setup import preflight

    assert all(cfg.hardware == cfgs[0].hardware for cfg in cfgs), "one hardware config"
    choices = choices or [{} for _ in cfgs]
    jobs = [Job(run_dir, dict(c), None) for run_dir, c in zip(run_dirs, choices, strict=True)]
    for job in jobs:
        job.run_dir.mkdir(parents=True, exist_ok=True)
    plans = [preflight(cfg) for cfg in cfgs]
    return launch_workers(_train_each, (list(cfgs), jobs, plans), cfgs[0].hardware)


@dataclass(frozen=True)
class TwoProcessJob:
    overrides: list[str]
    #: ``prepare(root)`` writes the job's inputs under ``root`` (the folder of all the runs,
    #: where ``root / name`` is each job's run folder) and returns overrides naming them.
    prepare: Callable[[Path], list[str]] | None
    choices: dict


@dataclass(frozen=True)
class TwoProcessRun:
    run_dir: Path
    metrics: Any  # dlrm_exp.record.run_record.RunMetrics
    cfg: Config


#: Every 2-process training job of the suite, registered by its test module at import
#: (:func:`two_process_job`) and trained, in registration order, by one start of the workers
#: (``two_process_runs``): collection imports every module before the first test runs.
TWO_PROCESS_JOBS: dict[str, TwoProcessJob] = {}


def two_process_job(
    name: str,
    overrides: Sequence[str],
    prepare: Callable[[Path], list[str]] | None = None,
    choices: dict | None = None,
) -> str:
    """Register a training job on ``hardware.nproc_per_node=2`` for ``two_process_runs``;
    returns ``name`` (its key there and its run folder's name)."""
    assert name not in TWO_PROCESS_JOBS, name
    TWO_PROCESS_JOBS[name] = TwoProcessJob(
        ["hardware.nproc_per_node=2", "train.progress_bar=false", *overrides],
        prepare,
        choices or {},
    )
    return name


def elastic_folders() -> set[Path]:
    """The log folders torch's elastic launcher may leave in the temp dir."""
    tmp = Path(tempfile.gettempdir())
    return set(tmp.glob("torchelastic_*")) | set(tmp.glob("dlrm_exp_elastic_*"))


@dataclass(frozen=True)
class TwoProcessRuns:
    runs: dict[str, TwoProcessRun]
    #: elastic log folders the launch left behind in the temp dir (none expected)
    left_behind: set[Path]

    def __getitem__(self, name: str) -> TwoProcessRun:
        return self.runs[name]


@pytest.fixture(scope="session")
def two_process_runs(tmp_path_factory) -> TwoProcessRuns:
    """Every registered :data:`TWO_PROCESS_JOBS` job trained by one launch of 2 workers, with a
    fresh peak cache."""
    root = tmp_path_factory.mktemp("two_process")
    names = list(TWO_PROCESS_JOBS)
    cfgs = []
    for name in names:
        job = TWO_PROCESS_JOBS[name]
        extra = job.prepare(root) if job.prepare else []
        cfgs.append(compose_cfg([*job.overrides, *extra]))
    dirs = [root / name for name in names]
    before = elastic_folders()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DLRM_EXP_CACHE_DIR", str(root / "cache"))
        # the ranks take their default share of the cores (cores // 2), not a test worker's
        # OMP_NUM_THREADS (tests/parallel.py): that rule is checked end to end here
        patch.delenv("OMP_NUM_THREADS", raising=False)
        records = train_in_one_launch(cfgs, dirs, [TWO_PROCESS_JOBS[n].choices for n in names])
    runs = {
        name: TwoProcessRun(run_dir, record, cfg)
        for name, run_dir, record, cfg in zip(names, dirs, records, cfgs, strict=True)
    }
    return TwoProcessRuns(runs, elastic_folders() - before)


def tensorboard_experiment(logdir: Path) -> Any:
    """The HParams experiment TensorBoard's own HParams backend serves for ``--logdir
    logdir`` (an ``api_pb2.Experiment``: ``hparam_infos`` differing first, then by name;
    ``metric_infos``), as its dashboard's first request gets it."""
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.hparams import api_pb2, backend_context, get_experiment

    events = plugin_event_multiplexer.EventMultiplexer()
    events.AddRunsFromDirectory(str(logdir))
    events.Reload()
    provider = data_provider.MultiplexerDataProvider(events, str(logdir))
    tb = base_plugin.TBContext(data_provider=provider, logdir=str(logdir), multiplexer=events)
    request = api_pb2.GetExperimentRequest()
    handler = get_experiment.Handler(
        context.RequestContext(), backend_context.Context(tb), "", request
    )
    return handler.run()


def tensorboard_session_statuses(logdir: Path) -> list[int]:
    """The ``api_pb2.Status`` of each HParams session end the event files of ``logdir`` hold."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    events = EventAccumulator(str(logdir))
    events.Reload()
    ends = events.PluginTagToContent("hparams").get("_hparams_/session_end_info")
    if ends is None:
        return []
    return [plugin_data_pb2.HParamsPluginData.FromString(ends).session_end_info.status]
