"""``dlrm_exp.util.folder_lock``: one run at a time in a run folder."""

import os

import pytest

from conftest import run_cli
from dlrm_exp.errors import RunFolderInUseError
from dlrm_exp.util.folder_lock import held_run_folder


def test_a_held_folder_is_refused_to_a_second_holder_until_released(tmp_path):
    from dlrm_exp.util.folder_lock import _lock

    with held_run_folder(tmp_path):
        with pytest.raises(RunFolderInUseError, match=f"process {os.getpid()} on "):
            _lock(tmp_path)  # another open file: another holder, as another process is
        with held_run_folder(tmp_path):  # this process's own hold: no second lock
            pass
    os.close(_lock(tmp_path))  # released with the block


def test_a_run_started_in_a_folder_in_use_is_refused_and_leaves_its_record(tmp_path):
    """Two runs started within one second share Hydra's default folder and wrote over each
    other's logs, events, checkpoints and metrics.json; the second is now refused before
    Hydra writes the folder's .hydra record or log, which stay the first run's (Hydra's
    default folder is one a refused run's record could not be put back in)."""
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("mode: plan\nseed: 5\n")
    (run / "dlrm_exp.log").write_text("the first run's log\n")
    with held_run_folder(run):  # the first run, still running
        result = run_cli(["mode=plan", f"hydra.run.dir={run}"])
    assert result.returncode == 1 and "in use by another run" in result.stderr
    assert "Traceback" not in result.stderr
    assert (run / ".hydra" / "config.yaml").read_text() == "mode: plan\nseed: 5\n"
    assert not (run / ".hydra" / "overrides.yaml").exists()  # never written, not put back
    assert (run / "dlrm_exp.log").read_text() == "the first run's log\n"
    assert not (run / "plan.json").exists()


def test_a_sweep_started_in_a_sweep_folder_in_use_is_refused_before_its_jobs(tmp_path):
    """Two sweeps started within one second shared Hydra's default sweep folder: the second
    rewrote multirun.yaml and its jobs were refused one by one. It is refused before either."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text("the first sweep's\n")
    with held_run_folder(sweep):  # the first sweep, still running
        result = run_cli(["-m", "mode=plan", "seed=0,1", f"hydra.sweep.dir={sweep}"])
    assert result.returncode == 1 and "in use by another run" in result.stderr
    # the advice fits a sweep too (it said to run them as one -m sweep: launch review)
    assert "a sweep's hydra.sweep.dir=..." in result.stderr
    assert (sweep / "multirun.yaml").read_text() == "the first sweep's\n"
    assert not (sweep / "0").exists()


def test_a_run_folder_that_is_a_file_is_one_line(tmp_path, cli_here):
    """Hydra's run folder named a file (or a path under one): a raw FileExistsError traceback
    from the lock's mkdir (CLI review)."""
    afile = tmp_path / "binary.tsv"
    afile.write_bytes(b"\0")
    for folder, why in ((afile, "it is a file"), (afile / "sub", "Not a directory")):
        done = cli_here(["mode=plan", f"hydra.run.dir={folder}"])
        assert done.returncode == 1 and "Traceback" not in done.stderr
        assert f"hydra.run.dir={folder} cannot be a run folder: {why}" in done.stderr


def test_a_held_folder_named_another_way_is_still_this_processs(tmp_path):
    """An output folder that is the run folder through a symlink or ``..`` opened a second
    lock in the process holding the first, which refused the run itself (review)."""
    run = tmp_path / "run"
    (tmp_path / "link").symlink_to(run, target_is_directory=True)
    with held_run_folder(run):
        for other in (tmp_path / "link", tmp_path / "x" / ".." / "run"):
            with held_run_folder(other, "preprocess.output_dir"):
                pass


def test_an_output_files_lock_goes_with_its_writer_and_a_stale_one_is_not_taken(tmp_path):
    """Predict left ``.<name>.lock`` beside every output (after-training review): the lock
    file is removed when its writer ends. A process that opened it just before then and
    locks it after must not count as the holder: it locks the file at the path again."""
    import fcntl

    from dlrm_exp.errors import OutputFolderInUseError
    from dlrm_exp.util.folder_lock import _is_current, _lock, held_output_file

    out = tmp_path / "p.parquet"
    lock = tmp_path / ".p.parquet.lock"
    with held_output_file(out, "predict.output"):
        late = os.open(lock, os.O_RDWR)  # opened while held, locked after the release
        with pytest.raises(OutputFolderInUseError):
            _lock(tmp_path, "predict.output", lock.name, named=out)
    assert not lock.exists()
    fcntl.flock(late, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the removed file: its lock is no hold
    assert not _is_current(late, lock)  # (so _lock, having locked it, opens the path again)
    fd = _lock(tmp_path, "predict.output", lock.name, named=out)
    assert fd is not None and os.fstat(fd).st_ino != os.fstat(late).st_ino
    os.close(fd)
    os.close(late)


def test_a_lock_file_removed_between_its_open_and_its_flock_is_opened_again(tmp_path, monkeypatch):
    """The writer that held it ended between this process's open and flock: the flock then
    succeeds on a removed file no later run sees, so _lock opens the path again (the test
    above checks only _is_current: diff review)."""
    from dlrm_exp.util import folder_lock

    lock = tmp_path / ".p.parquet.lock"
    lock.write_text("")
    real_open, opened = os.open, []

    def open_then_removed(path, *args, **kwargs):
        fd = real_open(path, *args, **kwargs)
        if not opened:
            os.unlink(path)  # the writer ends here
        opened.append(path)
        return fd

    monkeypatch.setattr(os, "open", open_then_removed)
    fd = folder_lock._lock(tmp_path, "predict.output", lock.name, named=tmp_path / "p.parquet")
    monkeypatch.undo()
    assert fd is not None and len(opened) == 2
    assert os.fstat(fd).st_ino == os.stat(lock).st_ino
    os.close(fd)
