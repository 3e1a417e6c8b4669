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
from dlrm_exp.planning.storage import GIB

PRESETS = ["a100_40gb_x8", "a100_80gb_x8", "h100_80gb_x8", "h200_141gb_x8"]
HBM_GIB = {"a100_40gb_x8": 40, "a100_80gb_x8": 80, "h100_80gb_x8": 79, "h200_141gb_x8": 140}


@pytest.mark.slow
@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_plans_the_mlperf_model(tmp_path, preset):
    record = run_plan(compose_cfg(["mode=plan", f"hardware={preset}", "model=mlperf"]), tmp_path)
    assert record["world_size"] == 8 and record["local_world_size"] == 8
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
    assert record["world_size"] == 8 * nnodes
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
    assert (
        "plan for 8 x cuda rank(s) on 1 host(s), 79.00 GiB HBM + 256.00 GiB DDR each"
        in result.stdout
    )
    assert re.search(r"largest rank: \d+\.\d\d( MiB)? of 79\.00 GiB HBM", result.stdout)
    assert (tmp_path / "plan.txt").is_file()


def test_a_cpu_plan_names_the_ddr_its_tables_use(tmp_path):
    cfg = compose_cfg(["mode=plan", "hardware.ddr_cap=2"])
    # a small model's MiB (it read 0.00 GiB everywhere: planning review)
    text = summary(run_plan(cfg, tmp_path), tmp_path)
    assert re.search(r"largest rank: \d\.\d\d MiB of 2\.00 GiB DDR", text)
    assert re.search(r"total embedding storage: \d\.\d\d MiB fp32 weights \+ ", text)
    assert "\nrank   DDR MiB " in text
    # one threshold for the table and the lines (a 50 MiB plan's table said MiB, its lines
    # 0.05 GiB: re-read)
    from dlrm_exp.modes.plan import _gib

    assert (_gib(0.05), _gib(0.1), _gib(0.05, bare=True)) == ("51.20 MiB", "0.10 GiB", "51.20 MiB")
    # data_parallel tables are held whole by every rank: the total says so
    dp = ["mode=plan", "hardware.ddr_cap=2", "hardware.nproc_per_node=2", "sharding=dataparallel"]
    record = run_plan(compose_cfg(dp), tmp_path)
    storage = record["storage"]
    assert storage["data_parallel_gib"] == storage["total_gib"] > 0
    assert storage["held_on_all_ranks_gib"] == 2 * storage["total_gib"]
    text = summary(record, tmp_path)
    assert "are data_parallel tables, held whole by each of the 2 ranks" in text
    # their gradients (as large as their weights) are in the total and the line
    assert storage["data_parallel_gradients_gib"] == storage["embedding_weights_gib"]
    assert "iB data_parallel gradients + " in text  # (GiB or MiB)
    # the same plan from its file: the same storage (the config alone showed no replica)
    (tmp_path / "dp.json").write_bytes((tmp_path / "plan.json").read_bytes())
    from_file = [*dp[:3], "sharding=from_file", f"sharding.plan_path={tmp_path / 'dp.json'}"]
    again = run_plan(compose_cfg(from_file), tmp_path)
    assert again["storage"] == storage
    # and what each rank holds, as the refusal of a replay counts it (nothing per rank was
    # printed, plan.json lost its estimates: review)
    held = again["held_per_rank"]["ddr"]
    assert sum(held) / GIB == pytest.approx(storage["held_on_all_ranks_gib"]) and held[0] == held[1]
    replayed = summary(again, tmp_path)
    largest = f"largest rank: {held[0] / 2**20:.2f} MiB of 2.00 GiB DDR on rank 0, of which the "
    assert largest in replayed
    assert "no perf estimate" in replayed and "HBM" not in replayed  # (a CPU's: diff review)
    assert "imbalance (max / mean over ranks): DDR 1.00\n" in replayed
    record = run_plan(compose_cfg([*dp[:3], "sharding=rowwise"]), tmp_path)
    assert "held_on_all_ranks_gib" not in record["storage"]


