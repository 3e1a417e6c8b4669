"""``experiment=`` presets: every one composes, cites its source, and says what it reproduces."""

import json
import re

import pytest

from conftest import REPO, compose_cfg
from dlrm_exp.config import (
    ComputeDevice,
    CriteoMultiHotDataConfig,
    CriteoNpyDataConfig,
    DenseOptimizer,
    InteractionType,
    SparseOptimizer,
)
from dlrm_exp.errors import ConfigError

PRESETS = sorted(p.stem for p in (REPO / "conf" / "experiment").glob("*.yaml"))


def test_the_issue_presets_exist():
    assert set(PRESETS) >= {
        "golden",
        "quickstart",
        "dlrm_main_mlperf",
        "dlrm_main_mlperf_x2",
        "dlrm_main_full_size",
        "mlperf_dcnv2",
        "precision_sweep",
        "fast",
    }


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_composes_as_a_global_package_citing_its_source(name):
    text = (REPO / "conf" / "experiment" / f"{name}.yaml").read_text()
    assert text.startswith("# @package _global_\n")
    assert re.search(r"torchrec|dlrm|MLPerf|MLCommons", text.split("defaults:")[0])
    compose_cfg([f"experiment={name}", "mode=plan"])


@pytest.mark.parametrize(
    ("name", "gpus", "batch", "rows"),
    [
        ("dlrm_main_mlperf", 8, 8192, 204_184_588),
        ("dlrm_main_mlperf_x2", 16, 4096, 364_975_536),
        ("dlrm_main_full_size", 80, 819, 882_774_559),
    ],
)
def test_dlrm_main_rows_flag_for_flag(name, gpus, batch, rows):
    cfg = compose_cfg([f"experiment={name}", "mode=plan"])
    assert cfg.hardware.world_size == gpus and cfg.hardware.compute_device is ComputeDevice.cuda
    assert cfg.train.batch_size == batch and cfg.train.epochs == 1
    assert sum(cfg.model.table_sizes) == rows and cfg.model.embedding_dim == 128
    assert cfg.model.interaction_type is InteractionType.original
    assert cfg.model.dense_arch_layer_sizes == [512, 256, 128]
    assert cfg.model.over_arch_layer_sizes == [1024, 1024, 512, 256, 1]
    opt = cfg.optimizer
    assert opt.sparse_optimizer is SparseOptimizer.sgd and opt.dense_optimizer is DenseOptimizer.sgd
    assert opt.learning_rate == opt.dense_learning_rate == 15.0
    assert isinstance(cfg.data, CriteoNpyDataConfig)


def test_dlrm_main_presets_need_their_data_to_train():
    with pytest.raises(ConfigError, match="data=criteo_npy needs data.path="):
        compose_cfg(["experiment=dlrm_main_mlperf"])
    # plan and export read no data: a dlrm_main run is exported with its own preset
    compose_cfg(["experiment=dlrm_main_mlperf", "mode=plan"])
    compose_cfg(["experiment=dlrm_main_mlperf", "mode=export", "checkpoint=run"])
    for preset in ("dlrm_main_mlperf", "dlrm_main_mlperf_x2", "dlrm_main_full_size"):
        # mapped: read whole, every rank would hold all of Criteo 1TB (about 1 TiB)
        assert compose_cfg([f"experiment={preset}", "data.path=days"]).data.mmap_mode


def test_mlperf_dcnv2_recipe():
    cfg = compose_cfg(["experiment=mlperf_dcnv2"])
    assert cfg.model.interaction_type is InteractionType.dcn
    assert isinstance(cfg.data, CriteoMultiHotDataConfig)
    opt = cfg.optimizer
    assert opt.sparse_optimizer is SparseOptimizer.adagrad
    assert opt.dense_optimizer is DenseOptimizer.adagrad
    assert opt.learning_rate == opt.dense_learning_rate == 0.004 and opt.eps == 1e-8
    assert cfg.train.batch_size * cfg.hardware.world_size == 65536
    # on W ranks its per-rank batch gives W x 65,536 a step: said, with the batch to set
    # (presets review)
    assert cfg.train.global_batch_size == 65536 and cfg.train.global_batch_note(1) is None
    assert cfg.train.global_batch_note(8).endswith(
        "on 8 rank(s) gives 524,288: set train.batch_size=8192, or "
        "train.global_batch_size=null to train as asked"
    )
    assert "(3 does not)" in cfg.train.global_batch_note(3)
    assert cfg.train.val_per_epoch == 20 and cfg.train.target_auroc == 0.80275
    # the uncapped lookup tables (22.27 GiB) fit its limit; real days are mapped, as there
    assert cfg.data.max_lookup_gib >= 22.27 and cfg.data.mmap_mode


@pytest.mark.slow
def test_dlrm_main_mlperf_plans_and_shows_its_flags(tmp_path, cli_here):
    """The acceptance commands: ``mode=plan`` prints 97.36 GiB (48.68 GiB with fp16 tables),
    ``--cfg job`` the flags."""
    plan = cli_here(["experiment=dlrm_main_mlperf", "mode=plan", f"hydra.run.dir={tmp_path}"])
    assert plan.returncode == 0, plan.stderr[-2000:]
    assert "97.36 GiB fp32 weights + 0.00 GiB optimizer state = 97.36 GiB" in plan.stdout
    half = cli_here(
        [
            "experiment=dlrm_main_mlperf",
            "model.embedding_data_type=fp16",
            "mode=plan",
            f"hydra.run.dir={tmp_path / 'fp16'}",
        ]
    )
    assert half.returncode == 0, half.stderr[-2000:]
    assert "48.68 GiB fp16 weights + 0.00 GiB optimizer state = 48.68 GiB" in half.stdout
    tables = json.loads((tmp_path / "fp16" / "plan.json").read_text())["tables"]
    assert {t["data_type"] for t in tables.values()} == {"fp16"}
    shown = cli_here(["experiment=dlrm_main_mlperf", "--cfg", "job"])
    assert shown.returncode == 0, shown.stderr[-2000:]
    for line in (
        "batch_size: 8192",
        "embedding_dim: 128",
        "sparse_optimizer: sgd",
        "learning_rate: 15.0",
        "dense_learning_rate: 15.0",
    ):
        assert re.search(rf"^\s+{re.escape(line)}$", shown.stdout, re.M), line


def test_mlperf_dcnv2_on_two_ranks_is_warned_of_its_global_batch_and_planned_for_it(
    tmp_path, cli_here
):
    """On 2 ranks the preset's per-rank 65,536 trained 131,072 a step without a word, and the
    plan's "more ranks" advice kept that doubled batch (presets review, diff review)."""
    done = cli_here(["experiment=mlperf_dcnv2", "mode=plan", "hardware.nproc_per_node=2",
                     f"hydra.run.dir={tmp_path}"])  # fmt: skip
    said = done.stdout + done.stderr  # (the warning is logged, the refusal is the error)
    assert "train.global_batch_size=65536 (the recipe's samples a step), but train.batch_" in said
    assert "set train.batch_size=32768" in said
    assert "gives a global batch of 65520, near the recipe's (train.global_batch_size) 65536" in (
        done.stderr
    )
