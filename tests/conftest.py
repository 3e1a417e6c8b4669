"""Shared helpers: compose the real config with Hydra's compose API, run the CLI."""

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from dlrm_exp.config import Config, conf_dir, register_configs

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
def small_synthetic() -> list:
    """Overrides for a quick synthetic run."""
    return [
        "data.num_train_samples=8192",
        "data.num_val_samples=2048",
        "data.num_test_samples=2048",
        "train.batch_size=256",
        "train.progress_bar=false",
    ]


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
