"""One unsharded DLRM for inference, with its tables quantized the way TorchRec's inference
path does it, and the plain-tensor interface a serving process calls.

Input of :class:`InferenceDLRM` (what ``export.json`` documents as the schema):

* ``dense``: (B, 13) float32, the dense features already transformed as in training
  (``log(1 + max(x, 0))`` of Criteo counts and of the schema's ``log1p`` columns);
* ``values``: (N,) int64, the ids of every feature, feature-major: all ids of ``cat_0`` for
  the B samples, then ``cat_1``, ... (each id in ``[0, num_embeddings)`` of its table);
* ``lengths``: (26 * B,) int32, ids per (feature, sample) in the same order (1 each for
  Criteo one-hot rows; their sum is N).

That is the ``KeyedJaggedTensor`` TorchRec builds from keys, values and lengths. Output: (B,)
float32 click probabilities.
"""

import copy
import warnings

import torch
from torchrec.inference.modules import quantize_inference_model
from torchrec.models.dlrm import DLRM
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from dlrm_exp.config import EmbeddingDataType, ExportQuantization
from dlrm_exp.planning.tables import is_table_key

#: Table weight dtype of each quantization (``none`` keeps TorchRec's fp32 tables).
WEIGHT_DTYPE = {ExportQuantization.fp16: torch.float16, ExportQuantization.int8: torch.qint8}
#: Table weight dtype of ``none`` for a table trained in each precision.
_TRAINED_DTYPE = {EmbeddingDataType.fp32: torch.float32, EmbeddingDataType.fp16: torch.float16}


#: The bound of a feature whose ids the model maps to rows itself (a managed-collision
#: table's 63-bit hashed raw ids): any non-negative int64.
ANY_ID = 2**63 - 1

#: What a call with an id outside its table's rows is told (:class:`InferenceDLRM`).
OUT_OF_RANGE = (
    "an id is outside its table's rows: each feature's ids must lie in [0, num_embeddings) "
    "of its table (export.json's inputs.num_embeddings; Criteo's int(C, 16) % num_embeddings)"
)


class InferenceDLRM(torch.nn.Module):
    """``(dense (B, 13), values (N,), lengths (F * B,)) -> probabilities (B,)`` around a DLRM
    (see the module docstring for the layout).

    Args:
        dlrm: the DLRM (``DLRM``, ``DLRM_DCN`` or ``DLRM_Projection``), in eval mode.
        keys: the sparse feature names in table order (``cat_0 .. cat_25``).
        bounds: per feature of ``keys``, the rows of its table (ids must lie in
            ``[0, bound)``; :data:`ANY_ID` where the model maps ids itself); None: unchecked.
            Out of range, FBGEMM's quantized (fp16, int8) lookups score the id as row 0
            without a word and its fp32 lookup fails on an internal check (review).

    Raises:
        AssertionError: (from ``forward``, with ``bounds``) an id outside its table's rows,
            saying :data:`OUT_OF_RANGE`; the scripted artifact raises it as ``torch.jit.Error``.
    """

    def __init__(self, dlrm: DLRM, keys: list[str], bounds: list[int] | None = None) -> None:
        super().__init__()
        self.dlrm = dlrm
        self.keys = keys
        self.bounds: torch.Tensor | None
        self.register_buffer(
            "bounds", None if bounds is None else torch.tensor(bounds, dtype=torch.int64)
        )

    def forward(
        self, dense: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor
    ) -> torch.Tensor:
        if self.bounds is not None:  # (decided when FX traces it: no branch in the artifact)
            per_feature = lengths.view(len(self.keys), -1).sum(dim=1)
            bound = self.bounds.repeat_interleave(per_feature)
            torch._assert(((values >= 0) & (values < bound)).all(), OUT_OF_RANGE)
        sparse = KeyedJaggedTensor.from_lengths_sync(keys=self.keys, values=values, lengths=lengths)
        return torch.sigmoid(self.dlrm(dense, sparse).squeeze(-1))


def quantize_tables(
    dlrm: DLRM, quantization: ExportQuantization, trained: dict[str, EmbeddingDataType]
) -> DLRM:
    """A copy of ``dlrm`` (fp32 tables) whose ``EmbeddingBagCollection`` is TorchRec's
    ``QuantEmbeddingBagCollection`` with ``quantization``'s weight dtype on every table
    (``torchrec.inference.modules.quantize_inference_model``; int8 is row-wise with an fp16
    scale and bias per row). ``none`` keeps each table in the precision it was ``trained``
    in ({table: data type}): ``dlrm`` itself when all are fp32; otherwise the fp16 ones become
    fp16 in the quantized collection (exactly their trained values) and the others stay fp32.
    """
    if quantization is not ExportQuantization.none:
        dtype = WEIGHT_DTYPE[quantization]
        per_table = dict.fromkeys(trained, dtype)
    elif set(trained.values()) == {EmbeddingDataType.fp32}:
        return dlrm
    else:
        dtype = torch.float16
        per_table = {name: _TRAINED_DTYPE[data_type] for name, data_type in trained.items()}
    return quantize_inference_model(
        copy.deepcopy(dlrm),
        per_table_weight_dtype=per_table,
        quantization_dtype=dtype,
        output_dtype=torch.float,
    )


def table_bytes(module: torch.nn.Module) -> int:
    """Bytes of every embedding table of ``module`` (weights, and for int8 the per-row scale
    and bias), as the float or quantized collection stores them."""
    return sum(
        tensor.numel() * tensor.element_size()
        for name, tensor in module.state_dict().items()
        if is_table_key(name) and isinstance(tensor, torch.Tensor)
    )


def one_hot_inputs(
    dense: torch.Tensor, sparse: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:class:`InferenceDLRM`'s inputs for rows of one id per feature: ``dense`` (B, 13)
    float32 and ``sparse`` (B, F) int64 ids -> (dense, values (F * B,) feature-major,
    lengths (F * B,) int32 ones)."""
    rows, features = sparse.shape
    return dense, sparse.t().reshape(-1), torch.ones(rows * features, dtype=torch.int32)


def script(module: InferenceDLRM) -> torch.jit.ScriptModule:
    """TorchScript of ``module``: traced with TorchRec's FX tracer (which keeps
    ``KeyedJaggedTensor`` whole), then scripted, as the TorchRec FAQ recommends for serving."""
    from torchrec.fx import symbolic_trace

    for parameter in module.parameters():
        parameter.requires_grad_(False)  # a serving model: no autograd graph per call
    with warnings.catch_warnings():
        # Harmless for this model, printed on every export: TorchScript notes that it ignores
        # instance annotations and dtype-specific Tensor subtypes in TorchRec's modules.
        warnings.filterwarnings("ignore", message=r"The TorchScript type system doesn't support")
        warnings.filterwarnings("ignore", message=r"TorchScript will treat type annotations")
        return torch.jit.script(symbolic_trace(module))
