"""Managed-collision tables: the sparse arch beside plain tables, the CPU row reset standing in
for FBGEMM's CUDA-only ``reset_weight_momentum``, and the TorchRec private name it relies on."""

import types

import pytest
import torch
from fbgemm_gpu.split_embedding_configs import EmbOptimType
from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation
from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
    ComputeDevice,
    SplitTableBatchedEmbeddingBagsCodegen,
)
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from dlrm_exp.config import EmbeddingTable, EvictionPolicy, ManagedCollision, ModelConfig
from dlrm_exp.distributed.managed_collision import (
    CpuRowReset,
    install_cpu_row_reset,
)
from dlrm_exp.factories.managed_collision import ManagedCollisionSparseArch, managed_rows_held
from dlrm_exp.factories.model import build_model


def _kernel() -> SplitTableBatchedEmbeddingBagsCodegen:
    """An FBGEMM CPU kernel of two tables (5 x 4 and 3 x 4), RowWiseAdagrad."""
    specs = [(rows, 4, EmbeddingLocation.HOST, ComputeDevice.CPU) for rows in (5, 3)]
    return SplitTableBatchedEmbeddingBagsCodegen(
        specs, optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, device="cpu"
    )


def test_cpu_row_reset_zeroes_the_evicted_rows_of_one_table_only():
    kernel = _kernel()
    weights, states = kernel.split_embedding_weights(), kernel.split_optimizer_states()
    for table in range(2):
        weights[table].copy_(torch.arange(weights[table].numel()).view_as(weights[table]) + 1.0)
        states[table][0].fill_(7.0)
    CpuRowReset(kernel).reset_embedding_weight_momentum(
        pruned_indices=torch.tensor([0, 2]),
        pruned_indices_offsets=torch.tensor([0, 2]),
        logical_table_ids=torch.tensor([1], dtype=torch.int32),
        buffer_ids=torch.tensor([0], dtype=torch.int32),
    )
    weights, states = kernel.split_embedding_weights(), kernel.split_optimizer_states()
    assert weights[1][[0, 2]].abs().sum() == 0 and weights[1][1].abs().sum() > 0
    assert states[1][0].tolist() == [0.0, 7.0, 0.0]
    assert (weights[0] > 0).all() and states[0][0].tolist() == [7.0] * 5


def test_a_torchrec_without_the_kernel_map_is_named():
    with pytest.raises(RuntimeError, match="has no _table_to_tbe_and_index"):
        install_cpu_row_reset(types.SimpleNamespace())
    kernel = _kernel()
    module = types.SimpleNamespace(_table_to_tbe_and_index={"t": (kernel, torch.tensor([0]))})
    install_cpu_row_reset(module)
    assert isinstance(module._table_to_tbe_and_index["t"][0], CpuRowReset)


def test_managed_tables_beside_plain_ones_pool_in_feature_order():
    managed = ManagedCollision(EvictionPolicy.lru, 1)
    cfg = ModelConfig(
        embedding_dim=4,
        num_embeddings_per_feature=[6, 10],
        dense_arch_layer_sizes=[4],
        over_arch_layer_sizes=[4, 1],
        num_dense_features=2,
        tables=[
            EmbeddingTable("t_user", 6, ["user"], managed),
            EmbeddingTable("t_item", 10, ["item"]),
        ],
    )
    model = build_model(cfg, torch.device("cpu"), table_device=torch.device("cpu")).train()
    arch = model.model.sparse_arch
    assert isinstance(arch, ManagedCollisionSparseArch)
    user_ids = torch.tensor([10**15, 3, 10**15, 42])  # raw 63-bit ids, two distinct + repeat
    kjt = KeyedJaggedTensor.from_lengths_sync(
        keys=["user", "item"],
        values=torch.cat([user_ids, torch.tensor([1, 2, 3, 4])]),
        lengths=torch.ones(8, dtype=torch.int32),
    )
    pooled = arch(kjt)
    assert pooled.shape == (4, 2, 4)
    plain = arch.embedding_bag_collection(kjt).to_dict()
    assert torch.equal(pooled[:, 1], plain["item"])
    # After the first step's eviction the three distinct raw ids hold rows of their own
    # (the module evicts every eviction_interval=1 step); the repeated id shares its row.
    rows_after = arch(kjt)
    assert managed_rows_held(model) == {"t_user": 3}
    assert torch.equal(rows_after[0, 0], rows_after[2, 0])
    assert not torch.equal(rows_after[0, 0], rows_after[1, 0])
