"""``train.symmetric_interaction``: DLRM's dot interaction with a backward that uses symmetry.

TorchRec's ``InteractionArch`` (``torchrec.models.dlrm``) stacks the dense arch output and the
F pooled embeddings into C (B, F+1, D), computes Z = C C^T (B, F+1, F+1) with ``bmm`` and keeps
the (F+1)F/2 entries above the diagonal: out = [dense (B, D), Z[:, i<j] (B, (F+1)F/2)]. Under
autocast its ``bmm`` casts C and its transpose to bf16 separately, and autograd gives the
gradient of C as two ``bmm`` products plus an accumulating scatter (``index_put_``) of the
upper triangle.

:func:`pairwise_dots` computes the same forward values from one cast of C, and its backward
builds dZ by a non-accumulating ``index_copy_`` (the pairs are distinct) and computes
dC = (dZ + dZ^T) C: one ``bmm`` instead of two (the derivative of C C^T is dZ C + dZ^T C).
Forward values are identical to TorchRec's (the same ``bmm`` on the same operands); gradients
are equal up to float rounding (one sum in another order). Measured on TorchRec's quickstart
shapes with bf16 dense on a 2-core CPU: about +17 % samples/s (docs/results.md, "The fast
setting").

Only the dot interaction (``model.interaction_type=original``) has pairwise products; for DCN
and projection the run records a substitution and keeps TorchRec's interaction.
"""

import torch
import torch.fx
from torchrec.models.dlrm import DLRMTrain, InteractionArch

from dlrm_exp.config import InteractionType, ModelConfig
from dlrm_exp.util.substitution import Substitution


class _PairwiseDots(torch.autograd.Function):
    """``out[b, k] = <C[b, i_k], C[b, j_k]>`` for the flat pair indices ``pairs`` (i * n + j)."""

    @staticmethod
    def forward(ctx, combined: torch.Tensor, pairs: torch.Tensor, dtype: torch.dtype):  # type: ignore[override]
        with torch.autocast(combined.device.type, enabled=False):
            c = combined.to(dtype)
            dots = torch.bmm(c, c.transpose(1, 2)).flatten(1).index_select(1, pairs)
        ctx.save_for_backward(c, pairs)
        ctx.input_dtype = combined.dtype
        return dots

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        c, pairs = ctx.saved_tensors
        batch, n = c.shape[0], c.shape[1]
        with torch.autocast(c.device.type, enabled=False):
            dz = grad.new_zeros(batch, n * n).index_copy_(1, pairs, grad).view(batch, n, n)
            grad_c = torch.bmm((dz + dz.transpose(1, 2)).to(c.dtype), c)
        return grad_c.to(ctx.input_dtype), None, None


@torch.fx.wrap
def pairwise_dots(combined: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """The dot products of the pairs ``pairs`` (flat indices i * n + j, i < j) of the rows of
    ``combined`` (B, n, D), (B, len(pairs)), in autocast's dtype when autocast is on (else
    ``combined``'s). ``torch.fx.wrap``: TorchRec's pipelines trace the model, and this call stays
    one node of their graph."""
    device = combined.device.type
    on = torch.is_autocast_enabled(device)
    dtype = torch.get_autocast_dtype(device) if on else combined.dtype
    return _PairwiseDots.apply(combined, pairs, dtype)


class SymmetricInteractionArch(InteractionArch):
    """TorchRec's ``InteractionArch`` with :func:`pairwise_dots`: the same inputs, output
    (B, D + (F+1)F/2), buffers and (no) parameters, so checkpoints do not change."""

    def __init__(self, num_sparse_features: int) -> None:
        super().__init__(num_sparse_features)
        n = num_sparse_features + 1
        self.register_buffer(
            "pairs", self.triu_indices[0] * n + self.triu_indices[1], persistent=False
        )

    def forward(self, dense_features: torch.Tensor, sparse_features: torch.Tensor) -> torch.Tensor:
        if self.F <= 0:
            return dense_features
        combined = torch.cat((dense_features.unsqueeze(1), sparse_features), dim=1)
        dots = pairwise_dots(combined, self.pairs)
        return torch.cat((dense_features, dots.to(dense_features.dtype)), dim=1)


def apply_symmetric_interaction(module: DLRMTrain) -> None:
    """Replace ``module``'s dot interaction by :class:`SymmetricInteractionArch` in place (the
    dense device's buffers follow); other interactions are left as they are."""
    dlrm = module.model
    old = dlrm.inter_arch
    if type(old) is not InteractionArch:
        return
    new = SymmetricInteractionArch(old.F)
    dlrm.inter_arch = new.to(old.triu_indices.device)


def interaction_substitution(model: ModelConfig, symmetric: bool) -> Substitution | None:
    """The substitution when ``train.symmetric_interaction`` is asked of a model without a dot
    interaction (DCN, projection): TorchRec's interaction runs; None otherwise."""
    if not symmetric or model.interaction_type is InteractionType.original:
        return None
    return Substitution(
        "train.symmetric_interaction",
        "true",
        f"TorchRec's {model.interaction_type.value} interaction",
        "only the dot interaction (model.interaction_type=original) has pairwise products",
    )