def test_a_gpu_preset_does_not_train_on_this_cpu_machine(tmp_path, cli_here):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = cli_here(["hardware=a100_40gb_x8", f"hydra.run.dir={tmp_path}"])
    assert result.returncode == 1
    assert "use mode=plan" in result.stderr and "Traceback" not in result.stderr


def test_more_processes_than_gpus_is_refused(monkeypatch):
    """Here with a pretended 4-GPU machine (no GPU is needed for the check itself)."""
    import fbgemm_gpu

    from dlrm_exp.distributed.launch import check_devices
    from dlrm_exp.errors import ConfigError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(fbgemm_gpu, "__variant__", "cuda", raising=False)  # (here: cpu)
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    check_devices(compose_cfg(["hardware=a100_40gb_x8", "hardware.nproc_per_node=4"]).hardware)
    with pytest.raises(ConfigError, match=r"nproc_per_node=8 but this machine has 4 GPU\(s\): set"):
        check_devices(compose_cfg(["hardware=a100_40gb_x8"]).hardware)


def test_a_gpu_job_names_what_the_environment_lacks(monkeypatch):
    """ "This machine has none" was said whatever the cause (GPU review): a CPU build of torch,
    or FBGEMM's CPU build beside a CUDA torch (here pretended: no GPU is needed)."""
    import fbgemm_gpu

    from dlrm_exp.distributed.launch import check_devices
    from dlrm_exp.errors import ConfigError

    gpu = compose_cfg(["hardware=a100_40gb_x8", "hardware.nproc_per_node=1"]).hardware
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(ConfigError, match=r"this torch \(.*\) is built without CUDA: install a"):
        check_devices(gpu)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    with pytest.raises(ConfigError, match=r"this machine has none: use mode=plan"):
        check_devices(gpu)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(fbgemm_gpu, "__variant__", "cpu", raising=False)
    with pytest.raises(ConfigError, match=r"its CPU build \(fbgemm-gpu-cpu\) is installed: pip"):
        check_devices(gpu)
    monkeypatch.setattr(fbgemm_gpu, "__variant__", "cuda")
    check_devices(gpu)


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


def test_a_table_row_wise_plan_for_other_ranks_per_host_is_refused(tmp_path):
    """TorchRec cuts table-row-wise and grid shards per host: a plan for 1 rank per host
    replayed on 2 was accepted and failed with an IndexError inside TorchRec."""
    plan = _tiny_plan(tmp_path, "sharding=tablerowwise", "hardware.local_world_size=1")
    job = ["mode=plan", "hardware.nproc_per_node=2", "sharding=from_file",
           f"sharding.plan_path={plan}"]  # fmt: skip
    refused = r"is for 1 rank\(s\) per host, this job has 2: its t_cat_0, t_cat_1, t_cat_10, "
    with pytest.raises(ConfigError, match=refused + r"\.\.\. are cut per host"):
        run_plan(compose_cfg(job), tmp_path / "again")
    run_plan(compose_cfg([*job, "hardware.local_world_size=1"]), tmp_path / "same")
    # a plan.json written before local_world_size joined the plan record kept it in hardware
    record = json.loads(plan.read_text())
    record["hardware"]["local_world_size"] = record.pop("local_world_size")
    plan.write_text(json.dumps(record))
    with pytest.raises(ConfigError, match=refused):
        run_plan(compose_cfg(job), tmp_path / "older")


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


