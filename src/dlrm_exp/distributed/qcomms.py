"""Quantized-communication codecs for the embedding collectives, from the ``qcomms`` group,
and the precisions they actually run in, read back from the built sharded model."""

from collections.abc import Callable
from typing import Any

import torch
from torchrec.distributed.fbgemm_qcomm_codec import CommType, get_qcomm_codecs_registry
from torchrec.distributed.fbgemm_qcomm_codec import QCommsConfig as TorchRecQCommsConfig
from torchrec.distributed.types import CommOp, QuantizedCommCodecs

from dlrm_exp.config import CommPrecision, QCommsConfig
from dlrm_exp.errors import ConfigError
from dlrm_exp.util.rank_zero import several_ranks
from dlrm_exp.util.substitution import Substitution, precisions_text


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


#: (precision, sharding type) pairs that cannot train, with the reason, on any backend.
#: Measured with TorchRec 1.8.0 / fbgemm-gpu-cpu 1.8.0 on 2 gloo processes: INT8 codecs of
#: row-wise layouts (row_wise, table_row_wise, grid_shard) fail inside FBGEMM
#: (``AssertionError: Unexpected None``): TorchRec encodes the reduce-scatter and all-gather
#: without the context FBGEMM's INT8 codec needs (``comm_ops``: ``rsi.codecs.forward.encode(
#: inputs)``), whatever the backend; INT8 table-wise, column-wise and table-column-wise (their
#: all-to-all makes one), and every FP32/FP16/BF16/FP8 combination, train.
UNSUPPORTED: dict[tuple[str, str], str] = {
    (CommPrecision.int8.value, kind): (
        "TorchRec's reduce-scatter gives FBGEMM's INT8 codec no context (AssertionError: "
        "Unexpected None), on any backend"
    )
    for kind in ("row_wise", "table_row_wise", "grid_shard")
}


def check_supported(
    cfg: QCommsConfig, sharding_types: set[str], placed: Callable[[str], str] | None = None
) -> None:
    """Refuse a precision / sharding-type combination known not to run (:data:`UNSUPPORTED`,
    on any backend: the message named the backend, then said "on any backend"; review).
    ``placed``: which tables a sharding type holds and what placed them there, for the
    message (it advised ``sharding=tablewise`` to a command that had it, its row-wise table
    from a per-table override: distributed review).

    Raises:
        ConfigError: one line naming the combination, why, and the ways out.
    """
    if not cfg.enabled:
        return
    precisions = {p.value for p in (cfg.forward_precision, cfg.backward_precision) if p}
    for precision in sorted(precisions):
        kinds = [k for k in sorted(sharding_types) if (precision, k) in UNSUPPORTED]
        if kinds:  # (each refused kind at once: one at a time, fixing one met the next)
            where = f" ({'; '.join(f'{k}: {placed(k)}' for k in kinds)})" if placed else ""
            raise ConfigError(  # (fp8 runs as FP16/BF16 there: no way out of its own)
                f"qcomms {precision} with {' and '.join(kinds)} sharding is not supported: "
                f"{UNSUPPORTED[(precision, kinds[0])]}{where}; use qcomms=fp16 or bf16, or place "
                "those tables otherwise (table_wise or column_wise)"
            )


#: The name ``metrics.json`` gives each collective of TorchRec's codec registry (keyed by
#: ``CommOp`` name): the pooled all-to-all of table-, column- and table-row-wise layouts, the
#: reduce-scatter of row-wise layouts, the sequence all-to-all of sequence embeddings.
COLLECTIVES = {
    CommOp.POOLED_EMBEDDINGS_ALL_TO_ALL.name: "pooled_all_to_all",
    CommOp.POOLED_EMBEDDINGS_REDUCE_SCATTER.name: "reduce_scatter",
    CommOp.SEQUENCE_EMBEDDINGS_ALL_TO_ALL.name: "sequence_all_to_all",
}


def codec_precision(codec: Any) -> str:
    """The precision one FBGEMM codec sends in, e.g. ``FP16``. FBGEMM keeps it only as the
    private ``_comm_precision`` (a ``SparseType``); its public ``quantized_dtype`` is uint8 for
    FP8 and INT8 alike, so it is the fallback only."""
    precision = getattr(codec, "_comm_precision", None)
    return precision.name if precision is not None else str(codec.quantized_dtype)


def _output_dists(sharded: torch.nn.Module) -> list[torch.nn.Module]:
    """The output-dist modules of one sharded embedding collection, as its shardings create them
    (TorchRec creates its own lazily at the first batch, from the same shardings and codec
    registry, so these hold the codecs it will use)."""
    device = getattr(sharded, "_device", None)
    return [s.create_output_dist(device=device) for s in sharded._embedding_shardings]


