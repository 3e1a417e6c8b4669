"""``train.sparse_backward=overlap``: the sparse arch's backward runs on the helper thread, lands
at ``settle`` with TorchRec's gradients bit for bit, holds the training thread to one OpenMP
thread meanwhile, raises the helper's failure on the training thread, and applies only on a
CPU with one rank, two threads and no data_parallel table (a substitution elsewhere); FBGEMM
takes the learning rate at the lookup, so the schedule may set the next one meanwhile."""

import threading
from types import SimpleNamespace

import pytest
import torch
from fbgemm_gpu.split_embedding_configs import EmbOptimType
from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation
from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
    ComputeDevice,
    SplitTableBatchedEmbeddingBagsCodegen,
)
from torchrec.modules.embedding_configs import EmbeddingBagConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from conftest import SMALL, compose_cfg
from dlrm_exp.factories.experiment import _overlap, build_module
from dlrm_exp.factories.sparse_arch import PooledSparseArch, overlapped_backward
from dlrm_exp.factories.sparse_backward import SparseBackwardThread, overlap_blocker

NAMES = ["f0", "f1"]


def _arch(thread: SparseBackwardThread | None) -> PooledSparseArch:
    torch.manual_seed(0)
    tables = [
        EmbeddingBagConfig(name=f"t{i}", embedding_dim=4, num_embeddings=5, feature_names=[n])
        for i, n in enumerate(NAMES)
    ]
    arch = PooledSparseArch(EmbeddingBagCollection(tables=tables))
    arch.backward_thread = thread
    return arch


def _batch() -> KeyedJaggedTensor:
    return KeyedJaggedTensor.from_lengths_sync(
        keys=NAMES,
        values=torch.tensor([1, 2, 3, 4, 0, 1, 4]),
        lengths=torch.tensor([1, 2, 1, 2, 1, 0], dtype=torch.int32),  # B=3, an empty bag
    )


