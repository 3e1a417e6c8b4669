"""Schema of the ``optimizer`` group: the fused sparse optimizer, the dense one, and the
learning-rate schedule both follow."""

from dataclasses import dataclass
from enum import Enum

from dlrm_exp.config.checks import (
    is_not_value,
    is_positive,
    require,
    require_positive,
    require_read,
)


class SparseOptimizer(Enum):
    """Optimizer for the embedding tables, fused into backward (``apply_optimizer_in_backward``;
    FBGEMM ``EXACT_ROWWISE_ADAGRAD``, ``EXACT_ADAGRAD``, ``EXACT_SGD``, ``ADAM``)."""

    rowwise_adagrad = "rowwise_adagrad"
    adagrad = "adagrad"
    sgd = "sgd"
    adam = "adam"

    def state_floats_per_row(self, embedding_dim: int) -> int:
        """fp32 optimizer-state values FBGEMM's fused kernel keeps per table row of
        ``embedding_dim`` columns: row-wise Adagrad 1, Adagrad ``D``, Adam ``2 D`` (first and
        second moments), SGD none."""
        per_row = {
            SparseOptimizer.rowwise_adagrad: 1,
            SparseOptimizer.adagrad: embedding_dim,
            SparseOptimizer.adam: 2 * embedding_dim,
        }
        return per_row.get(self, 0)


#: Sparse optimizers that FBGEMM's CPU kernels fuse into backward (fbgemm-gpu 1.8: EXACT_ADAGRAD,
#: EXACT_ROWWISE_ADAGRAD, EXACT_SGD; its CPU TBE asserts "Optimizer adam is not supported in CPU
#: mode"). On CPU, Adam tables are data_parallel replicas stepped by ``torch.optim.Adam``.
CPU_FUSED = frozenset(
    {SparseOptimizer.rowwise_adagrad, SparseOptimizer.adagrad, SparseOptimizer.sgd}
)


def fbgemm_fuses(optimizer: SparseOptimizer, on_cpu: bool) -> bool:
    """Whether FBGEMM fuses ``optimizer`` into backward on the compute device: every one on a
    GPU, those of :data:`CPU_FUSED` on CPU (elsewhere its tables run data_parallel)."""
    return not on_cpu or optimizer in CPU_FUSED


def fbgemm_steps_replicas(optimizer: SparseOptimizer, on_cpu: bool) -> bool:
    """Whether FBGEMM's fused kernel steps the data_parallel replicas, in fp32 state
    (:class:`~dlrm_exp.factories.replicated_optim.FbgemmReplicaOptimizer`): on CPU with an
    optimizer of :data:`CPU_FUSED`; on a GPU, and for Adam on CPU, ``torch.optim`` /
    TorchRec's optimizers step them."""
    return on_cpu and optimizer in CPU_FUSED


class DenseOptimizer(Enum):
    """Optimizer for the dense arch, interaction and over arch parameters (``torch.optim``)."""

    adagrad = "adagrad"
    sgd = "sgd"
    adam = "adam"


@dataclass
class OptimizerConfig:
    """Sparse (fused, in backward) and dense optimizers, and their learning-rate schedule
    (group ``optimizer``).

    The schedule is the reference's ``LRPolicyScheduler`` (facebookresearch/dlrm
    ``torchrec_dlrm/lr_scheduler.py``, used by TorchRec's ``dlrm_main.py``), applied to the
    sparse and the dense rate alike, see :mod:`dlrm_exp.factories.lr_schedule`.

    Attributes:
        sparse_optimizer: embedding optimizer, applied inside backward by FBGEMM's fused kernel.
        dense_optimizer: optimizer for every non-embedding parameter.
        learning_rate: sparse learning rate (0.1 in TorchRec's golden training example).
        dense_learning_rate: dense learning rate.
        eps: Adagrad's / Adam's denominator epsilon (both optimizers).
        stochastic_rounding: FBGEMM's ``stochastic_rounding`` for tables whose weights are
            not fp32 (``model.embedding_data_type=fp16``): each updated weight is rounded to
            one of its two nearest fp16 neighbours with probability by distance, so small
            updates are not lost on average (FBGEMM's default; false rounds to nearest).
        lr_warmup_steps: W; the rate rises linearly from base/W at step 1 (0: no warm-up).
        lr_decay_start: the step at which the polynomial decay begins (>= W).
        lr_decay_steps: N; over N steps the rate falls as ``base * ((N - k) / N) ** 2`` (never
            below 1e-7), then holds (0: no decay).
    """

    sparse_optimizer: SparseOptimizer = SparseOptimizer.rowwise_adagrad
    dense_optimizer: DenseOptimizer = DenseOptimizer.adagrad
    learning_rate: float = 0.1
    dense_learning_rate: float = 0.01
    eps: float = 1e-8
    stochastic_rounding: bool = True
    lr_warmup_steps: int = 0
    lr_decay_start: int = 0
    lr_decay_steps: int = 0

    def __post_init__(self) -> None:
        require_positive(
            {
                "optimizer.learning_rate": self.learning_rate,
                "optimizer.dense_learning_rate": self.dense_learning_rate,
            }
        )
        require(self.eps >= 0, f"optimizer.eps must be >= 0, got {self.eps}")
        for name in ("lr_warmup_steps", "lr_decay_start", "lr_decay_steps"):
            value = getattr(self, name)
            require(value >= 0, f"optimizer.{name} must be >= 0, got {value}")
        sgd = self.sparse_optimizer is SparseOptimizer.sgd
        sgd = sgd and self.dense_optimizer is DenseOptimizer.sgd
        require_read(
            not sgd or self.eps == 1e-8,
            f"optimizer.eps={self.eps} is read by Adagrad and Adam only; SGD on the tables and "
            "the dense part would ignore it",
            {
                "optimizer": is_not_value("sgd"),
                "optimizer.sparse_optimizer": is_not_value("sgd"),
                "optimizer.dense_optimizer": is_not_value("sgd"),
            },
        )
        require_read(
            self.lr_decay_steps > 0 or self.lr_decay_start == 0,
            f"optimizer.lr_decay_start={self.lr_decay_start} is read only with a decay: set "
            "optimizer.lr_decay_steps=<N> too (without it the rate never decays)",
            {"optimizer.lr_decay_steps": is_positive},
        )
        if self.lr_decay_steps > 0:
            require(
                self.lr_decay_start >= self.lr_warmup_steps,
                f"optimizer.lr_decay_start ({self.lr_decay_start}) is before the end of the "
                f"warm-up ({self.lr_warmup_steps} steps): the warm-up must finish before the "
                f"decay starts; set optimizer.lr_decay_start={self.lr_warmup_steps} or later",
            )

    def schedule_past(self, total_steps: int) -> str | None:
        """A line when the warm-up or the decay's start lies past the ``total_steps`` a run
        trains: its rates then end at a fraction of the asked ones (base * steps / W), or never
        decay, without a word (tuning review); None otherwise."""
        if self.lr_warmup_steps > total_steps:
            share = total_steps / self.lr_warmup_steps
            return (
                f"optimizer.lr_warmup_steps={self.lr_warmup_steps} is more than the "
                f"{total_steps:,} steps this run trains: its learning rates end at {share:.1%} "
                "of the asked ones (shorten the warm-up or train longer)"
            )
        if self.lr_decay_steps > 0 and self.lr_decay_start >= total_steps:
            return (
                f"optimizer.lr_decay_start={self.lr_decay_start} is not before the end of the "
                f"{total_steps:,} steps this run trains: its learning rates never decay"
            )
        return None
