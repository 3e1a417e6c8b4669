"""Atomic file writes: a crash never leaves a half-written JSON or text file."""

import csv
import errno
import io
import json
import math
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import IO, Any

from dlrm_exp.errors import ConfigError


def absolute_path(location: str) -> Path:
    """``location`` (``~`` expanded) as an absolute path, as records name a checkpoint or a
    data file (a relative one named nothing from another folder: review): its ``..`` folded
    where that names the same folder (through a symlinked folder, ``link/..`` is the link
    target's parent, which text folding missed: diff review), else kept; symlinks kept."""
    typed = Path(location).expanduser().absolute()
    folded = Path(os.path.abspath(typed))
    if folded == typed:  # (no ..)
        return typed
    same = folded.exists() and typed.exists() and folded.resolve() == typed.resolve()
    return folded if same else typed


def json_safe(value: Any) -> Any:
    """``value`` as :func:`write_json_atomic` writes it: a non-finite float is ``null``
    (JSON has no ``inf`` or ``nan``), an enum its value, a mapping's keys text, a tuple a
    list. What a file written so reads back equals this (a setting compared with its
    record must be taken so first)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def sync_open_file(f: IO[Any]) -> None:
    """Flush the open file ``f`` and its data to the disk (before
    :func:`replace_durably` names it)."""
    f.flush()
    os.fsync(f.fileno())


def sync_file(path: Path) -> None:
    """Flush ``path``'s data to the disk (for a file another library wrote and closed)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_durably(tmp: Path, path: Path) -> None:
    """Move the finished file ``tmp``, whose data the caller synced (``os.fsync`` on its own
    descriptor, or :func:`sync_file`), to ``path``, then sync the folder's entry: a power
    loss or kernel crash then cannot leave ``path`` naming data that never reached the disk
    (a rename alone is ordered before the data only on some file systems; a day's marker
    written next would vouch for empty files). Linux semantics: macOS's ``fsync`` does not
    flush the device's cache."""
    os.replace(tmp, path)
    sync_folder(path.parent)


def publish_file(tmp: Path, path: Path) -> None:
    """Put the finished file ``tmp``, which another library wrote and closed, at ``path``:
    :func:`sync_file`, then :func:`replace_durably`."""
    sync_file(tmp)
    replace_durably(tmp, path)


def write_via(path: Path, write: Callable[[Path], object], suffix: str = ".partial") -> None:
    """``write(tmp)`` to the hidden ``.<name><suffix>`` beside ``path`` (which folder inputs
    and listings skip), then :func:`publish_file` it; ``tmp`` is removed if anything fails, so
    a crash never leaves a truncated file under ``path`` nor replaces an earlier one first."""
    tmp = path.with_name(f".{path.name}{suffix}")
    try:
        write(tmp)
        publish_file(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def sync_folder(folder: Path) -> None:
    """Flush ``folder``'s entries (files created, renamed or removed in it) to the disk; a
    folder that cannot be opened or synced (not POSIX) is left as it is."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and ``os.replace``, so a crash never
    leaves a half-written file. The file gets the mode a plain ``open`` would give it (0644
    under the usual umask 022), not ``mkstemp``'s 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            sync_open_file(f)
        os.chmod(tmp, 0o666 & ~_umask())
        replace_durably(Path(tmp), path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` in UTF-8, atomically (:func:`write_bytes_atomic`)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_csv_atomic(
    path: Path, fieldnames: Sequence[str], rows: Iterable[Mapping[str, Any]]
) -> None:
    """Write ``rows`` as CSV (a header of ``fieldnames``, ``csv.DictWriter``'s format) to
    ``path`` atomically (:func:`write_text_atomic`)."""
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=list(fieldnames))
    writer.writeheader()
    writer.writerows(rows)
    write_text_atomic(path, buffer.getvalue())


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    """Write ``data`` as JSON to ``path`` atomically (:func:`write_text_atomic`). Non-finite
    floats become null."""
    write_text_atomic(path, json.dumps(json_safe(data), indent=2, sort_keys=False) + "\n")


def read_json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None when the file is missing or unreadable, is not
    JSON, or holds something other than an object (a marker or cache left half-written or
    edited by hand counts as none)."""
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return content if isinstance(content, dict) else None


def check_writable(run_dir: Path, key: str = "hydra.run.dir") -> None:
    """Fail at start, not after training, when the run folder (or the folder ``key`` names)
    cannot be written.

    Raises:
        ConfigError: the folder cannot be created or written (permissions, full disk), naming
            ``key``.
    """
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        # a file of this process's own: ranks probing one folder at once do not race
        with tempfile.TemporaryFile(dir=run_dir, prefix=".write_test") as probe:
            probe.write(b"0" * 4096)
            probe.flush()
    except OSError as err:
        what = "the run folder" if key == "hydra.run.dir" else f"{key}:"
        # "File exists" for a file where a folder goes says nothing of which (review)
        in_the_way = next((p for p in (run_dir, *run_dir.parents) if p.is_file()), None)
        why = f"{in_the_way} is a file, not a folder" if in_the_way else err.strerror or err
        space = ", or free space" if out_of_space(err) else ""  # (not for a file in the way)
        raise ConfigError(
            f"cannot write {what} {run_dir}: {why} (choose another with {key}=...{space})"
        ) from None


def out_of_space(err: BaseException) -> bool:
    """Whether ``err`` is a write refused for want of space: a full disk (``ENOSPC``) or the
    user's quota (``EDQUOT``)."""
    return isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT)
