"""Sharded DCP checkpoints: atomic saves, bitwise resume, kill -9 then resume, bad checkpoints,
non-finite losses, determinism."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import REPO, compose_cfg, run_cli
from dlrm_exp.checkpoint import CheckpointError, complete_checkpoints
from dlrm_exp.errors import ConfigError
from dlrm_exp.run import run_train

SMALL = [
    "data.num_train_samples=4096",
    "data.num_val_samples=1024",
    "data.num_test_samples=1024",
    "train.batch_size=128",
    "train.progress_bar=false",
    "train.val_every_n_steps=16",
    "train.checkpoint_every_n_steps=8",
]
QUALITY = ("val", "test", "val_history", "final_train_loss", "steps", "train_samples")


def _same_results(a: dict, b: dict) -> None:
    for key in QUALITY:
        assert a[key] == b[key], key


def test_resume_continues_bitwise_and_prunes(tmp_path):
    full = run_train(compose_cfg([*SMALL, "train.keep_last_checkpoints=2"]), tmp_path / "a", {})
    kept = complete_checkpoints(tmp_path / "a")
    assert [p.name for p in kept] == ["step_24", "step_32"]  # 32 steps; older ones pruned
    state = json.loads((kept[0] / "trainer_state.json").read_text())
    assert state["step"] == 24 and state["tables"]["t_cat_0"] == [1000, 16]
    # a later run folder holding only step 24, plus a save that never finished
    resumed_dir = tmp_path / "b" / "checkpoints"
    resumed_dir.mkdir(parents=True)
    shutil.copytree(kept[0], resumed_dir / "step_24")
    (resumed_dir / "step_32.partial").mkdir()
    cfg = compose_cfg([*SMALL, "train.resume=auto"])
    _same_results(run_train(cfg, tmp_path / "b", {}), full)


def test_two_identical_runs_give_identical_metrics(tmp_path):
    first = run_train(compose_cfg(SMALL), tmp_path / "a", {})
    second = run_train(compose_cfg(SMALL), tmp_path / "b", {})
    _same_results(first, second)


def test_resume_auto_without_checkpoints_starts_fresh(tmp_path):
    cfg = compose_cfg([*SMALL, "train.max_steps=8", "train.resume=auto"])
    assert run_train(cfg, tmp_path, {})["steps"] == 8


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("saved")
    run_train(compose_cfg([*SMALL, "train.max_steps=8"]), run_dir, {})
    return run_dir / "checkpoints" / "step_8"


def test_a_checkpoint_of_another_model_shape_is_refused(saved, tmp_path):
    cfg = compose_cfg([*SMALL, "model.num_embeddings_cap=500", f"train.resume={saved}"])
    with pytest.raises(CheckpointError, match=r"another model shape \(t_cat_0: checkpoint"):
        run_train(cfg, tmp_path, {})


def test_a_truncated_checkpoint_is_refused(saved, tmp_path):
    broken = tmp_path / "step_8"
    shutil.copytree(saved, broken)
    data = next(broken.glob("*.distcp"))
    data.write_bytes(data.read_bytes()[:100])
    cfg = compose_cfg([*SMALL, f"train.resume={broken}"])
    with pytest.raises(CheckpointError, match="cannot be read"):
        run_train(cfg, tmp_path / "run", {})


@pytest.mark.parametrize("what", ["missing", "not_a_checkpoint", "partial"])
def test_a_folder_that_is_not_a_checkpoint_is_refused(tmp_path, what):
    folder = tmp_path / "step_8"
    if what != "missing":
        folder.mkdir()
        if what == "partial":
            (folder / ".metadata").write_bytes(b"")
    cfg = compose_cfg([*SMALL, f"train.resume={folder}"])
    with pytest.raises(CheckpointError, match="no checkpoint folder|not a complete checkpoint"):
        run_train(cfg, tmp_path / "run", {})


def test_a_non_finite_loss_stops_the_run_naming_the_step(tmp_path):
    result = run_cli(
        [
            *SMALL,
            "optimizer=sgd",
            "optimizer.dense_learning_rate=1e30",
            "train.checkpoint_every_n_steps=1",
            f"hydra.run.dir={tmp_path}",
        ]
    )
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: training loss is ") and " at step " in last
    assert "Traceback" not in result.stderr
    assert complete_checkpoints(tmp_path)  # the checkpoints before the bad step are kept
    assert not (tmp_path / "metrics.json").exists()


def test_an_unwritable_run_folder_is_refused_at_start():
    with pytest.raises(ConfigError, match="cannot write the run folder /proc/dlrm_exp_run"):
        run_train(compose_cfg(SMALL), Path("/proc/dlrm_exp_run"), {})


@pytest.mark.slow
def test_kill_9_then_resume_matches_an_uninterrupted_run(tmp_path):
    """One worker of a 2-process job is killed with SIGKILL after the first checkpoint: the
    job ends within 60 s, non-zero, naming the signal; the newest complete checkpoint is
    intact and train.resume=auto finishes with the uninterrupted run's metrics."""
    job_args = [
        "hardware.nproc_per_node=2",
        "sharding=rowwise",
        "data.num_train_samples=16384",
        "data.num_val_samples=1024",
        "data.num_test_samples=1024",
        "train.batch_size=128",
        "train.progress_bar=false",
        "train.checkpoint_every_n_steps=8",
        "train.keep_last_checkpoints=2",
    ]
    killed_dir = tmp_path / "killed"
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    job = subprocess.Popen(
        [sys.executable, "-m", "dlrm_exp", *job_args, f"hydra.run.dir={killed_dir}"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 180
        while not complete_checkpoints(killed_dir):
            assert job.poll() is None and time.monotonic() < deadline, "no checkpoint written"
            time.sleep(0.1)
        workers = [
            p
            for p in psutil.Process(job.pid).children(recursive=True)
            if "spawn_main" in " ".join(p.cmdline())
        ]
        assert len(workers) == 2
        killed_at = time.monotonic()
        os.kill(workers[1].pid, signal.SIGKILL)
        _, stderr = job.communicate(timeout=60)
        assert time.monotonic() - killed_at < 60
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode != 0
    assert "killed by signal SIGKILL" in stderr
    assert not (killed_dir / "metrics.json").exists()
    assert complete_checkpoints(killed_dir)[-1].name.startswith("step_")

    resumed = run_train(compose_cfg([*job_args, "train.resume=auto"]), killed_dir, {})
    uninterrupted = run_train(compose_cfg(job_args), tmp_path / "whole", {})
    _same_results(resumed, uninterrupted)
    assert json.loads((killed_dir / "metrics.json").read_text())["val"] == resumed["val"]
