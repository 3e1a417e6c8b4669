"""Quality and speed metrics: AUROC, log loss, normalized entropy, throughput, peak memory.

AUROC comes from torchmetrics' ``BinaryAUROC``. Log loss is the mean binary cross-entropy of
the predicted click probability (natural log, nats). Normalized entropy (NE) is the log loss
divided by the entropy of the evaluated set's click-through rate p:
``NE = logloss / -(p log p + (1 - p) log(1 - p))``, as TorchRec's NE metric (He et al. 2014,
"Practical Lessons from Predicting Clicks on Ads at Facebook", normalize by the training set's
average CTR instead: where the two CTRs differ, the NEs differ either way, the one whose CTR
lies nearer 0.5 having the larger entropy and the lower NE, so compare NEs of one
convention); NE < 1 means better than always predicting p.
Calibration is the mean predicted click probability over the observed click-through rate,
``sum(sigmoid(logit)) / sum(label)`` (the CTR-prediction convention reported next to NE): 1 is
calibrated, above 1 over-predicts clicks.
All metrics sync across ranks through torchmetrics when the process group has several ranks
(:func:`dlrm_exp.util.rank_zero.several_ranks`). torchmetrics would sync over a one-rank group
too: its all-gather then only copies the evaluated predictions, on a gloo thread, which that
copy gives an OpenMP team of its own; with more OpenMP threads in the process than cores,
libgomp shortens every team's spin wait for good, and the training steps after it ran 15-30 %
slower on 2 cores (docs/performance.md, "The fast setting").
"""

import gc
import math
import re
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torchmetrics import Metric
from torchmetrics.classification import BinaryAUROC

from dlrm_exp.distributed.host_memory import release_free_heap
from dlrm_exp.util.rank_zero import several_ranks


