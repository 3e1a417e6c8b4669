"""Sharded DCP checkpoints: atomic saves, bitwise resume, kill -9 then resume, bad checkpoints,
non-finite losses, determinism."""

import json
import logging
import math
import os
import pickle
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import REPO, compose_cfg, two_process_job
from conftest import SMALL as QUICK
from dlrm_exp.data import batches
from dlrm_exp.errors import (
    ConfigError,
    FinishedRunKeptError,
    NonFiniteLossError,
    RunFolderInUseError,
)
from dlrm_exp.factories import experiment
from dlrm_exp.loop import checkpoint as checkpoint_module
from dlrm_exp.loop import trainer
from dlrm_exp.loop.checkpoint import (
    CHECKPOINTS,
    STATE_FILE,
    CheckpointError,
    SafeFileSystemReader,
    _dcp_load,
    complete_checkpoints,
    resume_step,
)
from dlrm_exp.loop.run_folder import check_run_folder
from dlrm_exp.loop.settings import change_line, setting_changes
from dlrm_exp.modes import resume as resume_mode
from dlrm_exp.modes import train as train_mode
from dlrm_exp.modes.train import run_train, summary
from dlrm_exp.record.run_record import RunMetrics

SMALL = [*QUICK, "train.val_every_n_steps=16", "train.checkpoint_every_n_steps=8"]
QUALITY = ("val", "test", "val_history", "final_train_loss", "steps", "train_samples",
           "train_windows")  # fmt: skip


def _same_results(a: RunMetrics, b: RunMetrics) -> None:
    for key in QUALITY:
        assert getattr(a, key) == getattr(b, key), key


def test_resume_continues_bitwise_and_prunes(tmp_path, caplog, monkeypatch):
    synced = []
    for name in ("sync_file", "sync_folder"):
        real = getattr(checkpoint_module, name)
        recording = lambda path, real=real: synced.append(path) or real(path)  # noqa: E731
        monkeypatch.setattr(checkpoint_module, name, recording)
    full = run_train(compose_cfg([*SMALL, "train.keep_last_checkpoints=2"]), tmp_path / "a", {})
    kept = complete_checkpoints(tmp_path / "a")
    assert [p.name for p in kept] == ["step_24", "step_32"]  # 32 steps; older ones pruned
    # on the disk before a folder is named complete, and its new name too (loop review: only
    # trainer_state.json was synced; a power loss could leave empty generator files)
    checkpoints = tmp_path / "a" / CHECKPOINTS
    assert checkpoints / "step_8.partial" / "rng_rank0.pt" in synced and checkpoints in synced
    state = json.loads((kept[0] / "trainer_state.json").read_text())
    assert state["step"] == 24 and state["tables"]["t_cat_0"] == [1000, 16]
    final = json.loads((kept[1] / "trainer_state.json").read_text())  # written after validating
    assert (
        [h["step"] for h in final["val_history"]]
        == [16, 32]
        == [h["step"] for h in full.val_history]
    )
    # a later run folder holding only step 24, plus a save that never finished
    resumed_dir = tmp_path / "b" / "checkpoints"
    resumed_dir.mkdir(parents=True)
    shutil.copytree(kept[0], resumed_dir / "step_24")
    (resumed_dir / "step_32.partial").mkdir()
    cfg = compose_cfg([*SMALL, "train.resume=auto"])
    built = []  # the first row of every training batch built: none of the 24 steps trained
    original = batches.make_batch

    def spy(data, start, stop, keys):
        if len(data) == 4096:  # the training split
            built.append(start)
        return original(data, start, stop, keys)

    monkeypatch.setattr(batches, "make_batch", spy)
    initialized = []  # the checkpoint's weights replace the initial ones: none are computed
    monkeypatch.setattr(experiment, "init_tables", lambda *args: initialized.append(args))
    resumed = run_train(cfg, tmp_path / "b", {})
    monkeypatch.undo()
    assert built == [step * 128 for step in range(24, 32)] and initialized == []
    _same_results(resumed, full)
    # the summary's samples/s are of this run's steps: it says which (the total beside them
    # read as one run's: what-ran review)
    assert "train 32 steps (25-32 in this run, resumed at step 24) |" in summary(resumed, tmp_path)
    assert "train 32 steps |" in summary(full, tmp_path)
    # 8 steps were left: the warm-up (10 by default) shrinks to half of them, so the resumed
    # job still measures its throughput, over its own steps after that warm-up
    assert resumed.samples_per_sec is not None and resumed.step_time_ms["p50"] is not None
    # bytes per step over the 8 steps it trained (not over all 32: a quarter)
    assert resumed.comm_bytes_per_step["input_dist"] == pytest.approx(
        full.comm_bytes_per_step["input_dist"], rel=0.1
    )
    # resumed again where training ended: nothing to train, the measured record is kept
    record = (tmp_path / "b" / "metrics.json").read_bytes()
    again = run_train(cfg, tmp_path / "b", {})
    assert (tmp_path / "b" / "metrics.json").read_bytes() == record
    assert again.samples_per_sec == resumed.samples_per_sec
    # from the end in another folder: a record of no trained step measures no bytes or speed
    ended = compose_cfg([*SMALL, f"train.resume={kept[1]}", "optimizer.learning_rate=0.05",
                         "train.max_steps=24", "qcomms=fp16"])  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="dlrm_exp"):
        empty = run_train(ended, tmp_path / "c", {})
    assert empty.steps == 32 and empty.comm_bytes_per_step == {}
    assert empty.samples_per_sec is None and empty.val == full.val
    assert "train 32 steps (none in this run, resumed at step 32)" in summary(empty, tmp_path)
    # a setting that changes the update was accepted without a word
    assert "1 setting(s) differ from the run that wrote" in caplog.text
    assert "optimizer.learning_rate 0.1 -> 0.05" in caplog.text
    # qcomms=fp16 on one rank runs no collective: no change of the update (it was said to be
    # one: what-ran review); what the collectives ran in is what a resume compares
    assert "qcomms" not in caplog.text.split("setting(s) differ")[1].split("\n")[0]
    # and metrics.json says so (only the log did: resume review)
    assert empty.resumed["checkpoint"] == str(kept[1]) and empty.resumed["step"] == 32
    assert "optimizer.learning_rate 0.1 -> 0.05" in empty.resumed["changed_settings"]
    assert full.resumed == {}
    assert "the checkpoint is at step 32, past this job's last step 24" in caplog.text
    # at this job's last step (another world size's steps, or max_steps equal): "train 32
    # steps | n/a samples/s" without a word (README walk-through)
    at_end = compose_cfg([*SMALL, f"train.resume={kept[1]}", "train.max_steps=32"])
    with caplog.at_level(logging.WARNING, logger="dlrm_exp"):
        run_train(at_end, tmp_path / "d", {})
    assert "the checkpoint is at this job's last step 32 (train.max_steps" in caplog.text
    # from its earlier step_24 in its own folder, beside its later step_32: refused (pruning and
    # resume=auto would take the later branch), the folder untouched
    back = compose_cfg([*SMALL, f"train.resume={kept[0]}", "train.keep_last_checkpoints=1"])
    with pytest.raises(CheckpointError, match=r"holds later checkpoints \(step_32\)"):
        run_train(back, tmp_path / "a", {})
    # refused before any worker starts: from a worker, the hint to rerun the same command
    # followed (review)
    monkeypatch.setattr(train_mode, "run_on_ranks", lambda *a: pytest.fail("a worker started"))
    with pytest.raises(CheckpointError, match=r"holds later checkpoints \(step_32\)"):
        run_train(back, tmp_path / "a", {})
    monkeypatch.undo()
    # a sweep's job is told of the key a sweep reads (it was told hydra.run.dir: re-read)
    monkeypatch.setattr(train_mode, "_in_multirun", lambda: True)
    with pytest.raises(CheckpointError, match=r"resume into another sweep folder \(hydra.sweep"):
        run_train(back, tmp_path / "a", {})
    assert [p.name for p in complete_checkpoints(tmp_path / "a")] == ["step_24", "step_32"]


def test_a_fresh_run_into_a_folder_with_checkpoints_is_refused_and_keeps_its_record(
    tmp_path, cli_here
):
    """Training again into a run folder without resuming mixed the two runs' checkpoints:
    evaluate, predict, export and ``train.resume=auto`` then took the earlier run's. A sweep
    run again into its folder keeps each job's record (a failure record replaced it)."""
    run_dir = tmp_path / "sweep" / "0"
    first = ["-m", *SMALL, "train.max_steps=8", f"hydra.sweep.dir={run_dir.parent}"]
    assert cli_here(first).returncode == 0
    record = (run_dir / "metrics.json").read_bytes()
    same = cli_here(first)
    assert (
        (  # a finished job's: kept, said as such (an error line before: diff review)
            f"{run_dir} holds the record of a run that finished (metrics.json) and its checkpoints "
            "(step_8), kept: train.resume=auto trains it on where more steps are asked for"
        )
        in same.stderr
        and "Error in job" not in same.stderr
        and same.returncode == 0
    )
    # with another setting that record is not this job's: it was kept as its own, exit 0
    # (sweeps review); now the job did not run, and the sweep says why
    other = cli_here([*first, "optimizer.learning_rate=0.05"])
    assert (
        other.returncode == 1
        and (
            f"{run_dir} holds the record of this job run with other settings "
            "(optimizer.learning_rate - / 0.05: there / here"
        )
        in other.stderr
    )
    assert (run_dir / "metrics.json").read_bytes() == record  # still the first run's record
    assert [p.name for p in complete_checkpoints(run_dir)] == ["step_8"]
    assert cli_here([*first, "train.resume=auto"]).returncode == 0  # resuming is the way on


