"""DLRM construction from :class:`~dlrm_exp.config.ModelConfig`, embedding tables on the meta
device.

The tables never get storage here: ``DistributedModelParallel`` later materializes only the
shards a rank owns. The dense part (dense arch, interaction, over arch) is replicated on every
rank anyway and is built on the compute device, as in TorchRec's DLRM examples: DMP gives meta
parameters uninitialized storage and re-initializes only modules with ``reset_parameters``,
which TorchRec's ``LowRankCrossNet`` (DCN interaction) does not have.
"""

import torch
from torchrec.models.dlrm import DLRM, DLRM_DCN, DLRM_Projection, DLRMTrain
from torchrec.modules.embedding_modules import EmbeddingBagCollection

from dlrm_exp.config import InteractionType, ModelConfig
from dlrm_exp.factories.managed_collision import managed_sparse_arch
from dlrm_exp.planning.tables import META, table_configs


def build_model(
    cfg: ModelConfig,
    dense_device: torch.device,
    table_device: torch.device = META,
    world_size: int = 1,
) -> DLRMTrain:
    """Build ``DLRMTrain(DLRM | DLRM_DCN | DLRM_Projection)`` with its tables on meta.

    Args:
        cfg: the model group.
        dense_device: where the dense part is built (the rank's compute device, or meta to
            build nothing at all, e.g. for planning only).
        table_device: where the tables are built: meta (default; sharding materializes the
            shards), or a real device for one unsharded model (``mode=export``).
        world_size: the ranks the model will be sharded over (managed-collision tables split
            their raw-id range into one bucket per rank).

    The module's input is a TorchRec ``Batch``: ``dense_features`` (B, num_dense_features)
    float32, ``sparse_features`` a ``KeyedJaggedTensor`` over ``cat_0..cat_{F-1}`` and
    ``labels`` (B,) float32. Managed-collision tables get the sparse arch of
    :mod:`dlrm_exp.factories.managed_collision`.

    Returns:
        ``DLRMTrain``, whose forward returns ``(loss, (loss, logits (B,), labels (B,)))`` with
        the mean binary cross-entropy of the click logits as loss.

    Example::

        cfg = ModelConfig(embedding_dim=16, num_embeddings_per_feature=[10] * 26,
                          dense_arch_layer_sizes=[16], over_arch_layer_sizes=[1])
        model = build_model(cfg, torch.device("cpu"))
    """
    # The device context also covers sub-modules TorchRec builds without a device argument
    # (DLRM_DCN's LowRankCrossNet); the tables get device=meta explicitly.
    with dense_device:
        ebc = EmbeddingBagCollection(tables=table_configs(cfg), device=table_device)
        common = dict(
            embedding_bag_collection=ebc,
            dense_in_features=cfg.num_dense_features,
            dense_arch_layer_sizes=list(cfg.dense_arch_layer_sizes),
            over_arch_layer_sizes=list(cfg.over_arch_layer_sizes),
            dense_device=dense_device,
        )
        if cfg.interaction_type is InteractionType.dcn:
            dlrm: DLRM = DLRM_DCN(
                dcn_num_layers=cfg.dcn_num_layers, dcn_low_rank_dim=cfg.dcn_low_rank_dim, **common
            )
        elif cfg.interaction_type is InteractionType.projection:
            dlrm = DLRM_Projection(
                interaction_branch1_layer_sizes=list(cfg.interaction_branch1_layer_sizes),
                interaction_branch2_layer_sizes=list(cfg.interaction_branch2_layer_sizes),
                **common,
            )
        else:
            dlrm = DLRM(**common)
        if cfg.managed_tables:
            dlrm.sparse_arch = managed_sparse_arch(
                table_configs(cfg), cfg.managed_tables, cfg.feature_names, table_device, world_size
            )
        return DLRMTrain(dlrm)
