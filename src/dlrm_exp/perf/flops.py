"""Dense FLOPs and embedding bytes of one training sample, from the model's shapes.

Dense FLOPs count the matrix products of the dense part, 2 FLOPs (multiply + add) per
multiply-accumulate, per sample:

- a ``Linear(in, out)`` layer (dense arch, over arch, projection branches): ``2 * in * out``;
- the ``original`` interaction, TorchRec's ``InteractionArch``: the (F+1) x (F+1) matrix of
  dot products of the dense arch output and the F pooled embeddings, each of width D:
  ``2 * (F+1)^2 * D`` (``bmm`` computes the whole matrix; the upper triangle is kept), output
  width ``D + F(F+1)/2``;
- ``dcn``, TorchRec's ``LowRankCrossNet`` over N = (F+1) * D inputs with rank r:
  ``4 * N * r`` per cross layer (``x V`` then ``(x V) W``), output width N;
- ``projection``, ``InteractionProjectionArch``: both branch MLPs over N inputs, then the
  (F1 x D) x (D x F2) ``bmm``: ``2 * F1 * F2 * D``, output width ``D + F1 * F2``.

A training step costs 3x the forward (backward computes the gradients of the inputs and of
the weights, each a product of the forward's size), the usual convention (e.g. Kaplan et al.
2020, "6N FLOPs per token"), except where autograd computes no input gradient: the dense
arch's first layer, whose input (the dense features) needs none, costs 2x; the dot interaction
with ``train.symmetric_interaction`` costs 2x (its backward is one ``bmm``, ``(dZ + dZ^T) C``,
not two). Bias adds, activations, the loss and
the embedding lookups are left out (under 1 % of the dense FLOPs for the configs shipped here).

Embedding bytes count fp32 rows of D floats (4 bytes each) per sample, for every looked-up
id, duplicates included (an upper bound for fused tables: FBGEMM updates a row once per
batch; a lower bound for data-parallel ones, which ``torch.optim`` updates whole): the lookup
reads each row (``4 D``), the fused update reads and writes it (``8 D``) and its optimizer
state (:meth:`~dlrm_exp.config.SparseOptimizer.state_floats_per_row`).
"""

from dataclasses import dataclass

from dlrm_exp.config import InteractionType, ModelConfig, SparseOptimizer

FP32_BYTES = 4
#: Forward + backward = 3 x forward.
TRAINING_FLOPS_PER_FORWARD = 3


def mlp_flops(in_features: int, layer_sizes: list[int]) -> int:
    """Forward FLOPs of an MLP of ``Linear`` layers, per sample: ``sum 2 * in * out``."""
    flops = 0
    for out in layer_sizes:
        flops += 2 * in_features * out
        in_features = out
    return flops


@dataclass(frozen=True)
class DenseFlops:
    """Forward FLOPs per sample of each part of the dense model."""

    dense_arch: int
    interaction: int
    over_arch: int
    #: The interaction's backward in forwards: 2, or 1 for the symmetric dot interaction.
    interaction_backward: int = TRAINING_FLOPS_PER_FORWARD - 1
    #: Forward FLOPs of the dense arch's first layer, whose input gradient is not computed.
    first_layer: int = 0

    @property
    def forward(self) -> int:
        """Forward FLOPs per sample."""
        return self.dense_arch + self.interaction + self.over_arch

    @property
    def training(self) -> int:
        """Forward + backward FLOPs per training sample (3 x forward; the first dense layer's
        and the symmetric interaction's share 2 x)."""
        layers = TRAINING_FLOPS_PER_FORWARD * (self.dense_arch + self.over_arch) - self.first_layer
        return layers + (1 + self.interaction_backward) * self.interaction


def dense_flops(cfg: ModelConfig, symmetric_interaction: bool = False) -> DenseFlops:
    """The dense FLOPs per sample of ``cfg`` (formulas in the module docstring);
    ``symmetric_interaction``: ``train.symmetric_interaction`` (the dot interaction only)."""
    d, f = cfg.embedding_dim, len(cfg.feature_names)
    dense = mlp_flops(cfg.num_dense_features, list(cfg.dense_arch_layer_sizes))
    n = (f + 1) * d
    if cfg.interaction_type is InteractionType.dcn:
        interaction, width = 4 * n * cfg.dcn_low_rank_dim * cfg.dcn_num_layers, n
    elif cfg.interaction_type is InteractionType.projection:
        branch1, branch2 = cfg.interaction_branch1_layer_sizes, cfg.interaction_branch2_layer_sizes
        f1, f2 = branch1[-1] // d, branch2[-1] // d
        interaction = mlp_flops(n, list(branch1)) + mlp_flops(n, list(branch2)) + 2 * f1 * f2 * d
        width = d + f1 * f2
    else:
        interaction, width = 2 * (f + 1) ** 2 * d, d + f * (f + 1) // 2
    symmetric = symmetric_interaction and cfg.interaction_type is InteractionType.original
    over = mlp_flops(width, list(cfg.over_arch_layer_sizes))
    first = mlp_flops(cfg.num_dense_features, list(cfg.dense_arch_layer_sizes[:1]))
    backward = 1 if symmetric else TRAINING_FLOPS_PER_FORWARD - 1  # symmetric: one bmm, not two
    return DenseFlops(dense, interaction, over, interaction_backward=backward, first_layer=first)


def embedding_bytes_per_sample(
    cfg: ModelConfig, optimizer: SparseOptimizer, pooling_factors: list[float] | None = None
) -> int:
    """Embedding bytes one training sample moves: lookup reads plus the fused update's
    read-modify-write of rows (in each table's ``embedding_data_type``: 2 bytes an element for
    fp16) and of optimizer state (fp32 whatever the table's dtype, as FBGEMM keeps it), for
    ``pooling_factors[i]`` ids of feature i (None: one id each, Criteo one-hot)."""
    d = cfg.embedding_dim
    state_bytes = FP32_BYTES * 2 * optimizer.state_floats_per_row(d)
    dtype_of = {
        feature: dtype
        for dtype, features in zip(cfg.table_data_types, cfg.table_features, strict=True)
        for feature in features
    }
    ids = pooling_factors or [1.0] * len(cfg.feature_names)
    total = sum(
        n * (dtype_of[feature].element_bytes * 3 * d + state_bytes)
        for feature, n in zip(cfg.feature_names, ids, strict=True)
    )
    return int(round(total))