def test_a_job_begun_from_a_checkpoint_continues_when_rerun_with_it(tmp_path, monkeypatch, caplog):
    """An interrupted sweep started with ``train.resume=PATH`` had no command that finished
    it: the same one refused the job's own step checkpoints, and ``train.resume=auto``
    started the jobs that had not run afresh, not from PATH (review). Given PATH again, the
    sweep's job of the same swept values continues its attempt's newest checkpoint, as the
    uninterrupted run would have trained (a fixed setting changed too: warned of, as with
    auto); another job's (an edited sweep list), or checkpoints begun elsewhere, stay
    refused."""
    run_train(compose_cfg([*SMALL, "train.max_steps=8"]), tmp_path / "base", {})
    start = tmp_path / "base" / CHECKPOINTS / "step_8"
    asked = [*SMALL, f"train.resume={start}", "train.max_steps=24"]
    job_of = {"train.max_steps": 24}  # the sweep's job: its swept values
    direct = run_train(compose_cfg(asked), tmp_path / "direct", {}, swept=job_of)
    real_save = train_mode.save_checkpoint

    def interrupted_after_16(run_dir, step, *args, **kwargs):
        saved = real_save(run_dir, step, *args, **kwargs)
        if saved.name == "step_16":
            raise KeyboardInterrupt
        return saved

    monkeypatch.setattr(train_mode, "save_checkpoint", interrupted_after_16)
    job = tmp_path / "sweep" / "1"
    with pytest.raises(KeyboardInterrupt):
        run_train(compose_cfg(asked), job, {}, swept=job_of)
    monkeypatch.undo()
    RunMetrics.interrupted("SIGINT", "KeyboardInterrupt").write(job / "metrics.json")
    timeout = "hardware.collective_timeout_s=1200"  # (the fix after a collective timed out)
    with caplog.at_level(logging.WARNING, logger="dlrm_exp"):
        again = run_train(compose_cfg([*asked, timeout]), job, {}, swept=job_of)
    assert "holds this job's earlier attempt, begun from that checkpoint" in caplog.text
    assert again.resumed["checkpoint"] == str(job / CHECKPOINTS / "step_16")
    # where the training began, in the record (it named only its own checkpoint: diff review)
    began = {"checkpoint": str(start.resolve()), "step": 8, "changed_settings": []}
    assert again.resumed["started_from"] == began
    _same_results(again, direct)
    # another job given the folder (a sweep rerun with an edited list numbers its jobs into
    # other jobs' folders: it continued their attempts: diff review), or checkpoints begun
    # from another checkpoint (a copy of it elsewhere): refused as before
    RunMetrics.interrupted("SIGINT", "KeyboardInterrupt").write(job / "metrics.json")
    edited = compose_cfg([*SMALL, f"train.resume={start}", "train.max_steps=32"])
    with pytest.raises(RunFolderInUseError, match="checkpoints of an earlier run"):
        run_train(edited, job, {}, swept={"train.max_steps": 32})
    # whose, in a sweep: auto would continue it (diff review)
    monkeypatch.setattr(train_mode, "_in_multirun", lambda: True)
    whose = "another job of an earlier sweep, train.max_steps=24 (best, step_16, step_24): train"
    with pytest.raises(RunFolderInUseError, match=re.escape(whose)):
        run_train(edited, job, {}, swept={"train.max_steps": 32})
    # with train.resume=auto too (it continued that job's attempt, or replaced a finished
    # job's record with one of no step trained, its best removed: diff review)
    auto = compose_cfg([*SMALL, "train.resume=auto", "train.max_steps=32"])
    with pytest.raises(RunFolderInUseError, match=re.escape(whose)):
        run_train(auto, job, {}, swept={"train.max_steps": 32})
    monkeypatch.undo()
    other = tmp_path / "copy" / CHECKPOINTS / "step_8"
    shutil.copytree(start, other)
    elsewhere = compose_cfg([*SMALL, f"train.resume={other}", "train.max_steps=24"])
    with pytest.raises(RunFolderInUseError, match="checkpoints of an earlier run"):
        run_train(elsewhere, job, {}, swept=job_of)


def test_a_resume_that_validates_on_other_rows_forgets_the_checkpoints_validations(
    tmp_path, caplog, monkeypatch
):
    """Resumed from a seed-0 checkpoint with seed=1 on generated data (other rows), a job
    kept that run's best: it reported that run's val AUROC and scored the test split with
    its weights, though its own validations never came near (review). Another learning rate
    on the same rows keeps the history."""
    base = run_train(compose_cfg([*SMALL, "train.max_steps=16"]), tmp_path / "base", {})
    start = f"train.resume={tmp_path / 'base' / CHECKPOINTS / 'step_16'}"
    with caplog.at_level(logging.WARNING, logger="dlrm_exp"):
        reseeded = run_train(compose_cfg([*SMALL, start, "seed=1"]), tmp_path / "s1", {})
    assert [h["step"] for h in reseeded.val_history] == [32]  # its own validation only
    assert reseeded.val["auroc"] == reseeded.val_history[0]["auroc"]
    assert "seed 0 -> 1 give this run other validation rows than the run of" in caplog.text
    # nothing left to train: the weights validated on this run's rows (the record gave the
    # checkpoint's run's val AUROC beside a test AUROC of this run's rows: diff review)
    ended_there = compose_cfg([*SMALL, start, "seed=1", "train.max_steps=16"])
    assert run_train(ended_there, tmp_path / "z", {}).val["auroc"] != base.val["auroc"]
    relearned = compose_cfg([*SMALL, start, "optimizer.learning_rate=0.05"])
    assert [h["step"] for h in run_train(relearned, tmp_path / "lr", {}).val_history] == [16, 32]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    # a folder of its own shows the validations it kept, one of which it may report (its
    # curve began after the resume: review)
    events = EventAccumulator(str(tmp_path / "lr"))
    events.Reload()
    assert [e.step for e in events.Scalars("val/auroc")] == [16, 32]
    # so does a sweep's job that replaces its abandoned attempt (which logged nothing: diff
    # review)
    (tmp_path / "attempt").mkdir()
    (tmp_path / "attempt" / "metrics.json").write_text(json.dumps({"status": "failed"}))
    with monkeypatch.context() as patched:
        patched.setattr(train_mode, "_in_multirun", lambda: True)
        run_train(relearned, tmp_path / "attempt", {})
    events = EventAccumulator(str(tmp_path / "attempt"))
    events.Reload()
    assert [e.step for e in events.Scalars("val/auroc")] == [16, 32]
    # in its own folder, the earlier points leave TensorBoard's curve too (they stayed in it
    # beside the new rows': diff review)

    more_rows = compose_cfg([*SMALL, "train.resume=auto", "data.num_val_samples=512"])
    run_train(more_rows, tmp_path / "base", {})
    events = EventAccumulator(str(tmp_path / "base"))
    events.Reload()
    assert [e.step for e in events.Scalars("val/auroc")] == [32]
    assert list((tmp_path / "base" / "tensorboard_before_step_16").glob("events.out.*"))
    # nothing left to train beside a finished record: kept whole, nothing said set aside (it
    # said so, then kept them; then a zero-step record replaced it, its best removed: diff
    # reviews)
    record = (tmp_path / "base" / "metrics.json").read_bytes()
    caplog.clear()
    ended = compose_cfg([*SMALL, "train.resume=auto", "data.num_val_samples=256"])
    with caplog.at_level(logging.WARNING, logger="dlrm_exp"):
        run_train(ended, tmp_path / "base", {})
    assert "nothing left to train" in caplog.text and "set aside" not in caplog.text
    assert "its validations are of that run's rows, not of this job's (data.num_val" in caplog.text
    assert (tmp_path / "base" / "metrics.json").read_bytes() == record
    # the training window of other rows is not restored, though the checkpoint had no
    # validation to forget (the gap paired another run's window: diff review)
    early = f"train.resume={tmp_path / 'base' / CHECKPOINTS / 'step_8'}"
    reseeded = compose_cfg([*SMALL, early, "seed=1", "train.max_steps=16"])
    windows = run_train(reseeded, tmp_path / "w", {}).train_windows
    monkeypatch.setattr(resume_mode, "_restore_window", lambda *args: None)
    assert run_train(reseeded, tmp_path / "w2", {}).train_windows == windows
    # a stop reached on the other rows is no stop here: it trains on (it kept the other
    # run's record and trained nothing: diff review)
    target = [*SMALL, "train.target_auroc=0.5"]
    assert run_train(compose_cfg(target), tmp_path / "t", {}).steps == 16  # reached at 16
    on = run_train(compose_cfg([*target, "train.resume=auto", "seed=1"]), tmp_path / "t", {})
    assert [h["step"] for h in on.val_history] == [32]


def test_only_what_decides_the_validation_rows_counts_as_changing_them(tmp_path, monkeypatch):
    """Every data key but three counted: another test split, a planner's pooling factor, the
    next day's training file beside a fixed validation file, or one file typed relative then
    absolute threw the checkpoint's validations away (diff review)."""
    from dlrm_exp.loop.settings import (
        resolved_inputs,
        setting_changes,
        validation_changes,
    )

    synthetic = compose_cfg([]).data
    val = ("val",)
    assert synthetic.decides_rows("seed", val) and synthetic.decides_rows("data.base_logit", val)
    assert not synthetic.decides_rows("data.num_test_samples", val)
    tsv = compose_cfg(["data=criteo_tsv", "data.path=a.tsv", "data.val_path=v.tsv"]).data
    feature = "data.schema.sparse.cat_0"
    keys = ("seed", "data.path", "data.val_path", "data.test_fraction",
            f"{feature}.pooling_factor", f"{feature}.id_policy")  # fmt: skip
    decided = [k for k in keys if tsv.decides_rows(k, val)]
    assert decided == ["data.val_path", f"{feature}.id_policy"]
    cut = compose_cfg(["data=criteo_tsv", "data.path=a.tsv"]).data  # validation cut from path
    assert cut.decides_rows("data.path", val) and cut.decides_rows("data.test_fraction", val)
    # the files a checkpoint records: one typed relative, or from another folder, is the
    # same file; a symlink moved to another day is another (diff reviews)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "day2.tsv").write_text("")
    (tmp_path / "cur.tsv").symlink_to(tmp_path / "a.tsv")
    saved = resolved_inputs({"data.path": ["cur.tsv"], "data.val_path": str(tmp_path / "a.tsv")})
    (tmp_path / "cur.tsv").unlink()
    (tmp_path / "cur.tsv").symlink_to(tmp_path / "day2.tsv")
    here = resolved_inputs({"data.path": ["cur.tsv"], "data.val_path": "a.tsv"})
    assert _change_lines(saved, here) == [
        f"data.path ['{tmp_path / 'a.tsv'}'] -> ['{tmp_path / 'day2.tsv'}']"
    ]
    # a checkpoint of an earlier version recorded the path as typed: the file it names from
    # here (every resume of one was a change of data, its validations forgotten)
    typed = {"data.path": ["cur.tsv"], "data.val_path": "a.tsv"}
    assert _change_lines(typed, here) == []
    # a run records the file it read, wherever it was typed from
    from dlrm_exp.data.criteo_format import write_criteo_tsv

    (tmp_path / "days").mkdir()
    write_criteo_tsv(tmp_path / "days" / "day.tsv", 256)
    ran = ["data=criteo_tsv", "data.path=days", "train.batch_size=64", "train.max_steps=2",
           "train.checkpoint_every_n_steps=2", "train.progress_bar=false"]  # fmt: skip
    run_train(compose_cfg(ran), tmp_path / "run", {})
    recorded = json.loads((tmp_path / "run" / CHECKPOINTS / "step_2" / STATE_FILE).read_text())
    assert recorded["settings"]["data.path"] == [str(tmp_path / "days")]
    # and the files it names: a day added to the folder moves the validation cut of the
    # same path (it was no change: a review's reading)
    assert recorded["settings"]["data.path.files"].startswith("1 file, ")
    write_criteo_tsv(tmp_path / "days" / "day2.tsv", 64)
    now = compose_cfg(ran)
    job = train_mode.job_settings(now)
    added = _change_lines(recorded["settings"], job)
    assert [c.split(" ", 1)[0] for c in added] == ["data.path.files"] and "-> 2 files, " in added[0]
    # the warning says where the digests are: no config file holds them (npy review)
    from dlrm_exp.modes.resume import _digests_where

    assert "trainer_state.json" in _digests_where(setting_changes(recorded["settings"], job))
    assert _digests_where([("seed", 0, 1)]) == ""

    def moved(data, saved, job):
        changes = setting_changes(saved, job)
        return validation_changes(changes, lambda *change: data.rows_differ(*change, val))

    assert moved(now.data, recorded["settings"], job) == added
    assert not tsv.decides_rows("data.path.files", val)  # validation from v.tsv: not moved
    saved = {"data.path": ["a"], "data.val_path": None, "data": "Parquet"}
    here = {"data.path": ["b"], "data.val_path": ["v"], "data": "Tsv"}
    assert moved(tsv, saved, here) == ["data Parquet -> Tsv",
                                       "data.val_path None -> ['v']"]  # fmt: skip
    # another test file moves no validation row, a test split cut or read from a file does
    # (the checkpoint's validations and best were forgotten for the next day's test: review)
    cut = compose_cfg(["data=criteo_tsv", "data.path=a.tsv", "data.test_path=t.tsv"]).data
    assert moved(cut, {"data.test_path": ["t1"]}, {"data.test_path": ["t2"]}) == []
    assert moved(cut, {"data.test_path": None}, {"data.test_path": ["t2"]}) != []


