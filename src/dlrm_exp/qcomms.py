"""Quantized-communication codecs for the embedding all-to-all, from the ``qcomms`` group."""

from torchrec.distributed.fbgemm_qcomm_codec import CommType, get_qcomm_codecs_registry
from torchrec.distributed.fbgemm_qcomm_codec import QCommsConfig as TorchRecQCommsConfig
from torchrec.distributed.types import QuantizedCommCodecs

from dlrm_exp.config import CommPrecision, QCommsConfig


def torchrec_qcomms_config(cfg: QCommsConfig) -> TorchRecQCommsConfig | None:
    """TorchRec's ``QCommsConfig`` for ``cfg``, or None when no precision is set.

    A direction left null stays FP32 (TorchRec's default).
    """
    if not cfg.enabled:
        return None
    fwd = cfg.forward_precision or CommPrecision.fp32
    bwd = cfg.backward_precision or CommPrecision.fp32
    return TorchRecQCommsConfig(
        forward_precision=CommType(fwd.value),
        backward_precision=CommType(bwd.value),
        forward_loss_scale=cfg.forward_loss_scale,
        backward_loss_scale=cfg.backward_loss_scale,
    )


def build_qcomm_codecs_registry(cfg: QCommsConfig) -> dict[str, QuantizedCommCodecs] | None:
    """Codec registry for ``EmbeddingBagCollectionSharder(qcomm_codecs_registry=...)``;
    None means uncompressed fp32 collectives."""
    qcfg = torchrec_qcomms_config(cfg)
    return None if qcfg is None else get_qcomm_codecs_registry(qcomms_config=qcfg)