def _running_codecs(output_dist: torch.nn.Module) -> list[QuantizedCommCodecs]:
    """The codecs ``output_dist`` holds, but in a job of several ranks not those of a
    collective whose group has one member (a module keeps each codecs beside its group:
    ``_codecs`` / ``_pg``, and table-row-wise's and grid's ``_intra_*`` / ``_cross_*``):
    TorchRec's ``comm_ops`` return a one-rank group's input unchanged, before any codec runs
    (table-row-wise and grid on one host: the cross-host all-to-all's group is that host's
    rank alone). On one process every group has one member: the codecs are read as the same
    plan on several ranks would hold them."""
    several = several_ranks()
    running = []
    for part in output_dist.modules():
        for name, value in vars(part).items():
            if not isinstance(value, QuantizedCommCodecs):
                continue
            group = getattr(part, name.replace("codecs", "pg"), None)
            if several and group is not None and group.size() <= 1:
                continue
            running.append(value)
    return running


def effective_qcomms(model: torch.nn.Module) -> dict[str, dict[str, str]]:
    """The precision each embedding collective of this rank's sharded model runs in:
    ``{collective: {"forward": "FP16", "backward": "BF16"}}``, collectives named as in
    :data:`COLLECTIVES`, only those the plan uses (none for data-parallel tables).

    Read from the codecs held by the output-dist modules that the sharded collections'
    ``_embedding_shardings`` create (TorchRec 1.8 has no public accessor), matched by identity
    to the sharded module's ``qcomm_codecs_registry``; so a precision TorchRec substituted
    when building the registry (``get_qcomm_codecs_registry`` runs FP8 and MX4
    reduce-scatters in FP16 forward / BF16 backward) is what is returned. Empty when the model
    has no codecs (``qcomms=none`` / ``fp32``: every collective in FP32).
    """
    found: dict[str, dict[str, str]] = {}
    for module in model.modules():
        registry = getattr(module, "qcomm_codecs_registry", None)
        if not registry or not hasattr(module, "_embedding_shardings"):
            continue
        owner = {id(codecs): COLLECTIVES.get(op, op.lower()) for op, codecs in registry.items()}
        for output_dist in _output_dists(module):
            for value in _running_codecs(output_dist):
                if id(value) in owner:
                    found[owner[id(value)]] = {
                        "forward": codec_precision(value.forward),
                        "backward": codec_precision(value.backward),
                    }
    return dict(sorted(found.items()))


def requested_precisions(cfg: QCommsConfig) -> dict[str, str]:
    """``{"forward": ..., "backward": ...}`` as the ``qcomms`` group asks (a null direction:
    FP32), in the names of :func:`codec_precision`."""
    return {
        "forward": (cfg.forward_precision or CommPrecision.fp32).name.upper(),
        "backward": (cfg.backward_precision or CommPrecision.fp32).name.upper(),
    }


def builds_codecs(cfg: QCommsConfig) -> bool:
    """Whether TorchRec builds qcomms codecs for ``cfg``: a precision other than FP32 in
    either direction (``get_qcomm_codecs_registry`` builds none where both are FP32, and a
    null direction is FP32)."""
    return set(requested_precisions(cfg).values()) != {"FP32"}


def qcomms_substitution(
    cfg: QCommsConfig, effective: dict[str, dict[str, str]], world_size: int
) -> Substitution | None:
    """The substitution when a collective runs in another precision than ``cfg`` asks
    (``effective`` from :func:`effective_qcomms`), or when qcomms were asked and no collective
    runs to apply them to: on one rank (TorchRec's collectives return their input unchanged
    when the group has one rank, ``comm_ops``' ``group.size() <= 1``, so no codec encodes
    anything) or when every table is data-parallel; None when everything ran as asked or
    nothing but FP32 was asked (``qcomms=none`` / ``fp32``: no codecs)."""
    asked = requested_precisions(cfg)
    if not builds_codecs(cfg):
        return None
    wanted = "/".join(dict.fromkeys(asked.values()))
    if world_size <= 1 or not effective:
        why = (
            "one rank: TorchRec skips the collectives and their codecs "
            "(run hardware.nproc_per_node >= 2 to quantize)"
            if world_size <= 1
            else "every table is data_parallel"
        )
        return Substitution("qcomms", wanted.lower(), "no embedding collective", why)
    differ = {name: p for name, p in effective.items() if p != asked}
    if not differ:
        return None
    return Substitution(
        "qcomms",
        wanted.lower(),
        precisions_text(differ),
        f"TorchRec has no {wanted} {' or '.join(differ)}; precisions are forward/backward",
    )
