"""The user's cache of measurements and checks: JSON files in one folder, shared by processes.

``$DLRM_EXP_CACHE_DIR`` (default ``~/.cache/dlrm_exp``; for a user without a home folder,
e.g. a container's arbitrary user id, ``<temp dir>/dlrm_exp-cache-<uid>``) holds one JSON
object per file (``peak.json``: measured peaks, :mod:`dlrm_exp.perf.peak`;
``data_checks.json``: data checks passed, :mod:`dlrm_exp.data.check_cache`). Processes that
write at once merge their entries under a lock file beside it.
"""

import os
import tempfile
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from dlrm_exp.util.files import read_json_object, write_json_atomic


def cache_path(name: str) -> Path:
    """The cache file ``name`` in ``$DLRM_EXP_CACHE_DIR`` (default ``~/.cache/dlrm_exp``, or
    ``<temp dir>/dlrm_exp-cache-<uid>`` where the user has no home folder: ``Path.home()``
    raises RuntimeError without ``$HOME`` and a passwd entry)."""
    root = os.environ.get("DLRM_EXP_CACHE_DIR")
    if root:
        return Path(root) / name
    try:
        return Path.home() / ".cache" / "dlrm_exp" / name
    except RuntimeError:
        return Path(tempfile.gettempdir()) / f"dlrm_exp-cache-{os.getuid()}" / name


def store_entries(path: Path, entries: dict[str, Any]) -> None:
    """Put ``entries`` (key -> JSON value) in the cache file, keeping what other processes
    stored meanwhile: read again and written under a lock file beside it (``filelock``,
    writable by every user of a shared cache), so ranks or hosts writing at once do not drop
    each other's entries. Where no lock can be taken (a file system without ``flock``, a lock
    held past 10 s, another user's lock file) it is read again and written without one; a
    cache that cannot be written is left as it is (what it would hold is measured or checked
    again next time)."""

    def merge() -> None:
        cached = read_json_object(path) or {}
        cached.update(entries)
        write_json_atomic(path, cached)

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(f"{path}.lock", timeout=10, mode=0o666):
            return merge()
    except (OSError, Timeout, NotImplementedError):
        pass
    try:
        merge()
    except OSError:
        pass
