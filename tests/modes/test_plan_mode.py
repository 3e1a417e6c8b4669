"""mode=plan for hardware that is not here, the published table sizes, and plans as files."""

import json
import re
from pathlib import Path

import pytest
import torch

from conftest import compose_cfg, two_process_job
from dlrm_exp.errors import ConfigError, InsufficientMemoryError
from dlrm_exp.modes.plan import run_plan, summary
from dlrm_exp.modes.train import run_train

PRESETS = ["a100_40gb_x8", "a100_80gb_x8", "h100_80gb_x8", "h200_141gb_x8"]
HBM_GIB = {"a100_40gb_x8": 40, "a100_80gb_x8": 80, "h100_80gb_x8": 80, "h200_141gb_x8": 140}


@pytest.mark.slow
@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_plans_the_mlperf_model(tmp_path, preset):
    record = run_plan(compose_cfg(["mode=plan", f"hardware={preset}", "model=mlperf"]), tmp_path)
    assert record["hardware"]["world_size"] == 8
    assert record["hardware"]["hbm_cap_gib_per_rank"] == HBM_GIB[preset]
    assert round(record["storage"]["embedding_weights_gib"], 2) == 97.36
    estimates = record["estimates_per_rank"]
    assert len(estimates) == 8 and all(e["total_ms"] > 0 for e in estimates)
    assert max(e["hbm_bytes"] for e in estimates) <= HBM_GIB[preset] * 2**30
    assert sum(e["hbm_bytes"] for e in estimates) > 97 * 2**30  # tables + optimizer state
    assert len(record["tables"]) == 26
    assert json.loads((tmp_path / "plan.json").read_text())["tables"] == record["tables"]
    text = summary(record, tmp_path)
    assert "total embedding storage: 97.36 GiB fp32 weights" in text
    assert "imbalance (max / mean over ranks)" in text


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model", "nnodes", "total"), [("mlperf_x2", 2, 174.03), ("criteo_full", 10, 420.94)]
)
def test_published_configurations_plan_on_several_hosts(tmp_path, model, nnodes, total):
    cfg = compose_cfg(
        ["mode=plan", "hardware=a100_40gb_x8", f"hardware.nnodes={nnodes}", f"model={model}"]
    )
    record = run_plan(cfg, tmp_path)
    assert record["hardware"]["world_size"] == 8 * nnodes
    assert round(record["storage"]["embedding_weights_gib"], 2) == total
    # the largest Criteo table (292,775,614 x 128, 140 GiB) cannot sit on one 40 GiB device
    assert max(e["hbm_bytes"] for e in record["estimates_per_rank"]) <= 40 * 2**30


def test_an_impossible_plan_is_explained_with_numbers(tmp_path):
    cfg = compose_cfg(
        ["mode=plan", "hardware=a100_40gb_x8", "hardware.nproc_per_node=1", "model=criteo_full"]
    )
    with pytest.raises(InsufficientMemoryError) as err:
        run_plan(cfg, tmp_path)
    message = str(err.value)
    assert "needed:  420.94 GiB fp32 weights" in message
    assert "offered: 40.00 GiB HBM on 1 rank(s)" in message and "hardware.hbm_cap" in message
    assert "at least 13 ranks of 40.00 GiB" in message
    assert not (tmp_path / "plan.json").exists()


def test_plan_mode_cli_prints_the_plan(tmp_path, cli_here):
    result = cli_here(["mode=plan", "hardware=h100_80gb_x8", f"hydra.run.dir={tmp_path}"])
    assert result.returncode == 0, result.stderr[-2000:]
    assert "plan for 8 x cuda rank(s) on 1 host(s), 80 GiB HBM + 256 GiB DDR each" in result.stdout
    assert re.search(r"largest rank: \d+\.\d\d of 80\.00 GiB HBM", result.stdout)
    assert (tmp_path / "plan.txt").is_file()


def test_a_cpu_plan_names_the_ddr_its_tables_use(tmp_path):
    cfg = compose_cfg(["mode=plan", "hardware.ddr_cap=2"])
    assert "largest rank: 0.00 of 2.00 GiB DDR" in summary(run_plan(cfg, tmp_path), tmp_path)


def test_a_gpu_preset_does_not_train_on_this_cpu_machine(tmp_path, cli_here):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = cli_here(["hardware=a100_40gb_x8", f"hydra.run.dir={tmp_path}"])
    assert result.returncode == 1
    assert "use mode=plan" in result.stderr and "Traceback" not in result.stderr


