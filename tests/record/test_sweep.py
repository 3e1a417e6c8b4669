"""Multirun: a failing job does not end the sweep, the summary, TensorBoard HParams under
override-named runs, the report command, and a job re-run alone giving the same numbers."""

import csv
import json
import math
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from conftest import REPO, SWEEP_RAN, run_cli, tensorboard_experiment, write_job
from conftest import SWEEP_REFUSED as REFUSED
from conftest import SWEEP_RUNS as RUNS
from conftest import SWEEP_TINY as TINY
from dlrm_exp.record import report
from dlrm_exp.record.compare import config_stats
from dlrm_exp.record.runs import load_runs, parsed_override_values, run_name, swept_keys
from dlrm_exp.record.tracking import Tracker, swept_hparams


def test_run_names_use_the_swept_keys_in_command_order_and_values_as_parsed():
    swept = swept_keys(["sharding=tablewise,rowwise", "qcomms=none,fp16", "seed=3"])
    assert swept == ["sharding", "qcomms"]
    assert run_name(["seed=3", "qcomms=fp16", "sharding=rowwise"], swept) == (
        "sharding=rowwise,qcomms=fp16"
    )
    assert run_name(["seed=3"], []) == "seed=3"
    # a swept path with an interpolation, as the job's overrides hold it: without Hydra's
    # escapes ($\{hydra\:runtime.cwd\} named the run and its TensorBoard folder)
    cwd = ["data.path=${hydra:runtime.cwd}/a.tsv", "seed=3", "note='a b'"]
    assert run_name(cwd, ["data.path"]) == "data.path=${hydra:runtime.cwd}/a.tsv"
    assert run_name(cwd[1:], []) == "seed=3,note='a b'"  # a quoted string as typed
    job = ["seed=3", "hardware.nproc_per_node=2", "sharding=rowwise", "train.lr=0.10"]
    assert parsed_override_values(job, ["sharding", "hardware.nproc_per_node", "train.lr"]) == {
        "sharding": "rowwise",
        "hardware.nproc_per_node": 2,  # what a job's HParams get (typed)
        "train.lr": 0.1,
    }


@pytest.mark.slow
def test_failed_job_is_recorded_and_the_sweep_goes_on(record_sweep):
    sweep_dir, result = record_sweep
    assert result.returncode == 1, result.stderr[-2000:]
    assert f"6 of 12 jobs did not complete: {', '.join(REFUSED)}" in result.stdout
    with open(sweep_dir / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["run"] for r in rows] == RUNS
    assert [r["status"] for r in rows] == ["completed"] * 6 + ["failed"] * 6
    assert "int8 with row_wise sharding is not supported: TorchRec's" in rows[6]["error"]
    assert all(0.5 < float(r["val_auroc"]) < 1 for r in rows[:6])
    # one process: no collective ran, quantized or not (it said FP32: review)
    assert {r["qcomms_ran"] for r in rows[:6]} == {"none"}
    assert [r["sharding_ran"] for r in rows] == ["table_wise"] * 6 + [""] * 6
    assert [r["dense_ran"] for r in rows] == ["fp32"] * 6 + [""] * 6  # (review: JSON only)
    assert [r["substituted"] for r in rows] == ["qcomms: no embedding collective"] * 6 + [""] * 6
    failed = json.loads((sweep_dir / "6" / "metrics.json").read_text())
    assert failed["status"] == "failed" and failed["error_type"] == "ConfigError"
    # its groups as chosen, so a report places its bar (a default group read "?" before)
    assert failed["choices"]["sharding"] == "rowwise" and failed["choices"]["model"] == "tiny"
    table = (sweep_dir / "summary.md").read_text()
    assert f"| {RUNS[3]}{SWEEP_RAN} | completed |" in table and f"| {RUNS[6]} | failed |" in table
    assert "| val AUROC |" in table and table in result.stdout + "\n"


@pytest.mark.slow
def test_tensorboard_runs_are_named_by_overrides_with_readable_hparams(record_sweep):
    sweep_dir, _ = record_sweep
    for name in RUNS[:6]:
        events = EventAccumulator(str(sweep_dir / name))
        events.Reload()
        content = events.PluginTagToContent("hparams")
        start = plugin_data_pb2.HParamsPluginData.FromString(
            content["_hparams_/session_start_info"]
        ).session_start_info
        sharding, lr, _ = (part.split("=")[1] for part in name.split(","))
        assert start.hparams["sharding"].string_value == sharding
        assert start.hparams["qcomms"].string_value == "int8"
        assert start.hparams["learning_rate"].number_value == float(lr)
        assert start.hparams["qcomms_ran"].string_value == "none"
        assert start.hparams["seed"].string_value in ("0", "1", "2")  # (it showed 1.0000)
        assert "sharding_type" not in start.hparams  # the choice says it (it hid sharding)
        assert "_hparams_/experiment" not in content  # TensorBoard infers it over the runs
        assert "val/auroc" in events.Tags()["scalars"]
        assert "summary/fraction_of_matmul_peak" in events.Tags()["scalars"]
        assert "summary/table_bytes_max_rank" in events.Tags()["scalars"]  # (review)
    assert not any((sweep_dir / name).exists() for name in REFUSED)  # refused jobs never trained
    experiment = tensorboard_experiment(sweep_dir)  # what its HParams table shows first
    differing = [info.name for info in experiment.hparam_infos if info.differs]
    assert differing == ["learning_rate", "seed"]  # every row-wise job was refused


