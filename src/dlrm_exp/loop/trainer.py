"""The training loop: ``TrainPipeline`` over the train split, validation every
``train.val_every_n_steps`` and at the end, test at the end.

The loop's own state (step, samples seen, validation history, last loss, skipped steps, the best
validation and the early-stopping count) is one object, :class:`TrainerState`, which checkpoints
save next to the model and optimizer and resume restores. Training stops at the end of its
steps, at ``train.target_auroc`` or by early stopping (:mod:`dlrm_exp.loop.early_stopping`),
whichever comes first; with ``train.keep_best`` the test split is scored on the best
validation's weights, and the final weights' numbers are kept beside them. Training runs in
segments that end at validation and checkpoint steps, where the pipeline is drained (no batch
in flight), see :mod:`dlrm_exp.loop.evaluate`.
"""

import itertools
import logging
import math
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

import torch
from torchrec.datasets.utils import Batch
from torchrec.distributed.train_pipeline.train_pipelines import TrainPipeline
from tqdm import tqdm

from dlrm_exp.config import OnNonFinite, TrainConfig
from dlrm_exp.distributed.comm_stats import CollectiveBytes
from dlrm_exp.errors import NonFiniteLossError
from dlrm_exp.loop.early_stopping import (
    EARLY_STOPPING,
    END,
    TARGET,
    BestValidation,
    step_value,
)
from dlrm_exp.loop.evaluate import drain, evaluate, quality
from dlrm_exp.loop.metrics import Throughput, capped_warmup
from dlrm_exp.loop.train_window import TrainWindow
from dlrm_exp.perf.profile import StepProfiler
from dlrm_exp.record.tracking import Tracker

log = logging.getLogger(__name__)

#: A split's batches on this rank, in order: called once per evaluation.
BatchSource = Callable[[], Iterable[Batch]]

#: The training split's batches on this rank of ``(epoch, skip)``: epoch ``epoch`` (from 0;
#: it seeds a shuffled order) from its ``skip``-th batch on, the ones before left unread.
TrainSource = Callable[[int, int], Iterable[Batch]]


class Schedule(Protocol):
    """Sets the learning rates of a training step
    (``dlrm_exp.factories.lr_schedule.LRSchedule``)."""

    def apply(self, step: int) -> None:
        """Set the rates of training step ``step`` (1-based), before it runs."""
        ...


class Trainable(Protocol):
    """What the loop trains (``dlrm_exp.factories.experiment.Experiment`` is one)."""

    model: torch.nn.Module
    pipeline: TrainPipeline
    lr_schedule: Schedule

    def learning_rate(self) -> float:
        """The dense optimizer's learning rate now, as applied."""
        ...

    def embedding_learning_rate(self) -> float | None:
        """The fused embedding kernel's learning rate now, read from the kernel."""
        ...


class BestWeights(Protocol):
    """Keeps the weights of the best validation (``train.keep_best``), e.g. as a checkpoint."""

    def save(self, step: int, state: "TrainerState") -> str:
        """Save the weights now (a collective, the pipeline drained); returns where."""
        ...

    def restore(self, location: str, best: BestValidation) -> bool:
        """Load the weights saved at ``location`` into the model (a collective) if they are
        those of the validation ``best`` names (its monitored value, which a resume on another
        world size keeps while its step is rescaled); False, loading nothing, otherwise."""
        ...


def step_budget(steps_per_epoch: int, epochs: int, max_steps: int | None) -> tuple[int, str | None]:
    """The steps a run trains: ``epochs`` passes over the training split, or ``max_steps``
    where that is fewer; and a line when ``max_steps`` asks for more than the epochs give (a
    preset's 1,000 steps on a small split ended at the epoch's end without a word), else
    None."""
    total = steps_per_epoch * epochs
    if max_steps is None or max_steps <= total:
        return total if max_steps is None else max_steps, None
    return total, (
        f"train.max_steps={max_steps} is more than train.epochs={epochs} of "
        f"{steps_per_epoch:,} steps give: training ends at step {total:,} (raise train.epochs "
        "or give more rows to train the steps asked for)"
    )


def loss_read_lag(device: torch.device, on_nonfinite: OnNonFinite) -> int:
    """Steps queued before a step's loss is read (:meth:`Trainer._train_segment`): 1 on CUDA
    with ``on_nonfinite=stop``; 0 otherwise (on CPU a loss is ready when its step returns;
    ``skip`` must know a skipped step before the next step's rate is set)."""
    return 1 if device.type == "cuda" and on_nonfinite is OnNonFinite.stop else 0


