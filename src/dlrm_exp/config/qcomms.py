"""Schema of the ``qcomms`` group: precision of the embedding collectives."""

from dataclasses import dataclass
from enum import Enum

from dlrm_exp.config.checks import require, require_positive


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
        forward_loss_scale: optional loss scale of the forward codec: FBGEMM multiplies
            what it encodes by it and divides what it decodes (> 0; FP16/BF16 only).
        backward_loss_scale: the same for the backward codec.

    Raises:
        ConfigError: a loss scale that is not above 0, or one set for a direction whose
            precision is not fp16 or bf16 (FBGEMM would drop it with a warning).
    """

    forward_precision: CommPrecision | None = None
    backward_precision: CommPrecision | None = None
    forward_loss_scale: float | None = None
    backward_loss_scale: float | None = None

    def __post_init__(self) -> None:
        scales = {
            "forward": (self.forward_loss_scale, self.forward_precision),
            "backward": (self.backward_loss_scale, self.backward_precision),
        }
        require_positive(
            {f"qcomms.{d}_loss_scale": scale for d, (scale, _) in scales.items()}, nullable=True
        )
        scaled = (CommPrecision.fp16, CommPrecision.bf16)
        for direction, (scale, precision) in scales.items():
            ran = precision.value if precision else "fp32 (null)"
            require(
                scale is None or precision in scaled,
                f"qcomms.{direction}_loss_scale={scale} applies only to an fp16 or bf16 codec "
                f"(FBGEMM drops it otherwise), but qcomms.{direction}_precision is {ran}: set "
                f"qcomms.{direction}_loss_scale=null or qcomms.{direction}_precision=fp16",
            )

    @property
    def enabled(self) -> bool:
        return self.forward_precision is not None or self.backward_precision is not None
