"""Data checks a file passed are remembered per unchanged file: a second start reads it no
more, while a rewritten file, other rows, a failed check and a file modified moments ago are
checked again."""

import os
import time

import numpy as np
import pytest
from test_criteo_npy import SIZES, config, write_day

from dlrm_exp.data import check_cache, criteo_npy
from dlrm_exp.data.check_cache import file_state, remembered_checks
from dlrm_exp.data.criteo_npy import load_criteo_npy
from dlrm_exp.errors import DataError


def check_once(state, run) -> None:
    """One check in a scan of its own (its pass stored as the scan ends)."""
    with remembered_checks() as checks:
        checks.once(state, run)


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
        check_once(file_state("labels", path), lambda: runs.append("labels"))
    assert runs == ["labels"]
    check_once(
        file_state("dense", path, (0, 4)), lambda: runs.append("dense")
    )  # another check, rows
    check_once(file_state("dense", path, (2, 4)), lambda: runs.append("dense 2-4"))
    assert runs == ["labels", "dense", "dense 2-4"]
    path.write_bytes(b"3210")  # rewritten, same size: another modification time
    _age(path, 1800.0)
    check_once(file_state("labels", path), lambda: runs.append("again"))
    assert runs[-1] == "again"
    replacement = tmp_path / "new.npy"  # same size and time, renamed over it: another inode
    replacement.write_bytes(b"9999")
    os.utime(replacement, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns))
    replacement.rename(path)
    check_once(file_state("labels", path), lambda: runs.append("replaced"))
    assert runs[-1] == "replaced"


def test_failed_young_and_changing_files_are_checked_every_time(tmp_path, monkeypatch):
    path = tmp_path / "day_0_labels.npy"
    path.write_bytes(b"0123")
    _age(path)

    def fail():
        raise DataError("bad labels")

    for _ in range(2):
        with pytest.raises(DataError, match="bad labels"):
            check_once(file_state("labels", path), fail)
    young = tmp_path / "young.npy"
    young.write_bytes(b"0")  # modified now: a rewrite in the same clock tick could keep its time
    runs = []
    for _ in range(2):
        check_once(file_state("labels", young), lambda: runs.append(1))
    assert runs == [1, 1]
    changing = tmp_path / "changing.npy"
    changing.write_bytes(b"0")
    _age(changing)

    def rewrite():  # written while it was read: what was read is not what is there
        changing.write_bytes(b"1")
        _age(changing, 60.0)
        runs.append(2)

    check_once(file_state("labels", changing), rewrite)
    check_once(file_state("labels", changing), lambda: runs.append(3))
    assert runs == [1, 1, 2, 3]
    fresh = tmp_path / "fresh.npy"
    fresh.write_bytes(b"0")
    state = file_state("labels", fresh)  # young when its content was taken

    with monkeypatch.context() as clock:

        def long_check():  # 16 GiB of labels take a while: the file is old by the end
            later = time.time() + 60.0
            clock.setattr(check_cache.time, "time", lambda: later)
            runs.append(4)

        check_once(state, long_check)
    check_once(file_state("labels", fresh), lambda: runs.append(5))
    assert runs[-2:] == [4, 5]


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