def test_a_failed_workers_hint_keeps_the_checkpoint_the_run_began_from(tmp_path, monkeypatch):
    """A job begun from ``train.resume=PATH`` continues with that PATH (its folder's attempt
    is taken up); the hint said ``train.resume=auto``, which starts a sweep's jobs not yet
    run afresh (re-read)."""
    from dlrm_exp.errors import WorkerFailedError

    def saved(step: Path) -> None:
        step.mkdir(parents=True)
        (step / ".metadata").write_bytes(b"")
        (step / STATE_FILE).write_text('{"step": 4, "samples": 512}')

    def a_worker_fails(*args):
        saved(tmp_path / "run" / CHECKPOINTS / "step_4")
        raise WorkerFailedError("rank 1 failed")

    start = tmp_path / "base" / CHECKPOINTS / "step_8"
    saved(start)
    monkeypatch.setattr(train_mode, "run_on_ranks", a_worker_fails)
    for resume, again in ((f"train.resume={start}", ""), ("seed=0", " train.resume=auto")):
        shutil.rmtree(tmp_path / "run", ignore_errors=True)
        with pytest.raises(WorkerFailedError) as failed:
            run_train(compose_cfg([*QUICK, resume]), tmp_path / "run", {})
        assert str(failed.value) == (
            "rank 1 failed; the complete checkpoints stay (newest: step_4): once what failed "
            f"is mended, the same command with hydra.run.dir={tmp_path / 'run'}{again} "
            "continues from it"
        )


def test_a_resume_with_nothing_left_to_train_keeps_the_folders_config_and_plan(tmp_path, cli_here):
    """It kept the finished run's metrics.json but wrote its own .hydra config and plan.json
    beside it (another sharding), which sharding=from_file would then replay (review)."""
    first = [*SMALL, "train.max_steps=8", f"hydra.run.dir={tmp_path}"]
    assert cli_here(first).returncode == 0
    kept = {n: (tmp_path / n).read_bytes() for n in ("plan.json", ".hydra/overrides.yaml")}
    again = cli_here([*first, "sharding=tablewise", "train.resume=auto"])
    assert again.returncode == 0 and "nothing left to train" in again.stdout + again.stderr
    assert {n: (tmp_path / n).read_bytes() for n in kept} == kept


def test_a_pruned_checkpoint_is_never_left_looking_complete(tmp_path, monkeypatch):
    """A crash while pruning deleted some of a step's shards and left its metadata and trainer
    state: resume=auto then took it for complete (loop review). It is renamed first."""
    step = tmp_path / CHECKPOINTS / "step_8"
    step.mkdir(parents=True)
    for name in (".metadata", STATE_FILE, "__0_0.distcp"):
        (step / name).write_text("{}")
    monkeypatch.setattr(checkpoint_module.shutil, "rmtree", lambda *a, **k: None)  # the crash
    checkpoint_module._remove_folder(step)
    assert complete_checkpoints(tmp_path) == [] and (step.parent / "step_8.partial").is_dir()


def test_two_identical_runs_give_identical_metrics(tmp_path):
    first = run_train(compose_cfg(SMALL), tmp_path / "a", {})
    second = run_train(compose_cfg(SMALL), tmp_path / "b", {})
    _same_results(first, second)


def test_resume_auto_without_checkpoints_starts_fresh(tmp_path):
    cfg = compose_cfg([*SMALL, "train.max_steps=8", "train.resume=auto"])
    assert run_train(cfg, tmp_path, {}).steps == 8


def test_what_replaces_an_abandoned_attempt(tmp_path, caplog):
    """A failed or interrupted record with no step checkpoint is an abandoned attempt, which a
    job started afresh or from another run's checkpoint replaces, not one resumed from the
    folder's own best (that best was removed, then not found: diff review)."""
    from dlrm_exp.loop.run_folder import abandoned_attempt, drop_attempt_record, replaces_attempt

    def folder(name, status, steps=()):
        for step in ("best", *steps):
            (tmp_path / name / CHECKPOINTS / step).mkdir(parents=True)
            (tmp_path / name / CHECKPOINTS / step / ".metadata").write_bytes(b"")
            (tmp_path / name / CHECKPOINTS / step / STATE_FILE).write_text("{}")
        (tmp_path / name / "metrics.json").write_text(json.dumps({"status": status}))
        return tmp_path / name

    failed = folder("f", "failed")
    for run_dir in (folder("i", "interrupted", ["step_4"]), folder("c", "completed")):
        assert not abandoned_attempt(run_dir) and not replaces_attempt(run_dir, None)
    assert abandoned_attempt(failed)
    assert replaces_attempt(failed, None) and replaces_attempt(failed, "auto")
    assert replaces_attempt(failed, str(tmp_path / "other" / CHECKPOINTS / "step_8"))
    assert not replaces_attempt(failed, str(failed / CHECKPOINTS / "best"))
    # resumed from another run's checkpoint, keep_best=false: the attempt's best is no best of
    # this run from before its resume (it was refused so: diff review)
    check_run_folder(failed, str(tmp_path / "other" / CHECKPOINTS / "step_8"), keep_best=False)
    with caplog.at_level(logging.WARNING):
        drop_attempt_record(failed)
    assert not (failed / "metrics.json").exists() and (failed / CHECKPOINTS / "best").exists()
    assert "replacing the record of an earlier attempt that failed" in caplog.text


def test_a_resume_from_another_run_over_an_abandoned_attempt(tmp_path):
    """The attempt's best stayed with train.keep_best=false and evaluate scored it; its
    TensorBoard points joined the new run's curve (diff review): the best goes, the points
    move to tensorboard_earlier_attempt/."""
    run = [*QUICK, "train.max_steps=8", "train.val_every_n_steps=4"]
    run_train(compose_cfg([*run, "train.checkpoint_every_n_steps=4"]), tmp_path / "a", {})
    run_train(compose_cfg(run), tmp_path / "b", {})
    record = json.loads((tmp_path / "b" / "metrics.json").read_text())
    (tmp_path / "b" / "metrics.json").write_text(json.dumps({**record, "status": "failed"}))
    assert (tmp_path / "b" / CHECKPOINTS / "best").is_dir()
    time.sleep(1.1)  # another event file name (they differ by the second)
    step_4 = f"train.resume={tmp_path / 'a' / CHECKPOINTS / 'step_4'}"
    again = run_train(compose_cfg([*run, step_4, "train.keep_best=false"]), tmp_path / "b", {})
    assert again.status == "completed" and again.resumed["step"] == 4
    assert not (tmp_path / "b" / CHECKPOINTS / "best").exists()
    aside = tmp_path / "b" / "tensorboard_earlier_attempt"
    assert len(list(aside.glob("events.out.tfevents.*"))) == 1
    assert len(list((tmp_path / "b").glob("events.out.tfevents.*"))) == 1
    # an attempt killed outright (kill -9: its events, no record, no checkpoint): its points
    # before the checkpoint's step stayed in this run's curve (run-folder review)
    (tmp_path / "c").mkdir()
    shutil.copy(next(aside.glob("events.out.tfevents.*")), tmp_path / "c")
    time.sleep(1.1)
    run_train(compose_cfg([*run, step_4, "train.keep_best=false"]), tmp_path / "c", {})
    killed = tmp_path / "c" / "tensorboard_earlier_attempt"
    assert len(list(killed.glob("events.out.tfevents.*"))) == 1
    assert len(list((tmp_path / "c").glob("events.out.tfevents.*"))) == 1


def test_resume_auto_trains_an_interrupted_attempt_afresh_hiding_its_events(tmp_path):
    """An interrupted sweep job without a step checkpoint, rerun with train.resume=auto as
    the sweep's hint says, was refused (docs review): it trains afresh, and TensorBoard's
    SessionLog.START at step 0 hides the attempt's points."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.compat.proto.event_pb2 import SessionLog

    run = [*QUICK, "train.max_steps=8", "train.val_every_n_steps=4", "train.keep_best=false"]
    run_train(compose_cfg(run), tmp_path, {})
    record = json.loads((tmp_path / "metrics.json").read_text())
    (tmp_path / "metrics.json").write_text(json.dumps({**record, "status": "interrupted"}))
    time.sleep(1.1)  # another event file name (they differ by the second)
    again = run_train(compose_cfg([*run, "train.resume=auto"]), tmp_path, {})
    assert again.status == "completed" and again.steps == 8
    assert json.loads((tmp_path / "metrics.json").read_text())["status"] == "completed"
    files = sorted(tmp_path.glob("events.out.tfevents.*"))
    starts = [
        [e.step for e in EventFileLoader(str(f)).Load()
         if e.HasField("session_log") and e.session_log.status == SessionLog.START]
        for f in files
    ]  # fmt: skip
    assert starts == [[], [0]]
    # refused in the worker (a checkpoint to resume from that is not there), the rerun
    # removed nothing: the attempt's record was gone before the refusal (diff review)
    (tmp_path / "metrics.json").write_text(json.dumps({**record, "status": "interrupted"}))
    gone = f"train.resume={tmp_path / 'other' / CHECKPOINTS / 'step_8'}"
    with pytest.raises(CheckpointError, match="no checkpoint folder"):
        run_train(compose_cfg([*run, gone]), tmp_path, {})
    assert json.loads((tmp_path / "metrics.json").read_text())["status"] == "interrupted"


def test_a_fresh_start_refuses_an_earlier_runs_best_or_record(tmp_path):
    """Review: ``train.resume=auto`` finding no step checkpoint started fresh beside a finished
    run's ``checkpoints/best``, which evaluate then scored for this run's; a resume with
    ``train.keep_best=false`` left the best from before it to be scored; a fresh run that
    failed left the earlier run's ``metrics.json`` beside its own config. A requeued job
    killed before its first step checkpoint (only its ``best``, no record) starts fresh."""
    best = tmp_path / "a" / CHECKPOINTS / "best"
    best.mkdir(parents=True)
    (best / ".metadata").write_bytes(b"")
    (best / STATE_FILE).write_text("{}")
    check_run_folder(tmp_path / "a", "auto", keep_best=True)  # an interrupted attempt: on
    # a best alone is no checkpoint train.resume=auto continues: said (it was told to)
    alone = r"the best weights of an earlier run \(best\) and no step checkpoint to continue fr"
    with pytest.raises(RunFolderInUseError, match=alone):
        check_run_folder(tmp_path / "a", None, keep_best=True)
    with pytest.raises(RunFolderInUseError, match=r"train.keep_best=false, but .*best holds"):
        check_run_folder(tmp_path / "a", str(best), keep_best=False)
    # a sweep job interrupted (or failed) without a step checkpoint, rerun with
    # train.resume=auto as the sweep's hint says, starts afresh, its best dropped (it was
    # refused: docs review)
    for status in ("interrupted", "failed"):
        (tmp_path / "a" / "metrics.json").write_text(json.dumps({"status": status}))
        check_run_folder(tmp_path / "a", "auto", keep_best=True)
    (tmp_path / "a" / "metrics.json").write_text("{}")  # a finished run: kept, said so (the
    # refusal with resume=auto advised train.resume=auto: TensorBoard review; then removal)
    kept = r"a run that finished \(metrics.json\) and its best weights \(best\), kept, but no"
    with pytest.raises(RunFolderInUseError, match=kept):
        check_run_folder(tmp_path / "a", "auto", keep_best=True)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "metrics.json").write_text("{}")
    finished = r"the record of a run that finished \(metrics.json\), kept"
    with pytest.raises(RunFolderInUseError, match=finished + r": train into another folder "):
        check_run_folder(tmp_path / "b", None, keep_best=True)
    # a sweep's job is sent to another sweep folder, its record not offered for removal
    with pytest.raises(RunFolderInUseError, match=r"sweep folder \(hydra.sweep.dir=...\) to tra"):
        check_run_folder(tmp_path / "b", None, keep_best=True, multirun=True)
    # train.resume=auto: a finished run's record is kept too; an attempt that failed or was
    # interrupted and saved no step checkpoint is replaced, afresh or from another run's
    # checkpoint (an interrupted sweep rerun as its hint said was refused: docs review)
    with pytest.raises(RunFolderInUseError, match=finished + ", but no step checkpoint"):
        check_run_folder(tmp_path / "b", "auto", keep_best=True)
    # with step checkpoints too: kept, not an error in a sweep's rerun (diff review)
    (tmp_path / "e" / CHECKPOINTS / "step_4").mkdir(parents=True)
    (tmp_path / "e" / CHECKPOINTS / "step_4" / ".metadata").write_bytes(b"")
    (tmp_path / "e" / CHECKPOINTS / "step_4" / STATE_FILE).write_text("{}")
    (tmp_path / "e" / "metrics.json").write_text("{}")
    with pytest.raises(FinishedRunKeptError, match=r"and its checkpoints \(step_4\), kept: "):
        check_run_folder(tmp_path / "e", None, keep_best=True, multirun=True)
    with pytest.raises(RunFolderInUseError, match=finished):
        run_train(compose_cfg(SMALL), tmp_path / "b", {})  # as the run calls it
    for status in ("interrupted", "failed"):  # (no best either)
        (tmp_path / "b" / "metrics.json").write_text(json.dumps({"status": status}))
        for resume in ("auto", None, str(best)):
            check_run_folder(tmp_path / "b", resume, keep_best=True)


def test_a_resume_from_another_runs_checkpoint_refuses_a_folder_of_an_earlier_run(tmp_path):
    """Review: ``train.resume=<run C's step_10>`` into folder B holding an earlier run's
    ``step_10..step_40`` trained on, mixing the two: evaluate took B's old ``step_40``, and with
    ``keep_last_checkpoints=1`` pruning (by samples) removed the new checkpoint. A lone
    ``best`` is still adopted over (or removed), and B's own checkpoints resume as before."""

    def checkpoint(folder, name):
        path = folder / CHECKPOINTS / name
        path.mkdir(parents=True)
        (path / ".metadata").write_bytes(b"")
        (path / STATE_FILE).write_text('{"step": 10, "samples": 10}')
        return path

    other = checkpoint(tmp_path / "c", "step_10")
    checkpoint(tmp_path / "b", "best")
    check_run_folder(tmp_path / "b", str(other), keep_best=True)
    own = checkpoint(tmp_path / "b", "step_40")
    with pytest.raises(RunFolderInUseError, match=r"checkpoints of an earlier run \(step_40\)"):
        check_run_folder(tmp_path / "b", str(other), keep_best=True)
    check_run_folder(tmp_path / "b", str(own), keep_best=True)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "metrics.json").write_text("{}")
    with pytest.raises(RunFolderInUseError, match=r"the record of a run that finished \(metrics"):
        check_run_folder(tmp_path / "d", str(other), keep_best=True)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("saved")
    run_train(compose_cfg([*SMALL, "train.max_steps=8"]), run_dir, {})
    return run_dir / "checkpoints" / "step_8"