@dataclass
class BatchSources:
    """The three splits' batch sources."""

    train: TrainSource
    val: BatchSource
    test: BatchSource


@dataclass
class TrainerState:
    """The loop's state: what a checkpoint saves besides the model and the optimizers.

    Attributes:
        step: optimizer steps taken (the data position: batches are a function of the step).
        samples: samples trained on, all ranks.
        val_history: metrics of every validation, with its ``step``.
        final_train_loss: the last logged finite training loss.
        skipped_steps: steps whose batch was skipped for a non-finite loss.
        target_step: the step whose validation first reached ``train.target_auroc`` (None:
            not reached, or no target).
        best: the best validation of ``train.early_stopping.monitor`` and the patience count.
        best_checkpoint: where the best validation's weights were saved (None: not saved).
        stop_reason: why training stopped before its last step (``target_auroc``,
            ``early_stopping``), None while it runs on.
        train_windows: rank 0's training window (:mod:`dlrm_exp.loop.train_window`) at each
            validation, ``{"step", "logloss", "auroc"}``: the train side of the gap.
        started_from: the resume from another run's checkpoint this run's training began
            with (``train.resume=PATH``): the record's ``{"checkpoint" (resolved), "step",
            "changed_settings"}`` of it, kept by resumes from the run's own checkpoints; None
            for a fresh start. A rerun given that PATH again continues the run's newest
            checkpoint (:func:`~dlrm_exp.loop.run_folder.continued_resume`).
    """

    step: int = 0
    samples: int = 0
    val_history: list[dict[str, float]] = field(default_factory=list)
    final_train_loss: float | None = None
    skipped_steps: list[int] = field(default_factory=list)
    target_step: int | None = None
    best: BestValidation = field(default_factory=BestValidation)
    best_checkpoint: str | None = None
    stop_reason: str | None = None
    train_windows: list[dict[str, float]] = field(default_factory=list)
    started_from: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        """The JSON-able state a checkpoint stores (its ``step`` is the checkpoint's own)."""
        return {
            "samples": self.samples,
            "val_history": list(self.val_history),
            "final_train_loss": self.final_train_loss,
            "skipped_steps": list(self.skipped_steps),
            "target_step": self.target_step,
            "best": self.best.to_json(),
            "best_checkpoint": self.best_checkpoint,
            "stop_reason": self.stop_reason,
            "train_windows": list(self.train_windows),
            "started_from": self.started_from,
        }

    @classmethod
    def from_checkpoint(cls, saved: dict[str, Any], step: int) -> "TrainerState":
        """The state of a checkpoint's ``trainer_state.json``, continuing at ``step`` (this
        job's step at the checkpoint's data position).

        With another world size the checkpoint's steps count other global batches: its step
        fields (validations, training windows, the best and target steps, skipped steps) are
        rescaled to this job's steps at the same sample position, ``s * step / saved step``
        (an integer where it divides, else a fraction), so they compare with this job's."""
        saved_step = int(saved["step"])

        def rescale(s: float | None) -> float | int | None:
            if s is None or saved_step in (0, step):
                return s
            return step_value(s * step / saved_step)

        def at(entries: list[dict[str, float]]) -> list[dict[str, float]]:
            return [{**e, "step": float(rescale(e["step"]))} for e in entries]  # type: ignore[arg-type]

        best = BestValidation.from_json(saved.get("best"))
        best.step = rescale(best.step)  # type: ignore[assignment]
        return cls(
            step=step,
            samples=int(saved["samples"]),
            val_history=at(list(saved["val_history"])),
            final_train_loss=saved.get("final_train_loss"),
            skipped_steps=[rescale(s) for s in saved.get("skipped_steps", [])],  # type: ignore[misc]
            target_step=rescale(saved.get("target_step")),  # type: ignore[arg-type]
            best=best,
            best_checkpoint=saved.get("best_checkpoint"),
            stop_reason=saved.get("stop_reason"),
            train_windows=at(list(saved.get("train_windows", []))),
            started_from=saved.get("started_from"),
        )

    def forget_validations(self) -> None:
        """Drop the checkpoint's validations, its best (and where its weights were saved),
        its target step and stop, and the training windows beside them: a resume that
        validates on other rows (:func:`~dlrm_exp.loop.settings.validation_changes`)
        compares its validations with its own only."""
        self.val_history, self.train_windows = [], []
        self.best, self.best_checkpoint = BestValidation(), None
        self.target_step = self.stop_reason = None

    def reconsider_stop(self, cfg: TrainConfig, total_steps: int | None = None) -> None:
        """Keep a checkpoint's stop only where this job asks for it too, so a resume with
        ``train.target_auroc`` removed or raised, or more ``early_stopping.patience``, trains
        on (a requeue of the same job still stops), and one with less patience than the
        history's validations without improvement stops at once, as a fresh run of this job
        would have stopped (earlier). The target step becomes the first
        validation that reached this job's target (None: no target, or not reached); a target
        the history already reached stops, as a fresh run of this job would have. Another
        ``early_stopping.monitor`` or ``min_delta`` than the checkpoint's rebuilds the best
        validation and the patience count from the history (they were counted under the
        checkpoint's rule); the best weights
        saved under it stay where they are, kept when they are the replayed best validation's
        (:func:`~dlrm_exp.loop.checkpoint.holds_best`), else removed or refused by the
        resume's adoption and the restore. A target first
        reached at the last of ``total_steps`` is no stop (the run ended there anyway: ``end``,
        as it ran), and a NaN AUROC (stored as null) never reached one."""
        monitor = cfg.early_stopping.monitor.value
        # the best and the patience count as this job's rule gives them over the history: a
        # checkpoint's were counted under its monitor and min_delta (a resume with less
        # patience and a lower min_delta stopped on a count a fresh run would not have)
        replayed = BestValidation.replayed(self.val_history, cfg.early_stopping)
        if self.val_history and replayed != self.best:
            self.best = replayed
        target = cfg.target_auroc
        reached = [
            h["step"]
            for h in self.val_history
            if target is not None and h["auroc"] is not None and h["auroc"] >= target
        ]
        first = reached[0] if reached else None
        self.target_step = None if first is None else step_value(first)  # type: ignore[assignment]
        # a fresh run of this job would have stopped there, unless at its last step (it ends)
        stops = self.target_step is not None and (
            total_steps is None or self.target_step < total_steps
        )
        if stops and self.stop_reason is None:
            self.stop_reason = TARGET
        elif self.stop_reason == TARGET and not stops:
            self.stop_reason = None
        patience_spent = self.best.should_stop(cfg.early_stopping)
        before_end = total_steps is None or self.step < total_steps
        if self.stop_reason == EARLY_STOPPING and not patience_spent:
            self.stop_reason = None
        elif self.stop_reason is None and patience_spent and before_end:
            self.stop_reason = EARLY_STOPPING  # (a fresh run would have stopped earlier)
            log.info(
                "early stopping at the resumed step %d: val %s did not improve for the last %d "
                "validations, train.early_stopping.patience=%d",
                self.step,
                monitor,
                self.best.bad_validations,
                cfg.early_stopping.patience,
            )


