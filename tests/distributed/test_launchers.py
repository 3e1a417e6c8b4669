"""The engines clusters use: TorchX (local run, Slurm and Kubernetes requests) and multi-node
torchrun, each reusing ``python -m dlrm_exp`` and its run folder."""

import fcntl
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SMALL = ["data.num_train_samples=16384", "train.progress_bar=false", "sharding=rowwise"]
BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _elastic_env(tmp_path_factory) -> dict[str, str]:
    """The environment for torchrun and torchx: their agents' ``torchelastic_*`` folders go to
    a test folder, not the machine's ``/tmp`` (they are not removed after a run)."""
    scratch = tmp_path_factory.mktemp("elastic")
    return {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}", "TMPDIR": str(scratch)}


def test_two_torchrun_nodes_on_localhost_train_one_job(tmp_path, tmp_path_factory):
    """``torchrun --nnodes 2 --node_rank {0,1} --nproc_per_node 1 --rdzv-backend c10d``: two
    "hosts" on this machine form one 2-rank job; no rank launches workers again, global rank 0
    writes the one run folder and prints the summary, the other writes nothing (no ``.hydra``
    or log file in its working directory) but its checkpoint shards, into the same run folder
    (they went to its working directory: the checkpoints could not be loaded)."""
    endpoint = f"localhost:{_free_port()}"
    run_dir = tmp_path / "run"
    env = _elastic_env(tmp_path_factory)
    nodes = [
        subprocess.Popen(
            [
                str(BIN / "torchrun"),
                "--nnodes",
                "2",
                "--node_rank",
                str(rank),
                "--nproc_per_node",
                "1",
                "--rdzv-backend",
                "c10d",
                "--rdzv-endpoint",
                endpoint,
                "-m",
                "dlrm_exp",
                *SMALL,
                "hardware.nnodes=2",
                "train.checkpoint_every_n_steps=8",
                f"hydra.run.dir={run_dir}",
            ],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [node.communicate(timeout=300)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs[0][-2000:] + outputs[1][-2000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["world_size"] == 2 and metrics["steps"] == 16  # 16,384 rows / (2 x 512)
    assert sum(output.count("val  AUROC") for output in outputs) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    shards = sorted(p.name for p in (run_dir / "checkpoints" / "step_16").glob("*.distcp"))
    assert shards == ["__0_0.distcp", "__1_0.distcp"]


def test_torchx_builtin_ddp_runs_locally_and_leaves_one_run_folder(tmp_path, tmp_path_factory):
    """The README's command: ``torchx run -s local_cwd dist.ddp -j 1x2 -m dlrm_exp -- ...``."""
    env = _elastic_env(tmp_path_factory)
    result = subprocess.run(
        [
            str(BIN / "torchx"),
            "run",
            "-s",
            "local_cwd",
            "dist.ddp",
            "-j",
            "1x2",
            "-m",
            "dlrm_exp",
            "--",
            *SMALL,
            "train.max_steps=20",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    (found,) = list((tmp_path / "outputs").glob("*/*/metrics.json"))
    assert json.loads(found.read_text())["world_size"] == 2
    # the config says 1 process: rank 0 says the saved config does not describe the job
    log = (found.parent / "dlrm_exp.log").read_text()
    assert "the launcher started 2 ranks (2 per host), but hardware.nproc_per_node=1" in log


def _ddp(*overrides: str, **kwargs):
    ddp = pytest.importorskip("torchx.components.dist").ddp
    return ddp(*overrides, m="dlrm_exp", j="2x8", gpu=8, cpu=96, memMB=1_100_000, **kwargs)


def test_torchx_renders_a_slurm_job_of_2_nodes_x_8_gpus():
    from torchx.runner import get_runner

    app = _ddp("sharding=rowwise", "hardware=a100_40gb_x8", "hardware.nnodes=2")
    request = str(get_runner().dryrun(app, "slurm", cfg={"partition": "gpu"}).request)
    groups = [line for line in request.splitlines() if line.startswith("#SBATCH --job-name")]
    assert len(groups) == 2  # one heterogeneous group per node
    assert all("--partition=gpu" in g and "--gpus-per-task=8" in g for g in groups)
    # the docs' node resources, not dist.ddp's 2 CPUs and 1 GiB for 8 ranks
    assert all("--cpus-per-task=96" in g and "--mem=1100000" in g for g in groups)
    assert request.count("--nnodes 2 --nproc_per_node 8") == 2
    assert (
        request.count("-m dlrm_exp sharding=rowwise hardware=a100_40gb_x8 hardware.nnodes=2") == 2
    )


def test_torchx_renders_a_kubernetes_job_with_the_image_given():
    from torchx.runner import get_runner

    app = _ddp("sharding=rowwise", image="registry.example/dlrm_exp:1")
    info = get_runner().dryrun(app, "kubernetes", cfg={"queue": "default"})
    job = info.request.resource
    tasks = job["spec"]["tasks"]
    assert len(tasks) == 2 and all(t["replicas"] == 1 for t in tasks)
    container = tasks[0]["template"].spec.containers[0]
    assert container.image == "registry.example/dlrm_exp:1"
    assert container.resources.limits["nvidia.com/gpu"] == "8"
    command = " ".join(container.command)
    assert "--nnodes 2 --nproc_per_node 8" in command and "-m dlrm_exp sharding=rowwise" in command


def _submitit_rank0_task(launcher: subprocess.Popen, job_dir: Path):
    """The global-rank-0 task process that submitit's local executor started under
    ``launcher`` for the job of ``job_dir`` (the task holding its log file open), or None."""
    import psutil

    for proc in psutil.Process(launcher.pid).children(recursive=True):
        try:
            if proc.environ().get("SUBMITIT_LOCAL_GLOBALID") != "0":
                continue
            if any(Path(f.path).parent == job_dir for f in proc.open_files()):
                return proc
        except psutil.Error:
            continue
    return None


def test_submitit_local_sweep_runs_two_task_jobs_and_requeues_a_preempted_one(tmp_path):
    """``-m hydra/launcher=local``: both jobs run through submitit's local executor, each as 2
    tasks that form its process group from submitit's environment. Once job 0 has a
    checkpoint, its rank-0 task gets submitit's preemption signal (USR2, what Slurm sends
    before a timeout): submitit calls the launcher's checkpoint hook, requeues the job, and
    the requeued job resumes from its newest checkpoint (``train.resume`` is ``auto`` in a
    submitit task) and completes; job 1 runs through once; the summary is written."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    import signal
    import time

    from dlrm_exp.loop.checkpoint import complete_checkpoints

    args = [
        "-m",
        "hydra/launcher=local",
        "sharding=tablewise,rowwise",
        "hardware.nproc_per_node=2",
        "data.num_train_samples=16384",
        "data.num_val_samples=2048",
        "data.num_test_samples=2048",
        "train.batch_size=128",
        "train.max_steps=40",
        "train.checkpoint_every_n_steps=8",
        "train.progress_bar=false",
        f"hydra.sweep.dir={tmp_path}",
    ]
    launcher = subprocess.Popen(
        [sys.executable, "-m", "dlrm_exp", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        task = None
        while not task:
            assert launcher.poll() is None and time.monotonic() < deadline, "no checkpoint"
            task = complete_checkpoints(tmp_path / "0") and _submitit_rank0_task(
                launcher, tmp_path / "0"
            )
            time.sleep(0.2)
        task.send_signal(signal.SIGUSR2)
        _out, err = launcher.communicate(timeout=300)
    finally:
        launcher.kill()
    assert launcher.returncode == 0, err[-3000:]
    assert (tmp_path / "summary.csv").is_file()
    rank0_logs = [p.read_text() for p in (tmp_path / ".submitit").rglob("*_0_log.out")]
    assert len(rank0_logs) == 2 and sum("Requeued job" in log for log in rank0_logs) == 1
    for job in ("0", "1"):
        metrics = json.loads((tmp_path / job / "metrics.json").read_text())
        assert metrics["status"] == "completed" and metrics["world_size"] == 2
        assert metrics["steps"] == 40
    job_log = "".join(p.read_text() for p in (tmp_path / "0").glob("*.log"))
    assert "resumed from" in job_log and "at step 0" not in job_log
    assert "resumed from" not in "".join(p.read_text() for p in (tmp_path / "1").glob("*.log"))


@pytest.mark.parametrize(
    ("mode", "refusal"),
    [
        ("train", "holds the record of a run that finished (metrics.json), kept"),
        ("evaluate", "holds another run's metrics.json"),
        ("train", "is in use by another run"),
    ],
)
def test_a_submitit_jobs_folder_refusal_reaches_every_task(tmp_path, mode, refusal):
    """Rank 0 checked the run folder before the process group existed: refused (the job
    rerun into its folder, which holds a training record), it returned, and rank 1 waited
    for it in the rendezvous until hardware.collective_timeout_s (600 s by default;
    distributed review, and for evaluate the review of that fix). Now every task raises the
    refusal; so too where another process holds the folder (rank 0 took the folder's lock
    before the group existed: launch review)."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    (tmp_path / "0").mkdir()
    if "in use" in refusal:  # this process holds job 0's folder, as a run there would
        lock = (tmp_path / "0" / ".lock").open("w")
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    else:
        (tmp_path / "0" / "metrics.json").write_text('{"status": "completed"}')
    args = ["-m", "hydra/launcher=local", "hardware.nproc_per_node=2", "train.max_steps=4",
            f"mode={mode}", "hardware.collective_timeout_s=20",
            f"hydra.sweep.dir={tmp_path}"]  # fmt: skip
    if mode == "evaluate":
        args.append(f"checkpoint={tmp_path / 'trained'}")
    result = subprocess.run(
        [sys.executable, "-m", "dlrm_exp", *args], capture_output=True, text=True, timeout=120
    )
    assert "summary.md" in result.stdout, result.stderr[-3000:]  # (its kept record counts)
    task_errors = [p.read_text() for p in (tmp_path / ".submitit").rglob("*_log.err")]
    assert len(task_errors) == 2
    assert all(refusal in e for e in task_errors), task_errors


def test_a_submitit_job_whose_hardware_disagrees_is_refused_with_the_fix(monkeypatch):
    submitit = pytest.importorskip("submitit")
    from conftest import compose_cfg
    from dlrm_exp.distributed.submitit_env import adopt_submitit_environment
    from dlrm_exp.errors import ConfigError

    class TwoTasksOnOneNode:
        num_nodes, num_tasks = 1, 2

    monkeypatch.setattr(submitit, "JobEnvironment", TwoTasksOnOneNode)
    with pytest.raises(ConfigError, match="set hardware.nnodes=1 hardware.nproc_per_node=2"):
        adopt_submitit_environment(compose_cfg([]).hardware)


_SLEEPING_JOB = """
import sys
from dlrm_exp.config import HardwareConfig
from dlrm_exp.distributed.launch import launch_workers
from dlrm_exp.errors import Terminated
from sleeper import sleep
print("launching", flush=True)
try:
    launch_workers(sleep, (120,), HardwareConfig(nproc_per_node=2))
except Terminated as err:
    print(f"terminated by {err.signum}", flush=True)
    sys.exit(3)
"""
#: The workers' function: set up as a training worker, with a (hidden) progress bar.
_SLEEPER = """
import os, pathlib, time
from tqdm import tqdm
from dlrm_exp.distributed.launch import init_worker
def sleep(seconds):
    init_worker(None)
    tqdm(total=1, disable=True)
    pathlib.Path(f"ready_{os.environ['RANK']}").touch()
    time.sleep(seconds)
"""


def test_sigterm_to_a_multi_process_job_ends_it_in_one_line(tmp_path):
    """The elastic agent turns SIGTERM into its own SignalException, which reached the user as
    a raw traceback; it is now ``Terminated`` (the entry point prints one line, exit 143),
    after the agent stopped the workers; without the resource tracker's "leaked semaphore"
    warning, which tqdm's multiprocessing lock in the stopped workers caused (checkpoints
    review)."""
    import signal
    import time

    (tmp_path / "sleeper.py").write_text(_SLEEPER)
    job = subprocess.Popen(
        [sys.executable, "-c", _SLEEPING_JOB], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, cwd=tmp_path,
    )  # fmt: skip
    assert job.stdout.readline().strip() == "launching"
    deadline = time.monotonic() + 120  # both workers made their bar (a fixed 4 s ended
    # before they did, and the test passed without its fix: diff review)
    while len(list(tmp_path.glob("ready_*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    job.send_signal(signal.SIGTERM)
    out, err = job.communicate(timeout=60)
    assert job.returncode == 3, err[-2000:]
    assert out.strip() == f"terminated by {int(signal.SIGTERM)}"
    assert "Traceback" not in err and "leaked semaphore" not in err


def test_a_submitit_task_takes_its_jobs_port_not_an_inherited_master_port(monkeypatch):
    """submitit read an inherited ``MASTER_PORT`` before exporting its own: every job of a
    sweep started from such an environment bound the same port on a shared host."""
    import random

    submitit = pytest.importorskip("submitit")
    helpers = pytest.importorskip("submitit.helpers")

    from conftest import compose_cfg
    from dlrm_exp.distributed.submitit_env import adopt_submitit_environment

    class Task:
        num_nodes, num_tasks, global_rank, local_rank = 1, 2, 1, 1
        hostnames, job_id = ["node0"], "4242"

    monkeypatch.setattr(submitit, "JobEnvironment", Task)
    monkeypatch.setattr(helpers, "JobEnvironment", Task)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR"):
        monkeypatch.setenv(name, "")  # so that the undo removes what the export sets: a
        monkeypatch.delenv(name)  # leaked LOCAL_WORLD_SIZE=2 broke later plans in the worker
    monkeypatch.setenv("MASTER_PORT", "29500")
    adopt_submitit_environment(compose_cfg(["hardware.nproc_per_node=2"]).hardware)
    port = random.Random("4242").randint(20000, 60000)
    assert (os.environ["MASTER_PORT"], os.environ["RANK"]) == (str(port), "1")
