"""The run summary's ``tensorboard --logdir`` names a folder that holds the run."""

from pathlib import Path

from dlrm_exp.modes.job import Job
from dlrm_exp.modes.train import tensorboard_logdir


def test_the_tensorboard_hint_names_a_folder_holding_the_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert tensorboard_logdir(Job(tmp_path / "outputs" / "2026-11-25" / "04-33-08")) == "outputs"
    assert tensorboard_logdir(Job(tmp_path / "outputs" / "trained")) == "outputs"
    elsewhere = tmp_path.parent / "u1"  # hydra.run.dir=/tmp/u1: not ./outputs, nor all of /tmp
    assert tensorboard_logdir(Job(elsewhere)) == str(elsewhere)
    sweep = Job(tmp_path / "multirun" / "0", {}, tmp_path / "multirun" / "sharding=rowwise")
    assert tensorboard_logdir(sweep) == str(tmp_path / "multirun")
    # a swept path's slashes nest the events folder: its parent held this run alone
    nested = Job(tmp_path / "multirun" / "1", {}, tmp_path / "multirun" / "data.path=/d/a.tsv")
    assert tensorboard_logdir(nested) == str(tmp_path / "multirun")
    # the default hydra.sweep.dir is relative: the events folder too, the run folder not
    relative = Job(tmp_path / "outputs" / "m" / "0", {}, Path("outputs") / "m" / "seed=0")
    assert tensorboard_logdir(relative) == str(tmp_path / "outputs" / "m")
