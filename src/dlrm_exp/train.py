"""The training loop: ``TrainPipelineSparseDist`` over the train split, validation every
``val_every_n_steps`` and at the end, test at the end.

TorchRec's pipeline keeps up to two batches in flight, so each phase gets its own iterator and
the pipeline is drained (``StopIteration``) before switching phases, as in TorchRec's DLRM
example; no training batch is ever evaluated and vice versa.
"""

import itertools
import logging
import math
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torchrec.datasets.utils import Batch
from torchrec.distributed import TrainPipelineSparseDist
from tqdm import tqdm

from dlrm_exp.comm_stats import CollectiveBytes
from dlrm_exp.config import OnNonFinite, TrainConfig
from dlrm_exp.errors import UserError
from dlrm_exp.metrics import ClickMetrics, Throughput
from dlrm_exp.tracking import Tracker

log = logging.getLogger(__name__)

BatchSource = Callable[[], Iterable[Batch]]


class NonFiniteLossError(UserError):
    """A training step produced a NaN or infinite loss."""


@dataclass
class FitResult:
    """What training measured.

    Attributes:
        steps: optimizer steps taken.
        train_samples: samples trained on, all ranks.
        samples_per_sec: steady-state global samples/s (warm-up steps and evaluation excluded),
            None if no step followed the warm-up.
        train_seconds: wall seconds inside training steps.
        final_train_loss: mean BCE of the last step on this rank.
        val: final validation metrics (auroc, logloss, ne, samples).
        test: test metrics.
        val_history: validation metrics at every validation, with their step.
        step_seconds: wall seconds of each training step after the throughput warm-up (from
            one step's output to the next; on CUDA after a synchronize).
        skipped_steps: steps whose batch was skipped for a non-finite loss
            (``train.on_nonfinite=skip``).
    """

    steps: int
    train_samples: int
    samples_per_sec: float | None
    train_seconds: float
    final_train_loss: float | None
    val: dict[str, float]
    test: dict[str, float]
    val_history: list[dict[str, float]] = field(default_factory=list)
    step_seconds: list[float] = field(default_factory=list)
    skipped_steps: list[int] = field(default_factory=list)


def _drain(pipeline: TrainPipelineSparseDist, batches: Iterator[Batch]) -> Iterator[tuple]:
    """Run ``pipeline.progress`` until the iterator and the pipeline are empty, yielding each
    step's output ``(loss, logits, labels)``."""
    while True:
        try:
            yield pipeline.progress(batches)
        except StopIteration:
            return


def evaluate(
    pipeline: TrainPipelineSparseDist, batches: Iterable[Batch], device: torch.device
) -> dict[str, float]:
    """AUROC, log loss and NE of the model over ``batches`` (all ranks), in eval mode."""
    model = pipeline._model
    model.eval()
    metrics = ClickMetrics(device)
    with torch.no_grad():
        for _loss, logits, labels in _drain(pipeline, iter(batches)):
            metrics.update(logits, labels)
    model.train()
    return metrics.compute()


