"""Schema of the training loop (``train.*``)."""

from dataclasses import dataclass, field
from enum import Enum

from dlrm_exp.config.checks import is_not_value, is_value, require, require_positive, require_read


class OnNonFinite(Enum):
    """What a training step with a NaN or infinite loss does: ``stop`` the run naming the step
    (earlier checkpoints stay), or ``skip`` the batch with exact-zero gradients and count it
    (see :mod:`dlrm_exp.factories.nonfinite`)."""

    stop = "stop"
    skip = "skip"


class Pipeline(Enum):
    """TorchRec's training pipelines (``torchrec.distributed.train_pipeline``).

    ``sparse_dist`` (``TrainPipelineSparseDist``, the DLRM example's): the input dist of batch
    i+1 overlaps the forward/backward of batch i; exact. ``base`` (``TrainPipelineBase``): no
    overlap of the embedding all-to-all, only the host-to-device copy; exact.
    ``semi_sync`` (``TrainPipelineSemiSync``): from ``train.semi_sync_start_step`` on, the
    embedding lookup of batch i+1 runs before batch i's sparse update, so each batch sees
    embeddings one update staler; changes the numerics. ``fused_sparse_dist``
    (``TrainPipelineFusedSparseDist``): the lookup runs in the data-dist stream; exact.
    ``prefetch_sparse_dist`` (``PrefetchTrainPipelineSparseDist``): prefetches the rows of
    ``fused_uvm_caching`` tables into their HBM cache; needs CUDA.
    """

    sparse_dist = "sparse_dist"
    base = "base"
    semi_sync = "semi_sync"
    fused_sparse_dist = "fused_sparse_dist"
    prefetch_sparse_dist = "prefetch_sparse_dist"


#: Pipelines that run only with ``hardware.compute_device=cuda``, and why (TorchRec 1.8 on a
#: CPU tensor: ``record_stream`` fails with "unknown parameter type").
CUDA_PIPELINES = {
    Pipeline.semi_sync: "it records CUDA streams on the batch and the looked-up embeddings",
    Pipeline.fused_sparse_dist: "it runs the lookup on a CUDA stream it records on the batch",
    Pipeline.prefetch_sparse_dist: "it prefetches fused_uvm_caching rows into the HBM cache",
}


class DensePrecision(Enum):
    """Compute precision of the dense part (dense arch, interaction, over arch) under
    ``torch.autocast``; parameters, optimizer state, loss and embeddings stay fp32. ``fp16`` is
    refused: it needs a gradient scaler, which the fused embedding update cannot honour (see
    :mod:`dlrm_exp.factories.precision`)."""

    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"


class SparseBackward(Enum):
    """Where the sparse arch's backward (FBGEMM's table backward with its fused update) runs:
    ``serial``, on the training thread after the dense backward; ``overlap``, on a helper
    thread beside it while the training thread keeps all threads but one (CPU, one rank, at
    least 2 threads, no data_parallel table; a run elsewhere records a substitution and runs
    ``serial``); ``auto``, ``overlap`` where it applies and ``serial`` elsewhere without a
    substitution (for a preset that goes on any hardware). ``metrics.json``'s
    ``sparse_backward`` says which ran (:mod:`dlrm_exp.factories.sparse_backward`)."""

    serial = "serial"
    overlap = "overlap"
    auto = "auto"


class Monitor(Enum):
    """The validation metric early stopping and ``train.keep_best`` watch: ``auroc`` (higher is
    better), ``logloss`` or ``ne`` (lower is better)."""

    auroc = "auroc"
    logloss = "logloss"
    ne = "ne"

    @property
    def higher_is_better(self) -> bool:
        """AUROC improves upwards; log loss and NE (nats, normalized) downwards."""
        return self is Monitor.auroc