def test_a_checkpoint_of_another_model_shape_is_refused(saved, tmp_path):
    cfg = compose_cfg([*SMALL, "model.num_embeddings_cap=500", f"train.resume={saved}"])
    rows = r"its tables have other rows \(model.num_embeddings_per_feature / _cap"
    with pytest.raises(CheckpointError, match=r"another model shape \(t_cat_0: .*" + rows):
        run_train(cfg, tmp_path, {})
    # the key that differs: the refusal named only the run's model option, the one the job
    # was on (checkpoints review)
    from dlrm_exp.loop.checkpoint import _shape_keys

    saved_tables = {"t_cat_0": [1000, 16], "t_cat_1": [500, 16]}
    assert _shape_keys(saved_tables, {"t_cat_0": [1000, 8], "t_cat_1": [500, 8]}) == (
        "its model.embedding_dim is 16, this job's 8; "
    )
    # tables named by another feature schema (C1..C26 of data/schema=criteo): not a model
    # shape, which it said ("t_cat_0: checkpoint None"; Criteo review)
    from dlrm_exp.loop.checkpoint import _trainer_state_matching

    other = tmp_path / "schema_ckpt"
    other.mkdir()
    (other / "trainer_state.json").write_text(json.dumps({"tables": {"C1": [1000, 16]}}))
    with pytest.raises(CheckpointError, match=r"names its tables C1, this job t_cat_0.*another"
                       r" feature schema"):  # fmt: skip
        _trainer_state_matching(other, {"t_cat_0": [1000, 16]})
    # one table more than this job's (a feature added): it said "another model shape ()"
    both = {"t_cat_0": [1000, 16], "t_cat_1": [1000, 16]}
    (other / "trainer_state.json").write_text(json.dumps({"tables": both}))
    with pytest.raises(CheckpointError, match=r"names its tables t_cat_0, t_cat_1, this job "
                       r"t_cat_0: it was trained with another feature schema"):  # fmt: skip
        _trainer_state_matching(other, {"t_cat_0": [1000, 16]})
    # the dense part's shape: DCP's raw "Size mismatch ... dense_arch" now says why (review)
    dense = [*SMALL, "model.dense_arch_layer_sizes=[32,16]", f"train.resume={saved}"]
    with pytest.raises(CheckpointError, match=r"Size mismatch.*the checkpoint holds another "
                       r"model or optimizer: model.dense_arch_layer_sizes"):  # fmt: skip
        run_train(compose_cfg(dense), tmp_path / "dense", {})


def test_a_truncated_checkpoint_is_refused(saved, tmp_path):
    broken = tmp_path / "step_8"
    shutil.copytree(saved, broken)
    data = next(broken.glob("*.distcp"))
    data.write_bytes(data.read_bytes()[:100])
    cfg = compose_cfg([*SMALL, f"train.resume={broken}"])
    # the file named (DCP's own error was a bare EOFError)
    cut = rf"cannot be read: {re.escape(str(data))} is cut short \(100 of [\d,]+ bytes\)"
    # and how to go on: an earlier checkpoint beside it was refused (checkpoints review)
    cut += rf".*move the checkpoint\(s\) holding it aside \(mv {re.escape(str(broken))} .*"
    cut += rf"\.damaged\) and take an earlier one of its run folder \({re.escape(str(tmp_path))}"
    with pytest.raises(CheckpointError, match=cut):
        run_train(cfg, tmp_path / "run", {})
    (tmp_path / "best").mkdir()  # best and its step share files: each named (diff review)
    os.link(data, tmp_path / "best" / data.name)
    both = rf"\(mv {re.escape(str(broken))} \S+; mv {re.escape(str(tmp_path / 'best'))} "
    with pytest.raises(CheckpointError, match=both):
        _dcp_load(broken, {})
    (tmp_path / "best").rename(tmp_path / "best.damaged")  # set aside: not named again
    with pytest.raises(CheckpointError) as again:
        _dcp_load(broken, {})
    assert "best.damaged.damaged" not in str(again.value)
    data.unlink()
    with pytest.raises(CheckpointError, match=rf"{re.escape(str(data))} is missing"):
        _dcp_load(broken, {})


def test_ctrl_c_while_loading_is_an_interruption_not_a_damaged_checkpoint(saved, monkeypatch):
    """DCP wraps the KeyboardInterrupt (or SIGTERM's Terminated) in a CheckpointException:
    'checkpoint ... cannot be read: KeyboardInterrupt' sent users to delete a good one (crash
    review)."""
    import traceback

    from torch.distributed.checkpoint.api import CheckpointException

    from dlrm_exp.errors import Terminated
    from dlrm_exp.loop import checkpoint

    for stop in (KeyboardInterrupt(), Terminated(15)):

        def interrupted(*args, stop=stop, **kwargs):
            raise CheckpointException("load", {0: (stop, traceback.StackSummary())})

        monkeypatch.setattr(checkpoint.dcp, "load", interrupted)
        with pytest.raises(type(stop)):
            _dcp_load(saved, {})


def test_a_save_on_a_full_disk_is_one_line_saying_the_earlier_checkpoints_stand(
    tmp_path, monkeypatch
):
    """A 113-line traceback that never said the disk was full (torch.save fails there with
    'unexpected pos'; crash review, a 12 MB tmpfs); other failures stay as they are."""
    import errno
    import shutil as shutil_module
    from collections import namedtuple

    from dlrm_exp.loop import checkpoint

    final = tmp_path / "checkpoints" / "step_4"
    final.parent.mkdir(parents=True)
    refusal = checkpoint._full_disk(OSError(errno.ENOSPC, "No space left on device"), final)
    assert str(refusal).startswith(f"cannot save checkpoint {final}: no space left for it (")
    assert "the earlier checkpoints are intact" in str(refusal)
    assert checkpoint._full_disk(OSError(errno.EDQUOT, "Disk quota exceeded"), final)
    pos = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
    assert checkpoint._full_disk(pos, final) is None  # room left: not the disk's doing
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil_module, "disk_usage", lambda path: usage(10, 10, 1024))
    assert "(0.0 MiB free here)" in str(checkpoint._full_disk(pos, final))
    # nearly full, but another failure (a peer rank gone): not called a full disk (diff review)
    assert checkpoint._full_disk(RuntimeError("Connection closed by peer"), final) is None


def test_inputs_in_another_order_are_refused_and_renamed_columns_warned(tmp_path, caplog):
    """A schema listing the features or dense columns in another order scored the inputs
    swapped (own-data review); a file whose columns were only renamed was scored as before
    and must still be, while features keeping their names but reading each other's columns
    are a swap (diff reviews)."""
    check = checkpoint_module._check_inputs

    def inputs(sparse, dense):
        return {
            "sparse": [{"feature": f, "column": c} for f, c in sparse],
            "dense": [{"column": c, "log1p": log1p} for c, log1p in dense],
        }

    users, items = ("user_id", "user_id"), ("item", "item")
    price, hour = ("price", True), ("hour", False)
    trained = inputs([users, items], [price, hour])
    refused = {
        "sparse features in this order: user_id, item; this job's feature schema gives item,":
            inputs([items, users], [price, hour]),
        "from other columns: sparse feature user_id reads item, which the run read for item":
            inputs(
            [("user_id", "item"), ("item", "user_id")], [price, hour]),  # columns swapped
        "dense column 0 reads hour, which the run read for column 1": inputs(
            [users, items], [("hour", True), ("price", False)]),
        "dense columns price (log1p), hour; this job gives price, hour": inputs(
            [users, items], [("price", False), hour]),
        "dense columns price (log1p), hour; this job gives price (log1p)": inputs(
            [users, items], [price]),
    }  # fmt: skip
    for message, wanted in refused.items():
        with pytest.raises(CheckpointError, match=re.escape(message)):
            check(tmp_path, trained, wanted)
    with caplog.at_level(logging.WARNING, logger="dlrm_exp"):
        check(tmp_path, trained, trained)
        check(tmp_path, None, trained)  # a checkpoint without the record
        earlier = {"sparse": ["user_id", "item"], "dense": ["price (log1p)", "hour"]}
        check(tmp_path, earlier, trained)  # this record's first form: order and log1p agree
        assert not caplog.records
        check(tmp_path, trained, inputs([("user_id", "uid"), items], [("cost", True), hour]))
    assert "read from other columns than its run read (user_id -> uid, price -> cost)" in (
        caplog.text
    )
    with pytest.raises(CheckpointError, match="sparse features in this order: item, user_id"):
        check(tmp_path, {"sparse": ["item", "user_id"], "dense": ["price (log1p)", "hour"]},
              trained)  # fmt: skip
    shared = inputs([("item", "item"), ("item_hashed", "item")], [price])  # one column, twice
    check(tmp_path, shared, inputs([("item", "item"), ("item_hashed", "item")], [("cost", True)]))


