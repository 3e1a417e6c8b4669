"""One run at a time in a run folder.

Hydra names a run's folder by the second it starts (``outputs/<date>/<H-M-S>``), and a sweep's
by the second too: runs started within one second (a loop of background jobs, a Slurm job
array starting its tasks together in one working folder) share it and write their logs,
TensorBoard events, checkpoints and ``metrics.json`` over each other. :func:`held_run_folder`
holds an exclusive ``flock`` on ``<folder>/.lock`` while the run's process lives (the kernel
releases it when the process ends, however it ends: no stale lock after a crash or
``kill -9``), and refuses a second process that asks for the same folder.
"""

import errno
import fcntl
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dlrm_exp.errors import RunFolderInUseError

#: The lock file's name in the run folder.
LOCK_FILE = ".lock"


@contextmanager
def held_run_folder(run_dir: Path) -> Iterator[None]:
    """Hold the lock of ``run_dir`` for the block (the file stays; the lock ends with the block
    or the process). A file system without ``flock`` (some network or FUSE mounts) runs
    unlocked.

    Raises:
        RunFolderInUseError: another live process holds it (naming that process and host).
    """
    path = run_dir / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield  # a folder that cannot hold the file: nothing to lock with
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                yield  # no flock here
                return
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another process"
            raise RunFolderInUseError(
                f"{run_dir} is in use by another run ({holder}): runs started within the "
                "same second share the default folder outputs/<date>/<time>; give each its "
                "own hydra.run.dir=..., or run them as one -m sweep"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"process {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock
