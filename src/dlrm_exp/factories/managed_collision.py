"""DLRM's sparse arch with managed-collision tables (``id_policy=managed_collision``).

TorchRec's ``ManagedCollisionEmbeddingBagCollection`` (MC-EBC) needs a managed-collision
module for every table it holds and returns ``(KeyedTensor, remapped features)``, where DLRM's
``SparseArch`` expects one ``EmbeddingBagCollection`` returning a ``KeyedTensor``.
:class:`ManagedCollisionSparseArch` holds the plain tables in an ``EmbeddingBagCollection`` and
the managed ones in an MC-EBC, hands both the batch's whole ``KeyedJaggedTensor`` (each takes
its own features, as TorchRec's sharded modules do with a wider input, so
``TrainPipelineSparseDist`` still pipelines both) and lays the pooled embeddings out in the
model's feature order, as ``SparseArch`` does.
"""

import inspect

import torch
from torchrec.modules.embedding_configs import EmbeddingBagConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.modules.mc_embedding_modules import ManagedCollisionEmbeddingBagCollection
from torchrec.modules.mc_modules import (
    DistanceLFU_EvictionPolicy,
    LFU_EvictionPolicy,
    LRU_EvictionPolicy,
    ManagedCollisionCollection,
    MCHEvictionPolicy,
    MCHManagedCollisionModule,
)
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from dlrm_exp.config import EvictionPolicy, ManagedCollision
from dlrm_exp.config.model import MANAGED_ID_RANGE
from dlrm_exp.factories.sparse_arch import stack_features

_POLICIES: dict[EvictionPolicy, type[MCHEvictionPolicy]] = {
    EvictionPolicy.lfu: LFU_EvictionPolicy,
    EvictionPolicy.lru: LRU_EvictionPolicy,
    EvictionPolicy.distance_lfu: DistanceLFU_EvictionPolicy,
}


_MCH_ARGUMENTS = inspect.signature(MCHManagedCollisionModule).parameters


class ManagedCollisionSparseArch(torch.nn.Module):
    """``SparseArch`` over plain and managed-collision tables: KJT -> (B, F, D).

    Args:
        embedding_bag_collection: the plain tables (None when every table is managed).
        managed_collision_collection: the MC-EBC of the managed tables.
        feature_names: the F features, in the model's order (``ModelConfig.feature_names``).
    """

    def __init__(
        self,
        embedding_bag_collection: EmbeddingBagCollection | None,
        managed_collision_collection: ManagedCollisionEmbeddingBagCollection,
        feature_names: list[str],
    ) -> None:
        super().__init__()
        self.embedding_bag_collection = embedding_bag_collection
        self.managed_collision_collection = managed_collision_collection
        self.sparse_feature_names = list(feature_names)
        self.F = len(feature_names)

    def forward(self, features: KeyedJaggedTensor) -> torch.Tensor:
        """Pooled embeddings (B, F, D) of the batch's features (B samples, F features)."""
        pooled, _ = self.managed_collision_collection(features)
        by_feature = pooled.to_dict()
        if self.embedding_bag_collection is not None:
            by_feature.update(self.embedding_bag_collection(features).to_dict())
        return stack_features(by_feature, self.sparse_feature_names)


def mch_module(
    rows: int, settings: ManagedCollision, device: torch.device, buckets: int = 1
) -> MCHManagedCollisionModule:
    """TorchRec's ``MCHManagedCollisionModule`` of a table of ``rows`` rows: raw ids in
    ``[0, MANAGED_ID_RANGE)`` (see :mod:`dlrm_exp.data.id_policy`), ``rows - 1`` of them
    kept by the eviction policy, the last row shared by the others. ``buckets``: the blocks
    row-wise sharding splits the raw-id range into, one per rank (TorchRec >= 1.8 refuses a
    count that the world size does not divide; older releases have no such argument)."""
    extra = {"buckets": buckets} if "buckets" in _MCH_ARGUMENTS else {}
    return MCHManagedCollisionModule(
        zch_size=rows,
        device=device,
        eviction_policy=_POLICIES[settings.eviction_policy](),
        eviction_interval=settings.eviction_interval,
        input_hash_size=MANAGED_ID_RANGE,
        **extra,
    )


def managed_sparse_arch(
    tables: list[EmbeddingBagConfig],
    managed: dict[str, ManagedCollision],
    feature_names: list[str],
    device: torch.device,
    world_size: int = 1,
) -> ManagedCollisionSparseArch:
    """The sparse arch of ``tables`` where those named in ``managed`` are managed-collision
    tables; the tables on ``device`` (meta before sharding), the modules' id maps on the CPU
    when ``device`` is meta (sharding rebuilds them on the rank's device), one raw-id bucket
    per rank of ``world_size``."""
    plain = [t for t in tables if t.name not in managed]
    managed_configs = [t for t in tables if t.name in managed]
    map_device = torch.device("cpu") if device.type == "meta" else device
    collection = ManagedCollisionCollection(
        {
            t.name: mch_module(t.num_embeddings, managed[t.name], map_device, world_size)
            for t in managed_configs
        },
        managed_configs,
    )
    return ManagedCollisionSparseArch(
        EmbeddingBagCollection(tables=plain, device=device) if plain else None,
        ManagedCollisionEmbeddingBagCollection(
            EmbeddingBagCollection(tables=managed_configs, device=device),
            collection,
            return_remapped_features=False,
        ),
        feature_names,
    )


#: ``MCHManagedCollisionModule``'s marker of a slot that holds no raw id.
_EMPTY_SLOT = torch.iinfo(torch.int64).max


def managed_rows_held(model: torch.nn.Module) -> dict[str, int]:
    """``{table: rows holding a raw id of their own}`` of this rank's managed-collision
    modules (sharded: this rank's share of each table; sum over the ranks for the table),
    counted from the modules' raw-id slots (``_mch_sorted_raw_ids``, the buffer TorchRec's
    module searches; empty slots hold ``torch.iinfo(torch.int64).max``). Each module's last
    slot, that of its shared row, stays empty, so the shared rows are not counted."""
    held: dict[str, int] = {}
    for name, module in model.named_modules():
        if isinstance(module, MCHManagedCollisionModule):
            table = name.rsplit(".", 1)[-1]
            raw_ids = module._mch_sorted_raw_ids
            held[table] = held.get(table, 0) + int((raw_ids != _EMPTY_SLOT).sum())
    return held
