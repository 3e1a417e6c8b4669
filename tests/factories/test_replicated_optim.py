"""FbgemmReplicaOptimizer: the data_parallel table update is FBGEMM's fused update, to the bit."""

import copy

import pytest
import torch
from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation
from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
    ComputeDevice,
    SplitTableBatchedEmbeddingBagsCodegen,
)

from dlrm_exp.config import SparseOptimizer
from dlrm_exp.config.optimizer import CPU_FUSED
from dlrm_exp.factories.replicated_optim import _FBGEMM_TYPE, FbgemmReplicaOptimizer

ROWS, DIM, BATCH = 60, 8, 48


@pytest.mark.parametrize("kind", sorted(CPU_FUSED, key=lambda k: k.value))  # no CPU Adam
def test_replica_update_equals_fused_tbe_bitwise(kind):
    """A fused TBE trained on one-id bags, and a plain table stepped with the dense gradient of
    the same bags (summed in bag order, as FBGEMM's kernels sum), end bitwise equal: weights
    and accumulators."""
    torch.manual_seed(0)
    fused = SplitTableBatchedEmbeddingBagsCodegen(
        [(ROWS, DIM, EmbeddingLocation.HOST, ComputeDevice.CPU)],
        optimizer=_FBGEMM_TYPE[kind],
        learning_rate=0.1,
        eps=1e-8,
    )
    table = torch.nn.Parameter(fused.weights_host.detach().view(ROWS, DIM).clone())
    opt = FbgemmReplicaOptimizer([table], kind, lr=0.1, eps=1e-8)
    for _ in range(6):
        ids = torch.randint(0, ROWS // 2, (BATCH,))  # repeated ids; rows >= ROWS/2 untouched
        upstream = torch.randn(BATCH, DIM) * 1e-3
        fused(ids, torch.arange(BATCH + 1)).backward(upstream)
        table.grad = torch.zeros(ROWS, DIM).index_add_(0, ids, upstream)
        opt.step()
        opt.zero_grad()
    weights = fused.weights_host.detach().view(ROWS, DIM)
    assert torch.equal(table.detach(), weights)
    if kind is not SparseOptimizer.sgd:
        assert torch.equal(opt.state[table]["momentum1"], fused.momentum1_host)


def test_state_survives_a_state_dict_round_trip():
    torch.manual_seed(0)
    table = torch.nn.Parameter(torch.randn(ROWS, DIM))
    opt = FbgemmReplicaOptimizer([table], SparseOptimizer.rowwise_adagrad, lr=0.1)
    table.grad = torch.zeros(ROWS, DIM)
    table.grad[3] = 1.0
    opt.step()
    saved = copy.deepcopy(opt.state_dict())  # as written to disk: no tensor shared with opt
    twin_table = torch.nn.Parameter(table.detach().clone())
    twin = FbgemmReplicaOptimizer([twin_table], SparseOptimizer.rowwise_adagrad, lr=0.1)
    twin.load_state_dict(saved)
    for o, t in ((opt, table), (twin, twin_table)):
        t.grad = torch.zeros(ROWS, DIM)
        t.grad[3] = 0.5
        o.step()
    assert torch.equal(table.detach(), twin_table.detach())
    assert float(opt.state[table]["momentum1"][3]) == pytest.approx(1.25)


def test_kernels_are_built_before_any_gradient_and_draw_no_random_numbers():
    """Built lazily in the first step, a TBE's own (filled) table came on top of the weights,
    their gradient and the state: a second copy of the largest table at the peak (review);
    its init drew from the run's random stream."""
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    table = torch.nn.Parameter(torch.zeros(ROWS, DIM))
    opt = FbgemmReplicaOptimizer([table], SparseOptimizer.rowwise_adagrad, lr=0.1)
    assert list(opt._kernels) == [table] and table.grad is None
    assert torch.equal(torch.rand(3), expected)


def test_rejects_non_table_parameters():
    with pytest.raises(ValueError, match="2-D float32 / float16 CPU"):
        FbgemmReplicaOptimizer([torch.nn.Parameter(torch.zeros(4))], SparseOptimizer.sgd, lr=0.1)
