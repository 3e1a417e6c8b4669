"""Data checks a file has passed, remembered, so a later start does not read it again.

``data=criteo_npy``'s rank-0 scan reads every day's labels at each start (16 GiB on the 1TB
days) and, with ``data.mmap_mode``, the validation and test rows' dense values (the last day,
9.2 GB). A passed check is recorded in ``data_checks.json`` of the user's cache
(:mod:`dlrm_exp.util.user_cache`) under the check's name, the file's resolved path, size and
modification time (ns) and the rows checked; a file rewritten since (``mode=preprocess``, a
copy) has another size or time, so it is checked again, as ``make`` and ``rsync`` judge a file
unchanged. A file modified within :data:`SETTLE_SECONDS` before its check is not recorded: a
rewrite in the same tick of the file system's clock could keep its time (git's "racily clean"
files). A failed check is never recorded. A cache that cannot be read or written is ignored.
"""

import time
from collections.abc import Callable
from pathlib import Path

from dlrm_exp.util.files import read_json_object
from dlrm_exp.util.user_cache import cache_path, store_entries

CACHE_NAME = "data_checks.json"
#: A file younger than this (seconds since its modification) is checked but not recorded.
SETTLE_SECONDS = 2.0


def _file_key(check: str, path: Path, rows: tuple[int, int] | None) -> tuple[str, float] | None:
    """The record of ``path`` as it is now, for ``check`` over ``rows`` (None: all rows), and
    its modification time (s); None when it cannot be read. Taken before the check, a file
    rewritten during the check is left with another key than its record."""
    try:
        stat = path.stat()
    except OSError:
        return None
    span = "all" if rows is None else f"{rows[0]}-{rows[1]}"
    return f"{check}|{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{span}", stat.st_mtime


def check_once(
    check: str, path: Path, run: Callable[[], None], rows: tuple[int, int] | None = None
) -> None:
    """Run ``run`` (the check ``check`` of ``path`` over ``rows``, None: all; it raises on bad
    data) unless the unchanged file passed it before; remember a pass, unless the file was
    modified within :data:`SETTLE_SECONDS` before.

    Raises:
        DataError: what ``run`` raises.
    """
    cache = cache_path(CACHE_NAME)
    found = _file_key(check, path, rows)
    if found is not None and found[0] in (read_json_object(cache) or {}):
        return
    run()
    if found is not None and time.time() - found[1] >= SETTLE_SECONDS:
        store_entries(cache, {found[0]: time.strftime("%Y-%m-%dT%H:%M:%S")})
