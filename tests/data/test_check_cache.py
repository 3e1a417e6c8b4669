"""Data checks a file passed are remembered per unchanged file: a second start reads it no
more, while a rewritten file, other rows, a failed check and a file modified moments ago are
checked again."""

import os
import time

import numpy as np
import pytest
from test_criteo_npy import SIZES, config, write_day

from dlrm_exp.data import criteo_npy
from dlrm_exp.data.check_cache import check_once
from dlrm_exp.data.criteo_npy import load_criteo_npy
from dlrm_exp.errors import DataError


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DLRM_EXP_CACHE_DIR", str(tmp_path / "cache"))


def _age(path, seconds: float = 3600.0) -> None:
    """Set ``path``'s modification time ``seconds`` in the past (a file written earlier)."""
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_a_passed_check_of_an_unchanged_file_runs_once(tmp_path):
    path = tmp_path / "day_0_labels.npy"
    path.write_bytes(b"0123")
    _age(path)
    runs = []
    for _ in range(2):
        check_once("labels", path, lambda: runs.append("labels"))
    assert runs == ["labels"]
    check_once("dense", path, lambda: runs.append("dense"), (0, 4))  # another check, rows
    check_once("dense", path, lambda: runs.append("dense 2-4"), (2, 4))
    assert runs == ["labels", "dense", "dense 2-4"]
    path.write_bytes(b"3210")  # rewritten, same size: another modification time
    _age(path, 1800.0)
    check_once("labels", path, lambda: runs.append("again"))
    assert runs[-1] == "again"


def test_failed_young_and_changing_files_are_checked_every_time(tmp_path):
    path = tmp_path / "day_0_labels.npy"
    path.write_bytes(b"0123")
    _age(path)

    def fail():
        raise DataError("bad labels")

    for _ in range(2):
        with pytest.raises(DataError, match="bad labels"):
            check_once("labels", path, fail)
    young = tmp_path / "young.npy"
    young.write_bytes(b"0")  # modified now: a rewrite in the same clock tick could keep its time
    runs = []
    for _ in range(2):
        check_once("labels", young, lambda: runs.append(1))
    assert runs == [1, 1]
    changing = tmp_path / "changing.npy"
    changing.write_bytes(b"0")
    _age(changing)

    def rewrite():  # written while it was read: what was read is not what is there
        changing.write_bytes(b"1")
        _age(changing, 60.0)
        runs.append(2)

    check_once("labels", changing, rewrite)
    check_once("labels", changing, lambda: runs.append(3))
    assert runs == [1, 1, 2, 3]


def test_criteo_npy_reads_unchanged_labels_and_held_out_rows_once(tmp_path, monkeypatch):
    for day in (0, 1):
        write_day(tmp_path, day, 20, seed=day)
    for path in tmp_path.glob("day_*.npy"):
        _age(path)
    calls = []
    for name in ("_check_labels", "check_dense"):
        real = getattr(criteo_npy, name)
        spy = lambda path, *a, real=real, name=name: calls.append(name) or real(path, *a)  # noqa: E731
        monkeypatch.setattr(criteo_npy, name, spy)
    load_criteo_npy(config(tmp_path, mmap_mode=True), SIZES, 0)
    assert calls.count("_check_labels") == 2 and calls.count("check_dense") == 1
    load_criteo_npy(config(tmp_path, mmap_mode=True), SIZES, 0)
    assert len(calls) == 3  # nothing read again
    labels = np.load(tmp_path / "day_0_labels.npy")
    labels[3] = 2
    np.save(tmp_path / "day_0_labels.npy", labels)  # rewritten since: checked, and refused
    _age(tmp_path / "day_0_labels.npy", 60.0)
    with pytest.raises(DataError, match="day_0_labels.npy: 1 of 20 labels are neither"):
        load_criteo_npy(config(tmp_path, mmap_mode=True), SIZES, 0)