def _edit_first_table(entry: dict, case: str) -> None:
    """Break table t_cat_0's entry of a row-wise plan the way ``case`` says."""
    if case == "module":
        entry["module"] = "sparse_arch.embedding_bag_collection"
    elif case == "type":
        entry["sharding_type"] = "foo_wise"
    elif case == "uvm":
        entry["compute_kernel"] = "fused_uvm_caching"
    elif case == "dp_fused":
        entry["sharding_type"] = "data_parallel"
    elif case == "rank":
        entry["shards"][1]["rank"] = 5
    elif case == "overlap":
        entry["shards"][1]["offsets"] = [400, 0]
    elif case == "outside":
        entry["shards"][1]["sizes"] = [900, 16]
    elif case == "missing":
        del entry["module"]
    elif case == "null_shards":  # a raw TypeError traceback (review)
        entry["shards"] = None
    elif case == "text_rank":
        entry["ranks"] = ["0", 1]
    elif case == "data_type":
        entry["data_type"] = "fp99"


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("module", r"t_cat_0 is planned in module 'sparse_arch.embedding_bag_collection', this "
         r"model holds it in 'model.sparse_arch.embedding_bag_collection'"),
        ("type", r"t_cat_0 is planned foo_wise, which this job cannot run on cpu; offered: "
         r"data_parallel, table_wise, column_wise, table_column_wise, row_wise"),
        ("uvm", r"row_wise with compute kernel fused_uvm_caching, which this job cannot run on "
         r"cpu; offered with row_wise: fused"),
        ("dp_fused", r"data_parallel with compute kernel fused, .* offered with data_parallel: "
         r"dense"),
        ("rank", r"a shard at offsets \[500, 0\] of sizes \[500, 16\] on rank 5, outside"),
        ("overlap", r"shards of table t_cat_0 overlap \(at offsets \[0, 0\] and \[400, 0\]\)"),
        ("outside", r"a shard at offsets \[500, 0\] of sizes \[900, 16\] on rank 1, outside its "
         r"1000 x 16"),
        ("missing", r"table t_cat_0 lacks \['module'\]: not a dlrm_exp plan.json"),
        ("null_shards", r"t_cat_0 has ranks \[0, 1\] and shards None: lists \(of rank"),
        ("text_rank", r"t_cat_0 has ranks \['0', 1\] and shards .*: lists \(of rank"),
        ("data_type", r"t_cat_0 has data_type 'fp99': one of fp32, fp16 in a dlrm_exp plan"),
    ],
)  # fmt: skip
def test_a_plan_file_the_job_cannot_run_is_refused_naming_the_table(tmp_path, case, message):
    """A plan file is checked against what this job runs before TorchRec sees it: a table of
    another module would stay unsharded while every record said row_wise; an unknown type, a
    kernel this device lacks or a shard off the table failed deep inside sharding."""
    plan = json.loads(_tiny_plan(tmp_path, "sharding=rowwise").read_text())
    _edit_first_table(plan["tables"]["t_cat_0"], case)
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(plan))
    job = ["hardware.nproc_per_node=2", "sharding=from_file", f"sharding.plan_path={edited}"]
    with pytest.raises(ConfigError, match=message):
        run_plan(compose_cfg(["mode=plan", *job]), tmp_path / "again")


@pytest.mark.parametrize("sharding", ["rowwise", "tablerowwise", "grid"])
def test_a_plan_with_more_ranks_than_a_table_has_rows_is_replayed(tmp_path, sharding):
    """TorchRec gives the ranks beyond a table's rows empty shards (t_cat_5 has 3 rows): they
    are part of the plan, not outside the table."""
    four = ["mode=plan", "hardware.nproc_per_node=4"]
    planned = run_plan(compose_cfg([*four, f"sharding={sharding}"]), tmp_path / "planned")
    assert [0, 16] in [s["sizes"] for s in planned["tables"]["t_cat_5"]["shards"]]
    replay = [*four, "sharding=from_file", f"sharding.plan_path={tmp_path / 'planned'}"]
    assert run_plan(compose_cfg(replay), tmp_path / "again")["tables"] == planned["tables"]


