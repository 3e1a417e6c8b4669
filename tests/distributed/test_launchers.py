"""The engines clusters use: TorchX (local run, Slurm and Kubernetes requests) and multi-node
torchrun, each reusing ``python -m dlrm_exp`` and its run folder."""

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


def test_two_torchrun_nodes_on_localhost_train_one_job(tmp_path):
    """``torchrun --nnodes 2 --node_rank {0,1} --nproc_per_node 1 --rdzv-backend c10d``: two
    "hosts" on this machine form one 2-rank job; global rank 0 writes the one run folder."""
    endpoint = f"localhost:{_free_port()}"
    run_dir = tmp_path / "run"
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
                f"hydra.run.dir={run_dir}",
            ],
            cwd=tmp_path,
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


def test_torchx_builtin_ddp_runs_locally_and_leaves_one_run_folder(tmp_path):
    """The README's command: ``torchx run -s local_cwd dist.ddp -j 1x2 -m dlrm_exp -- ...``."""
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
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


def _ddp(*overrides: str, **kwargs):
    ddp = pytest.importorskip("torchx.components.dist").ddp
    return ddp(*overrides, m="dlrm_exp", j="2x8", gpu=8, **kwargs)


def test_torchx_renders_a_slurm_job_of_2_nodes_x_8_gpus():
    from torchx.runner import get_runner

    app = _ddp("sharding=rowwise", "hardware=a100_40gb_x8", "hardware.nnodes=2")
    request = str(get_runner().dryrun(app, "slurm", cfg={"partition": "gpu"}).request)
    groups = [line for line in request.splitlines() if line.startswith("#SBATCH --job-name")]
    assert len(groups) == 2  # one heterogeneous group per node
    assert all("--partition=gpu" in g and "--gpus-per-task=8" in g for g in groups)
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


def test_submitit_local_sweep_runs_each_job_as_two_tasks(tmp_path):
    """``-m hydra/launcher=local``: both jobs run through submitit's local executor, each as 2
    tasks that form its process group from submitit's environment; the summary is written."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    from conftest import run_cli

    result = run_cli(
        [
            "-m",
            "hydra/launcher=local",
            "sharding=tablewise,rowwise",
            "hardware.nproc_per_node=2",
            "train.max_steps=20",
            "data.num_train_samples=16384",
            "train.progress_bar=false",
            f"hydra.sweep.dir={tmp_path}",
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "summary.csv").is_file() and list((tmp_path / ".submitit").iterdir())
    for job in ("0", "1"):
        metrics = json.loads((tmp_path / job / "metrics.json").read_text())
        assert metrics["status"] == "completed" and metrics["world_size"] == 2


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
