"""DLRM's sparse arch without TorchRec's split and re-concatenation of the pooled embeddings.

TorchRec's ``SparseArch`` (``torchrec.models.dlrm``) turns the ``KeyedTensor`` its embedding
collection returns, values (B, F * D), into one (B, D) tensor per feature (``to_dict``) and
concatenates them again in its feature order: B x F x D floats written once more in forward,
and split and concatenated once more in backward. When the ``KeyedTensor``'s keys already
come in that order, its values are that concatenation, and :func:`pooled_embeddings` returns
them as a (B, F, D) view: values and gradients are TorchRec's bit for bit. Keys in another
order (a sharded collection may group its features by sharding type) take TorchRec's path.
Measured on TorchRec's quickstart shapes at batch 2048 with the fast setting on a 2-core CPU:
the sparse arch's forward took 3.9 instead of 6.3 ms (docs/results.md, "The fast setting").

Training builds it (:func:`apply_pooled_sparse_arch`); ``mode=export`` keeps TorchRec's
``SparseArch``, which TorchScript compiles. With ``train.sparse_backward=overlap`` its backward
runs on a helper thread (:mod:`dlrm_exp.factories.sparse_backward`).
"""

import torch
import torch.fx
from torchrec.models.dlrm import DLRMTrain, SparseArch
from torchrec.sparse.jagged_tensor import KeyedTensor

from dlrm_exp.factories.sparse_backward import SparseBackwardThread, hand_off


def stack_features(by_feature: dict[str, torch.Tensor], names: list[str]) -> torch.Tensor:
    """TorchRec's ``SparseArch`` concatenation: the (B, D) pooled embedding of each feature of
    ``names``, in that order, as (B, F, D)."""
    values = [by_feature[name] for name in names]
    return torch.cat(values, dim=1).view(-1, len(names), values[0].shape[1])


@torch.fx.wrap
def pooled_embeddings(pooled: KeyedTensor, names: list[str], dim: int) -> torch.Tensor:
    """The (B, F, D) pooled embeddings of the F features ``names`` (each ``dim`` wide) from
    ``pooled``: a view of its values when its keys are ``names`` in order, else TorchRec's
    split and concatenation. ``torch.fx.wrap``: TorchRec's pipelines trace the model, and this
    call stays one node of their graph."""
    if pooled.keys() == names:
        return pooled.values().view(-1, len(names), dim)
    return stack_features(pooled.to_dict(), names)


class PooledSparseArch(SparseArch):
    """TorchRec's ``SparseArch`` (same ``embedding_bag_collection``, so the same parameter
    names and checkpoints) whose forward is :func:`pooled_embeddings`: KJT -> (B, F, D).
    ``backward_thread``: where its backward runs (None: on the training thread)."""

    def __init__(self, embedding_bag_collection) -> None:  # type: ignore[no-untyped-def]
        super().__init__(embedding_bag_collection)
        self.backward_thread: SparseBackwardThread | None = None

    def forward(self, features):  # type: ignore[override]
        thread = self.backward_thread
        if thread is not None:
            thread.settle()  # the lookup reads the tables the last backward updates
        pooled = self.embedding_bag_collection(features)
        embeddings = pooled_embeddings(pooled, self._sparse_feature_names, self.D)
        # (TrainPipelineSparseDist traces forward symbolically, to find the lookups' inputs)
        if thread is None or isinstance(embeddings, torch.fx.Proxy):
            return embeddings
        return hand_off(embeddings, thread)


def overlapped_backward(module: DLRMTrain) -> SparseBackwardThread | None:
    """Give ``module``'s :class:`PooledSparseArch` a helper thread for its backward
    (``train.sparse_backward``) and return it; None, changing nothing, when the
    sparse arch is another one (managed-collision tables)."""
    arch = module.model.sparse_arch
    if not isinstance(arch, PooledSparseArch):
        return None
    arch.backward_thread = SparseBackwardThread()
    return arch.backward_thread


def apply_pooled_sparse_arch(module: DLRMTrain) -> None:
    """Replace ``module``'s TorchRec ``SparseArch`` by :class:`PooledSparseArch` in place;
    another sparse arch (managed-collision tables) is left as it is."""
    dlrm = module.model
    if type(dlrm.sparse_arch) is SparseArch:
        dlrm.sparse_arch = PooledSparseArch(dlrm.sparse_arch.embedding_bag_collection)