def _backward(arch: PooledSparseArch) -> list[str]:
    """Backward of a weighted sum of the (B, F, D) output; the threads the tables' gradient
    was computed on."""
    seen: list[str] = []
    record = lambda _grad: seen.append(threading.current_thread().name)  # noqa: E731
    for weight in arch.parameters():
        weight.register_hook(record)
    out = arch(_batch())
    (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    return seen


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_the_backward_runs_on_the_helper_and_lands_at_settle(two_threads):
    serial = _arch(None)
    assert _backward(serial) == [threading.current_thread().name] * 2
    thread = SparseBackwardThread()
    arch = _arch(thread)
    seen = _backward(arch)
    assert torch.get_num_threads() == 1  # the training thread's share while it runs
    assert thread.settle() is True and torch.get_num_threads() == 2
    assert seen and all(name.startswith("sparse-backward") for name in seen)
    grads = [p.grad for p in arch.parameters()]
    assert all(torch.equal(a, b.grad) for a, b in zip(grads, serial.parameters(), strict=True))
    assert thread.settle() is False  # nothing in flight
    torch.set_num_threads(3)  # the helper takes one core, the training thread the rest
    _backward(arch)
    assert torch.get_num_threads() == 2 and thread.settle() is True
    assert torch.get_num_threads() == 3
    torch.set_num_threads(2)
    # the next forward settles the backward before its lookup
    _backward(arch)
    with torch.no_grad():  # evaluation: nothing is handed off
        out = arch(_batch())
    assert out.grad_fn is None and torch.get_num_threads() == 2
    assert thread.settle() is False


def test_a_failure_on_the_helper_is_raised_on_the_training_thread(two_threads):
    thread = SparseBackwardThread()
    arch = _arch(thread)

    def fail(_grad):
        raise RuntimeError("table backward failed")

    next(arch.parameters()).register_hook(fail)
    out = arch(_batch())
    out.sum().backward()
    with pytest.raises(RuntimeError, match="table backward failed"):
        thread.settle()
    assert torch.get_num_threads() == 2


def test_it_applies_on_one_cpu_rank_with_two_threads_and_to_the_pooled_arch_only():
    assert overlap_blocker("cpu", 1, 2) is None
    assert "cuda" in overlap_blocker("cuda", 1, 8)
    assert "2 ranks" in overlap_blocker("cpu", 2, 4)
    assert "1 thread" in overlap_blocker("cpu", 1, 1)
    assert "data_parallel tables (t_a)" in overlap_blocker("cpu", 1, 2, ["t_a"])
    module = build_module(compose_cfg(SMALL))
    assert overlapped_backward(module) is module.model.sparse_arch.backward_thread is not None
    module.model.sparse_arch = torch.nn.Identity()  # e.g. managed-collision tables' arch
    assert overlapped_backward(module) is None


def _plan(**sharding_types: str) -> SimpleNamespace:
    tables = {name: SimpleNamespace(sharding_type=t) for name, t in sharding_types.items()}
    return SimpleNamespace(plan={"model.sparse_arch.embedding_bag_collection": tables})


def test_where_it_cannot_apply_the_run_records_a_substitution(two_threads):
    cfg = compose_cfg([*SMALL, "train.sparse_backward=overlap"])
    one_rank = SimpleNamespace(device=torch.device("cpu"), world_size=1)
    sharded = _plan(t_cat_0="table_wise", t_cat_1="row_wise")
    thread, substitution = _overlap(cfg, build_module(cfg), one_rank, sharded)
    assert thread is not None and substitution is None
    two_ranks = SimpleNamespace(device=torch.device("cpu"), world_size=2)
    thread, substitution = _overlap(cfg, build_module(cfg), two_ranks, sharded)
    assert thread is None and substitution.setting == "train.sparse_backward"
    assert (substitution.asked, substitution.ran) == ("overlap", "serial")
    assert "2 ranks" in substitution.reason
    auto = compose_cfg([*SMALL, "train.sparse_backward=auto"])
    assert _overlap(auto, build_module(auto), two_ranks, sharded) == (None, None)
    assert _overlap(auto, build_module(auto), one_rank, sharded)[0] is not None
    replicated = _plan(t_cat_0="table_wise", t_cat_1="data_parallel")
    _, substitution = _overlap(cfg, build_module(cfg), one_rank, replicated)
    assert "data_parallel tables (t_cat_1)" in substitution.reason
    module = build_module(cfg)
    module.model.sparse_arch = torch.nn.Identity()
    assert "managed-collision" in _overlap(cfg, module, one_rank, sharded)[1].reason
    assert _overlap(compose_cfg(SMALL), build_module(cfg), one_rank, sharded) == (None, None)


CPU_FUSED = [EmbOptimType.EXACT_SGD, EmbOptimType.EXACT_ROWWISE_ADAGRAD, EmbOptimType.EXACT_ADAGRAD]


@pytest.mark.parametrize("optimizer", CPU_FUSED)
def test_fbgemm_takes_the_rate_at_the_lookup(optimizer):
    """The schedule sets the next step's rate while this step's backward may still run on the
    helper: FBGEMM's CPU kernels (the optimizers fused on CPU) must use the rate of the
    lookup's forward."""
    updates = []
    for later_rate in (1.0, 100.0):
        kernel = SplitTableBatchedEmbeddingBagsCodegen(
            [(10, 4, EmbeddingLocation.HOST, ComputeDevice.CPU)],
            optimizer=optimizer,
            learning_rate=1.0,
        )
        before = kernel.split_embedding_weights()[0].clone()
        out = kernel(torch.tensor([1, 2]), torch.tensor([0, 1, 2]))
        kernel.set_learning_rate(later_rate)
        out.sum().backward()
        updates.append(before - kernel.split_embedding_weights()[0])
    assert updates[0].abs().sum() > 0 and torch.equal(updates[0], updates[1])