@dataclass
class EarlyStopping:
    """Stop training at the ``patience``-th validation in a row that did not improve the
    monitored metric by more than ``min_delta`` (PyTorch Lightning's
    ``EarlyStopping`` rule and defaults: patience 3, min_delta 0). ``patience: null`` turns it
    off; the MLPerf presets do (their rule: train to the target AUROC or the end of the epoch).

    Attributes:
        monitor: see :class:`Monitor`.
        patience: validations without improvement before the stop (null: never stop early).
        min_delta: the smallest change that counts as an improvement (in the metric's units).
    """

    monitor: Monitor = Monitor.auroc
    patience: int | None = 3
    min_delta: float = 0.0

    def __post_init__(self) -> None:
        require_positive(
            {"train.early_stopping.patience": self.patience},
            nullable=True,
            message="{key} must be positive or null",
        )
        require(self.min_delta >= 0, "train.early_stopping.min_delta must be >= 0")


@dataclass
class ProfileSteps:
    """``torch.profiler.schedule`` of ``train.profile``: skip ``wait`` steps, trace
    ``warmup`` steps without recording, then record ``active`` steps (one trace per rank)."""

    wait: int = 5
    warmup: int = 2
    active: int = 5

    def __post_init__(self) -> None:
        require(self.wait >= 0 and self.warmup >= 0, "train.profile_steps.wait/warmup >= 0")
        require(self.active > 0, "train.profile_steps.active must be positive")

    @property
    def first_active(self) -> int:
        """The first step recorded into the trace (1-based, of the process's steps)."""
        return self.wait + self.warmup + 1

    @property
    def last_step(self) -> int:
        """The schedule's last step: the trace is written after it."""
        return self.wait + self.warmup + self.active