def test_a_second_stop_inside_the_save_is_raised_as_itself(tmp_path, monkeypatch):
    """A Ctrl-C (or SIGTERM) repeated during a save stops it at once; DCP's save wraps it in
    a CheckpointException, which save_checkpoint unwraps: the interruption, not a failed
    save (its 111-line traceback and exit 1: crash review). A full disk inside DCP's wrapper
    is still told as one; another failure stays as it is."""
    import errno
    import traceback

    from torch.distributed.checkpoint.api import CheckpointException

    from dlrm_exp.errors import DiskFullError, Terminated

    def wrapped(exc: BaseException) -> CheckpointException:
        return CheckpointException("save", {0: (exc, traceback.StackSummary())})

    cases = [
        (wrapped(KeyboardInterrupt()), KeyboardInterrupt),
        (wrapped(Terminated(15)), Terminated),
        (wrapped(OSError(errno.ENOSPC, "No space left on device")), DiskFullError),
        (wrapped(RuntimeError("Connection closed by peer")), CheckpointException),
    ]
    for failure, raised in cases:

        def failing(*args, failure=failure):
            raise failure

        monkeypatch.setattr(checkpoint_module, "_save", failing)
        with pytest.raises(raised) as caught:
            checkpoint_module.save_checkpoint(tmp_path, 4, torch.nn.Linear(1, 1), None, {}, True)
        assert (caught.value is failure) == (raised is CheckpointException)


class _Payload:
    """Unpickling it would create the file ``path`` (what a crafted checkpoint could do)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.touch, (self.path,))


def test_crafted_metadata_is_not_unpickled(saved, tmp_path, caplog):
    crafted = tmp_path / "step_8"
    shutil.copytree(saved, crafted)
    marker = tmp_path / "code_ran"
    (crafted / ".metadata").write_bytes(pickle.dumps(_Payload(marker)))
    cfg = compose_cfg([*SMALL, f"train.resume={crafted}"])
    # Our check names the class it refused; an older DCP (torch 2.11) fails on the file first
    # ("metadata is None"), which we report as unreadable: either refusal is fine as long as
    # nothing was unpickled.
    refusals = r"not plain DCP metadata \(pathlib.*Path.touch|cannot be read: .*metadata is None"
    with pytest.raises(CheckpointError, match=refusals):
        run_train(cfg, tmp_path / "run", {})
    assert not marker.exists()
    # read before DCP, which logged a traceback for each fallback it tried (CLI review)
    (crafted / ".metadata").write_bytes(b"\x80garbage")
    caplog.clear()
    with pytest.raises(CheckpointError, match=r"cannot be read: .*not plain DCP metadata"):
        _dcp_load(crafted, {})
    assert not [r.getMessage() for r in caplog.records if r.exc_info]
    # a function reached through the metadata module's own imports (pickle resolves dotted
    # names): os.system of "torch.distributed.checkpoint.metadata" ran (loop review)
    (crafted / ".metadata").write_bytes(_dotted_global_call("os.system", f"touch {marker}"))
    with pytest.raises(CheckpointError, match=r"not plain DCP metadata|cannot be read"):
        SafeFileSystemReader(str(crafted)).read_metadata()
    assert not marker.exists()


def _dotted_global_call(name: str, argument: str) -> bytes:
    """A pickle (protocol 4) calling ``name`` of DCP's metadata module on ``argument``."""

    def text(value: str) -> bytes:  # SHORT_BINUNICODE
        return b"\x8c" + bytes([len(value.encode())]) + value.encode()

    module = "torch.distributed.checkpoint.metadata"
    return b"\x80\x04" + text(module) + text(name) + b"\x93" + text(argument) + b"\x85R."


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


def test_a_non_finite_loss_stops_the_run_naming_the_step(tmp_path, cli_here):
    """... and a profiled run that fails keeps its profile and leaves no profiler running in
    the process (a later ``-m`` job in it would be profiled)."""
    result = cli_here(
        [
            *SMALL,
            "optimizer=sgd",
            "optimizer.dense_learning_rate=1e30",
            "train.checkpoint_every_n_steps=1",
            "train.profile=true",
            f"hydra.run.dir={tmp_path}",
        ]
    )
    assert not torch.autograd.profiler._is_profiler_enabled
    assert (tmp_path / "profile" / "rss_rank0.csv").is_file()
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: training loss is ") and " at step " in last
    assert "Traceback" not in result.stderr
    assert complete_checkpoints(tmp_path)  # the checkpoints before the bad step are kept
    assert not (tmp_path / "metrics.json").exists()


def _write_days(folder: Path, train: list[np.ndarray], test: list[np.ndarray]) -> None:
    """Day 0 = the ``train`` (dense, sparse, labels) rows, day 1 = ``test``'s (val / test)."""
    folder.mkdir()
    for day, arrays in enumerate((train, test)):
        for kind, array in zip(("dense", "sparse", "labels"), arrays, strict=True):
            np.save(folder / f"day_{day}_{kind}.npy", array)