def test_more_processes_than_gpus_is_refused(monkeypatch):
    """Here with a pretended 4-GPU machine (no GPU is needed for the check itself)."""
    from dlrm_exp.distributed.launch import check_devices
    from dlrm_exp.errors import ConfigError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    check_devices(compose_cfg(["hardware=a100_40gb_x8", "hardware.nproc_per_node=4"]).hardware)
    with pytest.raises(ConfigError, match=r"nproc_per_node=8 but this machine has 4 GPU\(s\): set"):
        check_devices(compose_cfg(["hardware=a100_40gb_x8"]).hardware)


def _tiny_plan(tmp_path, *overrides):
    """A 2-rank CPU plan of the tiny model, made in plan mode (no processes)."""
    cfg = compose_cfg(["mode=plan", "hardware.nproc_per_node=2", *overrides])
    run_plan(cfg, tmp_path)
    return tmp_path / "plan.json"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["hardware.nproc_per_node=1"], r"is for 2 ranks, this job has 1"),
        (["model.num_embeddings_cap=500"], r"table t_cat_0 is planned as 1000 x 16"),
        (["model.embedding_dim=8", "model.dense_arch_layer_sizes=[8]"], r"planned as 1000 x 16"),
    ],
)
def test_mismatched_plans_are_refused(tmp_path, overrides, message):
    plan = _tiny_plan(tmp_path, "sharding=rowwise")
    job = ["hardware.nproc_per_node=2", "sharding=from_file", f"sharding.plan_path={plan}"]
    cfg = compose_cfg([*job, *overrides])
    with pytest.raises(ConfigError, match=message):
        run_train(cfg, tmp_path / "run", {})
    assert not (tmp_path / "run" / "metrics.json").exists()


def test_a_plan_file_that_does_not_fit_this_hardware_is_refused(tmp_path):
    """A plan is made for some hardware: read under smaller ranks it is refused before
    anything is allocated, naming the rank and both sizes."""
    plan = _tiny_plan(tmp_path, "sharding=rowwise")
    job = ["hardware.nproc_per_node=2", "sharding=from_file", f"sharding.plan_path={plan}"]
    small = compose_cfg([*job, "hardware.ddr_cap=0.0005"])  # 0.5 MiB; a rank holds 0.8 MiB
    with pytest.raises(InsufficientMemoryError, match=r"rank \d holds 0.00 GiB of tables .* more"):
        run_train(small, tmp_path / "run", {})
    assert not (tmp_path / "run" / "metrics.json").exists()


def test_a_file_that_is_not_a_plan_is_refused(tmp_path):
    bogus = tmp_path / "plan.json"
    bogus.write_text('{"tables": {}}')
    cfg = compose_cfg(["sharding=from_file", f"sharding.plan_path={bogus}"])
    with pytest.raises(ConfigError, match="is not a dlrm_exp plan.json"):
        run_train(cfg, tmp_path / "run", {})


def _saved_plan(root: Path) -> list[str]:
    return ["sharding=from_file", f"sharding.plan_path={_tiny_plan(root / 'planned')}"]


#: A 4-step 2-process run fed the plan ``mode=plan`` saved (trained with the suite's other
#: 2-process jobs).
FROM_FILE = two_process_job(
    "plan-from-file",
    [
        "data.num_train_samples=4096",
        "data.num_val_samples=1024",
        "data.num_test_samples=1024",
        "train.batch_size=128",
        "train.max_steps=4",
    ],
    _saved_plan,
)


@pytest.mark.slow
def test_a_saved_plan_is_reused_exactly_by_a_two_process_run(two_process_runs):
    """A 2-rank CPU plan (``auto``: TorchRec picks table_row_wise here) saved by mode=plan,
    fed to a 2-process run with sharding=from_file: the run's plan.json is the same plan.
    (tests/test_multiprocess.py checks that a run's plan.json describes the plan it ran.)"""
    run = two_process_runs[FROM_FILE]
    again = json.loads((run.run_dir / "plan.json").read_text())
    planned = json.loads(Path(run.cfg.sharding.plan_path).read_text())
    assert run.metrics.steps == 4
    assert again["tables"] == planned["tables"] and again["world_size"] == 2
    assert {t["sharding_type"] for t in again["tables"].values()} != {"table_wise"}
