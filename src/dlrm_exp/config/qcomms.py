"""Schema of the ``qcomms`` group: precision of the embedding collectives."""

from dataclasses import dataclass
from enum import Enum


class CommPrecision(Enum):
    """Precision of the embedding all-to-all; values equal TorchRec's ``CommType`` strings."""

    fp32 = "fp32"
    fp16 = "fp16"
    bf16 = "bf16"
    fp8 = "fp8"
    int8 = "int8"


@dataclass
class QCommsConfig:
    """Quantized communication of the embedding all-to-all (group ``qcomms``).

    Maps to TorchRec's ``QCommsConfig(forward_precision, backward_precision)``. Both null:
    no codecs (plain fp32 collectives). One null: that direction stays fp32.

    Attributes:
        forward_precision: precision of pooled embeddings sent forward.
        backward_precision: precision of embedding gradients sent backward.
        forward_loss_scale: optional loss scale for the forward codec (FP16/BF16 only).
        backward_loss_scale: optional loss scale for the backward codec.
    """

    forward_precision: CommPrecision | None = None
    backward_precision: CommPrecision | None = None
    forward_loss_scale: float | None = None
    backward_loss_scale: float | None = None

    @property
    def enabled(self) -> bool:
        return self.forward_precision is not None or self.backward_precision is not None