def _click_rows(rows: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    dense = rng.random((rows, 13), dtype=np.float32)
    return [dense, rng.integers(0, 1000, (rows, 26)), rng.integers(0, 2, (rows, 1))]


def _skip_args(tmp_path: Path, nproc: int) -> list[str]:
    """Days with an inf dense value in step 3's global batch of 128 (in rank 0's part), in
    ``bad``, and without that batch, in ``clean``; the run's overrides."""
    train, held_out = _click_rows(1024, 1), _click_rows(512, 2)
    train[0][300, 4] = np.inf  # row 300 is in the third global batch of 128
    _write_days(tmp_path / "bad", train, held_out)
    _write_days(tmp_path / "clean", [np.delete(a, range(256, 384), 0) for a in train], held_out)
    return [
        "data=criteo_npy",
        f"train.batch_size={128 // nproc}",
        "train.progress_bar=false",
        f"hardware.nproc_per_node={nproc}",
        "optimizer.lr_warmup_steps=6",  # a skip leaves the schedule too (it did not)
        "train.on_nonfinite=skip",
    ]


def test_on_nonfinite_stop_names_the_step_and_skip_equals_training_without_the_batch(tmp_path):
    """``stop`` names step 3; ``skip`` counts it and ends bitwise where training on the data
    without that global batch ends."""
    args = _skip_args(tmp_path, 1)
    skipped = run_train(compose_cfg([*args, f"data.path={tmp_path / 'bad'}"]), tmp_path / "a", {})
    clean = run_train(compose_cfg([*args, f"data.path={tmp_path / 'clean'}"]), tmp_path / "b", {})
    assert skipped.skipped_steps == [3] and clean.skipped_steps == []
    assert (skipped.steps, clean.steps) == (8, 7)
    assert skipped.val == clean.val and skipped.test == clean.test
    assert json.loads((tmp_path / "a" / "metrics.json").read_text())["skipped_steps"] == [3]
    stop = [*args[:-1], f"data.path={tmp_path / 'bad'}"]
    with pytest.raises(NonFiniteLossError, match="at step 3: "):
        run_train(compose_cfg(stop), tmp_path / "stop", {})
    # TensorBoard's HParams table lists the failed run, marked so (it left it out: review)
    from tensorboard.plugins.hparams import api_pb2

    from conftest import tensorboard_session_statuses

    statuses = tensorboard_session_statuses(tmp_path / "stop")
    assert statuses == [api_pb2.Status.STATUS_FAILURE]
    assert tensorboard_session_statuses(tmp_path / "a") == [api_pb2.Status.STATUS_SUCCESS]


def test_a_loss_read_one_step_late_trains_the_same_and_stops_at_the_same_step(
    tmp_path, monkeypatch
):
    """On CUDA (``stop``) a step's loss is read once the next step is queued, so the GPU
    never waits for the host: forced here on CPU, the rates of the warm-up still reach each
    step before it runs (the run equals one read at once), a non-finite loss still names its
    own step, and no checkpoint after it is written."""
    args = _skip_args(tmp_path, 1)[:-1]  # train.on_nonfinite=stop
    clean = [*args, f"data.path={tmp_path / 'clean'}", "train.val_every_n_steps=3"]
    at_once = run_train(compose_cfg(clean), tmp_path / "a", {})
    monkeypatch.setattr(trainer, "loss_read_lag", lambda device, on_nonfinite: 1)
    late = run_train(compose_cfg(clean), tmp_path / "b", {})
    assert late.val_history == at_once.val_history and late.test == at_once.test
    assert late.final_train_loss == at_once.final_train_loss and late.steps == 7
    assert (at_once.loss_read_lag, late.loss_read_lag) == (0, 1)  # the record says what ran
    bad = [*args, f"data.path={tmp_path / 'bad'}", "train.checkpoint_every_n_steps=2"]
    with pytest.raises(NonFiniteLossError, match="at step 3: "):
        run_train(compose_cfg(bad), tmp_path / "stop", {})
    assert [p.name for p in complete_checkpoints(tmp_path / "stop")] == ["step_2"]


def _skip_two_processes(root: Path) -> list[str]:
    (root / "skip-data").mkdir()
    return [*_skip_args(root / "skip-data", 2), f"data.path={root / 'skip-data' / 'bad'}"]


SKIP_TWO = two_process_job("checkpoint-skip", [], _skip_two_processes)


@pytest.mark.slow
def test_on_nonfinite_skip_agrees_across_two_processes(two_process_runs):
    """Only rank 0's half of step 3 is bad: both ranks skip it (one all-reduced flag), and
    the run finishes with finite metrics (the 1-process test shows a skip is exact)."""
    skipped = two_process_runs[SKIP_TWO].metrics
    assert skipped.skipped_steps == [3] and skipped.steps == 8
    assert np.isfinite(skipped.val["logloss"]) and np.isfinite(skipped.final_train_loss)


#: A 2-process row-wise job with a data_parallel table: 16 steps, checkpoints at steps 8 and 16.
TWO_ROWWISE = [
    *SMALL,
    "+sharding.per_table_sharding_type.t_cat_0=data_parallel",
    "+sharding.per_table_compute_kernel.t_cat_0=dense",
    "train.val_every_n_steps=null",
    "hardware.nproc_per_node=2",
    "sharding=rowwise",
]


UNINTERRUPTED = two_process_job("checkpoint-uninterrupted", TWO_ROWWISE)
#: The same job resumed table-wise from the uninterrupted run's first checkpoint.
RESUMED_TABLEWISE = two_process_job(
    "checkpoint-resumed-tablewise",
    [*TWO_ROWWISE, "sharding=tablewise"],
    lambda root: [f"train.resume={root / UNINTERRUPTED / 'checkpoints' / 'step_8'}"],
)


@pytest.fixture
def uninterrupted(two_process_runs) -> tuple[Path, RunMetrics]:
    """``TWO_ROWWISE`` run from start to end: (its run folder, its record)."""
    run = two_process_runs[UNINTERRUPTED]
    return run.run_dir, run.metrics


@pytest.mark.slow
def test_resume_under_another_sharding_type_or_world_size(
    uninterrupted, two_process_runs, tmp_path
):
    """DCP reshards: a 2-process row-wise checkpoint resumes table-wise on 2 processes
    (bitwise the uninterrupted run) and on 1 process (at the same sample position); moving a
    table into or out of data_parallel is refused before anything is read."""
    full_dir, full = uninterrupted
    step_8 = full_dir / "checkpoints" / "step_8"
    _same_results(two_process_runs[RESUMED_TABLEWISE].metrics, full)
    one = compose_cfg([*TWO_ROWWISE, "hardware.nproc_per_node=1", f"train.resume={step_8}"])
    single = run_train(one, tmp_path / "c", {})  # 8 steps x 2 ranks = 16 steps x 1 rank
    assert single.steps == 32 and single.train_samples == full.train_samples
    assert [p.name for p in complete_checkpoints(tmp_path / "c")] == ["step_24", "step_32"]
    moved = compose_cfg([*SMALL, "sharding=rowwise", f"train.resume={step_8}"])
    refusal = r"data_parallel tables \['t_cat_0'\], this job none.*e.g. optimizer=adam on CPU"
    with pytest.raises(CheckpointError, match=refusal):  # (the optimizer named: resume review)
        run_train(moved, tmp_path / "d", {})


def test_resume_auto_starting_fresh_removes_an_earlier_attempts_best(tmp_path, caplog):
    """Its step checkpoints gone, an earlier attempt's best stayed: the fresh run, validating
    once at its end, never replaced it, and evaluate scored the earlier attempt's weights
    (resume review). It goes once the run has passed its checks (removed before them, a
    refusal lost it: diff review)."""
    best = tmp_path / "checkpoints" / "best"
    best.mkdir(parents=True)
    (best / ".metadata").write_bytes(b"")
    (best / "trainer_state.json").write_text("{}")
    auto = [*QUICK, "train.max_steps=4", "train.resume=auto", "train.keep_best=false"]
    with pytest.raises(ConfigError):  # refused in the worker: kept
        run_train(compose_cfg([*auto, "sharding=from_file", f"sharding.plan_path={tmp_path}"]),
                  tmp_path, {})  # fmt: skip
    assert best.is_dir()
    run_train(compose_cfg(auto), tmp_path, {})
    assert not list((tmp_path / "checkpoints").iterdir())
    assert "removing" in caplog.text and "best weights of an earlier attempt" in caplog.text


def test_newer_checkpoints_with_a_damaged_state_are_named_when_passed_over(tmp_path, caplog):
    """A truncated or missing trainer_state.json in the newest checkpoint: resume=auto took an
    older one (and wrote over it), evaluate scored an older one, without a word (review)."""
    from dlrm_exp.loop.checkpoint import find_checkpoint, resolve_resume

    for step, state in ((8, '{"samples": 512, "step": 8}'), (16, '{"samp'), (24, None)):
        folder = tmp_path / "checkpoints" / f"step_{step}"
        folder.mkdir(parents=True)
        (folder / ".metadata").write_bytes(b"")
        if state is not None:
            (folder / "trainer_state.json").write_text(state)
    with caplog.at_level(logging.WARNING, logger="dlrm_exp"):
        assert resolve_resume("auto", tmp_path).name == "step_8"
        assert find_checkpoint(str(tmp_path)).name == "step_8"
    (first, second) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert first == second and "step_16, step_24 passed over" in first
    assert first.endswith("taking step_8")
    # the folder's run failed (a refused job's record beside an earlier attempt's weights):
    # said, not scored without a word (diff review)
    RunMetrics.failed("bad data", "DataError").write(tmp_path / "metrics.json")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dlrm_exp"):
        assert find_checkpoint(str(tmp_path), warn=False).name == "step_8"
        assert caplog.text == ""
        assert find_checkpoint(str(tmp_path)).name == "step_8"
    assert "the run of this folder failed (metrics.json); taking step_8" in caplog.text


def test_a_save_of_another_branch_sets_the_earlier_step_folder_aside(tmp_path, caplog):
    """Resumed on 2 ranks from step_16 (1,024 samples on 1 rank), the job's own step_16
    (2,048 samples) wrote over the checkpoint it resumed from (resume review)."""
    from dlrm_exp.loop.checkpoint import keep_other_branch

    final = tmp_path / "checkpoints" / "step_16"
    final.mkdir(parents=True)
    (final / ".metadata").write_bytes(b"")
    (final / "trainer_state.json").write_text('{"samples": 1024, "step": 16}')
    assert keep_other_branch(final, 1024) is None and final.is_dir()  # the same branch
    with caplog.at_level(logging.WARNING, logger="dlrm_exp"):
        aside = keep_other_branch(final, 2048)
        checkpoint_module._say_aside(final, aside, None)
    assert aside == tmp_path / "checkpoints" / "step_16.samples_1024" and not final.exists()
    assert complete_checkpoints(tmp_path) == []  # no listing takes it; resume=<it> does
    assert "kept as step_16.samples_1024 rather than written over" in caplog.text
    # pruning takes it by its samples: keep_last_checkpoints=K left K more after each change
    # of world size (checkpoints review)
    from dlrm_exp.loop.checkpoint import prune_checkpoints

    for step, samples in ((8, 512), (24, 3072), (32, 4096)):
        later = tmp_path / "checkpoints" / f"step_{step}"
        later.mkdir()
        (later / ".metadata").write_bytes(b"")
        (later / "trainer_state.json").write_text(f'{{"samples": {samples}, "step": {step}}}')
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dlrm_exp"):
        prune_checkpoints(tmp_path, 2)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_24", "step_32"]
    # said so, at whichever save removes it (it had been said "kept": diff review)
    assert "step_16.samples_1024, set aside at 1024 samples, removed: older than the newest 2" in (
        caplog.text
    )
    prune_checkpoints(tmp_path, 3)  # (nothing more to remove)
    assert len(complete_checkpoints(tmp_path)) == 2


def test_a_requeued_job_resumes_from_its_own_checkpoint_over_the_path_it_started_from(tmp_path):
    """An explicit ``train.resume`` path trained again from there on every requeue; then
    every path became ``auto`` where the folder held checkpoints, so a first start into a
    finished run's folder replaced its record and best (diff review): only the task's own
    attempt begun from that path is continued."""
    from dlrm_exp.loop.run_folder import continued_resume, requeued_resume

    start = "/runs/a/checkpoints/step_10"
    assert requeued_resume(None) == "auto" and requeued_resume(start) == start
    own = tmp_path / "checkpoints" / "step_250"
    own.mkdir(parents=True)
    (own / ".metadata").write_bytes(b"")
    state = {"step": 250, "samples": 128000}
    (own / "trainer_state.json").write_text(json.dumps(state))
    assert continued_resume(start, tmp_path, {}) == start  # another run's: left to refuse
    began = {"checkpoint": str(Path(start).resolve())}
    own_state = {**state, "started_from": began, "sweep_job": {}}
    (own / "trainer_state.json").write_text(json.dumps(own_state))
    assert continued_resume(start, tmp_path, {}) == "auto"  # the task's own attempt


def test_a_sweep_job_meets_no_other_jobs_checkpoints(tmp_path):
    """An edited sweep list reran its jobs into other jobs' folders with auto: a finished job
    with only its best, checkpoints written before sweep_job was recorded or by a sweep
    without swept keys, and a list narrowed to one other value went unchecked, the finished
    record replaced; a swept group or interpolated seed must not be told apart from what the
    checkpoint recorded (diff reviews)."""
    best = tmp_path / CHECKPOINTS / "best"
    best.mkdir(parents=True)
    (best / ".metadata").write_bytes(b"")
    recorded = {"seed": 0, "data": "SyntheticDataConfig", "optimizer.learning_rate": 0.1}

    def saved_by(**state):
        (best / STATE_FILE).write_text(json.dumps({"step": 8, "settings": recorded, **state}))

    def check(swept, **settings):
        job = (swept, {**recorded, **settings})
        check_run_folder(tmp_path, "auto", keep_best=True, multirun=True, job=job)

    other_job = r"another job of an earlier sweep, seed=0 \(best\)"
    for state in ({"sweep_job": {"seed": 0}}, {"sweep_job": {}}, {}):  # (the last: older)
        saved_by(**state)
        with pytest.raises(RunFolderInUseError, match=other_job):
            check({"seed": 1}, seed=1)
        with pytest.raises(RunFolderInUseError, match=other_job):  # narrowed to seed=1
            check({}, seed=1) if state.get("sweep_job") else check({"seed": 1}, seed=1)
        check({"seed": 0})
        check({"data": "synthetic", "seed": "${oc.env:S,0}", "sharding": "rowwise"})
    saved_by(sweep_job={"sharding": "rowwise"})  # a group choice no setting records
    with pytest.raises(RunFolderInUseError, match="sharding=rowwise"):
        check({"sharding": "tablewise"})


def _change_lines(saved, job):
    """A resume's ``key old -> new`` lines of the settings ``job`` changes from ``saved``."""
    return [change_line(c) for c in setting_changes(saved, job)]


def test_only_settings_both_record_are_compared():
    """A key a later version records (``c``) is no change; older checkpoints record none."""
    assert _change_lines({"a": 1, "b": 2}, {"a": 1, "b": 3, "c": 4}) == ["b 2 -> 3"]
    assert _change_lines(None, {"a": 1}) == []
    # no collective (one rank) and FP32 ones are one exact update: a 2-rank run resumed on 1
    # rank was warned "qcomms FP32 -> none" (docs review); a codec is a change
    assert _change_lines({"qcomms": "FP32"}, {"qcomms": "none"}) == []
    assert _change_lines({"qcomms": "FP16/BF16"}, {"qcomms": "none"}) == [
        "qcomms FP16/BF16 -> none"
    ]


def test_a_non_finite_setting_matches_its_own_record(tmp_path):
    """trainer_state.json writes inf and nan as null: a resume of a job with one, or a sweep's
    job that swept one, compared them with null, a change or another job (re-read)."""
    from dlrm_exp.loop.settings import sweep_job
    from dlrm_exp.util.files import write_json_atomic

    swept = {"optimizer.eps": float("inf"), "train.clip": float("nan"), "a": (1, 2)}
    write_json_atomic(tmp_path / "state.json", {"sweep_job": sweep_job(swept), "settings": swept})
    saved = json.loads((tmp_path / "state.json").read_text())
    assert saved["sweep_job"] == sweep_job(swept) == {"a": [1, 2], "optimizer.eps": None,
                                                      "train.clip": None}  # fmt: skip
    assert _change_lines(saved["settings"], swept) == []
    assert _change_lines(saved["settings"], {"optimizer.eps": 1e-8}) == [
        "optimizer.eps None -> 1e-08"
    ]


def test_resume_step_maps_the_sample_position_to_another_world_size_or_batch():
    state = {"step": 3, "samples": 768, "world_size": 2}  # 3 steps of 2 x 128
    assert resume_step(state, [256] * 10, 2) == 3
    assert resume_step(state, [128] * 20, 1) == 6
    assert resume_step(state, [128] * 20, 2) == 6  # train.batch_size 64: it resumed at step 3
    ends = r"after 768 samples, between the ends of this job's steps at 512 and 1024 samples: "
    keep = r"\(4 rank\(s\)\); keep the world size and train.batch_size, or .* of 512 samples up"
    with pytest.raises(CheckpointError, match=ends + ".*" + keep):
        resume_step(state, [512] * 5, 4)
    # the same ranks and batch on other rows (a short last batch elsewhere): told so, not to
    # "keep the world size and train.batch_size", which it did (resume review); the
    # checkpoints that resume are of this job's first epoch (it said the checkpoint's run's,
    # where step 16 of 64 was one and refused: checkpoints review)
    state.update(samples=1024, world_size=1, settings={"train.batch_size": 64})
    with pytest.raises(CheckpointError, match=r"training split has another number of rows .*; "
                       r"resume with that run's data, or .*within its first epoch, a multiple "
                       r"of 64 samples up to 768\)"):  # fmt: skip
        resume_step(state, [64] * 12 + [32], 1)
    # another batch: the epochs, not the multiple, are the cause (it said "a multiple of the
    # new global batch" of a count that was one)
    state.update(samples=114688, settings={"train.batch_size": 512})
    other = r"stepped 512 samples \(1 rank\(s\)\), this job 64 \(1 rank\(s\)\), and this job's "
    with pytest.raises(CheckpointError, match=other + "epochs of 800 samples end"):
        resume_step(state, [64] * 12 + [32], 1)


def test_a_preemption_signal_during_a_save_is_handled_once_the_save_is_committed(
    tmp_path, monkeypatch
):
    """submitit's USR2 handler requeues and calls ``sys.exit`` (code 144 on its local
    executor). Arriving inside DCP's save, the ``SystemExit`` used to abort the save (DCP
    wrapped it in a ``CheckpointException``: exit 1, no requeue, a ``.partial`` folder)."""
    import signal

    import torch.distributed.checkpoint as dcp

    def requeue(signum, frame):
        raise SystemExit(144)

    real_save = dcp.save

    def save_then_preempted(*args, **kwargs):
        result = real_save(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGUSR2)  # the handler would run at the next bytecode
        return result

    monkeypatch.setattr(dcp, "save", save_then_preempted)
    previous = signal.signal(signal.SIGUSR2, requeue)
    try:
        with pytest.raises(SystemExit) as exited:
            run_train(compose_cfg(SMALL), tmp_path, {})
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert exited.value.code == 144
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["step_8"]
    assert complete_checkpoints(tmp_path) == [tmp_path / "checkpoints" / "step_8"]


def test_an_unwritable_run_folder_is_refused_at_start():
    with pytest.raises(ConfigError, match="cannot write the run folder /proc/dlrm_exp_run"):
        run_train(compose_cfg(SMALL), Path("/proc/dlrm_exp_run"), {})


# Loaded by every process of the job through PYTHONPATH; only the worker of rank 1 acts: it
# writes its part of the second checkpoint, notes the time, then dies (kill -9) before the save
# is committed.
KILL_IN_SECOND_SAVE = """
import os
import signal
import time

import torch.distributed.checkpoint as dcp

_save, _calls = dcp.save, []


def save(*args, **kwargs):
    result = _save(*args, **kwargs)
    _calls.append(1)
    if len(_calls) == 2 and os.environ.get("RANK") == "1":  # (set after start in workers)
        with open(os.environ["KILLED_AT_FILE"], "w") as f:
            f.write(str(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)
    return result


dcp.save = save
"""


@dataclass
class Killed:
    """What the killed job left: its process, how long after the kill it ended (s), the
    checkpoint folders and whether a metrics.json was there before the resume."""

    job: subprocess.CompletedProcess
    ended_after_kill: float
    checkpoints: list[str]
    metrics_written: bool


KILLED: dict[str, Killed] = {}


def _killed_job(root: Path) -> list[str]:
    """Run ``TWO_ROWWISE`` through the CLI into the run folder of ``RESUMED_AFTER_KILL``, rank 1
    killed with SIGKILL inside the second save (``KILL_IN_SECOND_SAVE``); keep its outcome in
    ``KILLED`` for the test (nothing is asserted here: this runs in the session fixture) and
    resume it with ``train.resume=auto`` in the suite's launch of 2-process jobs."""
    (root / "inject").mkdir()
    (root / "inject" / "sitecustomize.py").write_text(KILL_IN_SECOND_SAVE)
    run_dir = root / RESUMED_AFTER_KILL
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env["PYTHONPATH"] = str(root / "inject")
    env["KILLED_AT_FILE"] = str(root / "killed_at")
    job = subprocess.run(
        [sys.executable, "-m", "dlrm_exp", *TWO_ROWWISE, f"hydra.run.dir={run_dir}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    killed_at = root / "killed_at"
    ended = time.time() - float(killed_at.read_text()) if killed_at.exists() else math.inf
    folder = run_dir / "checkpoints"
    found = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    KILLED["job"] = Killed(job, ended, found, (run_dir / "metrics.json").exists())
    return ["train.resume=auto"]


RESUMED_AFTER_KILL = two_process_job("checkpoint-killed-then-resumed", TWO_ROWWISE, _killed_job)


@pytest.mark.slow
def test_a_rank_killed_inside_a_save_then_resume_matches_an_uninterrupted_run(
    uninterrupted, two_process_runs
):
    """Rank 1 is killed with SIGKILL inside the second save, after writing its shards: the job
    ends within 60 s, non-zero, naming the signal, without metrics.json; the save stays a
    .partial folder beside the intact first checkpoint, and train.resume=auto finishes with the
    uninterrupted run's metrics, bitwise."""
    killed = KILLED["job"]
    assert killed.ended_after_kill < 60
    assert killed.job.returncode != 0 and "killed by signal SIGKILL" in killed.job.stderr
    # how to go on, from the checkpoint that stands (it said nothing of it: crash review)
    assert "(newest: step_8)" in killed.job.stderr
    assert "train.resume=auto continues from it" in killed.job.stderr
    assert not killed.metrics_written
    assert killed.checkpoints == ["step_16.partial", "step_8"]
    resumed = two_process_runs[RESUMED_AFTER_KILL]
    assert "resumed from" in (resumed.run_dir / "dlrm_exp.log").read_text()
    _same_results(resumed.metrics, uninterrupted[1])
    assert json.loads((resumed.run_dir / "metrics.json").read_text())["val"] == resumed.metrics.val
    for phase in ("forward", "backward"):  # per step of the 8 steps the resumed job trained
        assert resumed.metrics.comm_bytes_per_step[phase] == pytest.approx(
            uninterrupted[1].comm_bytes_per_step[phase], rel=0.01
        )
    assert [p.name for p in complete_checkpoints(resumed.run_dir)] == ["step_8", "step_16"]


def _fake_checkpoint(path: Path, step: int) -> Path:
    """A folder :func:`best_checkpoint` counts as complete (DCP metadata and trainer state)."""
    path.mkdir(parents=True)
    (path / ".metadata").write_bytes(b"")
    (path / "trainer_state.json").write_text(json.dumps({"step": step}))
    return path


def test_a_crash_while_a_better_best_replaces_the_old_one_keeps_a_complete_best(
    tmp_path, monkeypatch
):
    from dlrm_exp.loop import checkpoint

    run = tmp_path / "run"
    folder = run / checkpoint.CHECKPOINTS
    _fake_checkpoint(folder / checkpoint.BEST, 10)
    new = _fake_checkpoint(folder / "best.partial", 20)
    rename = Path.rename

    def crash_on_the_second_rename(self, target):  # the old best is aside, the new one not in
        if self == new:
            raise KeyboardInterrupt
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", crash_on_the_second_rename)
    with pytest.raises(KeyboardInterrupt):
        checkpoint._replace_folder(new, folder / checkpoint.BEST)
    monkeypatch.undo()
    survivor = checkpoint.best_checkpoint(run)
    assert survivor is not None and json.loads((survivor / "trainer_state.json").read_text()) == {
        "step": 10
    }
    # the next better validation puts its folder in place and only then drops the old one
    checkpoint._replace_folder(new, folder / checkpoint.BEST)
    assert checkpoint.best_checkpoint(run) == folder / checkpoint.BEST
    assert sorted(p.name for p in folder.iterdir()) == [checkpoint.BEST]
    assert json.loads((folder / "best" / "trainer_state.json").read_text()) == {"step": 20}


def test_a_resume_between_managed_collision_evictions_is_named():
    from dlrm_exp.config.model import EvictionPolicy, ManagedCollision
    from dlrm_exp.modes.resume import between_evictions

    managed = {
        "t_a": ManagedCollision(EvictionPolicy.lfu, 4),
        "t_b": ManagedCollision(EvictionPolicy.lru, 2),
    }
    assert between_evictions(8, managed) is None and between_evictions(7, {}) is None
    line = between_evictions(6, managed)
    assert line is not None and "step 6" in line and "t_a (every 4)" in line
    assert "t_b" not in line and "not bitwise" in line


def test_a_resume_on_another_world_size_counts_the_checkpoints_steps_in_its_own(tmp_path):
    """2 ranks checkpointed at step 100 (validations at 50 and 100), resumed on 4 ranks at
    step 50: the saved steps become this job's, so its next validation (step 100) is not
    mistaken for the old step-100 one, and the checkpoints order by data position."""
    from dlrm_exp.loop import checkpoint
    from dlrm_exp.loop.trainer import TrainerState

    saved = {
        "step": 100, "samples": 25600, "val_history": [{"step": 50.0, "auroc": 0.6},
        {"step": 100.0, "auroc": 0.7}], "best": {"step": 100, "value": 0.7, "bad_validations": 0},
        "target_step": None, "skipped_steps": [75], "train_windows": [{"step": 50.0, "auroc": 0.6}],
    }  # fmt: skip
    state = TrainerState.from_checkpoint(saved, 50)
    assert [h["step"] for h in state.val_history] == [25.0, 50.0]
    assert state.best.step == 50 and state.skipped_steps == [37.5]
    assert state.train_windows[0]["step"] == 25.0 and state.samples == 25600
    same = TrainerState.from_checkpoint(saved, 100)  # the same world size: unchanged
    assert [h["step"] for h in same.val_history] == [50.0, 100.0] and same.best.step == 100

    for name, samples in (("step_300", 76800), ("step_250", 128000)):  # 2 ranks, then 4
        path = tmp_path / checkpoint.CHECKPOINTS / name
        path.mkdir(parents=True)
        (path / ".metadata").write_bytes(b"")
        (path / "trainer_state.json").write_text(json.dumps({"samples": samples}))
    assert [p.name for p in complete_checkpoints(tmp_path)] == ["step_300", "step_250"]


@pytest.mark.parametrize(
    ("data", "warned"),
    [
        ([], False),  # in-memory rows, not shuffled: step i is the same rows on any ranks
        (["data=criteo_npy", "data.path=x", "data.shuffle_batches=true"], True),
        (["data=parquet", "data/schema=criteo", "data.path=x"], True),  # blocks per rank
    ],
)
def test_a_resume_on_other_ranks_says_when_the_data_order_follows_the_ranks(data, warned, caplog):
    """The sample count carries over to another world size, but Parquet's blocks per rank and
    shuffled global batches are other rows there: 12 of 72 rows trained twice, 12 never, and
    no word."""
    from dlrm_exp.modes.resume import warn_other_data_order

    cfg = compose_cfg(data)
    with caplog.at_level(logging.WARNING, logger="dlrm_exp"):
        warn_other_data_order({"world_size": 2}, cfg, 1)
        warn_other_data_order({"world_size": 1}, cfg, 1)  # the same ranks: the same rows
    assert caplog.text.count("the checkpoint was trained on 2 rank(s), this job has 1") == warned


def test_managed_collision_tables_resume_only_on_a_world_size_dividing_the_saved_one():
    """1 -> 2 ranks failed inside TorchRec after the whole set-up (``shard within range
    [0, 128] cannot be built out of segments``); 2 -> 1 works."""
    from dlrm_exp.loop.checkpoint import check_managed_ranks

    managed, modulo = {"user_id": "managed_collision"}, {"user_id": "modulo"}
    check_managed_ranks(Path("ck"), 2, managed, 1)  # 2 -> 1
    check_managed_ranks(Path("ck"), 4, managed, 2)  # 4 -> 2
    check_managed_ranks(Path("ck"), 1, modulo, 2)  # no managed table: any
    with pytest.raises(CheckpointError, match=r"saved by 2 rank\(s\); its managed-collision "
                       r"features \(user_id\) load only .*: 1, 2, not 4"):  # fmt: skip
        check_managed_ranks(Path("ck"), 2, managed, 4)


def test_checkpoints_best_is_placed_among_its_runs_checkpoints(tmp_path):
    """``train.resume=<run>/checkpoints/best`` into that run's folder got around the refusal
    of an earlier checkpoint beside later ones: best was 'another run's'."""
    from dlrm_exp.loop.checkpoint import later_checkpoints

    def save(name: str, step: int) -> Path:
        folder = tmp_path / "checkpoints" / name
        folder.mkdir(parents=True)
        (folder / ".metadata").write_bytes(b"")
        (folder / "trainer_state.json").write_text(json.dumps({"step": step, "samples": step}))
        return folder

    step_8, step_9, best = save("step_8", 8), save("step_9", 9), save("best", 8)
    assert later_checkpoints(tmp_path, best) == [step_9]
    assert later_checkpoints(tmp_path, step_8) == [step_9]
    assert later_checkpoints(tmp_path / "other", best) == []  # another run's best


def test_a_momentum_of_another_column_shard_count_is_explained():
    """A column-wise table of 2 column shards resumed table-wise failed with DCP's bare 'Size
    mismatch ... momentum1' (embedding_dim 256, measured by review and by hand)."""
    from dlrm_exp.loop.checkpoint import _hint

    dcp = ("ValueError: Size mismatch between saved torch.Size([2000]) and current: "
           "torch.Size([1000]) for optim.model.sparse_arch...t_cat_0.momentum1")  # fmt: skip
    assert "keeps a table's momentum per column shard" in _hint(dcp)
    assert _hint("ValueError: Size mismatch ... t_cat_0.weight") == ""  # the layout's check
    assert "another model or optimizer" in _hint("Missing key ... model.inter_arch.crossnet.V")


def test_the_cuda_generator_is_saved_and_restored_where_cuda_is_used(tmp_path, monkeypatch):
    """FBGEMM's stochastic rounding of fp16 tables on CUDA draws from torch's CUDA generator:
    its state travels with the CPU generator's (checked with a stand-in CUDA generator: no
    GPU here). A job without CUDA writes no CUDA file."""
    import torch

    from dlrm_exp.loop.checkpoint import restore_rng, save_rng

    save_rng(tmp_path, 0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rng_rank0.pt"]
    state = {"cuda": torch.arange(8, dtype=torch.uint8)}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda: state["cuda"].clone())
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda s: state.update(cuda=s))
    save_rng(tmp_path, 1)
    state["cuda"] = torch.zeros(8, dtype=torch.uint8)  # the generator moved on
    restore_rng(tmp_path, 1)
    assert state["cuda"].tolist() == list(range(8))
    # a generator file a crash truncated: one line naming the fix, not a raw EOFError
    (tmp_path / "rng_rank0.pt").write_bytes((tmp_path / "rng_rank0.pt").read_bytes()[:40])
    with pytest.raises(CheckpointError, match=r"random generator state rng_rank0.pt cannot be"):
        restore_rng(tmp_path, 0)
    # junk, text or nothing: said to be damaged, without torch's advice to load it with
    # weights_only=False (an empty file was a raw IndexError, a text one a KeyError)
    for junk in (bytes(range(7, 57)), b"hello", b""):
        (tmp_path / "rng_rank0.pt").write_bytes(junk)
        with pytest.raises(CheckpointError, match=r"\(damaged: not a file torch.save wrote\)"):
            restore_rng(tmp_path, 0)


def test_a_resume_in_other_steps_sets_tensorboard_s_earlier_points_aside(tmp_path):
    """Resumed with another train.batch_size (or world size), the checkpoint's step 16 is
    this job's step 8: TensorBoard's earlier points, in the old steps, were kept in the run's
    own curves beside the new ones (metrics.json rescaled them). They move to a subfolder, and
    the validations are logged again in this job's steps."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    args = [*QUICK, "train.val_every_n_steps=8", "train.checkpoint_every_n_steps=16"]
    run_train(compose_cfg(args), tmp_path, {})  # batch 128: 32 steps, validations 8..32
    for later in complete_checkpoints(tmp_path)[1:]:
        shutil.rmtree(later)  # as if it stopped after step 16
    (tmp_path / "metrics.json").unlink()
    wider = [*args, "train.batch_size=256", "train.resume=auto"]
    run_train(compose_cfg(wider), tmp_path, {})
    aside = tmp_path / "tensorboard_before_step_16"
    assert list(aside.glob("events.out.tfevents.*"))
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    # rescaled 8 -> 4 and 16 -> 8, then this job's own validation at 16 (every 8 steps)
    assert [e.step for e in events.Scalars("val/auroc")] == [4, 8, 16]
    assert "val/samples" not in events.Tags()["scalars"]  # only the tags a validation logs
    assert [e.step for e in events.Scalars("train/loss")][0] > 8  # none in the old steps


def test_a_run_folder_given_as_the_checkpoint_to_resume_names_its_newest(tmp_path):
    """``train.resume=<run folder>`` said only "not a complete checkpoint" (review)."""
    from dlrm_exp.loop.checkpoint import resolve_resume

    for step in (8, 16):
        saved = tmp_path / "run" / CHECKPOINTS / f"step_{step}"
        saved.mkdir(parents=True)
        (saved / ".metadata").write_bytes(b"")
        (saved / STATE_FILE).write_text("{}")
    run = tmp_path / "run"
    newest = run / CHECKPOINTS / "step_16"
    with pytest.raises(CheckpointError, match=re.escape(
        f"train.resume={run} is a run folder, not a checkpoint: give one of its checkpoints "
        f"(train.resume={newest}, its newest), or continue the run in its own folder with "
        f"hydra.run.dir={run} train.resume=auto"
    )):  # fmt: skip
        resolve_resume(str(run), tmp_path / "other")
    assert resolve_resume(str(newest), tmp_path / "other") == newest


def test_resume_auto_in_a_new_folder_names_the_run_to_continue(tmp_path, caplog):
    """``train.resume=auto`` without ``hydra.run.dir`` trained from scratch in Hydra's new
    timestamped folder, said only in an INFO line (checkpoints review): a warning names the
    newest folder beside it that holds a checkpoint."""
    earlier = tmp_path / "outputs" / "2026-11-28" / "12-00-00"
    _fake_checkpoint(earlier / CHECKPOINTS / "step_8", 8)
    new = tmp_path / "outputs" / "2026-11-28" / "12-05-00"
    (new / ".hydra").mkdir(parents=True)
    cfg = compose_cfg(["train.resume=auto"])
    with caplog.at_level(logging.WARNING, logger="dlrm_exp"):
        assert resume_mode.checkpoint_to_resume(cfg, new, multirun=False) is None
    assert f"{new} is a new folder (Hydra names one per run)" in caplog.text
    assert f"give its folder: hydra.run.dir={earlier}" in caplog.text
    caplog.clear()  # a fine-tuning does not train from its start (diff review)
    tuning = compose_cfg(["train.resume=auto", f"train.init_from={earlier}"])
    with caplog.at_level(logging.WARNING, logger="dlrm_exp"):
        assert resume_mode.checkpoint_to_resume(tuning, new, multirun=False) is None
    assert caplog.text == ""
    named = tmp_path / "exp" / "long"  # named by hand: the first run of a long job (diff review)
    (named / ".hydra").mkdir(parents=True)
    with caplog.at_level(logging.WARNING, logger="dlrm_exp"):
        assert resume_mode.checkpoint_to_resume(cfg, named, multirun=False) is None
    assert caplog.text == ""
    (new / "metrics.json").write_text("{}")  # an earlier attempt's folder: not new
    with caplog.at_level(logging.WARNING, logger="dlrm_exp"):
        assert resume_mode.checkpoint_to_resume(cfg, new, multirun=False) is None
    assert caplog.text == ""


def test_init_from_starts_a_run_from_a_checkpoints_weights(saved, tmp_path, monkeypatch, caplog):
    """Fine-tuning: nothing started from a checkpoint's weights at step 0 (a resume onto
    other data was refused at the checkpoint's data position: checkpoints review)."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    first: dict[str, torch.Tensor] = {}
    real_fit = train_mode._fit

    def spy(trainer, run, start, tracker):  # the weights training starts from
        first.update({k: v.detach().clone() for k, v in run.experiment.model.state_dict().items()
                      if "dense_arch" in k and k.endswith("weight")})  # fmt: skip
        return real_fit(trainer, run, start, tracker)

    monkeypatch.setattr(train_mode, "_fit", spy)
    tuned = run_train(compose_cfg([*SMALL, "train.max_steps=2", f"train.init_from={saved}"]),
                      tmp_path / "tuned", {})  # fmt: skip
    assert tuned.initialized_from == str(saved) and tuned.steps == 2 and tuned.resumed == {}
    dcp_to_torch_save(saved, tmp_path / "saved.pt")
    model = torch.load(tmp_path / "saved.pt", weights_only=False)["model"]
    assert first and all(torch.equal(w, model[k]) for k, w in first.items())
    fresh = dict(first)
    first.clear()
    run_train(compose_cfg([*SMALL, "train.max_steps=2"]), tmp_path / "fresh", {})
    assert not all(torch.equal(w, fresh[k]) for k, w in first.items())  # (not the start's)
    # a run folder names its best, else newest; a resume path beside it is refused
    assert run_train(compose_cfg([*SMALL, "train.max_steps=2",
                                  f"train.init_from={saved.parent.parent}"]),
                     tmp_path / "folder", {}).initialized_from == str(saved)  # fmt: skip
    with pytest.raises(ConfigError, match=r"train.init_from=.* starts a new run from a "
                       r"checkpoint's weights, train.resume=.* continues one"):  # fmt: skip
        compose_cfg([*SMALL, f"train.init_from={saved}", f"train.resume={saved}"])
    with pytest.raises(CheckpointError, match=r"another model shape"):
        run_train(compose_cfg([*SMALL, "model.num_embeddings_cap=500",
                               f"train.init_from={saved}"]), tmp_path / "other", {})  # fmt: skip
    # continued (a requeue): the record still names it, and so do the HParams (diff review)
    on = [*SMALL, "train.max_steps=4", "train.resume=auto", f"train.init_from={saved}"]
    with caplog.at_level(logging.WARNING, logger="dlrm_exp"):
        again = run_train(compose_cfg(on), tmp_path / "tuned", {})
    assert again.resumed["step"] == 2 and again.initialized_from == str(saved)
    assert "init_from is not read" not in caplog.text  # (the same fine-tuning, continued)
    other = [*on[:-1], f"train.init_from={tmp_path / 'fresh'}", "train.max_steps=6"]
    run_train(compose_cfg(other), tmp_path / "tuned", {})  # (another: dropped, said)
    assert "train.init_from is not read: this run continues its checkpoint" in caplog.text
    from dlrm_exp.record.tracking import run_hparams

    assert run_hparams(compose_cfg(SMALL), {}, 1, 1, again)["init_from"] == str(saved)