def test_a_plan_file_is_checked_against_the_sparse_optimizer(tmp_path):
    """Adam cannot be fused on CPU: a replicated plan (what ``auto`` makes for it) is taken
    from its run folder; a row-wise one is refused, saying why."""
    replicated = _tiny_plan(tmp_path / "dp", "optimizer=adam")
    job = ["mode=plan", "hardware.nproc_per_node=2", "optimizer=adam", "sharding=from_file"]
    record = run_plan(compose_cfg([*job, f"sharding.plan_path={replicated.parent}"]), tmp_path)
    assert {t["sharding_type"] for t in record["tables"].values()} == {"data_parallel"}
    row_wise = _tiny_plan(tmp_path / "rw", "sharding=rowwise")
    with pytest.raises(
        ConfigError,
        match=r"row_wise, which this job cannot run on cpu "
        r"\(optimizer.sparse_optimizer=adam: FBGEMM's cpu kernels cannot fuse it\)",
    ):
        run_plan(compose_cfg([*job, f"sharding.plan_path={row_wise}"]), tmp_path / "again")


def test_a_plan_file_keeps_its_cache_load_factor(tmp_path):
    """``fused_uvm_caching`` tables replay with the HBM cache share they were planned with."""
    gpu = ["mode=plan", "hardware=a100_40gb_x8", "sharding=tablewise"]
    cached = [*gpu, "sharding.compute_kernel=fused_uvm_caching", "sharding.cache_load_factor=0.5"]
    run_plan(compose_cfg(cached), tmp_path / "planned")
    replay = [*gpu[:2], "sharding=from_file", f"sharding.plan_path={tmp_path / 'planned'}"]
    record = run_plan(compose_cfg(replay), tmp_path / "again")
    assert {t["cache_load_factor"] for t in record["tables"].values()} == {0.5}
    with pytest.raises(ConfigError, match=r"takes every table's cache_load_factor from the plan"):
        compose_cfg([*replay, "sharding.cache_load_factor=0.2"])
    # the cache sits in HBM: a plan whose caches exceed this job's HBM is refused (it was
    # counted as 0 bytes of HBM)
    with pytest.raises(InsufficientMemoryError, match=r"rank \d holds 0.00 GiB of tables"):
        run_plan(compose_cfg([*replay, "hardware.hbm_cap=0.00001"]), tmp_path / "small")
    # and the rows themselves sit in host memory: a plan whose rows exceed this job's DDR is
    # refused too (on a GPU only HBM was checked)
    with pytest.raises(InsufficientMemoryError, match=r"of tables and optimizer state in DDR"):
        run_plan(compose_cfg([*replay, "hardware.ddr_cap=0.00001"]), tmp_path / "host")


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
    """A 2-rank CPU plan (``auto``: row_wise, the first of its ties) saved by mode=plan,
    fed to a 2-process run with sharding=from_file: the run's plan.json is the same plan.
    (tests/test_multiprocess.py checks that a run's plan.json describes the plan it ran.)"""
    run = two_process_runs[FROM_FILE]
    again = json.loads((run.run_dir / "plan.json").read_text())
    planned = json.loads(Path(run.cfg.sharding.plan_path).read_text())
    assert run.metrics.steps == 4
    assert again["tables"] == planned["tables"] and again["world_size"] == 2
    assert {t["sharding_type"] for t in again["tables"].values()} == {"row_wise"}


def test_another_modes_run_folder_is_refused_before_hydra_writes(tmp_path, cli_here):
    """``mode=plan hydra.run.dir=<a training run>`` replaced its plan.json and Hydra its
    ``.hydra/config.yaml``; now both stay, and a plan folder takes mode=plan again, but a
    refused one (a bad value) leaves its record as it was."""
    trained = tmp_path / "trained"
    (trained / ".hydra").mkdir(parents=True)
    (trained / ".hydra" / "config.yaml").write_text("mode: train\nseed: 3\n")
    (trained / "plan.json").write_text('{"world_size": 1}')
    before = {
        p: p.read_bytes() for p in (trained / ".hydra" / "config.yaml", trained / "plan.json")
    }
    result = cli_here(["mode=plan", f"hydra.run.dir={trained}"])
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert (
        f"hydra.run.dir={trained} holds a mode=train run, whose records (.hydra/ config, files) "
        "mode=plan would overwrite" in result.stderr
    )
    assert {p: p.read_bytes() for p in before} == before
    shown = cli_here(["mode=plan", f"hydra.run.dir={trained}", "--cfg", "job"])  # writes nothing
    assert shown.returncode == 0 and "mode: plan" in shown.stdout, shown.stderr
    assert {p: p.read_bytes() for p in before} == before
    planned = tmp_path / "planned"
    assert cli_here(["mode=plan", f"hydra.run.dir={planned}"]).returncode == 0
    assert cli_here(["mode=plan", f"hydra.run.dir={planned}"]).returncode == 0  # its own again
    record = {p: p.read_bytes() for p in planned.rglob("*") if p.suffix in (".yaml", ".json")}
    refused = cli_here(["mode=plan", f"hydra.run.dir={planned}", "model.embedding_dim=15"])
    assert refused.returncode == 1 and "model.embedding_dim" in refused.stderr
    # Hydra had written the refused run's .hydra/ over the planned run's record: put back
    assert {p: p.read_bytes() for p in record} == record and len(record) == 4


