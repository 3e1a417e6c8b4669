"""``train.symmetric_interaction``: DLRM's dot interaction with a backward that uses symmetry.

TorchRec's ``InteractionArch`` (``torchrec.models.dlrm``) stacks the dense arch output and the
F pooled embeddings into C (B, F+1, D), computes Z = C C^T (B, F+1, F+1) with ``bmm`` and keeps
the (F+1)F/2 entries above the diagonal: out = [dense (B, D), Z[:, i<j] (B, (F+1)F/2)]. Under
autocast its ``bmm`` casts C and its transpose to bf16 separately, and autograd gives the
gradient of C as two ``bmm`` products plus an accumulating scatter (``index_put_``) of the
upper triangle.

:func:`dot_interaction` computes the same output in one autograd node: C is written once,
in the compute dtype (the dense output and the pooled embeddings copied into it, no fp32
stack), the pairs are gathered (``gather``: several times faster than bf16 ``index_select``
on CPU) and the dense output goes into the same output buffer. Its backward writes the
symmetric dZ + dZ^T by one non-accumulating ``scatter_`` (the pairs and their mirror images
are distinct) and computes dC = (dZ + dZ^T) C: one ``bmm`` instead of two (the derivative of
C C^T is dZ C + dZ^T C). Forward values are TorchRec's (the same ``bmm`` on the same
operands); gradients are equal up to float rounding (one sum in another order). Measured on
TorchRec's quickstart shapes with bf16 dense on a 2-core CPU: docs/results.md, "The fast
setting".

Only the dot interaction (``model.interaction_type=original``) has pairwise products; for DCN
and projection the run records a substitution and keeps TorchRec's interaction.
"""

import torch
import torch.fx
from torchrec.models.dlrm import DLRMTrain, InteractionArch

from dlrm_exp.config import InteractionType, ModelConfig
from dlrm_exp.util.substitution import Substitution


class _DotInteraction(torch.autograd.Function):
    """``[dense, <C[b, i_k], C[b, j_k]> for the pairs k]`` with C = [dense, sparse] (see the
    module docstring); ``pairs`` are the flat indices i * n + j (i < j) of C C^T (B, n * n),
    ``mirrored`` the same followed by their mirror images j * n + i."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx,
        dense: torch.Tensor,
        sparse: torch.Tensor,
        pairs: torch.Tensor,
        mirrored: torch.Tensor,
        dtype: torch.dtype,
    ) -> torch.Tensor:
        batch, features, dim = sparse.shape
        n = features + 1
        with torch.autocast(dense.device.type, enabled=False):
            c = torch.empty(batch, n, dim, dtype=dtype, device=dense.device)
            c[:, 0] = dense
            c[:, 1:] = sparse
            z = torch.bmm(c, c.transpose(1, 2)).view(batch, n * n)
            out = torch.empty(batch, dim + len(pairs), dtype=dtype, device=dense.device)
            out[:, :dim] = dense
            out[:, dim:] = torch.gather(z, 1, pairs.expand(batch, -1))
        ctx.save_for_backward(c, mirrored)
        ctx.input_dtypes = (dense.dtype, sparse.dtype)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        c, mirrored = ctx.saved_tensors
        batch, n, dim = c.shape
        with torch.autocast(c.device.type, enabled=False):
            dots = grad[:, dim:].to(c.dtype)
            symmetric = c.new_zeros(batch, n * n).scatter_(
                1, mirrored.expand(batch, -1), torch.cat((dots, dots), dim=1)
            )
            grad_c = torch.bmm(symmetric.view(batch, n, n), c)
            dense_dtype, sparse_dtype = ctx.input_dtypes
            grad_dense = grad[:, :dim].to(dense_dtype) + grad_c[:, 0].to(dense_dtype)
        return grad_dense, grad_c[:, 1:].to(sparse_dtype), None, None, None


@torch.fx.wrap
def dot_interaction(
    dense: torch.Tensor, sparse: torch.Tensor, pairs: torch.Tensor, mirrored: torch.Tensor
) -> torch.Tensor:
    """DLRM's dot interaction of ``dense`` (B, D) and ``sparse`` (B, F, D): (B, D + P) with
    P = len(``pairs``) = (F+1)F/2, in autocast's dtype when autocast is on (else ``dense``'s).
    ``torch.fx.wrap``: TorchRec's pipelines trace the model, and this call stays one node of
    their graph."""
    device = dense.device.type
    on = torch.is_autocast_enabled(device)
    dtype = torch.get_autocast_dtype(device) if on else dense.dtype
    return _DotInteraction.apply(dense, sparse, pairs, mirrored, dtype)


class SymmetricInteractionArch(InteractionArch):
    """TorchRec's ``InteractionArch`` with :func:`dot_interaction`: the same inputs, output
    (B, D + (F+1)F/2), buffers and (no) parameters, so checkpoints do not change."""

    def __init__(self, num_sparse_features: int) -> None:
        super().__init__(num_sparse_features)
        n = num_sparse_features + 1
        rows, cols = self.triu_indices[0], self.triu_indices[1]
        self.register_buffer("pairs", rows * n + cols, persistent=False)
        self.register_buffer(
            "mirrored", torch.cat((rows * n + cols, cols * n + rows)), persistent=False
        )

    def forward(self, dense_features: torch.Tensor, sparse_features: torch.Tensor) -> torch.Tensor:
        if self.F <= 0:
            return dense_features
        return dot_interaction(dense_features, sparse_features, self.pairs, self.mirrored)


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
