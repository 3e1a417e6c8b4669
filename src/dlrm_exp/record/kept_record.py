"""A run folder's record put back when a run given that folder is refused.

Hydra writes ``.hydra/config.yaml``, ``hydra.yaml`` and ``overrides.yaml`` into
``hydra.run.dir`` before the task starts, and training writes ``plan.json`` / ``plan.txt``
before its resume checks; a run refused there (another shape, a bad value, a folder in use)
would leave the folder's earlier run described by the refused one's settings, which
reports and sweeps then attach to that run's metrics. The entry point reads these files
before Hydra starts and writes them back (or removes the ones the refused run added) when the
run is refused having written no result (:data:`RESULT_PATTERNS`). A run that failed under
way (a NaN, a crash) gets them back while the folder's earlier record (``metrics.json``)
is unchanged, the failed run's own going to ``.hydra/failed_run/``; one that wrote its own
record keeps its settings beside it.
"""

import os
from pathlib import Path

from dlrm_exp.util.files import write_text_atomic

#: What a run leaves as its results (checkpoints, records, predictions, an export): a failed
#: run that changed none of them did not take the folder over.
RESULT_PATTERNS = (
    "checkpoints/*",
    "metrics.json",
    "predictions*.parquet",
    "predict_report.json",
    "model.pt",
    "export.json",
)


def _results(run_dir: Path) -> dict[str, tuple[int, int]]:
    """``{path: (size, mtime_ns)}`` of the run folder's results."""
    found = {}
    for pattern in RESULT_PATTERNS:
        for path in run_dir.glob(pattern):
            try:
                stat = path.stat()
            except OSError:
                continue
            found[str(path.relative_to(run_dir))] = (stat.st_size, stat.st_mtime_ns)
    return found


#: The files that say what a run folder's run produced: a training run's record, a predict or
#: export run's report (a rerun of predict into its folder, interrupted, left .hydra naming
#: its checkpoint beside the earlier predictions: crash review).
RECORDS = ("metrics.json", "predict_report.json", "export.json")


#: The files describing a run folder's run, relative to the folder.
RECORD_FILES = (
    ".hydra/config.yaml",
    ".hydra/hydra.yaml",
    ".hydra/overrides.yaml",
    "plan.json",
    "plan.txt",
)


#: Where a run that failed under way keeps its record files when the folder's earlier
#: record is put back (``.hydra/failed_run/config.yaml``, ...).
FAILED_RUN = ".hydra/failed_run"


class KeptRecord:
    """The record files of the run folder ``run_dir`` as they are now (none when it holds no
    run: ``.hydra/config.yaml`` absent)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.saved: dict[str, str | None] = {}
        self.mtimes: dict[str, int] = {}  # (ns) put back too: the report dates a run by them
        self.results: dict[str, tuple[int, int]] = {}
        if not (run_dir / RECORD_FILES[0]).is_file():
            return
        self.results = _results(run_dir)
        for name in RECORD_FILES:
            try:
                self.saved[name] = (run_dir / name).read_text(encoding="utf-8")
                self.mtimes[name] = (run_dir / name).stat().st_mtime_ns
            except FileNotFoundError:
                self.saved[name] = None
            except (OSError, UnicodeDecodeError):
                continue  # unreadable: nothing to put back, left as the run makes it

    def restore(self, failed: bool = False) -> list[str]:
        """Put the files back as they were read, unless the run changed a result (then they
        describe it); returns the names changed back. ``failed``: the run failed under way,
        after it may have written checkpoints; the files go back while the folder's earlier
        record (one of :data:`RECORDS`) is the one they describe, unchanged (a resumed run that
        then failed left a completed record beside the failed run's settings, which the
        report showed as that run's); the failed run's files go to :data:`FAILED_RUN`.

        Raises:
            OSError: one cannot be written or removed.
        """
        changed: list[str] = []
        if not self.saved:
            return changed
        results = _results(self.run_dir)
        kept = any(
            record in self.results and results.get(record) == self.results[record]
            for record in RECORDS
        )
        if not (kept if failed else results == self.results):
            return changed
        for name, text in self.saved.items():
            path = self.run_dir / name
            try:
                now: str | None = path.read_text(encoding="utf-8")
            except FileNotFoundError:
                now = None
            except (OSError, UnicodeDecodeError):
                now = ""
            if now != text:
                if failed and now:  # the failed run's settings stay beside its logs and events
                    write_text_atomic(self.run_dir / FAILED_RUN / Path(name).name, now)
                if text is None:
                    path.unlink(missing_ok=True)
                else:
                    write_text_atomic(path, text)
                changed.append(name)
            if name in self.mtimes:  # (Hydra rewrote it at this run's start, if unchanged)
                os.utime(path, ns=(self.mtimes[name], self.mtimes[name]))
        return changed