class LogLossNE(Metric):
    """Running log loss, normalized entropy and calibration of click logits.

    ``update(logits (B,), labels (B,))``; ``compute()`` returns ``{"logloss", "ne",
    "calibration", ...}``.
    """

    full_state_update = False

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.add_state("bce_sum", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("positives", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("predicted", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, logits: torch.Tensor, labels: torch.Tensor) -> None:
        labels = labels.to(torch.float64)
        bce = F.binary_cross_entropy_with_logits(logits.to(torch.float64), labels, reduction="sum")
        self.bce_sum += bce
        self.positives += labels.sum()
        self.count += labels.numel()
        self.predicted += torch.sigmoid(logits.to(torch.float64)).sum()

    def compute(self) -> dict[str, float]:
        """``{"logloss", "ne", "calibration", "samples", "positives"}`` over all ranks."""
        n = float(self.count)
        positives = float(self.positives)
        if n == 0:
            return {
                "logloss": math.nan,
                "ne": math.nan,
                "calibration": math.nan,
                "samples": 0.0,
                "positives": 0.0,
            }
        logloss = float(self.bce_sum) / n
        p = positives / n
        entropy = 0.0 if p in (0.0, 1.0) else -(p * math.log(p) + (1 - p) * math.log(1 - p))
        ne = logloss / entropy if entropy > 0 else math.nan
        calibration = float(self.predicted) / positives if positives > 0 else math.nan
        return {
            "logloss": logloss,
            "ne": ne,
            "calibration": calibration,
            "samples": n,
            "positives": positives,
        }


class ClickMetrics:
    """AUROC, log loss and NE over an evaluation pass, over all ranks.

    ``compute()`` is a collective when a process group exists: every rank must call it.
    """

    def __init__(self, device: torch.device) -> None:
        # labels are 0 / 1 by then (every reader refuses others): torchmetrics' check of
        # them costs a torch.unique and a host sync per batch on a GPU
        self.auroc = BinaryAUROC(validate_args=False, distributed_available_fn=several_ranks)
        self.auroc = self.auroc.to(device)
        self.logloss_ne = LogLossNE(distributed_available_fn=several_ranks).to(device)

    def update(self, logits: torch.Tensor, labels: torch.Tensor) -> None:
        self.auroc.update(torch.sigmoid(logits), labels.long())
        self.logloss_ne.update(logits, labels)

    def compute(self) -> dict[str, float]:
        """``{"auroc", "logloss", "ne", "calibration", "samples", "positives"}``; AUROC is NaN
        when only one class (or nothing) was seen, or a logit was NaN (``positives`` says
        which: the summary names the class, :func:`~dlrm_exp.record.metric_table.split_line`)."""
        if self.logloss_ne.update_count == 0:  # same on every rank: batches are equal per rank
            return {
                "auroc": math.nan,
                "logloss": math.nan,
                "ne": math.nan,
                "calibration": math.nan,
                "samples": 0.0,
                "positives": 0.0,
            }
        values = self.logloss_ne.compute()  # synced: every rank takes the same branch below
        one_class = values["positives"] in (0.0, values["samples"])
        # a NaN logit (its log loss NaN) leaves torchmetrics' AUROC finite: ranked somewhere
        nan_scores = math.isnan(values["logloss"])
        auroc = math.nan if one_class or nan_scores else float(self.auroc.compute())
        return {"auroc": auroc, **values}


def capped_warmup(warmup_steps: int, steps: int) -> int:
    """The warm-up steps a throughput over ``steps`` steps leaves out: ``warmup_steps``, at
    most half of them (a short run still measures its second half)."""
    return min(warmup_steps, steps // 2)


class Throughput:
    """Steady-state training throughput: samples per second over the steps after warm-up.

    Call :meth:`resume` before a run of steps (e.g. after validation) and :meth:`step` after
    each; time spent between a ``step`` and the next ``resume`` is not counted, nor are steps
    marked ``counted=False`` (e.g. those ``train.profile`` records).
    """

    def __init__(self, warmup_steps: int) -> None:
        self.warmup_steps = warmup_steps
        self.steps = 0
        self.samples = 0
        self.seconds = 0.0
        self._last = time.perf_counter()
        self._last_counted = False

    def resume(self) -> None:
        self._last = time.perf_counter()

    def step(self, samples: int, counted: bool = True) -> float | None:
        """One step of ``samples`` global rows ended now; its time and rows count after the
        warm-up unless ``counted`` is false (still a step of the warm-up count).

        Returns:
            the step's wall seconds when they counted (the trainer's per-step times), else
            None.
        """
        now = time.perf_counter()
        self.steps += 1
        seconds = now - self._last
        self._last = now
        self._last_counted = counted and self.steps > self.warmup_steps
        if not self._last_counted:
            return None
        self.seconds += seconds
        self.samples += samples
        return seconds

    def extend_last(self) -> float | None:
        """Count the time since the last step as that step's: work it left running (the
        sparse backward of ``train.sparse_backward=overlap``), which the next step would
        have waited for, ended now. Returns the seconds added (None: the step did not count).
        """
        now = time.perf_counter()
        tail, self._last = now - self._last, now
        if not self._last_counted:
            return None
        self.seconds += tail
        return tail

    @property
    def samples_per_sec(self) -> float | None:
        """Global samples/s after warm-up, or None before any post-warm-up step."""
        return self.samples / self.seconds if self.seconds > 0 else None


#: Linux's per-process peak resident set (``VmHWM``), which ``clear_refs`` can reset.
_STATUS, _CLEAR_REFS = Path("/proc/self/status"), Path("/proc/self/clear_refs")


def reset_peak_memory(device: torch.device) -> None:
    """Start this process's peak memory afresh, so a run reports its own peak and not an
    earlier run's in the same process (Hydra's basic launcher runs a sweep's one-process jobs
    one after another in one process): Linux's ``VmHWM`` (``5`` written to
    ``/proc/self/clear_refs``) and, on CUDA, torch's peak statistics. Where ``VmHWM`` cannot
    be reset (not Linux), :func:`peak_memory_gib` falls back to ``getrusage``, a peak over the
    process's whole life.

    An earlier run's model, tables included, often survives its run in reference cycles
    (TorchRec's sharded modules hold them), which only Python's cycle collector frees, and it
    seldom runs on its own: a one-process sweep's second and third jobs reported 1.90 and 2.51
    GiB against the first's 1.18 on the quickstart model. So the collector runs first, and
    glibc's free heap goes back to the kernel (:func:`release_free_heap`): without it a tiny
    sweep's fourth job read 0.473 GiB against 0.450 alone, with it 0.459."""
    gc.collect()
    release_free_heap()
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        pass
    if device.type == "cuda":  # the cached blocks first: the reset starts the peaks at the
        torch.cuda.empty_cache()  # current use, which would keep the earlier job's cache
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_gib() -> float:
    """Peak resident set size of this process since :func:`reset_peak_memory`, GiB (Linux's
    ``VmHWM``, in KiB), else over the process's life (``getrusage``; KiB on Linux, bytes on
    macOS)."""
    try:
        match = re.search(r"^VmHWM:\s+(\d+) kB", _STATUS.read_text(), re.MULTILINE)
    except OSError:
        match = None
    if match:
        return int(match.group(1)) / 2**20
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (2**30 if sys.platform == "darwin" else 2**20)


def step_time_ms(step_seconds: list[float]) -> dict[str, float | None]:
    """p50 / p90 / mean of per-step wall times, milliseconds (None without steps)."""
    if not step_seconds:
        return {"p50": None, "p90": None, "mean": None}
    ms = np.asarray(step_seconds) * 1e3
    return {
        "p50": float(np.percentile(ms, 50)),
        "p90": float(np.percentile(ms, 90)),
        "mean": float(ms.mean()),
    }


def rank_memory_gib(device: torch.device) -> dict[str, float]:
    """This rank's peak memory, GiB: resident set (``rss``), and on CUDA also
    ``cuda_allocated`` / ``cuda_reserved`` (``torch.cuda.max_memory_*``)."""
    memory = {"rss": peak_memory_gib()}
    if device.type == "cuda":
        memory["cuda_allocated"] = torch.cuda.max_memory_allocated(device) / 2**30
        memory["cuda_reserved"] = torch.cuda.max_memory_reserved(device) / 2**30
    return memory