@pytest.mark.parametrize("mode", ["plan", "export", "preprocess", "schema", "predict"])
def test_one_process_modes_refuse_torchrun(monkeypatch, mode):
    """Every torchrun rank ran them, the ranks other than 0 writing into their working
    directory."""
    from dlrm_exp.config import Mode
    from dlrm_exp.modes import Job, run_mode

    for key, value in (("RANK", "1"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "127.0.0.1"),
                       ("MASTER_PORT", "1")):  # fmt: skip
        monkeypatch.setenv(key, value)
    cfg = compose_cfg(["mode=plan"])
    cfg.mode = Mode(mode)
    refusal = (f"mode={mode} runs in one process, but this job was started as 2 ranks: start it "
               "as one, python -m dlrm_exp, not torchrun")  # fmt: skip
    with pytest.raises(ConfigError, match=refusal):
        run_mode(cfg, Job(Path("/nonexistent")))
    # a submitit task: the launcher's settings are the way out (it said python -m dlrm_exp)
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "slurm")
    with pytest.raises(
        ConfigError, match=r"hydra.launcher.nodes=1 hydra.launcher.tasks_per_node=1"
    ):
        run_mode(cfg, Job(Path("/nonexistent")))


def test_a_one_process_mode_runs_as_the_one_rank_of_a_launcher(monkeypatch, tmp_path):
    """A submitit task of one exports RANK, WORLD_SIZE=1, MASTER_ADDR and MASTER_PORT too."""
    from dlrm_exp.modes import Job, run_mode

    for key, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"),
                       ("MASTER_PORT", "1")):  # fmt: skip
        monkeypatch.setenv(key, value)
    run_mode(compose_cfg(["mode=plan"]), Job(tmp_path))
    assert (tmp_path / "plan.json").is_file()


def test_int8_row_wise_layouts_are_refused_on_nccl_too(tmp_path):
    """The INT8 codec fails for want of a context TorchRec's reduce-scatter never gives it,
    whatever the backend: a GPU job was refused only on gloo and crashed at its first step."""
    cfg = compose_cfg(["mode=plan", "hardware=a100_40gb_x8", "sharding=rowwise", "qcomms=int8"])
    with pytest.raises(ConfigError, match=r"int8 with row_wise sharding is not supported: "
                       r"TorchRec's reduce-scatter gives .* on any backend"):  # fmt: skip
        run_plan(cfg, tmp_path)
    # a row-wise table of a per-table override: named, not sharding=tablewise advised to a
    # command that had it (distributed review)
    mixed = ["mode=plan", "hardware.nproc_per_node=2", "sharding=tablewise", "qcomms=int8",
             "+sharding.per_table_sharding_type.t_cat_0=row_wise"]  # fmt: skip
    named = r"\(row_wise: \+sharding.per_table_sharding_type.t_cat_0\); use qcomms=fp16"
    with pytest.raises(ConfigError, match=named):
        run_plan(compose_cfg(mixed), tmp_path / "mixed")
    # both origins, and every refused type at once (one at a time, and one origin, sent the
    # user back for the next: diff review)
    both = [*mixed[:2], "sharding=rowwise", *mixed[3:], "+sharding.per_table_sharding_type.t_cat_1"
            "=grid_shard"]  # fmt: skip
    with pytest.raises(ConfigError, match=r"int8 with grid_shard and row_wise sharding is not "
                       r"supported: .*\(grid_shard: \+sharding.per_table_sharding_type."
                       r"t_cat_1; row_wise: \+sharding.per_table_sharding_type.t_cat_0; "
                       r"t_cat_10, .* by sharding.sharding_type=row_wise\)"):  # fmt: skip
        run_plan(compose_cfg(both), tmp_path / "both")
    # a managed-collision table is row_wise whatever the settings (it named the group's:
    # re-read)
    managed = ["mode=plan", "hardware.nproc_per_node=2", "sharding=tablewise", "qcomms=int8",
               "data=criteo_tsv", f"data.path={tmp_path / 'x.tsv'}",
               "data.schema.sparse.cat_2.id_policy=managed_collision"]  # fmt: skip
    (tmp_path / "x.tsv").write_text("")
    with pytest.raises(ConfigError, match=r"\(row_wise: t_cat_2 by id_policy=managed_collision"):
        run_plan(compose_cfg(managed), tmp_path / "managed")


