"""Input paths to files: what ``data.path`` (and ``val_path`` / ``test_path``) name."""

import glob
import hashlib
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from dlrm_exp.errors import DataError
from dlrm_exp.util.files import absolute_path


def resolve_paths(
    paths: Iterable[str], key: str, folder_files: str | None = None, globs: bool = False
) -> list[Path]:
    """Files named by ``paths``, in the order given, as absolute paths
    (:func:`~dlrm_exp.util.files.absolute_path`: ``metrics.json``'s ``data.read.files`` and
    predictions' ``file`` named them as typed, relative to a folder no record kept, while the
    checkpoint recorded them absolute: run-folder review).

    Args:
        paths: files, folders (and, with ``globs``, glob patterns).
        key: the config key, for the error (``data.path``).
        folder_files: the pattern a folder's files must match (``*.parquet``); None: every
            non-hidden file. A folder's files are sorted by name.
        globs: a path that is neither a file nor a folder is a glob pattern (sorted matches).

    Raises:
        DataError: a path names nothing, names a pipe or device, or a folder holds no
            matching file.
    """
    files: list[Path] = []
    for raw in paths:
        path = Path(raw).expanduser()
        if path.is_dir():
            found = sorted(
                p
                for p in (path.glob(folder_files) if folder_files else path.iterdir())
                if p.is_file() and not p.name.startswith(".")
            )
            if not found:
                raise DataError(f"{key}: folder {raw} holds no {folder_files or 'data'} file")
            files += found
        elif path.is_file():
            files.append(path)
        elif globs and (
            matched := sorted(Path(p) for p in glob.glob(str(path)) if Path(p).is_file())
        ):
            files += matched
        elif path.exists():  # a pipe (process substitution) or a device
            raise DataError(
                f"{key}: {raw} is neither a regular file nor a folder (a pipe or a device?): "
                "inputs are read in byte ranges, some more than once; write it to a file first"
            )
        else:
            what = "file, folder or glob match" if globs else "file or folder"
            raise DataError(f"{key}: no such {what}: {raw} (from {os.getcwd()})")
    return [absolute_path(str(f)) for f in files]


def refuse_repeated(files_by_key: Mapping[str, Sequence[Path]]) -> None:
    """No file named twice, under one key or two: a file under ``data.path`` and
    ``data.val_path`` would have its rows trained and validated on, one listed twice trained
    on twice.

    Raises:
        DataError: naming the file and the key(s).
    """
    seen: dict[Path, str] = {}
    for key, files in files_by_key.items():
        for file in files:
            real = file.resolve()
            if real in seen:
                twice = f"twice by {key}" if seen[real] == key else f"by {seen[real]} and {key}"
                raise DataError(
                    f"{file} is named {twice}: its rows would be read twice (or both trained "
                    "and evaluated on); name each file once"
                )
            seen[real] = key


def resolve_inputs(
    paths_by_key: Mapping[str, list[str]],
    resolve: Callable[[list[str], str], list[Path]] = resolve_paths,
) -> dict[str, list[Path]]:
    """The files of each config key's paths (``cfg.input_paths()``) by ``resolve``, none of
    them named twice (:func:`refuse_repeated`).

    Raises:
        DataError: a path names nothing, or a file is named twice.
    """
    files = {key: resolve(paths, key) for key, paths in paths_by_key.items()}
    refuse_repeated(files)
    return files


def files_digest(files: Sequence[Path]) -> str:
    """``"<n> file(s), <bytes> bytes, <digest>"`` of ``files``: their count, total size and a
    digest of their resolved names and sizes (SHA-1, 10 hex digits), in order. What a
    checkpoint records of each input path (:func:`dlrm_exp.data.input_digests`): a folder
    that gained a file, a glob matching others, or a file of another size reads other rows
    under the same path (a review's reading).

    Raises:
        OSError: a file of ``files`` is gone (or unreadable) when its size is read.
    """
    sizes = [(str(f.resolve()), f.stat().st_size) for f in files]
    digest = hashlib.sha1(repr(sizes).encode()).hexdigest()[:10]
    total = sum(size for _, size in sizes)
    return f"{len(sizes)} file{'s' * (len(sizes) != 1)}, {total:,} bytes, {digest}"