@dataclass
class FitResult:
    """What training measured.

    Attributes:
        state: the loop's state after the last step (steps, samples, history, last loss,
            skipped steps).
        samples_per_sec: steady-state global samples/s (warm-up steps and evaluation excluded),
            None if no step followed the warm-up.
        train_seconds: wall seconds inside counted training steps.
        val: validation metrics of the weights kept (auroc, logloss, ne, samples): the best
            validation's with ``train.keep_best``, else the final weights'.
        test: test metrics of the same weights.
        step_seconds: wall seconds of each training step after the throughput warm-up (from
            one step's loss read to the next: on CUDA each read waits for its step).
        target_epoch: epochs trained (a fraction) when the target AUROC was reached (None:
            not reached, or no target).
        stop_reason: ``end``, ``target_auroc`` or ``early_stopping``.
        final_weights: ``{"val": ..., "test": ...}`` of the final weights when the best
            validation's weights were restored instead (empty otherwise: val / test are the
            final weights').
        steps_per_epoch: training steps of one epoch.
        steps_trained: the steps this job trained (after a resume, those after the
            checkpoint's step): what collective bytes per step are counted over.
        loss_read_lag: steps queued before each loss was read (:func:`loss_read_lag`).
        traced: whether ``train.profile`` wrote this process's trace (a run shorter than the
            schedule writes none; its folder may hold an earlier attempt's).
    """

    state: TrainerState
    samples_per_sec: float | None
    train_seconds: float
    val: dict[str, float]
    test: dict[str, float]
    step_seconds: list[float] = field(default_factory=list)
    target_epoch: float | None = None
    stop_reason: str = END
    final_weights: dict[str, dict[str, float]] = field(default_factory=dict)
    steps_per_epoch: int = 1
    steps_trained: int = 0
    loss_read_lag: int = 0
    traced: bool = False


