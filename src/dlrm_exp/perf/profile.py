"""``train.profile``: ``torch.profiler`` traces of training steps, per rank, in ``<run>/profile/``.

Files, one set per rank r:

- ``rank<r>.pt.trace.json``: the Chrome trace of the ``train.profile_steps.active`` steps that
  follow ``wait`` skipped and ``warmup`` unrecorded steps (``torch.profiler.schedule``), with
  TorchRec's ``record_function`` ranges (``## forward ##``, ``## backward ##``,
  ``## optimizer ##``, ``## wait_for_batch ##``, ``## start_sparse_data_dist N ##``,
  ``## all2all_data:kjt ... ##``) and FBGEMM's lookup operators
  (``fbgemm::split_embedding_codegen_lookup_*``). Open it in Perfetto
  (https://ui.perfetto.dev) or ``chrome://tracing``; TensorBoard shows it with the
  ``torch-tb-profiler`` plugin: ``tensorboard --logdir <run>/profile``.
- ``rss_rank<r>.csv``: the process's resident set after every training step while profiling
  (``step``, ``seconds`` since the first step, ``rss_bytes``; psutil).
- on CUDA, ``cuda_memory_rank<r>.pickle``: the allocator's history over the profiled steps
  (``torch.cuda.memory._record_memory_history``), for https://pytorch.org/memory_viz.
"""

import time
from pathlib import Path
from typing import Any

import psutil
import torch
from torch.profiler import ProfilerActivity, profile, schedule

from dlrm_exp.config import ProfileSteps
from dlrm_exp.util.files import write_csv_atomic, write_via

PROFILE_DIR = "profile"
#: The end of a rank's trace file's name (``rank<r>.pt.trace.json``).
TRACE_SUFFIX = ".pt.trace.json"
#: The columns of ``rss_rank<r>.csv``.
RSS_COLUMNS = ("step", "seconds", "rss_bytes")


def profile_files(
    run_dir: Path, ranks: int | None = None, traced: bool = True, cuda: bool = True
) -> list[str]:
    """The files every rank's profiler wrote, relative to ``run_dir``, sorted (not a hidden
    temporary file a killed export left); with ``ranks``, only the names a run of that many
    ranks writes (:func:`rank_files`: traces only where it ``traced``, CUDA memory histories
    only on ``cuda``): an earlier attempt's on more ranks, its traces or a GPU attempt's
    histories were listed as this run's (re-read)."""
    found = (run_dir / PROFILE_DIR).glob("*")
    names = {n for r in range(ranks or 0) for n in rank_files(r, traced, cuda)}
    return sorted(
        str(p.relative_to(run_dir))
        for p in found
        if not p.name.startswith(".") and (ranks is None or p.name in names)
    )


def rank_files(rank: int, traced: bool = True, cuda: bool = True) -> list[str]:
    """The names of the files rank ``rank``'s profiler writes (module docs): its resident
    set's, its trace where it ``traced``, and on ``cuda`` its allocator history (recorded
    from the warm-up steps on: a run that ended there wrote one and no trace, and the
    history followed the trace out of the record: diff review)."""
    return [
        f"rss_rank{rank}.csv",
        *([f"rank{rank}{TRACE_SUFFIX}"] if traced else []),
        *([f"cuda_memory_rank{rank}.pickle"] if cuda else []),
    ]


def _all_threads() -> Any:
    """Kineto's option to record every thread's operators, not only the thread that started
    the profiler: the sparse backward of ``train.sparse_backward=overlap`` runs on a helper
    thread. None (the calling thread only) where this torch has no such option (Kineto's
    experimental config, without a compatibility promise)."""
    try:
        return torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
    except (AttributeError, TypeError):
        return None


class StepProfiler:
    """Profiles training steps on one rank; a no-op when ``enabled`` is false.

    Call :meth:`start` before the first step, :meth:`step` after each, :meth:`stop` at the
    end (it writes the files; also when fewer steps ran than the schedule asked for, then
    only what was recorded).
    """

    def __init__(
        self, run_dir: Path, rank: int, steps: ProfileSteps, device: torch.device, enabled: bool
    ) -> None:
        self.enabled = enabled
        self.dir = run_dir / PROFILE_DIR
        self.rank = rank
        self.device = device
        self.first_recorded = steps.wait + 1
        self.last_step = steps.last_step
        #: Whether this process wrote its trace (a folder may hold an earlier attempt's).
        self.traced = False
        self._rss: list[tuple[int, float, int]] = []
        self._process = psutil.Process()
        self._started = 0.0
        self._steps = 0
        self._history = False  # the CUDA allocator history is on
        activities = [ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        self._profiler = profile(
            activities=activities,
            schedule=schedule(wait=steps.wait, warmup=steps.warmup, active=steps.active),
            on_trace_ready=self._write_trace,
            record_shapes=True,
            profile_memory=True,
            experimental_config=_all_threads(),
        )

    def start(self) -> None:
        """Start the profiler before the first step (its schedule waits ``wait`` steps)."""
        if not self.enabled:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        self._history_before_recorded_steps()
        self._started = time.perf_counter()
        self._profiler.start()

    def _history_before_recorded_steps(self) -> None:
        """On CUDA, start the allocator history when the next step is the first recorded one:
        it records a stack trace per allocation, and the ``wait`` steps count as training."""
        if self.device.type == "cuda" and self._steps + 1 == self.first_recorded:
            torch.cuda.memory._record_memory_history(max_entries=100_000)
            self._history = True

    @property
    def recording(self) -> bool:
        """Whether the step under way is one the profiler records (its warm-up and active
        steps: slowed by recording shapes and memory, so not steady-state training)."""
        return self.enabled and self.first_recorded <= self._steps + 1 <= self.last_step

    def step(self) -> bool:
        """Mark the end of a training step; returns whether the profiler took part (its
        schedule advanced, a trace may have been written: time that is not training). After
        the last recorded step it stops (:meth:`stop`): on CUDA the allocator history, which
        records a stack trace per allocation, then no longer slows the steps that count."""
        if not self.enabled or self._steps >= self.last_step:
            return False
        self._steps += 1
        seconds = time.perf_counter() - self._started
        self._rss.append((self._steps, seconds, self._process.memory_info().rss))
        self._profiler.step()
        if self._steps >= self.last_step:
            self.stop()
        else:
            self._history_before_recorded_steps()
        return True

    def stop(self) -> None:
        """Stop profiling and write the files (once; the end of training calls it too, for a
        run shorter than the profiled steps)."""
        if not self.enabled:
            return
        self.enabled = False
        self._profiler.stop()
        rows = [dict(zip(RSS_COLUMNS, row, strict=True)) for row in self._rss]
        rss, _, history = rank_files(self.rank)  # (rss, trace, history)
        write_csv_atomic(self.dir / rss, list(RSS_COLUMNS), rows)
        if self._history:  # not when training ended in the wait steps: nothing recorded
            # written aside: a crash never leaves a truncated file under the name metrics.json
            # lists, nor truncates a resumed run's earlier one before the new one is complete
            write_via(self.dir / history,
                      lambda tmp: torch.cuda.memory._dump_snapshot(str(tmp)), ".tmp")  # fmt: skip
            torch.cuda.memory._record_memory_history(enabled=None)
            self._history = False

    def _write_trace(self, prof: profile) -> None:
        path = self.dir / rank_files(self.rank)[1]
        write_via(path, lambda tmp: prof.export_chrome_trace(str(tmp)), ".tmp")  # seconds
        self.traced = True
