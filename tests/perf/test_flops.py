"""Dense FLOPs and embedding bytes per sample, against hand counts."""

from conftest import compose_cfg
from dlrm_exp.config import EmbeddingDataType, InteractionType, ModelConfig, SparseOptimizer
from dlrm_exp.perf.flops import dense_flops, embedding_bytes_per_sample


def _model(**kwargs) -> ModelConfig:
    base = dict(
        embedding_dim=4,
        num_embeddings_per_feature=[10, 10],
        num_dense_features=3,
        dense_arch_layer_sizes=[5, 4],
        over_arch_layer_sizes=[6, 1],
    )
    return ModelConfig(**{**base, **kwargs})


def test_original_interaction_matches_a_hand_count():
    # dense arch 3->5->4: 2*(3*5) + 2*(5*4) = 30 + 40 = 70
    # interaction: F=2, D=4: bmm of (3 x 4) by (4 x 3) = 9 dots of 4 -> 2*9*4 = 72
    # over arch input D + F(F+1)/2 = 4 + 3 = 7: 2*(7*6) + 2*(6*1) = 84 + 12 = 96
    flops = dense_flops(_model())
    assert (flops.dense_arch, flops.interaction, flops.over_arch) == (70, 72, 96)
    # training: 3 x forward, less the first layer's input gradient (the dense features need
    # none): 3 * 238 - 30
    assert flops.forward == 238 and flops.training == 3 * 238 - 30


def test_dcn_interaction_matches_a_hand_count():
    # N = (F+1)*D = 12, rank 2, 3 layers: 3 * (2*12*2 + 2*2*12) = 3 * 96 = 288
    # over arch input N = 12: 2*(12*6) + 2*6 = 144 + 12 = 156
    flops = dense_flops(
        _model(interaction_type=InteractionType.dcn, dcn_num_layers=3, dcn_low_rank_dim=2)
    )
    assert (flops.interaction, flops.over_arch) == (288, 156)


def test_projection_interaction_matches_a_hand_count():
    # N = 12; branch1 12->8 (F1 = 8/4 = 2), branch2 12->12 (F2 = 3): 2*12*8 + 2*12*12 = 480
    # bmm (2 x 4) by (4 x 3): 2*2*3*4 = 48; over arch input D + F1*F2 = 10: 2*60 + 12 = 132
    flops = dense_flops(
        _model(
            interaction_type=InteractionType.projection,
            interaction_branch1_layer_sizes=[8],
            interaction_branch2_layer_sizes=[12],
        )
    )
    assert (flops.interaction, flops.over_arch) == (528, 132)


def test_embedding_bytes_count_lookup_update_and_optimizer_state():
    model = _model()
    # per id: read D + read/write D + read/write state, 4 bytes each; 2 one-hot features
    assert embedding_bytes_per_sample(model, SparseOptimizer.rowwise_adagrad) == 2 * 4 * (12 + 2)
    assert embedding_bytes_per_sample(model, SparseOptimizer.sgd) == 2 * 4 * 12
    assert embedding_bytes_per_sample(model, SparseOptimizer.adagrad, [3, 1]) == 4 * 4 * (12 + 8)
    # fp16 rows: 2 bytes an element; the optimizer state stays fp32 (FBGEMM's)
    half = _model(embedding_data_type=EmbeddingDataType.fp16)
    assert embedding_bytes_per_sample(half, SparseOptimizer.rowwise_adagrad) == 2 * (2 * 12 + 4 * 2)
    mixed = _model(embedding_data_type_per_table={"t_cat_1": EmbeddingDataType.fp16})
    assert embedding_bytes_per_sample(mixed, SparseOptimizer.sgd, [3, 1]) == 3 * 4 * 12 + 2 * 12


def test_the_shipped_quickstart_model():
    """The numbers ``make bench`` reports for ``model=quickstart``: 4.83 MFLOP per sample."""
    flops = dense_flops(compose_cfg(["model=quickstart"]).model)
    assert (
        flops.training
        == 3
        * (
            2 * (13 * 512 + 512 * 256 + 256 * 64)
            + 2 * 27 * 27 * 64
            + 2 * (415 * 512 + 512 * 512 + 512 * 256 + 256 * 1)
        )
        - 2 * 13 * 512
    )  # the first layer's forward: no input gradient for the dense features
