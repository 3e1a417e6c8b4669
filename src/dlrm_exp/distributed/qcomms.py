"""Quantized-communication codecs for the embedding all-to-all, from the ``qcomms`` group."""

from typing import Any

import torch
from torchrec.distributed.fbgemm_qcomm_codec import CommType, get_qcomm_codecs_registry
from torchrec.distributed.fbgemm_qcomm_codec import QCommsConfig as TorchRecQCommsConfig
from torchrec.distributed.types import QuantizedCommCodecs

from dlrm_exp.config import CommPrecision, QCommsConfig
from dlrm_exp.errors import ConfigError


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


class TwoDimensionalCodec:
    """Wraps an FBGEMM codec so 1-D buffers reach it as (1, N).

    TorchRec hands the pooled all-to-all codec a flat buffer, but FBGEMM's FP8 quantizer
    (``fp32_to_hfp8_with_clamp``, used unless ``fp8_quantize_dim`` is set) accepts only 2-D
    tensors: FP8 table-wise and column-wise sharding otherwise fail with ``Tensor 'input' must
    have 2 dimension(s). Found 1``. Every other method is the wrapped codec's own.
    """

    def __init__(self, codec: Any) -> None:
        self._codec = codec

    def encode(self, input_tensor: torch.Tensor, ctx: Any = None) -> torch.Tensor:
        if input_tensor.dim() == 1:
            return self._codec.encode(input_tensor.view(1, -1), ctx).view(-1)
        return self._codec.encode(input_tensor, ctx)

    def decode(self, input_grad: torch.Tensor, ctx: Any = None) -> torch.Tensor:
        if input_grad.dim() == 1:
            return self._codec.decode(input_grad.view(1, -1), ctx).view(-1)
        return self._codec.decode(input_grad, ctx)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._codec, name)


def _two_dimensional(codecs: QuantizedCommCodecs) -> QuantizedCommCodecs:
    return QuantizedCommCodecs(
        forward=TwoDimensionalCodec(codecs.forward),  # type: ignore[arg-type]
        backward=TwoDimensionalCodec(codecs.backward),  # type: ignore[arg-type]
    )


def build_qcomm_codecs_registry(cfg: QCommsConfig) -> dict[str, QuantizedCommCodecs] | None:
    """Codec registry for ``EmbeddingBagCollectionSharder(qcomm_codecs_registry=...)``;
    None means uncompressed fp32 collectives. FP8 codecs are wrapped in
    :class:`TwoDimensionalCodec`."""
    qcfg = torchrec_qcomms_config(cfg)
    if qcfg is None:
        return None
    registry = get_qcomm_codecs_registry(qcomms_config=qcfg)
    if CommPrecision.fp8 in (cfg.forward_precision, cfg.backward_precision):
        registry = {name: _two_dimensional(codecs) for name, codecs in registry.items()}
    return registry


#: (precision, sharding type) pairs that cannot train on gloo, with the reason. Measured with
#: TorchRec 1.8.0 / fbgemm-gpu-cpu 1.8.0 on 2 gloo processes: INT8 codecs of row-wise layouts
#: (row_wise, table_row_wise, grid_shard) fail inside FBGEMM (``AssertionError: Unexpected None``);
#: INT8 table-wise, column-wise and table-column-wise, and every FP32/FP16/BF16/FP8
#: combination, train.
UNSUPPORTED_ON_GLOO: dict[tuple[str, str], str] = {
    (CommPrecision.int8.value, kind): (
        "FBGEMM's INT8 row-wise codec fails on gloo (AssertionError: Unexpected None)"
    )
    for kind in ("row_wise", "table_row_wise", "grid_shard")
}


def check_supported(cfg: QCommsConfig, sharding_types: set[str], backend: str) -> None:
    """Refuse a precision / sharding-type combination known not to run on ``backend``.

    Raises:
        ConfigError: one line naming the combination and why.
    """
    if backend != "gloo" or not cfg.enabled:
        return
    precisions = {p.value for p in (cfg.forward_precision, cfg.backward_precision) if p}
    for precision in sorted(precisions):
        for kind in sorted(sharding_types):
            reason = UNSUPPORTED_ON_GLOO.get((precision, kind))
            if reason:
                raise ConfigError(
                    f"qcomms {precision} with {kind} sharding is not supported on gloo: "
                    f"{reason}; use qcomms=fp16 / bf16 / fp8, or sharding=tablewise / columnwise"
                )