def fit(
    pipeline: TrainPipelineSparseDist,
    train_batches: BatchSource,
    val_batches: BatchSource,
    test_batches: BatchSource,
    samples_per_step: list[int],
    cfg: TrainConfig,
    device: torch.device,
    tracker: Tracker,
    show_progress: bool,
    learning_rate: float,
    comm: CollectiveBytes | None = None,
    start: dict[str, Any] | None = None,
    checkpoint: Callable[[int, dict[str, Any]], None] | None = None,
) -> FitResult:
    """Train for ``cfg.epochs`` epochs (or ``cfg.max_steps`` steps), validating as configured.

    Args:
        pipeline: TorchRec pipeline over the sharded model and its optimizer.
        train_batches / val_batches / test_batches: callables returning this rank's batches of
            a split, in order (called once per epoch / evaluation).
        samples_per_step: global samples of each step of one epoch (its length is the number
            of steps per epoch; the last may be a smaller remainder).
        learning_rate: logged as the ``lr`` scalar.
        comm: if given, counts collective bytes during training steps only (not evaluation).
        start: a checkpoint's trainer state (``step``, ``samples``, ``val_history``,
            ``final_train_loss``, ``skipped_steps``) to continue from; its batches are skipped.
        checkpoint: called as ``checkpoint(step, trainer_state)`` every
            ``cfg.checkpoint_every_n_steps`` steps and after the last step, with the pipeline
            drained (no batch in flight).

    Raises:
        NonFiniteLossError: a training step's loss is NaN or infinite and
            ``cfg.on_nonfinite`` is ``stop`` (the run stops there; checkpoints written before
            stay). With ``skip`` the step is counted in ``skipped_steps`` instead.
    """
    total = len(samples_per_step) * cfg.epochs
    if cfg.max_steps is not None:
        total = min(total, cfg.max_steps)
    epochs = itertools.chain.from_iterable(train_batches() for _ in range(cfg.epochs))
    first = int(start["step"]) if start else 0
    train_iter = itertools.islice(epochs, first, total)
    bar = tqdm(
        total=total,
        desc="train",
        unit="step",
        disable=not (show_progress and sys.stderr.isatty()),
        file=sys.stderr,
    )
    step, samples, loss_value = first, int(start["samples"]) if start else 0, None
    if start:
        loss_value = start.get("final_train_loss")
        bar.update(first)
    history: list[dict[str, float]] = list(start["val_history"]) if start else []
    skipped: list[int] = list(start.get("skipped_steps", [])) if start else []
    step_seconds: list[float] = []
    warmup = min(cfg.throughput_warmup_steps, total // 2)
    throughput = Throughput(warmup_steps=warmup)
    pipeline._model.train()
    intervals = (cfg.val_every_n_steps, cfg.checkpoint_every_n_steps)
    while step < total:
        throughput.resume()
        if comm is not None:
            comm.active = True
        last = time.perf_counter()
        segment = _next_boundary(step, total, intervals) - step
        for loss, _logits, _labels in _drain(pipeline, itertools.islice(train_iter, segment)):
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            now = time.perf_counter()
            if step >= warmup:
                step_seconds.append(now - last)
            last = now
            step_samples = samples_per_step[step % len(samples_per_step)]
            step += 1
            samples += step_samples
            step_loss = float(loss)
            if not math.isfinite(step_loss) and cfg.on_nonfinite is OnNonFinite.skip:
                skipped.append(step)
                log.warning(
                    "step %d: non-finite loss, batch skipped (%d so far)", step, len(skipped)
                )
                tracker.scalar("train/skipped_steps", len(skipped), step)
            elif not math.isfinite(step_loss):
                raise NonFiniteLossError(
                    f"training loss is {step_loss} at step {step}: lower the learning rates "
                    "(optimizer.learning_rate / optimizer.dense_learning_rate) or check the "
                    "input data (train.on_nonfinite=skip skips such batches); checkpoints "
                    "written before this step are intact"
                )
            throughput.step(step_samples)
            bar.update(1)
            if (step % cfg.log_every_n_steps == 0 or step == total) and math.isfinite(step_loss):
                loss_value = step_loss
                tracker.scalar("train/loss", loss_value, step)
                tracker.scalar("train/samples_per_sec", throughput.samples_per_sec, step)
                tracker.scalar("lr", learning_rate, step)
                bar.set_postfix(loss=f"{loss_value:.4f}")
        if comm is not None:
            comm.active = False
        if step < total and cfg.val_every_n_steps and step % cfg.val_every_n_steps == 0:
            history.append({"step": float(step), **evaluate(pipeline, val_batches(), device)})
            tracker.scalars("val", _quality(history[-1]), step)
        every = cfg.checkpoint_every_n_steps
        if checkpoint is not None and every and (step % every == 0 or step == total):
            state = {
                "samples": samples,
                "val_history": history,
                "final_train_loss": loss_value,
                "skipped_steps": skipped,
            }
            checkpoint(step, state)
    bar.close()
    val = evaluate(pipeline, val_batches(), device)
    history.append({"step": float(step), **val})
    tracker.scalars("val", _quality(val), step)
    test = evaluate(pipeline, test_batches(), device)
    return FitResult(
        steps=step,
        train_samples=samples,
        samples_per_sec=throughput.samples_per_sec,
        train_seconds=throughput.seconds,
        final_train_loss=loss_value,
        val=val,
        test=test,
        val_history=history,
        step_seconds=step_seconds,
        skipped_steps=skipped,
    )


def _next_boundary(step: int, total: int, intervals: tuple[int | None, ...]) -> int:
    """The next step after ``step`` that ends a training segment: a multiple of any interval
    (validation, checkpoint), or ``total``. A function of the step alone, so a resumed run
    drains the pipeline at the same steps as an uninterrupted one."""
    return min([total] + [(step // n + 1) * n for n in intervals if n])


def _quality(metrics: dict[str, float]) -> dict[str, float]:
    return {k: metrics[k] for k in ("auroc", "logloss", "ne")}