@dataclass
class TrainConfig:
    """The training loop.

    Attributes:
        batch_size: samples per rank per step.
        global_batch_size: a recipe's samples per step over every rank (``mlperf_dcnv2``:
            65,536); where set, a run whose ``batch_size`` x ranks differs is warned of when
            it trains or plans, with the per-rank batch that gives it (null: none).
        epochs: passes over the training split (ignored when ``max_steps`` stops earlier).
        max_steps: stop after this many steps (null: run ``epochs``).
        val_every_n_steps: validate every N steps as well as at the end (null: only at the end;
            with more than one epoch, every epoch ends with a validation in any case).
        val_per_epoch: validate N times per epoch, at the ends of its N near-equal parts
            (step ``(k * steps_per_epoch) // N`` of each epoch, the last at its end; MLPerf
            DLRM-DCNv2: 20), besides ``val_every_n_steps`` (null: not).
        target_auroc: stop training at the first validation whose AUROC reaches this value,
            then run the test split (MLPerf DLRM-DCNv2: 0.80275); null: train to the end.
        early_stopping: see :class:`EarlyStopping`.
        keep_best: keep the weights of the best validation (the monitored metric) in
            ``<run>/checkpoints/best/`` and report them: the test split, ``metrics.json``'s
            ``val`` / ``test`` and ``checkpoint=<run folder>`` use them, and the final weights'
            numbers are recorded beside them (``final_weights``). A save happens at a
            validation that improves and is not the last one, and at the last one when it
            improves on a saved best (so ``best/`` never holds an earlier validation's weights
            than the best).
        train_window_batches: the running window of training batches whose log loss and AUROC
            are logged every ``log_every_n_steps`` (``train_window/*``) and recorded at each
            validation, for the generalization gap (0: off).
        log_every_n_steps: TensorBoard scalar interval, steps.
        throughput_warmup_steps: first steps left out of ``samples_per_sec``.
        progress_bar: tqdm bar on rank 0 when stderr is a terminal.
        prefetch_batches: batches built ahead of the step by a background thread (read,
            decoded, assembled; pinned on CUDA), as TorchRec's example does with a
            ``DataLoader``; 0 builds each inline (:mod:`dlrm_exp.data.prefetch`). null: 2 on
            CUDA, where the GPU computes while the host builds; 0 on CPU, where the thread
            competes with the step for the same cores (Parquet-streamed training here on 2
            cores: 51,977 and 49,448 samples/s inline, 46,905 and 50,513 with 2).
        checkpoint_every_n_steps: save a sharded DCP checkpoint every N steps and at the end
            (null: no checkpoints), under ``<run>/checkpoints/step_<n>/``.
        keep_last_checkpoints: keep only the newest N checkpoints (null: keep all); needs
            ``checkpoint_every_n_steps`` (without it none are written: refused).
        resume: ``auto`` continues the newest complete checkpoint of the run folder
            (``hydra.run.dir=<run>``; starts fresh if there is none), a path continues that
            checkpoint folder, null starts fresh.
        init_from: fine-tuning: start this run from the model weights of a checkpoint (a
            ``checkpoints/step_<n>`` or ``best`` folder, or a run folder: its best, else its
            newest), at step 0 of this run's data with a fresh optimizer (its state, the
            Adagrad sums, is not read); the tables' shapes and id policies must match. With
            ``train.resume=auto`` a checkpoint of the run folder wins (a requeued or
            continued fine-tuning goes on from its own). Refused beside a resume path.
        on_nonfinite: see :class:`OnNonFinite`.
        pipeline: TorchRec's training pipeline, see :class:`Pipeline`.
        semi_sync_start_step: with ``pipeline=semi_sync``, the steps before it train
            synchronously (TorchRec's ``start_batch``; null: its default, 900); refused with
            another pipeline, which would ignore it.
        dense_precision: see :class:`DensePrecision`.
        symmetric_interaction: compute the dot interaction's pairwise products once, with a
            backward that uses the symmetry of C C^T (one ``bmm`` instead of two); forward
            values as TorchRec's ``InteractionArch``, gradients equal up to float rounding
            (:mod:`dlrm_exp.factories.interaction`). Dot interaction only.
        sparse_backward: see :class:`SparseBackward`; with ``overlap`` the tables end bit for
            bit as with ``serial``, dense weights equal up to float rounding.
        profile: record ``torch.profiler`` traces of every rank into ``<run>/profile/``.
        profile_steps: the profiler's wait / warm-up / active schedule, in training steps.
    """

    batch_size: int = 512
    global_batch_size: int | None = None
    epochs: int = 1
    max_steps: int | None = None
    val_every_n_steps: int | None = None
    val_per_epoch: int | None = None
    target_auroc: float | None = None
    early_stopping: EarlyStopping = field(default_factory=EarlyStopping)
    keep_best: bool = True
    train_window_batches: int = 50
    log_every_n_steps: int = 20
    throughput_warmup_steps: int = 10
    progress_bar: bool = True
    prefetch_batches: int | None = None
    checkpoint_every_n_steps: int | None = None
    keep_last_checkpoints: int | None = None
    resume: str | None = None
    init_from: str | None = None
    on_nonfinite: OnNonFinite = OnNonFinite.stop
    pipeline: Pipeline = Pipeline.sparse_dist
    semi_sync_start_step: int | None = None
    dense_precision: DensePrecision = DensePrecision.fp32
    symmetric_interaction: bool = False
    sparse_backward: SparseBackward = SparseBackward.serial
    profile: bool = False
    profile_steps: ProfileSteps = field(default_factory=ProfileSteps)

    def __post_init__(self) -> None:
        require_positive({"train.batch_size": self.batch_size, "train.epochs": self.epochs})
        require_positive(
            {
                "train.max_steps": self.max_steps,
                "train.global_batch_size": self.global_batch_size,
                "train.val_every_n_steps": self.val_every_n_steps,
                "train.val_per_epoch": self.val_per_epoch,
                "train.checkpoint_every_n_steps": self.checkpoint_every_n_steps,
                "train.keep_last_checkpoints": self.keep_last_checkpoints,
            },
            nullable=True,
            message="{key} must be positive or null",
        )
        require(self.log_every_n_steps > 0, "train.log_every_n_steps must be positive")
        # (Hydra reads true as a bool, which became the path "True": reviews)
        require(
            self.resume not in ("True", "False"),
            f"train.resume={str(self.resume).lower()}: train.resume takes auto (the newest "
            "checkpoint of hydra.run.dir) or a checkpoint's path; leave it out to start fresh",
        )
        require(
            self.init_from not in ("True", "False"),
            f"train.init_from={str(self.init_from).lower()}: train.init_from takes a "
            "checkpoint's path or a run folder (its best, else its newest checkpoint); leave "
            "it out to start from initial weights",
        )
        require(
            self.init_from is None or self.resume in (None, "auto"),
            f"train.init_from={self.init_from} starts a new run from a checkpoint's weights, "
            f"train.resume={self.resume} continues one: give one of them (train.resume=auto "
            "beside it continues this run's own checkpoints)",
        )
        require(self.train_window_batches >= 0, "train.train_window_batches must be >= 0")
        require(self.throughput_warmup_steps >= 0, "train.throughput_warmup_steps must be >= 0")
        require(
            self.prefetch_batches is None or self.prefetch_batches >= 0,
            "train.prefetch_batches must be >= 0 or null",
        )
        self._check_pipeline_options()
        require(
            self.target_auroc is None or 0 < self.target_auroc <= 1,
            f"train.target_auroc must be in (0, 1] or null, got {self.target_auroc}",
        )

    def profile_past(self, steps: int, start: int = 0) -> str | None:
        """A line when ``train.profile`` records steps past the ``steps`` this process trains
        after step ``start`` (a resumed run's checkpoint: the schedule counts from there): it
        wrote no trace (or a partial one) without a word, and its summary still named the
        profile folder (presets review); None otherwise. Steps are the run's, as its summary
        numbers them (diff review)."""
        sched = self.profile_steps
        if not self.profile or sched.last_step <= steps:
            return None
        return (
            f"train.profile records steps {start + sched.first_active}.."
            f"{start + sched.last_step} (train.profile_steps wait {sched.wait}, warmup "
            f"{sched.warmup}, active {sched.active}, from step {start + 1}); this run trains "
            f"to step {start + steps}: {'no' if steps < sched.first_active else 'a partial'} "
            "trace (lower train.profile_steps.wait / warmup / active)"
        )

    def global_batch_note(self, world_size: int) -> str | None:
        """A line when ``batch_size`` on ``world_size`` ranks is not ``global_batch_size``:
        ``experiment=mlperf_dcnv2`` on 2 ranks trained at 131,072 samples a step without a
        word (presets review); None otherwise."""
        wanted = self.global_batch_size
        if wanted is None or self.batch_size * world_size == wanted:
            return None
        fix = (
            f"set train.batch_size={wanted // world_size}"
            if wanted % world_size == 0
            else f"use a number of ranks that divides it ({world_size} does not)"
        )
        return (
            f"train.global_batch_size={wanted} (the recipe's samples a step), but "
            f"train.batch_size={self.batch_size} on {world_size} rank(s) gives "
            f"{self.batch_size * world_size:,}: {fix}, or train.global_batch_size=null to "
            "train as asked"
        )

    def _check_pipeline_options(self) -> None:
        """Settings that only one other setting reads are refused without it, naming both:
        the run would ignore them without a word."""
        start = self.semi_sync_start_step
        require(start is None or start >= 0, "train.semi_sync_start_step must be >= 0")
        require_read(
            start is None or self.pipeline is Pipeline.semi_sync,
            f"train.semi_sync_start_step={start} is read by train.pipeline=semi_sync only; "
            f"train.pipeline={self.pipeline.value} would ignore it",
            {"train.pipeline": is_value("semi_sync")},
        )
        kept = self.keep_last_checkpoints
        require_read(
            kept is None or self.checkpoint_every_n_steps is not None,
            f"train.keep_last_checkpoints={kept} prunes the checkpoints that "
            "train.checkpoint_every_n_steps writes; without it none are written: set "
            "train.checkpoint_every_n_steps=N too",
            {"train.checkpoint_every_n_steps": is_not_value("null", "none")},
        )

    def prefetch_depth(self, cuda: bool) -> int:
        """``prefetch_batches``, or where null 2 on CUDA and 0 on CPU."""
        if self.prefetch_batches is None:
            return 2 if cuda else 0
        return self.prefetch_batches
