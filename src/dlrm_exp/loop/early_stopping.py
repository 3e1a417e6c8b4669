"""The best validation and early stopping: which validation so far is the best of the monitored
metric, and when training stops for lack of improvement.

The rule is PyTorch Lightning's ``EarlyStopping`` (and Keras'): a validation improves when its
value beats the best so far by more than ``min_delta`` (higher for AUROC, lower for log loss and
NE); after ``patience`` validations in a row without an improvement, training stops. The state
is a few numbers of the loop's :class:`~dlrm_exp.loop.trainer.TrainerState`, so a resumed run
continues the count and stops at the same step.
"""

import math
from dataclasses import dataclass

from dlrm_exp.config import EarlyStopping

#: ``stop_reason`` values: the steps ran out, a validation reached ``train.target_auroc``, or
#: early stopping ended training.
END, TARGET, EARLY_STOPPING = "end", "target_auroc", "early_stopping"


def step_value(step: float) -> int | float:
    """A step as recorded: an int where it is whole (histories store floats; a step rescaled
    to another world size may be a fraction)."""
    return int(step) if float(step).is_integer() else step


@dataclass
class BestValidation:
    """The best validation so far and the patience count.

    Attributes:
        step: the step of the best validation (None: no validation yet).
        value: its monitored value.
        bad_validations: validations since the best one (none improved).
        monitor: the metric ``value`` is of (``auroc``, ``logloss``, ``ne``; None: no
            validation yet, or a checkpoint written before it was recorded).
    """

    step: int | None = None
    value: float | None = None
    bad_validations: int = 0
    monitor: str | None = None

    def improves(self, value: float, cfg: EarlyStopping) -> bool:
        """Whether ``value`` beats the best by more than ``cfg.min_delta``. A NaN or infinite
        value (AUROC of a one-class split, a diverged model) never improves, so it never
        becomes the best that later validations would have to beat."""
        if not math.isfinite(value):
            return False
        if self.value is None:
            return True
        if cfg.monitor.higher_is_better:
            return value > self.value + cfg.min_delta
        return value < self.value - cfg.min_delta

    def update(self, step: int, metrics: dict[str, float], cfg: EarlyStopping) -> bool:
        """Record the validation of ``step`` (its ``metrics`` hold ``cfg.monitor``); returns
        whether it is the new best."""
        recorded = metrics[cfg.monitor.value]  # None: NaN or infinite, as JSON stores it
        value = math.nan if recorded is None else float(recorded)
        self.monitor = cfg.monitor.value
        if self.improves(value, cfg):
            self.step, self.value, self.bad_validations = step, value, 0
            return True
        self.bad_validations += 1
        return False

    def should_stop(self, cfg: EarlyStopping) -> bool:
        """``patience`` validations in a row did not improve (never with ``patience: null``)."""
        return cfg.patience is not None and self.bad_validations >= cfg.patience

    def to_json(self) -> dict[str, float | int | str | None]:
        """The state as a checkpoint's ``trainer_state.json`` stores it."""
        return {
            "step": self.step,
            "value": self.value,
            "bad_validations": self.bad_validations,
            "monitor": self.monitor,
        }

    @classmethod
    def from_json(cls, saved: dict | None) -> "BestValidation":
        """The state a checkpoint saved (an empty one for checkpoints written before it)."""
        saved = saved or {}
        return cls(
            saved.get("step"),
            saved.get("value"),
            int(saved.get("bad_validations", 0)),
            saved.get("monitor"),
        )

    @classmethod
    def replayed(cls, history: list[dict[str, float]], cfg: EarlyStopping) -> "BestValidation":
        """The state the validations ``history`` give under ``cfg`` (another monitor or
        ``min_delta`` than the ones a checkpoint's state was kept for). A validation of an
        empty split (no ``samples``) is passed over, as training passes over it."""
        best = cls()
        for entry in history:
            if entry.get("samples", 1):  # (entries written before samples were kept: taken)
                best.update(step_value(entry["step"]), entry, cfg)  # type: ignore[arg-type]
        return best
