"""Schema of the ``optimizer`` group: the fused sparse optimizer and the dense one."""

from dataclasses import dataclass
from enum import Enum

from dlrm_exp.config.checks import require


class SparseOptimizer(Enum):
    """Optimizer for the embedding tables, fused into backward (``apply_optimizer_in_backward``)."""

    rowwise_adagrad = "rowwise_adagrad"
    adagrad = "adagrad"
    sgd = "sgd"


class DenseOptimizer(Enum):
    """Optimizer for the dense arch, interaction and over arch parameters."""

    adagrad = "adagrad"
    sgd = "sgd"


@dataclass
class OptimizerConfig:
    """Sparse (fused, in backward) and dense optimizers (group ``optimizer``).

    Attributes:
        sparse_optimizer: embedding optimizer, applied inside backward by FBGEMM's fused kernel.
        dense_optimizer: optimizer for every non-embedding parameter.
        learning_rate: sparse learning rate (0.1 in TorchRec's golden training example).
        dense_learning_rate: dense learning rate.
        eps: Adagrad denominator epsilon.
    """

    sparse_optimizer: SparseOptimizer = SparseOptimizer.rowwise_adagrad
    dense_optimizer: DenseOptimizer = DenseOptimizer.adagrad
    learning_rate: float = 0.1
    dense_learning_rate: float = 0.01
    eps: float = 1e-8

    def __post_init__(self) -> None:
        for name in ("learning_rate", "dense_learning_rate"):
            value = getattr(self, name)
            require(value > 0, f"optimizer.{name} must be positive, got {value}")
        require(self.eps >= 0, f"optimizer.eps must be >= 0, got {self.eps}")