@pytest.mark.slow
def test_report_writes_plots_and_the_table(record_sweep, tmp_path, capsys):
    sweep_dir, _ = record_sweep
    assert report.main([str(sweep_dir), "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    for i, name in enumerate(RUNS):
        assert f"| {name}{SWEEP_RAN if i < 6 else ''} |" in printed
    for plot in report.PLOTS:
        if plot == "comm_bytes.png":  # one process per job: nothing sent, nothing drawn
            assert not (tmp_path / plot).exists() and f"(no {plot}: no run sent" in printed
            continue
        png = (tmp_path / plot).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert (tmp_path / "summary.csv").is_file()


def _written_sweep(folder, typed: list[str], jobs: list[tuple[list[str], dict]]):
    """A sweep folder as ``python -m dlrm_exp -m <typed>`` leaves it: one job folder per
    (overrides, metrics.json content)."""
    folder.mkdir()
    (folder / "multirun.yaml").write_text(json.dumps({"hydra": {"overrides": {"task": typed}}}))
    for number, (overrides, metrics) in enumerate(jobs):
        write_job(folder, number, overrides, metrics)
    return folder


def _completed(**extra):
    return {"status": "completed", "val": {"auroc": 0.7}, "samples_per_sec": 1000.0, **extra}


def test_a_plan_sweep_lists_its_jobs_and_succeeds(tmp_path, cli_here):
    """mode=plan writes plan files, no metrics.json: its jobs are not "missing"."""
    sweep = tmp_path / "plans"
    done = cli_here(["-m", "mode=plan", "sharding=rowwise,tablewise", f"hydra.sweep.dir={sweep}"])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "mode=plan: 2 jobs, each one's files in its folder:" in done.stdout
    assert f"- sharding=tablewise: {sweep / '1'}" in done.stdout
    assert (sweep / "1" / "plan.json").is_file() and "missing" not in done.stdout
    assert "will be refused" not in done.stdout + done.stderr
    # a job its config refuses is named before the first job starts, not hours in (review);
    # it still records its failure and the others run
    bad = ["-m", "mode=plan", "train.batch_size=64,-1", "optimizer.lr_decay_steps=0,1000",
           "optimizer.lr_decay_start=500", f"hydra.sweep.dir={tmp_path / 'bad'}"]  # fmt: skip
    refused = cli_here(bad)
    out = refused.stdout + refused.stderr
    warned = out.index("2 of the 4 jobs of this sweep will be refused")
    assert warned < out.index("Launching 4 jobs")
    assert "job 2 (train.batch_size=-1, optimizer.lr_decay_steps=0): train.batch_size must" in out
    assert "2 of 4 jobs did not complete" in out and (tmp_path / "bad" / "1" / "plan.json").exists()
    # hydra.job.chdir=true: each job refused as the entry point refuses it (one builder)
    moved = cli_here(["-m", "mode=plan", "seed=0,1", "hydra.job.chdir=true",
                      f"hydra.sweep.dir={tmp_path / 'moved'}"])  # fmt: skip
    assert "2 of the 2 jobs of this sweep will be refused" in moved.stdout + moved.stderr
    assert "job 0 (seed=0): hydra.job.chdir=true runs the job inside" in moved.stdout + moved.stderr


def test_an_evaluate_run_reports_no_collective_precision(tmp_path):
    """``mode=evaluate`` records no collectives: its row said FP32 for a qcomms=fp16 job
    (review); a training run of several ranks without codecs still says FP32, and one whose
    tables had no embedding collective (one rank, or every table data_parallel) says none (it
    said FP32: review)."""
    from dlrm_exp.record.sweep import summary_row

    scored = {"status": "completed", "mode": "evaluate", "val": {"auroc": 0.7}, "world_size": 2}
    trained = {"status": "completed", "val": {"auroc": 0.7}, "effective_qcomms": {}}
    sharded, replicated = {"t0": "data_parallel", "t1": "row_wise"}, {"t0": "data_parallel"}
    jobs = [
        (["qcomms=fp16"], scored),
        (["qcomms=none"], {**trained, "world_size": 2, "table_sharding_types": sharded}),
        (["qcomms=fp16"], {**trained, "world_size": 1}),
        (["qcomms=fp16"], {**trained, "world_size": 2, "table_sharding_types": replicated}),
    ]
    for i, (overrides, metrics) in enumerate(jobs):
        write_job(tmp_path, i, overrides, metrics)
    rows = [summary_row(run) for run in load_runs([tmp_path / str(i) for i in range(4)])]
    assert [row["qcomms_ran"] for row in rows] == ["", "FP32", "none", "none"]


def test_a_plan_sweeps_failed_and_interrupted_jobs_are_listed_as_not_completed(tmp_path, capsys):
    from omegaconf import OmegaConf

    from dlrm_exp.record.sweep import summarize_sweep

    failed = {"status": "failed", "error": "bad plan", "error_type": "ConfigError"}
    interrupted = {"status": "interrupted", "error": "interrupted by SIGINT",
                   "error_type": "KeyboardInterrupt"}  # fmt: skip
    sweep = _written_sweep(
        tmp_path / "plans", ["seed=0,1"], [(["seed=0"], failed), (["seed=1"], interrupted)]
    )
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}, "mode": "plan"})
    assert summarize_sweep(config)
    out = capsys.readouterr().out
    assert f"- seed=1: {sweep / '1'} (interrupted by SIGINT)" in out
    assert "2 of 2 jobs did not complete: seed=0 (failed), seed=1 (interrupted)" in out


def test_a_rerun_with_an_edited_list_names_the_jobs_that_did_not_run(tmp_path, capsys):
    """A rerun with one seed dropped numbers its jobs into the earlier jobs' folders: each
    was "kept" as the other job's record, the summary read those records as this sweep's,
    and the sweep exited 0 (sweeps review)."""
    from omegaconf import OmegaConf

    from dlrm_exp import cli
    from dlrm_exp.errors import FinishedRunKeptError
    from dlrm_exp.record.sweep import SweepSummary, summarize_sweep

    jobs = [([f"seed={seed}"], _completed()) for seed in (0, 1, 2)]
    sweep = _written_sweep(tmp_path / "sweep", ["seed=0,1,2"], jobs)
    (sweep / "summary_stats.csv").write_text("stale\n")  # (kept beside a new summary)
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}, "mode": "train"})
    SweepSummary().on_multirun_start(config)
    for job, seed in ((0, 1), (1, 2)):  # the rerun's -m seed=1,2 in folders 0 and 1
        value = cli._job_failed(
            FinishedRunKeptError("kept"), f"seed={seed}", sweep / str(job), sweep,
            ([f"seed={seed}"], ["seed"]),
        )  # fmt: skip
        assert math.isnan(value)
    assert f"{sweep / '0'} holds the record of seed=0, a job of an earlier" in (
        capsys.readouterr().err
    )
    # a list narrowed to one value sweeps no key: the keys both set are compared
    narrowed = write_job(tmp_path / "narrowed", 0, ["seed=0", "optimizer.learning_rate=0.1"],
                         _completed())  # fmt: skip
    job = (["seed=0", "optimizer.learning_rate=0.02"], [])
    kept = FinishedRunKeptError("kept")
    assert math.isnan(cli._job_failed(kept, "j", narrowed, tmp_path / "narrowed", job))
    assert (
        "holds the record of this job run with other settings (optimizer.learning_rate "
        "0.1 / 0.02: there / here, - unset)" in capsys.readouterr().err
    )
    # a setting that changes no result (its progress bar) is the same job: kept
    quiet = (["seed=0", "optimizer.learning_rate=0.1", "train.progress_bar=false"], [])
    assert cli._job_failed(kept, "j", narrowed, tmp_path / "narrowed", quiet) == 0.7
    assert summarize_sweep(config)  # exit 1
    out = capsys.readouterr().out
    assert "2 of 3 jobs did not complete: seed=1 (did not run), seed=2 (did not run)" in out
    assert "- 1 run(s) of 1 configuration(s), seed(s) 2," in out  # folder 2's: seed=2
    assert (sweep / "summary_stats.csv").read_text() != "stale\n"
    # its start clears the notes after the sweep folder is held (Hydra calls them in order):
    # a second -m into a folder under way cleared that sweep's notes, then was refused
    callbacks = list(OmegaConf.load(REPO / "conf" / "config.yaml").hydra.callbacks)
    assert callbacks.index("run_folder_lock") < callbacks.index("sweep_summary")
    SweepSummary().on_multirun_start(config)  # the next multirun into it starts clean
    assert not summarize_sweep(config)
    (sweep / "summary_stats.csv").write_text("stale\n")  # statistics that cannot be made
    (sweep / "1" / ".hydra" / "overrides.yaml").write_text('["seed=2"]')  # (two of seed=2)
    assert summarize_sweep(config) and not (sweep / "summary_stats.csv").exists()


