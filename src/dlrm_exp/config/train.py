"""Schema of the training loop (``train.*``)."""

from dataclasses import dataclass
from enum import Enum

from dlrm_exp.config.checks import require


class OnNonFinite(Enum):
    """What a training step with a NaN or infinite loss does: ``stop`` the run naming the step
    (earlier checkpoints stay), or ``skip`` the batch with exact-zero gradients and count it
    (see :mod:`dlrm_exp.build.nonfinite`)."""

    stop = "stop"
    skip = "skip"


@dataclass
class TrainConfig:
    """The training loop.

    Attributes:
        batch_size: samples per rank per step.
        epochs: passes over the training split (ignored when ``max_steps`` stops earlier).
        max_steps: stop after this many steps (null: run ``epochs``).
        val_every_n_steps: validate every N steps as well as at the end (null: only at the end).
        val_per_epoch: validate N times per epoch, every ``steps_per_epoch // N`` steps
            (MLPerf DLRM-DCNv2: 20), besides ``val_every_n_steps`` (null: not).
        target_auroc: stop training at the first validation whose AUROC reaches this value,
            then run the test split (MLPerf DLRM-DCNv2: 0.80275); null: train to the end.
        log_every_n_steps: TensorBoard scalar interval, steps.
        throughput_warmup_steps: first steps left out of ``samples_per_sec``.
        progress_bar: tqdm bar on rank 0 when stderr is a terminal.
        checkpoint_every_n_steps: save a sharded DCP checkpoint every N steps and at the end
            (null: no checkpoints), under ``<run>/checkpoints/step_<n>/``.
        keep_last_checkpoints: keep only the newest N checkpoints (null: keep all).
        resume: ``auto`` continues the newest complete checkpoint of the run folder
            (``hydra.run.dir=<run>``; starts fresh if there is none), a path continues that
            checkpoint folder, null starts fresh.
        on_nonfinite: see :class:`OnNonFinite`.
    """

    batch_size: int = 512
    epochs: int = 1
    max_steps: int | None = None
    val_every_n_steps: int | None = None
    val_per_epoch: int | None = None
    target_auroc: float | None = None
    log_every_n_steps: int = 20
    throughput_warmup_steps: int = 10
    progress_bar: bool = True
    checkpoint_every_n_steps: int | None = None
    keep_last_checkpoints: int | None = None
    resume: str | None = None
    on_nonfinite: OnNonFinite = OnNonFinite.stop

    def __post_init__(self) -> None:
        require(self.batch_size > 0, f"train.batch_size must be positive, got {self.batch_size}")
        require(self.epochs > 0, f"train.epochs must be positive, got {self.epochs}")
        for name in (
            "max_steps",
            "val_every_n_steps",
            "val_per_epoch",
            "checkpoint_every_n_steps",
            "keep_last_checkpoints",
        ):
            value = getattr(self, name)
            require(value is None or value > 0, f"train.{name} must be positive or null")
        require(self.log_every_n_steps > 0, "train.log_every_n_steps must be positive")
        require(self.throughput_warmup_steps >= 0, "train.throughput_warmup_steps must be >= 0")
        require(
            self.target_auroc is None or 0 < self.target_auroc <= 1,
            f"train.target_auroc must be in (0, 1] or null, got {self.target_auroc}",
        )