@pytest.mark.parametrize("qcomms", ["none", "fp32", "fp16_bf16"])
def test_fp16_tables_plan_the_collectives_of_fp32_outputs(tmp_path, qcomms):
    """The kernels output fp32 whatever the weights' dtype, so the collectives move what fp32
    tables' do (or what the qcomms codecs make of it); the planner's estimates had taken the
    weights' dtype (half) for them."""
    job = ["sharding=rowwise", f"qcomms={qcomms}"]
    plans = {
        dtype: json.loads(
            _tiny_plan(tmp_path / dtype, *job, f"model.embedding_data_type={dtype}").read_text()
        )
        for dtype in ("fp16", "fp32")
    }
    comms = {
        dtype: [(e["fwd_comms_ms"], e["bwd_comms_ms"]) for e in plan["estimates_per_rank"]]
        for dtype, plan in plans.items()
    }
    assert comms["fp16"] == comms["fp32"] and all(f > 0 for f, _ in comms["fp16"])
    weights = {d: p["storage"]["embedding_weights_gib"] for d, p in plans.items()}
    assert weights["fp16"] == pytest.approx(weights["fp32"] / 2)
    # the ranks' memory differs by the weights alone: the output buffers are fp32 in both
    ddr = {d: sum(e["ddr_bytes"] for e in p["estimates_per_rank"]) for d, p in plans.items()}
    assert ddr["fp32"] - ddr["fp16"] == pytest.approx((weights["fp32"] - weights["fp16"]) * GIB)


def test_the_largest_rank_of_a_uvm_plan_names_its_host_memory_too():
    """A UVM plan printed only the HBM (17.49 of 40), not the DDR that bound it (review)."""
    from dlrm_exp.modes.plan import _largest

    gpu = {"hbm_cap_gib_per_rank": 40.0, "ddr_cap_gib_per_rank": 144.0}
    device = {"hbm": [2 * GIB, GIB], "ddr": [0, 0]}
    assert (
        _largest(gpu, device)
        == "2.00 of 40.00 GiB HBM on rank 0, of which the planner gives the tables 34.00"
    )
    uvm = {"hbm": [GIB, 2 * GIB], "ddr": [80 * GIB, 0]}  # (two ranks: each part names its own)
    assert _largest(gpu, uvm) == (
        "2.00 of 40.00 GiB HBM on rank 1, of which the planner gives the tables 34.00; "
        "80.00 of 144.00 GiB DDR on rank 0, of which the planner gives the tables 122.40"
    )
    cpu = {"hbm_cap_gib_per_rank": 0.0, "ddr_cap_gib_per_rank": 2.0}
    assert _largest(cpu, {"hbm": [0], "ddr": [GIB]}).startswith("1.00 of 2.00 GiB DDR, ")