def test_a_rerun_with_a_shorter_list_leaves_the_earlier_sweeps_later_jobs_out(tmp_path, capsys):
    """-m seed=0,1 into a folder of an earlier seed=0,1,2: its job 2 was summarised as one of
    this sweep's (diff review)."""
    from omegaconf import OmegaConf

    from dlrm_exp.record.sweep import summarize_sweep

    jobs = [([f"seed={seed}"], _completed()) for seed in (0, 1, 2)]
    sweep = _written_sweep(tmp_path / "sweep", ["seed=0,1"], jobs)  # (the rerun's record)
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}, "mode": "train"})
    assert not summarize_sweep(config)
    out = capsys.readouterr().out
    assert "left out 1 job folder(s) of an earlier sweep into this folder, numbered past " in out
    assert "- 2 run(s) of 1 configuration(s), seed(s) 0, 1," in out
    # a list narrowed to one value: one job; folders named otherwise than by job number, or
    # another sweeper's trials (no product of values), are not counted so (diff review)
    single = _written_sweep(tmp_path / "single", ["seed=0"], jobs[:2])
    single_config = OmegaConf.create({"hydra": {"sweep": {"dir": str(single)}}, "mode": "train"})
    summarize_sweep(single_config)
    assert "- 1 run(s) of 1 configuration(s), seed(s) 0," in capsys.readouterr().out
    for extra in ({"sweep": {"subdir": "${seed}"}}, {"sweeper": {"_target_": "x.OptunaSweeper"}}):
        other = tmp_path / f"other_{len(str(extra))}"
        _written_sweep(other, ["seed=0,1"], jobs)
        saved = json.loads((other / "multirun.yaml").read_text())
        saved["hydra"].update(extra)
        (other / "multirun.yaml").write_text(json.dumps(saved))
        config = OmegaConf.create({"hydra": {"sweep": {"dir": str(other)}}, "mode": "train"})
        summarize_sweep(config)
        assert "left out" not in capsys.readouterr().out
    # a setting that changes no result (the progress bar) set in one run: still repeats of
    # one configuration (its statistics were refused as "other overrides not swept")
    quiet = _written_sweep(tmp_path / "quiet", ["seed=0,1"], [
        (["seed=0"], _completed()), (["seed=1", "train.progress_bar=false"], _completed())
    ])  # fmt: skip
    quiet_config = OmegaConf.create({"hydra": {"sweep": {"dir": str(quiet)}}, "mode": "train"})
    assert not summarize_sweep(quiet_config)
    assert "other overrides that were not swept" not in capsys.readouterr().out
    # a resume from a path starts from another run's checkpoint: it counts (diff review)
    resumed = _written_sweep(tmp_path / "resumed", ["seed=0,1"], [
        (["seed=0"], _completed()), (["seed=1", "train.resume=/x/step_4"], _completed())
    ])  # fmt: skip
    assert summarize_sweep(
        OmegaConf.create({"hydra": {"sweep": {"dir": str(resumed)}}, "mode": "train"})
    )
    assert "other overrides that were not swept (train.resume - / /x/step_4)" in (
        capsys.readouterr().out
    )


def test_a_failure_on_a_rank_above_0_writes_no_record_and_ends_the_task_well(
    tmp_path, cli_here, monkeypatch
):
    """Every task of a several-task submitit job runs the sweep's job. A task of rank 1 that
    failed wrote a failed record, which could replace rank 0's: it leaves the record to rank
    0. It does not fail its task either: the submitit launcher ends the whole sweep on a
    failed task (``Job.results`` raises), and rank 1 fails whenever rank 0 does (its
    collective's peer is gone)."""
    monkeypatch.setenv("RANK", "1")
    sweep = tmp_path / "sweep"
    missing = f"data.path={tmp_path / 'none.tsv'}"
    done = cli_here(["-m", "data=criteo_tsv", missing, f"hydra.sweep.dir={sweep}"])
    assert "Error in job " in done.stderr and "(rank 1): " in done.stderr
    assert "no such file or folder" in done.stderr and "Traceback" not in done.stderr
    assert (sweep / "0").is_dir() and not (sweep / "0" / "metrics.json").exists()


def test_a_job_rerun_that_fails_keeps_its_earlier_completed_record(tmp_path, cli_here, monkeypatch):
    """The same -m command again in its sweep folder, refused there (the job's folder holds a
    finished run), or rerun with train.resume=auto and failing before training, replaced the
    completed metrics.json with a failed one for good (crash-safety review)."""
    import json

    sweep = tmp_path / "sweep"
    done = {"status": "completed", "val": {"auroc": 0.7}, "samples_per_sec": 1000.0}
    missing = f"data.path={tmp_path / 'gone.tsv'}"
    write_job(sweep, 0, ["data=criteo_tsv", missing], done)
    rerun = cli_here(["-m", "data=criteo_tsv", missing, f"hydra.sweep.dir={sweep}"])
    # said of the job, not as an error (a sweep rerun to finish its other jobs meets these)
    assert "Job data=criteo_tsv," in rerun.stderr and "Error in job" not in rerun.stderr
    assert "kept: /" in rerun.stderr and "a run that finished (metrics.json), kept" in rerun.stderr
    assert json.loads((sweep / "0" / "metrics.json").read_text()) == done
    # its .hydra/ put back: the summary labelled the kept record with the rerun's overrides
    # (seed=1 beside seed 0's numbers: review)
    record = {name: f"# the first job's {name}\n" for name in ("config", "overrides")}
    for name, text in record.items():
        (sweep / "0" / ".hydra" / f"{name}.yaml").write_text(text)
    edited = cli_here(["-m", "data=criteo_tsv", missing, "seed=1", f"hydra.sweep.dir={sweep}"])
    assert "Job data=criteo_tsv" in edited.stderr and " kept: " in edited.stderr
    for name, text in record.items():
        assert (sweep / "0" / ".hydra" / f"{name}.yaml").read_text() == text
    step = sweep / "0" / "checkpoints" / "step_4"  # what a resume finds: a complete checkpoint
    step.mkdir(parents=True)
    (step / ".metadata").write_bytes(b"")
    (step / "trainer_state.json").write_text(json.dumps({"step": 4}))
    resumed = cli_here(["-m", "data=criteo_tsv", missing, "train.resume=auto",
                        f"hydra.sweep.dir={sweep}"])  # fmt: skip
    assert "Error in job " in resumed.stderr and "no such file or folder" in resumed.stderr
    assert json.loads((sweep / "0" / "metrics.json").read_text()) == done
    # a failure once training ran (not a refusal) is the job's news: recorded
    from dlrm_exp import cli
    from dlrm_exp.errors import FinishedRunKeptError

    # the kept job gives the sweeper its record's val AUROC, as when it ran (it gave NaN,
    # a failed trial to an Optuna-style sweeper: re-read)
    job = (["data=criteo_tsv", missing], [])
    assert cli._job_failed(FinishedRunKeptError("kept"), "j", sweep / "0", sweep, job) == 0.7
    assert math.isnan(
        cli._job_failed(FinishedRunKeptError("kept"), "j", tmp_path / "none", sweep, job)
    )
    from dlrm_exp.errors import NonFiniteLossError

    monkeypatch.setattr(cli, "_choices", dict)
    cli._record_failure(sweep / "0" / "metrics.json", "loss is nan", NonFiniteLossError("nan"))
    assert json.loads((sweep / "0" / "metrics.json").read_text())["status"] == "failed"
    second = cli_here(["-m", "data=criteo_tsv", missing, f"hydra.sweep.dir={tmp_path / 'new'}"])
    assert "Error in job " in second.stderr  # a job without an earlier record: failed
    assert json.loads((tmp_path / "new" / "0" / "metrics.json").read_text())["status"] == "failed"