#: Called as ``checkpoint(step, state)`` with the pipeline drained.
CheckpointHook = Callable[[int, TrainerState], None]


class Trainer:
    """Trains ``experiment`` for ``cfg.epochs`` epochs (or ``cfg.max_steps`` steps).

    Args:
        experiment: the sharded model and its pipeline (:class:`Trainable`).
        cfg: the ``train`` settings.
        samples_per_step: global samples of each step of one epoch (its length is the number
            of steps per epoch; the last may be a smaller remainder).
        device: this rank's compute device.
        tracker: TensorBoard scalars (a no-op on ranks other than 0).
        show_progress: draw a tqdm bar (when stderr is a terminal).
        log_progress: without a drawn bar (no terminal, or ``train.progress_bar=false``), log a
            progress line every ``log_every_n_steps`` steps (rank 0).
        comm: if given, counts collective bytes during training steps only (not evaluation).
        checkpoint: called every ``cfg.checkpoint_every_n_steps`` steps and after the last.
        profiler: started before the first step, told of every training step, stopped when
            training ends (``train.profile``, :class:`dlrm_exp.perf.profile.StepProfiler`).
        best_weights: with ``train.keep_best``, keeps the best validation's weights
            (:class:`BestWeights`).
    """

    def __init__(
        self,
        experiment: Trainable,
        cfg: TrainConfig,
        samples_per_step: list[int],
        device: torch.device,
        tracker: Tracker,
        show_progress: bool = False,
        log_progress: bool = False,
        comm: CollectiveBytes | None = None,
        checkpoint: CheckpointHook | None = None,
        profiler: StepProfiler | None = None,
        best_weights: BestWeights | None = None,
    ) -> None:
        self.experiment = experiment
        self.cfg = cfg
        self.samples_per_step = samples_per_step
        self.device = device
        self.tracker = tracker
        self.show_progress = show_progress
        self.log_progress = log_progress
        self.comm = comm
        self.checkpoint = checkpoint
        self.profiler = profiler
        self.best_weights = best_weights if cfg.keep_best else None
        self.steps_per_epoch = len(samples_per_step)
        #: ``val_per_epoch``'s steps of an epoch, counted from its start (:func:`epoch_positions`)
        self.val_positions = epoch_positions(self.steps_per_epoch, cfg.val_per_epoch)
        self.total_steps, short = step_budget(self.steps_per_epoch, cfg.epochs, cfg.max_steps)
        if short and log_progress:
            log.warning(short)
        self.step_seconds: list[float] = []
        self.window = TrainWindow(cfg.train_window_batches)
        self.loss_read_lag = loss_read_lag(device, cfg.on_nonfinite)
        self._empty_validation_warned = False

    def fit(self, sources: BatchSources, state: TrainerState | None = None) -> FitResult:
        """Train from ``state`` (a resumed checkpoint's; its batches are skipped) or from the
        start, validate as configured, then evaluate the validation and test splits.

        Raises:
            NonFiniteLossError: a training step's loss is NaN or infinite and
                ``train.on_nonfinite`` is ``stop`` (the run stops there; checkpoints written
                before stay). With ``skip`` the step is counted in ``skipped_steps`` instead.
        """
        state = state or TrainerState()
        start = state.step
        short = self.cfg.profile_past(self.total_steps - start, start)  # (counted from here)
        if short and self.log_progress:
            log.warning(short)
        self._keep_resumed_best(state)
        # warm-up counts this process's steps: a resumed run warms up again, over what is left
        warmup = capped_warmup(self.cfg.throughput_warmup_steps, self.total_steps - state.step)
        self.throughput = Throughput(warmup_steps=warmup)
        train_iter = self._train_batches(sources, state.step)
        bar = self._progress_bar(state.step)
        self.experiment.model.train()
        if self.profiler is not None:
            self.profiler.start()
        try:
            while state.step < self.total_steps and state.stop_reason is None:
                segment = self._next_segment_end(state.step) - state.step
                self._train_segment(itertools.islice(train_iter, segment), state, bar)
                self._after_segment(sources, state)
        finally:  # a failed run keeps its profile, and a later -m job is not profiled
            if self.profiler is not None:
                self.profiler.stop()
        bar.close()
        if not state.val_history or state.val_history[-1]["step"] != state.step:
            self._validate(sources, state)  # else the stopping validation is the last one
        stale = state.best_checkpoint is not None  # None: no best saved, nothing is stale
        if self.best_weights is not None and state.best.step == state.step and stale:
            # the last validation is the best: checkpoints/best, which evaluate, predict and
            # export take for the run folder, must not keep an earlier validation's weights
            state.best_checkpoint = self.best_weights.save(state.step, state)
        ended = state.stop_reason is None and state.step > start  # a stop checkpointed already
        if self.checkpoint is not None and self.cfg.checkpoint_every_n_steps and ended:
            self.checkpoint(state.step, state)  # after the final validation: it is in the state
        val, test, final_weights = self._kept_weights_metrics(sources, state)
        return FitResult(
            state=state,
            samples_per_sec=self.throughput.samples_per_sec,
            train_seconds=self.throughput.seconds,
            val=val,
            test=test,
            step_seconds=self.step_seconds,
            target_epoch=self.target_epoch(state),
            stop_reason=state.stop_reason or END,
            final_weights=final_weights,
            steps_per_epoch=self.steps_per_epoch,
            steps_trained=state.step - start,
            loss_read_lag=self.loss_read_lag,
            traced=self.profiler is not None and self.profiler.traced,
        )

    def _keep_resumed_best(self, state: TrainerState) -> None:
        """With ``train.keep_best``, a resumed run whose best validation is its checkpoint's
        own step, with no best weights saved, saves them now, before training on: a run that
        stopped at its target or ended there (then the final weights were the best, so nothing
        else was kept) and is resumed without that target or with more steps could otherwise
        not restore them when a later validation is worse."""
        best_here = state.best.step is not None and state.best.step == state.step
        trains_on = state.step < self.total_steps and state.stop_reason is None
        if self.best_weights is None or state.best_checkpoint is not None:
            return
        if best_here and trains_on:
            state.best_checkpoint = self.best_weights.save(state.step, state)

    def _kept_weights_metrics(
        self, sources: BatchSources, state: TrainerState
    ) -> tuple[dict[str, float], dict[str, float], dict[str, dict[str, float]]]:
        """(val, test, final_weights) of the weights the run keeps: the final weights', or,
        with ``train.keep_best`` and a best validation before the last, the best one's (then
        restored into the model), with the final weights' numbers as ``final_weights``."""
        last = {k: v for k, v in state.val_history[-1].items() if k != "step"}
        test = self._evaluate(sources.test)
        best_step = state.best.step
        if self.best_weights is None or best_step in (None, state.step):
            return last, test, {}
        if state.best_checkpoint is None:  # resumed without a best, or a stale one dropped
            log.warning(
                "train.keep_best: the best validation (step %d) has no saved weights (the run "
                "was resumed with keep_best from a checkpoint written without it, or the saved "
                "best was of a later validation than the resumed checkpoint knew, and was "
                "removed); val and test are the final weights'",
                best_step,
            )
            return last, test, {}
        if not self.best_weights.restore(state.best_checkpoint, state.best):
            log.warning(
                "train.keep_best: %s holds another validation's weights than the best (step "
                "%d; a resume that did not continue bitwise validated differently after it was "
                "saved); val and test are the final weights'",
                state.best_checkpoint,
                best_step,
            )
            return last, test, {}
        log.info("restored the best validation's weights (step %d)", best_step)
        (best,) = [h for h in state.val_history if h["step"] == best_step]
        val = {k: v for k, v in best.items() if k != "step"}
        return val, self._evaluate(sources.test), {"val": last, "test": test}

    def _val_intervals(self) -> tuple[int | None, ...]:
        """Validation intervals in steps: ``val_every_n_steps``, and with more than one epoch
        the epoch (``val_per_epoch``: :attr:`val_positions`)."""
        epoch = self.steps_per_epoch if self.cfg.epochs > 1 else None
        return (self.cfg.val_every_n_steps, epoch)

    def _val_due(self, step: int) -> bool:
        """Whether step ``step`` (> 0) ends with a validation (before the last step)."""
        positions, per_epoch = self.val_positions, self.steps_per_epoch  # step ended: 1..E
        in_epoch = bool(positions) and step - (step - 1) // per_epoch * per_epoch in positions
        return in_epoch or any(n and step % n == 0 for n in self._val_intervals())

    def _next_segment_end(self, step: int) -> int:
        """The step after ``step`` where the next segment ends (a validation, a checkpoint,
        or the end): a function of the step alone (see :func:`_next_boundary`)."""
        intervals = (*self._val_intervals(), self.cfg.checkpoint_every_n_steps)
        end = _next_boundary(step, self.total_steps, intervals)
        positions, per_epoch = self.val_positions, self.steps_per_epoch
        if positions:  # the next step is in the epoch starting at or before it
            start = step // per_epoch * per_epoch
            end = min(end, start + next(p for p in positions if p > step - start))
        return end

    def _train_batches(self, sources: BatchSources, start: int) -> Iterator[Batch]:
        """The training batches of steps ``start`` to ``total_steps``: a resumed run starts
        inside its epoch without reading the batches it trained (a Parquet row group or a
        multi-hot batch costs as much to skip as to read)."""
        if start >= self.total_steps:
            return
        first, skip = divmod(start, self.steps_per_epoch)
        epochs = (
            sources.train(epoch, skip if epoch == first else 0)
            for epoch in range(first, self.cfg.epochs)
        )
        batches = itertools.chain.from_iterable(epochs)
        yield from itertools.islice(batches, self.total_steps - start)

    def _progress_bar(self, first: int) -> tqdm:
        # initial=, not update(): a resumed run's steps would count into its rate and ETA
        return tqdm(
            total=self.total_steps,
            initial=first,
            desc="train",
            unit="step",
            disable=not (self.show_progress and sys.stderr.isatty()),
            file=sys.stderr,
        )

    def _train_segment(self, batches: Iterator[Batch], state: TrainerState, bar: tqdm) -> None:
        """Train on ``batches`` until they and the pipeline are exhausted.

        A step's loss is read (a host sync on a GPU) :attr:`loss_read_lag` steps after the
        step was queued: on CUDA with ``on_nonfinite=stop`` one, so the GPU runs the next step
        while the host waits for this one's loss, and the host builds and queues the step
        after while the GPU computes (TorchRec's example reads no loss at all). Each step's
        rates are set before it is queued, whatever the lag; every step of the segment is
        read before its validation or checkpoint."""
        self.throughput.resume()
        if self.comm is not None:
            self.comm.active = True
        schedule = self.experiment.lr_schedule
        # indexed by the steps that updated: a skipped batch is removed from the data, and
        # from the schedule (the next batch trains at the rate the skipped one would have)
        schedule.apply(state.step + 1 - len(state.skipped_steps))
        queued = state.step
        pending: deque[tuple[Any, ...]] = deque()
        try:
            for loss, logits, labels in drain(self.experiment.pipeline, batches):
                queued += 1
                profiled = self.profiler is not None and self.profiler.recording
                pending.append((loss, logits, labels, profiled, self._logged_rates(queued)))
                if len(pending) > self.loss_read_lag:
                    self._finish_step(*pending.popleft(), state, bar)
                if self.profiler is not None and self.profiler.step():
                    self.throughput.resume()  # a trace written is not the next step's time
                schedule.apply(queued + 1 - len(state.skipped_steps))
            # the last step's table update: its time is that step's (the next would wait); the
            # overlap runs on CPU only, where the loss read lag is 0, so that step is counted
            if self.experiment.settle_sparse_backward():
                tail = self.throughput.extend_last()
                if tail is not None and self.step_seconds:
                    self.step_seconds[-1] += tail
        except BaseException:  # a failed step leaves no backward running into what follows
            self._settle_after_failure()
            raise
        while pending:
            self._finish_step(*pending.popleft(), state, bar)
        if self.comm is not None:
            self.comm.active = False

    def _settle_after_failure(self) -> None:
        """Wait for the sparse backward of a step that failed; a failure of its own is logged,
        so the step's error (a NaN, an interrupt) is the one raised."""
        try:
            self.experiment.settle_sparse_backward()
        except Exception:
            log.exception("the failed step's sparse backward failed too")

    def _finish_step(
        self,
        loss: torch.Tensor,
        logits: torch.Tensor,
        labels: torch.Tensor,
        profiled: bool,
        rates: tuple[float, float | None] | None,
        state: TrainerState,
        bar: tqdm,
    ) -> None:
        """Count one trained step (its time ends when its loss is read), apply
        ``train.on_nonfinite`` to its loss and log it with the rates it ran at
        (:meth:`_logged_rates`)."""
        step_loss = float(loss)  # on a GPU: waits for this step, the next already queued
        step_samples = self.samples_per_step[state.step % len(self.samples_per_step)]
        seconds = self.throughput.step(step_samples, counted=not profiled)
        if seconds is not None:
            self.step_seconds.append(seconds)  # this process's steps after warm-up
        state.step += 1
        state.samples += step_samples
        self._check_finite(step_loss, state)
        if math.isfinite(step_loss):
            self.window.add(logits, labels)
        bar.update(1)
        self._log_step(step_loss, rates, state, bar)

    def _check_finite(self, step_loss: float, state: TrainerState) -> None:
        """Apply ``train.on_nonfinite`` to a NaN or infinite loss."""
        if math.isfinite(step_loss):
            return
        if self.cfg.on_nonfinite is OnNonFinite.skip:
            state.skipped_steps.append(state.step)
            log.warning(
                "step %d: non-finite loss, batch skipped (%d so far)",
                state.step,
                len(state.skipped_steps),
            )
            self.tracker.scalar("train/skipped_steps", len(state.skipped_steps), state.step)
            return
        raise NonFiniteLossError(
            f"training loss is {step_loss} at step {state.step}: lower the learning rates "
            "(optimizer.learning_rate / optimizer.dense_learning_rate) or check the "
            "input data (train.on_nonfinite=skip skips such batches); checkpoints "
            "written before this step are intact"
        )

    def _logged_rates(self, step: int) -> tuple[float, float | None] | None:
        """(dense, embedding) learning rates of step ``step``, read as it is queued, when the
        step is logged (None otherwise): its loss may be read after the next step's are set."""
        if not self._log_due(step):
            return None
        return self.experiment.learning_rate(), self.experiment.embedding_learning_rate()

    def _log_due(self, step: int) -> bool:
        return step % self.cfg.log_every_n_steps == 0 or step == self.total_steps

    def _log_step(
        self,
        step_loss: float,
        rates: tuple[float, float | None] | None,
        state: TrainerState,
        bar: tqdm,
    ) -> None:
        """Scalars every ``log_every_n_steps`` steps and at the last step (finite losses)."""
        step = state.step
        if rates is None or not math.isfinite(step_loss):  # rates: None when not due
            return
        state.final_train_loss = step_loss
        self.tracker.scalar("train/loss", step_loss, step)
        self.tracker.scalar("train/samples_per_sec", self.throughput.samples_per_sec, step)
        self.tracker.scalar("lr", rates[0], step)
        self.tracker.scalar("lr/embedding", rates[1], step)
        self.tracker.scalars("train_window", self.window.metrics(), step)
        bar.set_postfix(loss=f"{step_loss:.4f}")
        if self.log_progress and bar.disable:
            log.info(self._progress_line(step_loss, state))

    def _progress_line(self, step_loss: float, state: TrainerState) -> str:
        """``step 40/2048 (epoch 0.02) | loss 0.5012 | 48,210 samples/s | ETA 0:01:42``: what
        the bar shows, as a log line for runs without a terminal (CI, nohup, Slurm)."""
        step, rate = state.step, self.throughput.samples_per_sec
        epoch = step / self.steps_per_epoch
        eta = "n/a"
        if rate:  # the remaining steps at this run's mean samples per step
            left = (self.total_steps - step) * state.samples / step
            eta = str(timedelta(seconds=round(left / rate)))
        speed = f"{rate:,.0f}" if rate else "n/a"
        return (
            f"step {step}/{self.total_steps} (epoch {epoch:.2f}) | loss {step_loss:.4f} | "
            f"{speed} samples/s | ETA {eta}"
        )

    def _after_segment(self, sources: BatchSources, state: TrainerState) -> None:
        """Validate and checkpoint where the segment ended at their interval (and checkpoint
        where training stops at the target AUROC)."""
        step = state.step
        if step < self.total_steps and self._val_due(step):
            self._validate(sources, state)
        stopping = state.stop_reason is not None
        later_validation = not stopping and step < self.total_steps
        if self.best_weights is not None and state.best.step == step and later_validation:
            state.best_checkpoint = self.best_weights.save(step, state)  # keep these weights
        every = self.cfg.checkpoint_every_n_steps
        due = bool(every) and (stopping or (step % every == 0 and step < self.total_steps))
        if self.checkpoint is not None and due:  # the last step's waits for its validation
            self.checkpoint(step, state)

    def _validate(self, sources: BatchSources, state: TrainerState) -> None:
        """Evaluate the validation split into the history; mark the step that first reaches
        ``train.target_auroc`` or that ends training by early stopping (the loop then stops)."""
        step = state.step
        state.val_history.append({"step": float(step), **self._evaluate(sources.val)})
        self.tracker.scalars("val", quality(state.val_history[-1]), step)
        window = self.window.metrics()
        if window:
            state.train_windows.append({"step": float(step), **window})
        if not state.val_history[-1].get("samples"):  # an empty split measured nothing
            self._warn_empty_validation()
            return
        target, auroc = self.cfg.target_auroc, state.val_history[-1]["auroc"]
        reached = target is not None and state.target_step is None and auroc >= target
        self._track_best(state, target_reached=reached)
        if reached:
            state.target_step = step
            if step < self.total_steps:  # at the last step training ends anyway: no stop,
                state.stop_reason = TARGET  # and the last step's checkpoint is written
            epoch = step / self.steps_per_epoch
            self.tracker.scalar("val/reached_target_auroc", target, step)
            self.tracker.text(
                "target_auroc",
                f"validation AUROC {auroc:.5f} reached the target {target} at step {step} "
                f"(epoch {epoch:.3f})",
                step,
            )
            log.info("target AUROC %s reached at step %d (epoch %.3f)", target, step, epoch)

    def _warn_empty_validation(self) -> None:
        """Say once which validation-driven setting an empty split leaves without effect
        (``data.val_fraction=0``: its NaN metrics counted as validations that did not improve,
        and early stopping ended the run after ``patience`` of them); nothing when none is on."""
        if self._empty_validation_warned:
            return
        self._empty_validation_warned = True
        cfg = self.cfg
        active = [
            name
            for name, on in (
                ("early stopping", cfg.early_stopping.patience is not None),
                ("train.target_auroc", cfg.target_auroc is not None),
                ("train.keep_best", cfg.keep_best),
            )
            if on
        ]
        if active:
            log.warning(
                "the validation split has no rows: %s %s not apply (val metrics are n/a)",
                " and ".join(active),
                "does" if len(active) == 1 else "do",
            )

    def _track_best(self, state: TrainerState, target_reached: bool = False) -> None:
        """Update the best validation; stop by early stopping after ``patience`` validations
        without improvement, unless the target stops first (``target_reached``: this very
        validation reached it, which is then the one reason given)."""
        cfg, step = self.cfg.early_stopping, state.step
        if state.best.update(step, state.val_history[-1], cfg):
            self.tracker.scalar(f"val/best_{cfg.monitor.value}", state.best.value, step)
        stops = state.best.should_stop(cfg) and step < self.total_steps and not target_reached
        if state.stop_reason is None and stops:
            state.stop_reason = EARLY_STOPPING
            line = (
                f"early stopping at step {step} (epoch {step / self.steps_per_epoch:.3f}): val "
                f"{cfg.monitor.value} did not improve by more than {cfg.min_delta} for "
                + (
                    f"{cfg.patience} validations; the best was {state.best.value:.5f} at step "
                    f"{state.best.step}"
                    if state.best.value is not None
                    else f"{cfg.patience} validations; none gave a finite value"
                )
            )
            self.tracker.text("early_stopping", line, step)
            log.info(line)

    def target_epoch(self, state: TrainerState) -> float | None:
        """The epoch fraction at which the target AUROC was reached (None: not reached)."""
        return None if state.target_step is None else state.target_step / self.steps_per_epoch

    def _evaluate(self, source: BatchSource) -> dict[str, float]:
        experiment = self.experiment
        return evaluate(experiment.pipeline, experiment.model, source(), self.device)


def epoch_positions(steps_per_epoch: int, val_per_epoch: int | None) -> tuple[int, ...]:
    """``train.val_per_epoch=N``: the steps of an epoch (1 .. ``steps_per_epoch``, counted
    from each epoch's start) that end its N near-equal parts, ``(k * steps_per_epoch) // N``
    for k = 1 .. N (the last is the epoch's end); empty without it. (Multiples of
    ``steps_per_epoch // N`` counted from step 0 drifted in later epochs and validated again
    a few steps before each epoch's end, using up early stopping's patience.)"""
    if not val_per_epoch or not steps_per_epoch:
        return ()
    parts = range(1, val_per_epoch + 1)
    return tuple(sorted({max(1, k * steps_per_epoch // val_per_epoch) for k in parts}))


def _next_boundary(step: int, total: int, intervals: tuple[int | None, ...]) -> int:
    """The next step after ``step`` that ends a training segment: a multiple of any interval
    (validation, checkpoint), or ``total``. A function of the step alone, so a resumed run
    drains the pipeline at the same steps as an uninterrupted one."""
    return min([total] + [(step // n + 1) * n for n in intervals if n])
