"""The sparse arch without the split and re-concatenation gives TorchRec's ``SparseArch``
values and table gradients bit for bit, takes TorchRec's path for keys in another order, and
is what training builds (not export, not managed-collision tables)."""

import torch
from torchrec.models.dlrm import SparseArch
from torchrec.modules.embedding_configs import EmbeddingBagConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor, KeyedTensor

from conftest import SMALL, compose_cfg
from dlrm_exp.config import EmbeddingTable, EvictionPolicy, ManagedCollision
from dlrm_exp.factories.experiment import build_module
from dlrm_exp.factories.managed_collision import ManagedCollisionSparseArch
from dlrm_exp.factories.model import build_model
from dlrm_exp.factories.sparse_arch import PooledSparseArch, pooled_embeddings

NAMES = ["f0", "f1", "f2"]


def _collection() -> EmbeddingBagCollection:
    torch.manual_seed(0)
    tables = [
        EmbeddingBagConfig(name=f"t{i}", embedding_dim=4, num_embeddings=7, feature_names=[n])
        for i, n in enumerate(NAMES)
    ]
    return EmbeddingBagCollection(tables=tables)


def _batch() -> KeyedJaggedTensor:
    return KeyedJaggedTensor.from_lengths_sync(
        keys=NAMES,
        values=torch.tensor([1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 6, 5]),
        lengths=torch.tensor([1, 2, 1, 1, 2, 1, 2, 1, 1], dtype=torch.int32),  # multi-hot, B=3
    )


def _values_and_grads(arch: torch.nn.Module) -> tuple[torch.Tensor, list[torch.Tensor]]:
    out = arch(_batch())
    weights = torch.linspace(-1, 1, out.numel()).view_as(out)  # every value reaches a gradient
    (out * weights).sum().backward()
    return out, [p.grad for p in arch.parameters()]


def test_values_and_table_gradients_are_torchrecs_bit_for_bit():
    ebc = _collection()
    ref_out, ref_grads = _values_and_grads(SparseArch(ebc))
    ebc.zero_grad()
    out, grads = _values_and_grads(PooledSparseArch(ebc))
    assert out.shape == (3, 3, 4) and torch.equal(out, ref_out)
    assert len(grads) == 3 and all(torch.equal(a, b) for a, b in zip(grads, ref_grads, strict=True))


def test_keys_in_another_order_take_torchrecs_path():
    per_key = {name: torch.full((2, 4), float(i)) for i, name in enumerate(NAMES)}
    order = ["f2", "f0", "f1"]  # as a sharded collection may group its features
    pooled = KeyedTensor.from_tensor_list(order, [per_key[k] for k in order])
    out = pooled_embeddings(pooled, NAMES, 4)
    assert out.shape == (2, 3, 4)
    assert [out[0, i, 0].item() for i in range(3)] == [0.0, 1.0, 2.0]
    in_order = KeyedTensor.from_tensor_list(NAMES, [per_key[k] for k in NAMES])
    view = pooled_embeddings(in_order, NAMES, 4)
    assert view.data_ptr() == in_order.values().data_ptr()  # no copy when the keys agree
    assert torch.equal(view, out)


def test_training_builds_it_export_and_managed_tables_keep_their_own():
    assert type(build_module(compose_cfg(SMALL)).model.sparse_arch) is PooledSparseArch
    cfg = compose_cfg(SMALL).model
    assert type(build_model(cfg, torch.device("meta")).model.sparse_arch) is SparseArch
    managed = compose_cfg(SMALL)
    managed.model.tables = [
        EmbeddingTable(f"t_cat_{i}", n, [f"cat_{i}"], ManagedCollision(EvictionPolicy.lru, 1))
        if i == 0
        else EmbeddingTable(f"t_cat_{i}", n, [f"cat_{i}"])
        for i, n in enumerate(managed.model.table_sizes)
    ]
    assert isinstance(build_module(managed).model.sparse_arch, ManagedCollisionSparseArch)
