"""The jobs of a sweep that did not run because their folder was another's: a rerun with an
edited list numbers its jobs into folders that hold other jobs of the earlier sweep, and a
folder may be held by a run under way. Such a job writes no record there (the folder's is the
other job's), so the summary read the other job's record as this sweep's, listed the job
nowhere, kept an earlier ``summary_stats.csv`` and exited 0 (sweeps review). Each one leaves a
note in ``<sweep>/.jobs_not_run/`` (cleared when a multirun starts) that the summary reads.
"""

from pathlib import Path
from typing import Any

from dlrm_exp.util.files import read_json_object, write_json_atomic

#: The folder of the notes, in the sweep folder.
NOTES = ".jobs_not_run"


def note_not_run(sweep_dir: Path, run_dir: Path, job: str, why: str) -> None:
    """Note that the sweep's job ``job`` did not run in ``run_dir`` (``why``: its refusal)."""
    note = {"job": job, "folder": str(run_dir.absolute()), "why": why}
    write_json_atomic(sweep_dir / NOTES / f"{run_dir.name}.json", note)


def clear_notes(sweep_dir: Path) -> None:
    """Remove the notes of an earlier multirun into ``sweep_dir``."""
    for note in (sweep_dir / NOTES).glob("*.json"):
        note.unlink(missing_ok=True)


def jobs_not_run(sweep_dir: Path) -> list[dict[str, Any]]:
    """The notes of this multirun (``job``, ``folder``, ``why``), by folder name; unreadable
    ones are left out."""
    notes = (read_json_object(path) for path in sorted((sweep_dir / NOTES).glob("*.json")))
    return [note for note in notes if note and {"job", "folder", "why"} <= note.keys()]