def test_a_rank_holding_only_empty_row_shards_on_cpu_is_refused_at_planning(tmp_path):
    """A 1-row fp16 table row-wise on 2 CPU ranks (beside 25 fp32 ones) passed the plan and
    failed in training in FBGEMM ("weights[0] must be a GPU or MTIA tensor": configuration
    review, reproduced): its group of fp16 tables on rank 1 is one shard of 0 rows."""
    sizes = "[1" + ",100" * 25 + "]"
    job = ["mode=plan", "hardware.nproc_per_node=2", "sharding=rowwise",
           f"model.num_embeddings_per_feature={sizes}"]  # fmt: skip
    fp16 = "+model.embedding_data_type_per_table={t_cat_0: fp16}"
    with pytest.raises(ConfigError, match=r"rank 1 would hold only empty row_wise shards \(0 "
                       r"rows\) of fp16 table\(s\) t_cat_0, .*\+sharding.per_table_sharding_type"
                       r".t_cat_0=table_wise\), or give them at least 2 rows"):  # fmt: skip
        run_plan(compose_cfg([*job, fp16]), tmp_path / "fp16")
    run_plan(compose_cfg(job), tmp_path / "fp32")  # among fp32 tables with rows: it trains
    two = [*job[:3], "model.num_embeddings_per_feature=[1,1" + ",100" * 24 + "]"]
    each = r"\(\+sharding.per_table_sharding_type.t_cat_0=table_wise \+sharding.per_table_"
    with pytest.raises(ConfigError, match=each + r"sharding_type.t_cat_1=table_wise\)"):
        run_plan(compose_cfg([*two, "+model.embedding_data_type_per_table={t_cat_0: fp16, "
                              "t_cat_1: fp16}"]), tmp_path / "two")  # fmt: skip
    whole = "+sharding.per_table_sharding_type.t_cat_0=table_wise"
    run_plan(compose_cfg([*job, fp16, whole]), tmp_path / "whole")  # (trained: 3 steps)


def test_each_memory_kind_has_its_own_unit_in_the_rank_table():
    """One unit for both kinds said 0.05 GiB of HBM beside the largest-rank line's 50.24 MiB
    (diff review): each kind's column takes the unit its largest value is said in."""
    from dlrm_exp.modes.plan import _rank_lines

    times = dict.fromkeys(("fwd_compute_ms", "fwd_comms_ms", "bwd_compute_ms", "bwd_comms_ms",
                           "total_ms"), 1.0)  # fmt: skip
    record = {
        "estimates_per_rank": [{"hbm_bytes": 50 * 2**20, "ddr_bytes": 0.19 * GIB, **times}],
        "imbalance": {"hbm": 1.0, "ddr": 1.0, "perf": 1.0},
        "hardware": {"hbm_cap_gib_per_rank": 80.0, "ddr_cap_gib_per_rank": 144.0},
    }
    head, row, largest, _ = _rank_lines(record)
    assert head.split()[1:5] == ["HBM", "MiB", "DDR", "GiB"]
    assert row.split()[1:3] == ["50.00", "0.19"]
    assert largest.startswith("largest rank: 50.00 MiB of 80.00 GiB HBM, ")


def test_a_native_library_that_does_not_load_is_one_line(monkeypatch, tmp_path):
    """The CUDA fbgemm-gpu beside a CPU torch ended every command in a 13-frame traceback,
    "OSError: libtorch_cuda.so: cannot open shared object file" (install review)."""
    from dlrm_exp import modes
    from dlrm_exp.config import Mode

    (tmp_path / "broken_mode.py").write_text(
        "raise OSError('libtorch_cuda.so: cannot open shared object file: No such file')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(modes.MODES, Mode.plan, "broken_mode")
    with pytest.raises(ConfigError, match=r"FBGEMM / TorchRec do not load against this torch "
                       r"\(.*\): libtorch_cuda.so: cannot open .*; installed: .*torchrec .*: "
                       r"install the set that goes with this torch"):  # fmt: skip
        modes.run_mode(compose_cfg(["mode=plan"]), modes.Job(tmp_path))
