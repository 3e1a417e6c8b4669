"""Data checks a file has passed, remembered, so a later start does not read it again.

``data=criteo_npy``'s rank-0 scan reads every day's labels at each start (16 GiB on the 1TB
days) and, with ``data.mmap_mode``, the validation and test rows' dense values (the last day,
9.2 GB). A passed check is recorded in ``data_checks.json`` of the user's cache
(:mod:`dlrm_exp.util.user_cache`): under the check's name, the rows checked and the file's
resolved path, the file's device, inode, size and modification time (ns) when its content was
taken. A file rewritten or replaced since (``mode=preprocess``, a copy) differs in one of them,
so it is checked again, as ``make`` and ``rsync`` judge a file unchanged; its new pass replaces
the old record; a scan reads the cache once and stores its passes together. A file modified
within :data:`SETTLE_SECONDS` before its state was taken is
not recorded: a rewrite in the same tick of the file system's clock could keep its time (git's
"racily clean" files). A failed check is never recorded. A cache that cannot be read or written
only means the check runs again.
"""

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dlrm_exp.util.files import read_json_object
from dlrm_exp.util.user_cache import cache_path, store_entries

CACHE_NAME = "data_checks.json"
#: A file younger than this (seconds since its modification) is checked but not recorded.
SETTLE_SECONDS = 2.0


@dataclass(frozen=True)
class FileState:
    """A file as a check is about to read it: ``name`` (check, rows, path) and ``stamp``
    (device, inode, size, modification time) as recorded, and its age in seconds then."""

    name: str
    stamp: str
    age: float


def file_state(check: str, path: Path, rows: tuple[int, int] | None = None) -> FileState | None:
    """``path`` as it is now, for ``check`` over ``rows`` (None: all rows); None when it
    cannot be read. Take it as close to when the check's content is taken as the caller can
    (right after a mapping, not after a long scan of other files)."""
    try:
        stat = path.stat()
        name = f"{check}|{'all' if rows is None else f'{rows[0]}-{rows[1]}'}|{path.resolve()}"
    except (OSError, RuntimeError):
        return None
    stamp = f"{stat.st_dev}:{stat.st_ino}:{stat.st_size}:{stat.st_mtime_ns}"
    return FileState(name, stamp, time.time() - stat.st_mtime)


class RememberedChecks:
    """The checks of one scan: the cache read once, its passes stored together at the end
    (:func:`remembered_checks`)."""

    def __init__(self) -> None:
        self.cache = cache_path(CACHE_NAME)
        self.known = read_json_object(self.cache) or {}
        self.passed: dict[str, str] = {}

    def once(self, state: FileState | None, run: Callable[[], None]) -> None:
        """Run ``run`` (the check of the file ``state`` describes; it raises on bad data)
        unless the file, unchanged, passed it before; remember a pass.

        Raises:
            DataError: what ``run`` raises.
        """
        if state is not None and self.known.get(state.name) == state.stamp:
            return
        run()
        if state is not None and state.age >= SETTLE_SECONDS:
            self.passed[state.name] = state.stamp


@contextmanager
def remembered_checks() -> Iterator[RememberedChecks]:
    """The checks of one scan; their passes are stored when it ends, also when a later check
    raised (one locked write of the cache file)."""
    checks = RememberedChecks()
    try:
        yield checks
    finally:
        if checks.passed:
            store_entries(checks.cache, checks.passed)
