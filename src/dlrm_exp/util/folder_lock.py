"""One run at a time in a run folder.

Hydra names a run's folder by the second it starts (``outputs/<date>/<H-M-S>``), and a sweep's
by the second too: runs started within one second (a loop of background jobs, a Slurm job
array starting its tasks together in one working folder) share it and write their logs,
TensorBoard events, checkpoints and ``metrics.json`` over each other. A run holds an exclusive
``flock`` on ``<folder>/.lock`` while its process lives (the kernel releases it when the
process ends, however it ends: no stale lock after a crash or ``kill -9``), and a second
process that asks for the same folder is refused: :func:`hold_run_folder` for the whole
process (a single run, before Hydra writes the folder's ``.hydra`` record), or
:func:`held_run_folder` for a block (each job of a sweep).
"""

import errno
import fcntl
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dlrm_exp.errors import OutputFolderInUseError, RunFolderInUseError

#: The lock file's name in the run folder.
LOCK_FILE = ".lock"
#: The folders this process holds, with their lock files' descriptors (None: no flock there).
_held: dict[Path, int | None] = {}


def _lock(
    run_dir: Path, key: str = "hydra.run.dir", lock_file: str = LOCK_FILE, named: Path | None = None
) -> int | None:
    """The descriptor of ``run_dir``'s lock file (``lock_file``), locked; None where the
    folder cannot hold the file or its file system has no ``flock`` (some network or FUSE
    mounts: unlocked). ``key``: the setting that named the folder (an output folder's other
    than the run's), or, with ``named``, the output file it locks.

    Raises:
        RunFolderInUseError: another live process holds it (naming that process and host).
        OutputFolderInUseError: the same, for an output folder (``key`` not the run's).
    """
    while True:  # (again where the file locked was removed meanwhile: see _is_current)
        try:
            fd = os.open(run_dir / lock_file, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            return _refused(fd, err, run_dir, key, named)
        if _is_current(fd, run_dir / lock_file):
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"process {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
    return fd


def _is_current(fd: int, lock_path: Path) -> bool:
    """Whether the locked ``fd`` is still the file at ``lock_path``: an output file's lock is
    removed when its writer ends (:func:`held_output_file`), and a process that opened it
    just before then locked a file no later run sees."""
    try:
        return os.stat(lock_path).st_ino == os.fstat(fd).st_ino
    except OSError:
        return False


def _refused(fd: int, err: OSError, run_dir: Path, key: str, named: Path | None) -> None:
    """:func:`_lock`'s answer where ``flock`` of ``fd`` failed with ``err``: None where the
    file system has no ``flock``; else the refusal naming the holder.

    Raises:
        RunFolderInUseError, OutputFolderInUseError: see :func:`_lock`.
    """
    holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another process"
    os.close(fd)
    if err.errno not in (errno.EWOULDBLOCK, errno.EACCES):
        return None  # no flock here
    if key != "hydra.run.dir":
        raise OutputFolderInUseError(
            f"{key}={named or run_dir} is being written by another run ({holder}): wait "
            f"for it to end, or name another {'file' if named else 'folder'}"
        ) from None
    raise RunFolderInUseError(
        f"{run_dir} is in use by another run ({holder}): wait for it to end, or give "
        "this one another folder (hydra.run.dir=..., a sweep's hydra.sweep.dir=...; runs "
        "started within the same second share the default outputs/<date>/<time>, which "
        "one -m sweep avoids)"
    ) from None


def _key(run_dir: Path) -> Path:
    """The folder as this process's holds know it: resolved (a symlink, or ``..``, to a held
    folder is that folder; a second open of its lock file would block this process itself)."""
    return run_dir.resolve()


def hold_run_folder(run_dir: Path, key: str = "hydra.run.dir") -> None:
    """Hold ``run_dir``'s lock (creating the folder) until :func:`release_run_folder` or the
    process's end; holding it again is a no-op. ``key``: see :func:`_lock`.

    Raises:
        RunFolderInUseError: see :func:`_lock`.
    """
    folder = _key(run_dir)
    if folder not in _held:
        folder.mkdir(parents=True, exist_ok=True)
        _held[folder] = _lock(folder, key)


def release_run_folder(run_dir: Path) -> None:
    """Release what :func:`hold_run_folder` holds (the file stays)."""
    fd = _held.pop(_key(run_dir), None)
    if fd is not None:
        os.close(fd)


def release_run_folders() -> None:
    """Release every folder this process holds (the end of an entry point's run)."""
    for run_dir in list(_held):
        release_run_folder(run_dir)


@contextmanager
def held_run_folder(run_dir: Path, key: str = "hydra.run.dir") -> Iterator[None]:
    """Hold the lock of ``run_dir`` for the block, unless this process holds it already
    (``key``: see :func:`_lock`; an output folder, e.g. ``preprocess.output_dir``, whose
    writers use fixed temporary names that two runs would write over each other).

    Raises:
        RunFolderInUseError: see :func:`_lock`.
    """
    if _key(run_dir) in _held:
        yield
        return
    hold_run_folder(run_dir, key)
    try:
        yield
    finally:
        release_run_folder(run_dir)


@contextmanager
def held_output_file(path: Path, key: str) -> Iterator[None]:
    """Hold the lock of the output file ``path`` (``.<name>.lock`` beside it) for the block:
    its writer uses one fixed temporary name (``<name>.partial``), so two runs given the same
    file (two ``mode=predict`` with one ``predict.output``) wrote into one partial file, and
    the first to finish published it while the other still wrote (an unreadable file, vouched
    for by its report).

    Raises:
        OutputFolderInUseError: another live process holds it (naming ``key``, the file and
            that process).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    lock_file = f".{path.name}.lock"
    fd = _lock(path.parent, key, lock_file, named=path)
    try:
        yield
    finally:
        if fd is not None:  # removed while held: a predict left it beside every output (review)
            (path.parent / lock_file).unlink(missing_ok=True)
            os.close(fd)