def test_a_sweep_under_torchrun_is_refused(tmp_path, cli_here, monkeypatch):
    """Every torchrun rank ran its own sweep into the same timestamped folder, each writing
    multirun.yaml and the summary; one job's failure on a rank ended its sweep."""
    for key, value in (("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "127.0.0.1"),
                       ("MASTER_PORT", "1")):  # fmt: skip
        monkeypatch.setenv(key, value)
    done = cli_here(["-m", "seed=0,1", f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    assert done.returncode == 1 and "a -m sweep starts its own jobs: run it without" in done.stderr
    assert not (tmp_path / "sweep").exists()
    # rank 1 prints nothing (each rank printed the line) and records it for torchrun's
    # summary (error_file: <N/A>: launch review)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(tmp_path / "error_1.json"))
    other = cli_here(["-m", "seed=0,1", f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    assert other.returncode == 1 and "Error" not in other.stderr
    assert "a -m sweep starts its own jobs" in (tmp_path / "error_1.json").read_text()


def test_a_presets_swept_keys_count_beside_the_command_lines(tmp_path):
    """``-m experiment=<preset sweeping learning rates> seed=0,1``: runs are named, and
    grouped into configurations, by the preset's ``hydra.sweeper.params`` keys too (with
    only the command line's, four runs of two learning rates were two seeds of one)."""
    jobs = [
        ([f"optimizer.learning_rate={lr}", f"seed={seed}", "experiment=lrs"], _completed())
        for lr in ("0.1", "0.2")
        for seed in (0, 1)
    ]
    sweep = _written_sweep(tmp_path / "sweep", ["experiment=lrs", "seed=0,1"], jobs)
    saved = json.loads((sweep / "multirun.yaml").read_text())
    saved["hydra"]["sweeper"] = {"params": {"optimizer.learning_rate": "0.1,0.2"}}
    (sweep / "multirun.yaml").write_text(json.dumps(saved))
    runs = load_runs([sweep])
    assert [r.name for r in runs] == [
        f"seed={seed},optimizer.learning_rate={lr}" for lr in ("0.1", "0.2") for seed in (0, 1)
    ]
    assert [r.config for r in runs] == ["optimizer.learning_rate=0.1"] * 2 + [
        "optimizer.learning_rate=0.2"
    ] * 2
    assert [len(s.seeds) for s in config_stats(runs)] == [2, 2]


def test_a_first_configuration_whose_runs_all_failed_is_not_the_baseline(tmp_path):
    """Its failed runs left every other configuration without a difference to it (blank
    cells, an empty auroc_diff.png, nothing said): the first one that ran is the baseline."""
    failed = {"status": "failed", "error": "refused"}
    jobs = [
        ([f"qcomms={q}", f"seed={seed}"], failed if q == "fp8" else _completed())
        for q in ("fp8", "none", "fp16")
        for seed in (0, 1)
    ]
    sweep = _written_sweep(tmp_path / "sweep", ["qcomms=fp8,none,fp16", "seed=0,1"], jobs)
    stats = config_stats(load_runs([sweep]))
    assert [s.config for s in stats] == ["qcomms=none", "qcomms=fp8", "qcomms=fp16"]
    assert stats[1].failed and not stats[1].vs_baseline
    assert stats[2].vs_baseline["val_auroc"].n == 2


def test_report_draws_the_bytes_that_collectives_sent(tmp_path, capsys):
    """Two 2-process runs that sent bytes: comm_bytes.png."""
    jobs = [([f"qcomms={q}"], _completed(comm_bytes_per_step={"forward": b, "backward": b}))
            for q, b in (("none", 4.0e6), ("fp16", 2.0e6))]  # fmt: skip
    sweep = _written_sweep(tmp_path / "sweep", ["qcomms=none,fp16"], jobs)
    assert report.main([str(sweep), "--out", str(tmp_path / "out")]) == 0
    assert "(no comm_bytes.png" not in capsys.readouterr().out
    assert (tmp_path / "out" / "comm_bytes.png").read_bytes()[:4] == b"\x89PNG"


def test_ddp_allreduce_bytes_are_a_column_and_a_statistic(tmp_path):
    """The DDP all-reduce bytes (data_parallel tables' gradients) sat in metrics.json and
    TensorBoard only: a strategy sweep's table compared data_parallel as sending nothing."""
    jobs = [
        ([f"sharding={s}", f"seed={seed}"],
         _completed(comm_bytes_per_step={"forward": f, "backward": f, "allreduce": a}))
        for s, f, a in (("tablewise", 4.0e6, 2.0e5), ("dataparallel", 0.0, 2.5e6))
        for seed in (0, 1)
    ]  # fmt: skip
    typed = ["sharding=tablewise,dataparallel", "seed=0,1"]
    sweep = _written_sweep(tmp_path / "sweep", typed, jobs)
    assert report.main([str(sweep), "--out", str(tmp_path / "out")]) == 0
    rows = list(csv.DictReader((tmp_path / "out" / "summary.csv").open()))
    assert [float(r["allreduce_bytes_per_step"]) for r in rows] == [2.0e5, 2.0e5, 2.5e6, 2.5e6]
    text = (tmp_path / "out" / "summary.md").read_text()
    assert text.count("DDP all-reduce bytes/step (all ranks)") == 2  # runs' and stats' tables


def test_bars_pool_only_the_repeats_of_a_configuration(tmp_path):
    """sharding x learning rate x seed: a throughput bar per (sharding, learning rate), each
    pooling its two seeds, not the two learning rates."""
    typed = ["sharding=tablewise,rowwise", "optimizer.learning_rate=0.1,0.02", "seed=0,1"]
    jobs = [
        ([f"sharding={s}", f"optimizer.learning_rate={lr}", f"seed={seed}"], _completed())
        for s in ("tablewise", "rowwise")
        for lr in ("0.1", "0.02")
        for seed in (0, 1)
    ]
    runs = load_runs([_written_sweep(tmp_path / "sweep", typed, jobs)])
    pairs = report.bar_pairs(runs, "sharding", "qcomms")
    assert {group: len(pooled) for (group, _), pooled in pairs.items()} == {
        "sharding=tablewise,optimizer.learning_rate=0.1": 2,
        "sharding=tablewise,optimizer.learning_rate=0.02": 2,
        "sharding=rowwise,optimizer.learning_rate=0.1": 2,
        "sharding=rowwise,optimizer.learning_rate=0.02": 2,
    }
    assert all(len({r.seed for r in pooled}) == 2 for pooled in pairs.values())
    by_sharding = report.bar_pairs(runs, "qcomms", "sharding")  # the bytes plot's bars
    assert {group for group, _ in by_sharding} == {
        "optimizer.learning_rate=0.1",
        "optimizer.learning_rate=0.02",
    }


def test_bars_of_separate_run_folders_pool_seeds_and_keep_list_values(tmp_path):
    folders = []
    for name, overrides in {
        "a": ["qcomms=fp16", "seed=0"],
        "b": ["qcomms=fp16", "seed=1"],
        "c": ["model.table_sizes=[10,20]"],
        "d": ["model.table_sizes=[10,30]"],
    }.items():
        folders.append(write_job(tmp_path, name, overrides, _completed()))
    pairs = report.bar_pairs(load_runs(folders), "sharding", "qcomms")
    assert {pair: len(pooled) for pair, pooled in pairs.items()} == {
        ("sharding=?", "fp16"): 2,  # seeds 0 and 1: repeats
        ("model.table_sizes=[10,20]", "?"): 1,
        ("model.table_sizes=[10,30]", "?"): 1,
    }


def test_a_report_without_sent_bytes_removes_an_earlier_bytes_plot(tmp_path, capsys):
    jobs = [([f"sharding={s}"], _completed()) for s in ("tablewise", "rowwise")]
    sweep = _written_sweep(tmp_path / "sweep", ["sharding=tablewise,rowwise"], jobs)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "comm_bytes.png").write_bytes(b"an earlier report's")
    assert report.main([str(sweep), "--out", str(tmp_path / "out")]) == 0
    assert "(no comm_bytes.png: no run sent" in capsys.readouterr().out
    assert not (tmp_path / "out" / "comm_bytes.png").exists()


def test_a_swept_key_without_an_hparam_becomes_one_as_parsed():
    hparams = {"sharding": "tablewise", "learning_rate": 0.1, "seed": "0", "world_size": 2,
               "batch_size_per_rank": 64}  # fmt: skip
    swept = {"sharding": "rowwise", "optimizer.learning_rate": 0.02, "seed": 1,
             "hardware.nproc_per_node": 2, "train.batch_size": 64, "model.dcn_num_layers": 3,
             "data.paths": ["a", "b"], "x.y": None}  # fmt: skip
    assert swept_hparams(hparams, swept) == {
        **hparams,  # their own HParams: the run's values, typed as the config has them
        "model.dcn_num_layers": 3,  # (nproc_per_node is world_size: it was added beside it)
        "data.paths": '["a","b"]',
        "x.y": "null",
    }


def test_tensorboard_infers_one_experiment_over_sweeps_and_single_runs(tmp_path):
    """No run writes an experiment entry, so TensorBoard's table over a folder of several
    sweeps and single runs lists every run's HParams, differing ones first, with numeric
    ranges: not one arbitrary run's list."""
    base = {"sharding": "tablewise", "learning_rate": 0.1, "seed": 0, "world_size": 1}
    runs = {
        "sweep_a/nproc=1": ({**base}, {"hardware.nproc_per_node": 1}),
        "sweep_a/nproc=2": ({**base, "world_size": 2}, {"hardware.nproc_per_node": 2}),
        "sweep_b/lr=0.02": ({**base, "learning_rate": 0.02}, {"optimizer.learning_rate": 0.02}),
        "sweep_c/sr=false": ({**base}, {"optimizer.stochastic_rounding": False}),
        "sweep_d/dcn=1": ({**base}, {"model.dcn_num_layers": 1}),
        "sweep_d/dcn=2": ({**base}, {"model.dcn_num_layers": 2}),
        "single": ({**base, "sharding": "rowwise"}, {}),
    }
    for name, (hparams, swept) in runs.items():
        tracker = Tracker(tmp_path / name, enabled=True)
        tracker.hparams(hparams, {"val/auroc": 0.7}, step=4, swept=swept)
        tracker.close()
        events = EventAccumulator(str(tmp_path / name))
        events.Reload()
        assert "_hparams_/experiment" not in events.PluginTagToContent("hparams")
    experiment = tensorboard_experiment(tmp_path)
    infos = {info.name: info for info in experiment.hparam_infos}
    differing = [info.name for info in experiment.hparam_infos if info.differs]
    assert differing == ["learning_rate", "model.dcn_num_layers", "sharding", "world_size"]
    assert not infos["seed"].differs and "hardware.nproc_per_node" not in infos  # world_size
    layers = infos["model.dcn_num_layers"]  # a number: TensorBoard offers a range filter
    assert (layers.domain_interval.min_value, layers.domain_interval.max_value) == (1, 2)
    assert set(infos["sharding"].domain_discrete.values[i].string_value for i in range(2)) == {
        "tablewise",
        "rowwise",
    }
    assert "val/auroc" in {m.name.tag for m in experiment.metric_infos}
    rounding = infos["optimizer.stochastic_rounding"].domain_discrete.values  # not 0.0
    assert [v.string_value for v in rounding] == ["false"]


def test_the_plots_say_what_their_bars_and_axes_are(tmp_path, capsys):
    """Found by looking at them (review): whiskers unlabelled and an axis down to -200,000
    samples/s; long x names overlapping; an empty auroc_diff.png where every configuration
    but the baseline failed; a managed-collision column of n/a in every sweep."""
    import matplotlib.pyplot as plt

    jobs = [
        ([f"hardware.nproc_per_node={n}", f"qcomms={q}", f"seed={s}"],
         _completed(samples_per_sec=1000.0 * (1 + s * 9), seed=s))
        for n in (1, 2) for q in ("none", "fp16") for s in (0, 1)
    ]  # fmt: skip
    typed = ["hardware.nproc_per_node=1,2", "qcomms=none,fp16", "seed=0,1"]
    runs = load_runs([_written_sweep(tmp_path / "sweep", typed, jobs)])
    fig, ax = plt.subplots()
    x = report._grouped_bars(ax, runs, "sharding", "qcomms", lambda m: m.samples_per_sec)
    assert x == "configuration" and ax.get_ylim()[0] == 0  # (the interval reaches below 0)
    assert ax.get_legend().get_title().get_text() == (
        "bars: mean; whiskers: 95 % t interval, 2 runs"
    )
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2"]
    assert ax.get_xlabel() == "hardware.nproc_per_node"
    plt.close(fig)
    assert report._tick_labels(["a=[1,2],b=x"]) == (["a=[1,2],b=x"], "")  # (a comma inside)
    # every configuration but the baseline failed: no empty auroc_diff.png
    failed = {"status": "failed", "error": "refused"}
    jobs = [([f"qcomms={q}", f"seed={s}"], _completed() if q == "none" else failed)
            for q in ("none", "int8") for s in (0, 1)]  # fmt: skip
    sweep = _written_sweep(tmp_path / "int8", ["qcomms=none,int8", "seed=0,1"], jobs)
    assert report.main([str(sweep)]) == 0
    out = capsys.readouterr().out
    assert "(no auroc_diff.png: no configuration but the baseline has a val AUROC)" in out
    assert not (sweep / "auroc_diff.png").exists() and "MC rows held" not in out
    assert "| samples/s (all ranks) |" in out
    assert "| qcomms=int8 | 0 (2 failed) |" in out
    # an interrupted run is counted as such, not as failed (sweeps review)
    stopped = {"status": "interrupted", "error": "interrupted by SIGINT"}
    jobs = [([f"qcomms={q}", f"seed={s}"], _completed() if (q, s) != ("int8", 1) else stopped)
            for q in ("none", "int8") for s in (0, 1, 2)]  # fmt: skip
    typed = ["qcomms=none,int8", "seed=0,1,2"]
    assert report.main([str(_written_sweep(tmp_path / "cut_int8", typed, jobs))]) == 0
    assert "| qcomms=int8 | 2 (1 interrupted) |" in capsys.readouterr().out
    # a sweep of seeds cut short (a SIGKILL): not told to sweep the seeds it swept (review)
    cut = _written_sweep(tmp_path / "cut", ["seed=0,1,2"], [(["seed=0"], _completed())])
    assert report.main([str(cut)]) == 0
    assert "no configuration has repeats yet: of the sweep's seeds 0,1,2, not all ran" in (
        capsys.readouterr().out
    )


def test_report_refuses_a_path_without_runs(tmp_path, capsys):
    assert report.main([str(tmp_path / "nowhere")]) == 2
    assert "no run or sweep folder" in capsys.readouterr().err
    assert report.main([str(tmp_path)]) == 2
    assert "no runs under" in capsys.readouterr().err


@pytest.mark.slow
def test_a_job_rerun_alone_gives_the_same_numbers(record_sweep, tmp_path):
    """The fourth job of the sweep (after three others ran in the same process), alone."""
    sweep_dir, _ = record_sweep
    job = ["sharding=tablewise", "optimizer.learning_rate=0.02", "seed=0", "qcomms=int8"]
    result = run_cli([*job, *TINY, f"hydra.run.dir={tmp_path}"], timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    alone = json.loads((tmp_path / "metrics.json").read_text())
    in_sweep = json.loads((sweep_dir / "3" / "metrics.json").read_text())
    for split in ("val", "test"):
        assert alone[split] == in_sweep[split]
    assert alone["val_history"] == in_sweep["val_history"]


@pytest.mark.slow
def test_optuna_example_tunes_the_learning_rates(tmp_path):
    """The shipped hydra/sweeper=lr_search example (optional extra ``.[optuna]``)."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    result = run_cli(
        [
            "-m",
            "hydra/sweeper=lr_search",
            "hydra.sweeper.n_trials=2",
            *TINY,
            f"hydra.sweep.dir={tmp_path}",
        ],
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    best = (tmp_path / "optimization_results.yaml").read_text()
    assert "optimizer.learning_rate" in best and "best_value" in best
    with open(tmp_path / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 and all(r["status"] == "completed" for r in rows)
    assert all(r["run"].startswith("optimizer.learning_rate=") for r in rows)


def test_the_optuna_example_searches_keys_the_config_has():
    """Without the optional plugin the test above skips; the example's search space is still
    checked: every key it tunes is a config key (a renamed one would fail each trial)."""
    import yaml

    from dlrm_exp.config import Config
    from dlrm_exp.config.conf_tree import conf_dir
    from dlrm_exp.config.keys import check_override_keys

    example = yaml.safe_load((conf_dir() / "hydra" / "sweeper" / "lr_search.yaml").read_text())
    tuned = list(example["params"])
    assert tuned == ["optimizer.learning_rate", "optimizer.dense_learning_rate"]
    check_override_keys([f"{key}=0.1" for key in tuned], Config)  # raises on an unknown key


def test_the_table_shows_the_matmul_peak_and_links_profiles(tmp_path, monkeypatch):
    """Utilization and ``train.profile`` files reach the summary without a training run."""
    from dlrm_exp.record.run_record import RunMetrics
    from dlrm_exp.record.runs import RunRecord
    from dlrm_exp.record.sweep import markdown_table, summary_row

    metrics = RunMetrics(
        val={"auroc": 0.8},
        utilization={"fraction_of_matmul_peak": 0.546},
        profile=["profile/rank0.pt.trace.json", "profile/rss_rank0.csv"],
    )
    row = summary_row(RunRecord(tmp_path / "run", "sharding=rowwise", [], metrics))
    assert row["matmul_peak_pct"] == pytest.approx(54.6)
    table = markdown_table([row])
    # each run against the peak of its dense dtype (fp32 or bf16): the label says so (review)
    assert "| % of own-dtype matmul peak |" in table.splitlines()[0] and "| 54.6 |" in table
    trace = tmp_path / "run" / "profile" / "rank0.pt.trace.json"
    assert f"- sharding=rowwise: [rank0.pt.trace.json]({trace})" in table
    # the report, run elsewhere on a relative folder, wrote its paths relative (review)
    monkeypatch.chdir(tmp_path)
    relative = summary_row(RunRecord(Path("run"), "sharding=rowwise", [], metrics))
    assert relative["path"] == str(tmp_path / "run") and str(trace) in relative["profile"]


def test_weights_trained_before_the_resume_are_said_to_be_the_checkpoints_runs(tmp_path):
    """A run resumed on 1 process reported the 2-process run's best weights under its own
    labels, world size and sharding (review)."""
    from dlrm_exp.record.run_record import RunMetrics
    from dlrm_exp.record.runs import RunRecord
    from dlrm_exp.record.sweep import markdown_table, summary_row

    kept = {"status": "completed", "weights": "best", "best_step": 15.0, "val": {"auroc": 0.7}}
    before = RunMetrics(**kept, resumed={"step": 20})
    row = summary_row(RunRecord(tmp_path / "r", "hardware.nproc_per_node=1", [], before))
    assert row["weights_from"] == "before the resume at step 20 (best at step 15)"
    assert "nproc_per_node=1 (weights from before the resume at step 20" in markdown_table([row])
    after = RunMetrics(**{**kept, "best_step": 30.0}, resumed={"step": 20})
    assert summary_row(RunRecord(tmp_path / "a", "x", [], after))["weights_from"] == ""


def test_runs_the_planner_placed_differently_say_so_in_the_table(tmp_path):
    """``-m model.embedding_data_type=fp32,fp16`` with ``sharding=auto``: fp16 tables were
    planned table_column_wise, fp32 ones row_wise, shown only in summary.csv (what-ran
    review); a swept sharding names itself."""
    from dlrm_exp.record.run_record import RunMetrics
    from dlrm_exp.record.runs import RunRecord
    from dlrm_exp.record.sweep import markdown_table, summary_row

    def row(name: str, *types: str) -> dict:
        planned = {f"t{i}": t for i, t in enumerate(types)}
        metrics = RunMetrics(val={"auroc": 0.8}, table_sharding_types=planned)
        return summary_row(RunRecord(tmp_path / name, name, [], metrics))

    fp32 = row("model.embedding_data_type=fp32", "row_wise", "row_wise")
    fp16 = row("model.embedding_data_type=fp16", "table_column_wise", "table_wise")
    table = markdown_table([fp32, fp16])
    assert "| model.embedding_data_type=fp32 (planned: row_wise) |" in table
    assert (
        "| model.embedding_data_type=fp16 (planned: table_column_wise x 1, table_wise x 1) |"
    ) in table
    same = markdown_table([fp32, row("model.embedding_data_type=fp16", "row_wise")])
    assert "planned" not in same  # nothing to tell apart
    swept = [row("sharding=rowwise", "row_wise"), row("sharding=tablewise", "table_wise")]
    assert "planned" not in markdown_table(swept)  # each name says its sharding type


def test_gpu_memory_is_reported_beside_host_memory_where_a_run_held_some(tmp_path):
    """On a GPU the summary, the tables and the comparisons showed only host RSS: the memory
    a plan is checked against, HBM, never appeared (review). The column is left out where no
    run held GPU memory."""
    from dlrm_exp.modes.train import summary
    from dlrm_exp.record.run_record import RunMetrics
    from dlrm_exp.record.runs import RunRecord
    from dlrm_exp.record.sweep import markdown_table, summary_row

    ranks = [{"rss": 3.0, "cuda_allocated": 50.0, "cuda_reserved": 61.5},
             {"rss": 4.0, "cuda_allocated": 52.0, "cuda_reserved": 60.0}]  # fmt: skip
    split = {"auroc": 0.8, "samples": 64.0}
    gpu = RunMetrics(val=split, test=split, peak_memory_gib=3.0, peak_memory_gib_per_rank=ranks)
    cpu = RunMetrics(val=split, test=split, peak_memory_gib_per_rank=[{"rss": 2.0}])
    assert (gpu.peak_gpu_gib_max_rank, gpu.peak_rss_gib_max_rank) == (61.5, 4.0)
    assert cpu.peak_gpu_gib_max_rank is None
    line = next(x for x in summary(gpu, tmp_path).splitlines() if x.startswith("train "))
    # both the largest rank's (the host figure was rank 0's 3.00 beside the GPU's max)
    host, device = "peak host memory 4.00 GiB (max rank)", "peak GPU memory 61.50 GiB (reserved"
    assert f"| {host} | {device}, max rank) |" in line
    cpu_line = next(x for x in summary(cpu, tmp_path).splitlines() if x.startswith("train "))
    assert "GPU" not in cpu_line
    rows = [summary_row(RunRecord(tmp_path / n, n, [], m)) for n, m in (("g", gpu), ("c", cpu))]
    assert rows[0]["peak_gpu_gib"] == 61.5 and rows[1]["peak_gpu_gib"] is None
    assert "| peak GPU GiB (max rank) |" in markdown_table(rows).splitlines()[0]
    assert "| 61.50 |" in markdown_table(rows)
    assert "peak GPU GiB" not in markdown_table(rows[1:])
    from dlrm_exp.record.compare import ConfigStats, stats_markdown
    from dlrm_exp.record.stats import estimate

    held = ConfigStats("gpu", [0, 1], estimates={"peak_gpu_gib": estimate([61.5, 60.0])})
    assert "| peak GPU GiB (max rank) |" in stats_markdown([held]).splitlines()[0]
    assert "peak GPU GiB" not in stats_markdown([ConfigStats("cpu", [0, 1])])


def test_a_substituted_run_is_labelled_by_what_ran(tmp_path):
    """The summary names what ran instead of what was asked (no training run)."""
    from dlrm_exp.record.run_record import RunMetrics
    from dlrm_exp.record.runs import RunRecord
    from dlrm_exp.record.sweep import markdown_table, summary_row

    ran = {"reduce_scatter": {"forward": "FP16", "backward": "BF16"}}
    substituted = RunMetrics(
        val={"auroc": 0.8},
        effective_qcomms=ran,
        substitutions=[{"setting": "qcomms", "asked": "fp8", "ran": "reduce_scatter FP16/BF16",
                        "reason": "TorchRec has no FP8 reduce_scatter"}],
    )  # fmt: skip
    as_asked = RunMetrics(val={"auroc": 0.8}, effective_qcomms=ran)
    rows = [
        summary_row(RunRecord(tmp_path / "a", "qcomms=fp8", [], substituted)),
        summary_row(RunRecord(tmp_path / "b", "qcomms=fp16_bf16", [], as_asked)),
    ]
    assert rows[0]["qcomms_ran"] == rows[1]["qcomms_ran"] == "reduce_scatter FP16/BF16"
    assert (rows[0]["substituted"], rows[1]["substituted"]) == (
        "qcomms: reduce_scatter FP16/BF16",
        "",
    )
    table = markdown_table(rows)
    assert "| qcomms=fp8 (ran qcomms: reduce_scatter FP16/BF16) | completed |" in table
    assert "| qcomms=fp16_bf16 | completed |" in table
    from dlrm_exp.record.compare import config_stats

    records = [
        RunRecord(tmp_path / f"{name}{seed}", f"{name},seed={seed}", [], metrics, name, seed, name)
        for name, metrics in (("qcomms=fp8", substituted), ("qcomms=fp16_bf16", as_asked))
        for seed in (0, 1)
    ]
    labels = [s.config for s in config_stats(records)]
    assert labels == ["qcomms=fp8 (ran qcomms: reduce_scatter FP16/BF16)", "qcomms=fp16_bf16"]


def test_an_interrupted_sweep_still_gets_the_summary_of_its_finished_jobs(
    tmp_path, monkeypatch, capsys
):
    """Ctrl-C in a one-process multirun: Hydra never calls ``on_multirun_end``; the entry
    point writes the summary of the jobs that finished, then ends with its one line."""
    import signal

    from omegaconf import OmegaConf

    import dlrm_exp.cli as cli
    from dlrm_exp.record.sweep import SweepSummary, summarize_interrupted_sweep

    sweep = _written_sweep(
        tmp_path / "sweep", ["seed=0,1,2"], [(["seed=0"], _completed())]
    )  # fmt: skip
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}, "mode": "train"})

    def interrupted_multirun():
        SweepSummary().on_multirun_start(config)
        (sweep / "1" / ".hydra").mkdir(parents=True)  # the job under way: no metrics.json yet
        (sweep / "1" / ".hydra" / "overrides.yaml").write_text('["seed=1"]')
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "hydra_main", interrupted_multirun)
    monkeypatch.setattr(sys, "argv", ["dlrm_exp"])
    with pytest.raises(SystemExit) as ended:
        cli.main()
    assert ended.value.code == 128 + signal.SIGINT
    out, err = capsys.readouterr()
    assert "The sweep was interrupted; the jobs that finished:" in out
    assert "1 of 2 jobs did not complete: seed=1" in out
    # seed=2 never started: said (the count was of the folders alone: crash review)
    assert "1 of its 3 jobs did not start: the same -m command with the same" in out
    from dlrm_exp.record.sweep import _print_not_started

    _print_not_started(sweep, "plan")  # no train.resume for a plan sweep (diff review)
    assert capsys.readouterr().out.strip().endswith("with the same hydra.sweep.dir runs them")
    assert "Interrupted (SIGINT)" in err
    assert "seed=0" in (sweep / "summary.md").read_text()
    summarize_interrupted_sweep()  # the sweep's summary is written once, not at a later Ctrl-C
    assert capsys.readouterr().out == ""


def test_a_torchrun_rank_above_0_interrupted_says_one_short_line(monkeypatch, capsys):
    """Ctrl-C under torchrun: rank 1 printed the placeholder hint beside rank 0's own
    (launch review); rank 0 says how to go on."""
    import signal

    import dlrm_exp.cli as cli

    def interrupted():
        raise KeyboardInterrupt

    for key, value in {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(cli, "hydra_main", interrupted)
    monkeypatch.setattr(sys, "argv", ["dlrm_exp"])
    with pytest.raises(SystemExit) as ended:
        cli.main()
    assert ended.value.code == 128 + signal.SIGINT
    assert capsys.readouterr().err.strip() == "Interrupted (SIGINT) on rank 1"


def test_the_interruption_hint_fits_the_mode(monkeypatch, tmp_path):
    """It told an interrupted predict or export to resume training (crash review)."""
    import dlrm_exp.cli as cli

    hints = {}
    for mode in ("train", "preprocess", "predict"):
        monkeypatch.setattr(cli, "_job_folder", (False, tmp_path, mode, None))
        hints[mode] = cli._continue_hint()
    # no step checkpoint: nothing to continue (it promised to: diff review); a single run
    # left its best without a record, which auto replaces
    assert hints["train"] == (
        "it saved no step checkpoint (train.checkpoint_every_n_steps): the same command with "
        f"hydra.run.dir={tmp_path} train.resume=auto trains it again from its start"
    )
    (tmp_path / "checkpoints" / "step_4").mkdir(parents=True)
    (tmp_path / "checkpoints" / "step_4" / ".metadata").write_bytes(b"")
    (tmp_path / "checkpoints" / "step_4" / "trainer_state.json").write_text("{}")
    # started from another checkpoint: the same command starts from it again (auto threw
    # it away and trained from random weights: diff review)
    monkeypatch.setattr(cli, "_job_folder", (True, tmp_path / "0", "train", "/r/checkpoints/b"))
    assert cli._continue_hint() == (
        "it saved no step checkpoint (train.checkpoint_every_n_steps): the same -m command with "
        f"hydra.sweep.dir={tmp_path} trains it again from train.resume=/r/checkpoints/b"
    )
    monkeypatch.setattr(cli, "_job_folder", (True, tmp_path / "0", "train", "/r/b"))
    (tmp_path / "0" / "checkpoints" / "step_4").mkdir(parents=True)
    (tmp_path / "0" / "checkpoints" / "step_4" / ".metadata").write_bytes(b"")
    (tmp_path / "0" / "checkpoints" / "step_4" / "trainer_state.json").write_text("{}")
    # the same command, its PATH kept, continues the job and starts the others from PATH
    # (auto started them afresh: review)
    assert cli._continue_hint() == (
        f"the same -m command with hydra.sweep.dir={tmp_path} continues training from the "
        "newest checkpoint"
    )
    monkeypatch.setattr(cli, "_job_folder", (False, tmp_path, "train", None))
    assert cli._continue_hint() == (
        f"the same command with hydra.run.dir={tmp_path} train.resume=auto continues training "
        "from the newest checkpoint"
    )
    assert hints["preprocess"].startswith("the same command converts only the unfinished days")
    assert hints["predict"] == (
        "mode=predict leaves no half-written output: run the same command again"
    )
    # what stays, of each mode (a preprocess was told of checkpoints: npy review)
    monkeypatch.setattr(cli, "_job_folder", (False, tmp_path, "preprocess", None))
    assert cli._what_stays() == "the converted days stay; "
    monkeypatch.setattr(cli, "_job_folder", (False, tmp_path, "predict", None))
    assert cli._what_stays() == ""
    monkeypatch.setattr(cli, "_job_folder", (False, tmp_path, "train", None))
    assert cli._what_stays().startswith("what was finished stays (complete checkpoints")


def test_sigterm_ends_a_one_process_sweep_in_one_line_with_its_summary(tmp_path):
    """SIGTERM (``kill``, a container stopping) killed a one-process run mid-step with no word;
    it now ends it as Ctrl-C does: the finished jobs' summary, one line, exit 143."""
    import signal
    import subprocess
    import time

    sweep = tmp_path / "sweep"
    job = subprocess.Popen(
        [sys.executable, "-m", "dlrm_exp", "-m", "train.epochs=1,1000",
         "train.early_stopping.patience=null", *TINY, f"hydra.sweep.dir={sweep}"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 240
    while not (sweep / "1" / "dlrm_exp.log").is_file() and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(3)  # the second job (1000 epochs) is training
    job.send_signal(signal.SIGTERM)
    out, err = job.communicate(timeout=120)
    assert job.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "The sweep was interrupted; the jobs that finished:" in out
    assert "Interrupted (SIGTERM)" in err and "Traceback" not in err
    # run again in its own folders (the default one is new each time), from its start: it
    # saved no step checkpoint to continue from (it promised to: diff review)
    assert (
        "it saved no step checkpoint (train.checkpoint_every_n_steps): the same -m command with "
        f"hydra.sweep.dir={sweep} trains it again from its start"
    ) in err
    rows = list(csv.DictReader((sweep / "summary.csv").open()))
    assert [(r["run"], r["status"]) for r in rows] == [
        ("train.epochs=1", "completed"),
        ("train.epochs=1000", "interrupted"),
    ]
    record = json.loads((sweep / "1" / "metrics.json").read_text())
    assert record == {"status": "interrupted", "error": "interrupted by SIGTERM",
                      "error_type": "Terminated"}  # fmt: skip


def test_a_process_forked_under_the_sigterm_handler_dies_of_sigterm():
    """A worker forked inside the block (preprocess, a DataLoader) inherits the handler: it
    raised ``Terminated`` there, a traceback in a process that only had to stop."""
    import os
    import signal
    import time

    from dlrm_exp.cli import _stop_on_sigterm
    from dlrm_exp.errors import Terminated

    with _stop_on_sigterm():
        child = os.fork()
        if child == 0:  # pragma: no cover - the child process
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(10)
                os._exit(0)
            except Terminated:
                os._exit(3)
        _, status = os.waitpid(child, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM


def test_a_resume_marks_what_the_earlier_event_files_logged_after_its_checkpoint(tmp_path):
    """A run killed at step 5 after a checkpoint at step 2, resumed: steps 3-5 were in the
    folder's event files twice, and EventAccumulator (or a pandas export) read both
    (TensorBoard review). The resume writes TensorBoard's SessionLog.START at step 3."""
    import time

    first = Tracker(tmp_path, enabled=True)
    for step in range(1, 6):
        first.scalar("train/loss", 1.0 / step, step)
    first.close()
    time.sleep(1.1)  # another event file name (they differ by the second)
    resumed = Tracker(tmp_path, enabled=True)
    resumed.purge_from(3)
    for step in range(3, 7):
        resumed.scalar("train/loss", 1.0 / step, step)
    resumed.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2, 3, 4, 5, 6]


def test_each_set_aside_of_tensorboard_points_gets_a_folder_of_its_own(tmp_path):
    """Two resumes in other steps from one checkpoint step (or two abandoned attempts) moved
    their event files into one subfolder, mixing two histories in one curve (re-read)."""
    import time

    for attempt in range(3):
        tracker = Tracker(tmp_path, enabled=True)
        aside = tracker.restart_history("tensorboard_before_step_8", [], [])
        tracker.scalar("train/loss", 1.0, 1)
        tracker.close()
        time.sleep(1.1)  # another event file name (they differ by the second)
        want = [None, "tensorboard_before_step_8", "tensorboard_before_step_8_2"][attempt]
        assert (aside and aside.name) == want
    for name in ("tensorboard_before_step_8", "tensorboard_before_step_8_2"):
        assert len(list((tmp_path / name).glob("events.out.tfevents.*"))) == 1


def test_a_swept_value_resolving_through_hydra_is_not_called_refused(tmp_path, cli_here):
    """``${hydra:runtime.cwd}`` resolved nowhere when the sweep check built the jobs, so every
    job was said to be refused, then ran (review)."""
    (tmp_path / "x.tsv").write_text("")
    path = "data.path=${hydra:runtime.cwd}/x.tsv"
    args = ["-m", "mode=plan", "seed=0,1", "data=criteo_tsv", path, f"hydra.sweep.dir={tmp_path}/s"]
    done = cli_here(args, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "will be refused" not in done.stdout + done.stderr


def test_a_tracker_never_written_to_leaves_no_event_file(tmp_path):
    """A run refused before it logged anything (a checkpoint that cannot be loaded) left an
    empty event file in its folder (review); one that logs opens its file then."""
    idle = Tracker(tmp_path / "idle", enabled=True)
    idle.close()
    assert not list((tmp_path / "idle").glob("events.out.tfevents.*"))
    used = Tracker(tmp_path / "used", enabled=True)
    used.scalar("train/loss", 0.5, 1)
    used.close()
    assert len(list((tmp_path / "used").glob("events.out.tfevents.*"))) == 1


def test_an_interrupted_submitit_launcher_says_its_jobs_run_on(monkeypatch):
    """Its jobs, started by submitit, trained on to their end while the line gave a single
    run's hint (launch review)."""
    from omegaconf import OmegaConf

    from dlrm_exp import cli

    target = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher"
    sweep = OmegaConf.create({"hydra": {"launcher": {"_target_": target},
                                        "sweep": {"dir": "/s"}}})  # fmt: skip
    monkeypatch.setattr(cli, "_job_folder", None)
    hint = cli._launched_jobs_hint(sweep)
    assert hint is not None and hint.startswith("the jobs the launcher started run on to their end")
    assert "the same -m command with hydra.sweep.dir=/s then runs those" in hint
    assert cli._launched_jobs_hint(None) is None
    basic = OmegaConf.create({"hydra": {"launcher": {"_target_": "hydra._internal.BasicLauncher"},
                                        "sweep": {"dir": "/s"}}})  # fmt: skip
    assert cli._launched_jobs_hint(basic) is None
    monkeypatch.setattr(cli, "_job_folder", (True, "/s/0", "train", None))  # a job ran here
    assert cli._launched_jobs_hint(sweep) is None


def test_settings_that_change_no_result_leave_saved_and_new_identities_alike():
    """A baseline saved with train.progress_bar=false in a single run's identity paired with
    no new run, and a dropped train.resume=auto was shown as unset (diff review)."""
    from dlrm_exp.record.runs import override_differences, recanonical

    assert recanonical("optimizer=sgd,train.progress_bar=false") == "optimizer=sgd"
    assert recanonical("train.resume=/x/step_4,optimizer=sgd") == (
        "optimizer=sgd,train.resume=/x/step_4"
    )  # a path starts from another run's weights: it counts
    assert override_differences(["seed=0", "train.resume=/x/step_4"],
                                ["seed=0", "train.resume=auto"]) == {
        "train.resume": ("/x/step_4", "auto")
    }  # fmt: skip
    assert override_differences(["train.resume=auto", "train.progress_bar=false"], []) == {}
