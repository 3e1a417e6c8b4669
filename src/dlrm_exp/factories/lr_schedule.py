"""The learning-rate schedule of TorchRec's DLRM example, applied to the dense optimizer and to
the fused embedding kernels alike.

Policy (facebookresearch/dlrm ``torchrec_dlrm/lr_scheduler.py``, ``LRPolicyScheduler``, which
``dlrm_main.py`` steps once after every ``pipeline.progress``), for training step ``s`` = 1, 2,
... with warm-up ``W``, decay start ``D`` and decay length ``N``:

* ``s < W``: ``base * s / W`` (linear warm-up);
* ``D <= s < D + N``: ``max(1e-7, base * ((N - (s - D)) / N) ** 2)`` (polynomial decay,
  power 2, floor 1e-7);
* otherwise: the last value set by either phase, or ``base`` when neither has run (or
  ``N = 0``).

The reference's quirk is kept on purpose, so a preset trains exactly as the reference does:
between the end of the warm-up and the start of the decay the rate *holds the last warm-up
value* ``base * (W - 1) / W``, not ``base`` (with ``N > 0``). A warm-up of one step has no
warm-up value; the reference then has none to hold and fails, here it holds ``base``.

The rate reaches FBGEMM's fused kernels through the optimizer's param groups: TorchRec's
``EmbeddingFusedOptimizer`` copies ``param_groups[0]["lr"]`` into the kernel at every
``zero_grad`` and ``step``, which ``TrainPipelineSparseDist`` calls around each training step.
"""

from typing import Any

#: The reference's floor of the decayed rate.
MIN_LR = 1e-7


def scheduled_lr(step: int, base: float, warmup: int, decay_start: int, decay_steps: int) -> float:
    """The rate of training step ``step`` (1-based) for a base rate ``base``; see the module
    docstring. Pure: a resumed run gets the same rate at the same step."""
    if step < warmup:
        return base * (1.0 - (warmup - step) / warmup)
    decay_end = decay_start + decay_steps
    if decay_start <= step < decay_end:
        left = (decay_steps - (step - decay_start)) / decay_steps
        return max(MIN_LR, base * left**2)
    if decay_steps <= 0:
        return base
    if step >= decay_end:  # hold the last decayed value
        return scheduled_lr(decay_end - 1, base, warmup, decay_start, decay_steps)
    if warmup >= 2:  # between warm-up and decay: the reference holds its last warm-up value
        return scheduled_lr(warmup - 1, base, warmup, decay_start, decay_steps)
    return base


class LRSchedule:
    """Sets every param group of ``optimizer`` (dense, fused embedding and data-parallel table
    optimizers of a ``CombinedOptimizer``) to its scheduled rate for a training step.

    Args:
        optimizer: the job's optimizer; each group's ``lr`` at construction is its base rate.
        warmup / decay_start / decay_steps: ``optimizer.lr_warmup_steps`` /
            ``lr_decay_start`` / ``lr_decay_steps``.
        kernels: the rank's FBGEMM fused kernels and their base rate (``optimizer.
            learning_rate``): each is set too. TorchRec copies a group's rate into its kernel
            only in the fused optimizer's ``zero_grad`` / ``step``, which
            ``TrainPipelineSparseDist`` calls before a step's backward but
            ``TrainPipelineSemiSync`` after it: its tables were updated one step late (the
            first step at the full base rate, whatever the warm-up).
    """

    def __init__(
        self,
        optimizer: Any,
        warmup: int,
        decay_start: int,
        decay_steps: int,
        kernels: tuple[list[Any], float] = ([], 0.0),
    ) -> None:
        self.groups = list(optimizer.param_groups)
        self.base = [float(group["lr"]) for group in self.groups]
        self.warmup, self.decay_start, self.decay_steps = warmup, decay_start, decay_steps
        self.kernels, self.kernel_base = kernels

    @property
    def active(self) -> bool:
        """False when the schedule keeps every base rate at every step."""
        return self.warmup > 1 or self.decay_steps > 0

    def apply(self, step: int) -> None:
        """Set the rates of training step ``step`` (1-based), before that step runs."""
        if not self.active:
            return
        for group, base in zip(self.groups, self.base, strict=True):
            group["lr"] = scheduled_lr(step, base, self.warmup, self.decay_start, self.decay_steps)
        rate = scheduled_lr(step, self.kernel_base, self.warmup, self.decay_start, self.decay_steps)
        for kernel in self.kernels:
            kernel.set_learning_rate(rate)
