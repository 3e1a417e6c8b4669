"""The settings a checkpoint records of its run, and how a resume or a sweep's rerun compares
them with its own: values as the update sees them (:func:`setting_changes`), input paths as
the files they name (:func:`resolved_inputs`), a sweep's job as its swept values
(:func:`sweep_job`), and which changes give other validation rows
(:func:`validation_changes`).
"""

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dlrm_exp.util.files import json_safe

Settings = dict[str, Any] | None


def setting_changes(saved: Settings, job: Settings) -> list[tuple[str, Any, Any]]:
    """``(key, old, new)`` for each setting (:attr:`CheckpointLayout.settings`) this job
    changes from the checkpoint's, sorted by key, the values as each side has them; only keys
    both record (a key added by a later version is no change), compared as the update sees
    them (:func:`as_update`); none when either side has no record (:func:`change_line` says
    one)."""
    if not saved or not job:
        return []
    return [
        (key, saved[key], job[key])
        for key in sorted(set(saved) & set(job))
        if as_update(key, saved[key]) != as_update(key, job[key])
    ]


def validation_changes(
    changes: list[tuple[str, Any, Any]], differ: Callable[[str, Any, Any], bool]
) -> list[str]:
    """Of a resume's ``changes`` (:func:`setting_changes`), as :func:`change_line`'s
    lines, those that give the resumed run other validation rows than the run of its
    checkpoint, or decode them otherwise: the data source (``data``) and each key whose
    change ``differ`` (the job's :meth:`~dlrm_exp.config.data.DataConfig.rows_differ` of
    ``val``) says moves them. The checkpoint's validations then measure another task than
    this run's."""
    return [change_line(c) for c in changes if c[0] == "data" or differ(*c)]


def change_line(change: tuple[str, Any, Any]) -> str:
    """A :func:`setting_changes` triple as a resume says it: ``key old -> new``."""
    key, was, now = change
    return f"{key} {was} -> {now}"


def as_update(key: str, value: Any) -> Any:
    """A setting's value as the update sees it: embedding collectives in FP32 and none at all
    (one rank) are one exact update, so a 2-rank run resumed on 1 rank changes no
    ``qcomms`` (it was warned as ``qcomms FP32 -> none``: docs review). An input path is
    the file it names from here: what :func:`resolved_inputs` recorded stays that file, and
    one a checkpoint of an earlier version recorded as typed (relative, or through a
    symlink) is the file it names now (each resume of one was a change of data, its
    validations and best forgotten: diff review)."""
    value = json_safe(value)  # as the checkpoint's record reads back: inf there is null
    if key == "qcomms" and value == "none":
        return "FP32"
    if key in _PATH_KEYS and isinstance(value, (str, list)):
        return resolved_inputs({key: value})[key]
    return value


def resolved_inputs(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` with the input paths (``data.path``, ``data.val_path``,
    ``data.test_path``: a path or a list) as the files they name when the job runs, symlinks
    followed: what a checkpoint records, so a resume from another folder, or with one file
    typed relative then absolute, compares files, not texts (its validations were thrown
    away for one file; diff review), and a symlink moved to another file is a change (diff
    review)."""
    resolved = dict(settings)
    for key in _PATH_KEYS & settings.keys():
        value = settings[key]
        if isinstance(value, str) and value:
            resolved[key] = resolved_path(value)
        elif isinstance(value, list):
            resolved[key] = [resolved_path(str(p)) for p in value]
    return resolved


#: The settings that name input files (relative to where the job started).
_PATH_KEYS = frozenset({"data.path", "data.val_path", "data.test_path"})


def sweep_job(swept: Mapping[str, Any]) -> dict[str, Any]:
    """A sweep's job as a checkpoint records it (:attr:`CheckpointLayout.sweep_job`): its
    swept keys and values (:class:`~dlrm_exp.modes.job.Job`'s ``swept``) as JSON reads them
    back (a tuple is a list, an object its text, ``inf`` or ``nan`` null: a job that swept
    one never matched its own checkpoint)."""
    return json.loads(json.dumps(json_safe(dict(swept)), default=str, sort_keys=True))


def resolved_path(path: str) -> str:
    """``path`` (``~`` expanded, relative to where the job started) as the absolute path it
    names, symlinks followed; the file need not exist."""
    return str(Path(path).expanduser().resolve())
