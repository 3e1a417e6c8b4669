"""The embedding tables of a model: the planner's (and the model's) ``EmbeddingBagConfig``s."""

import torch
from torchrec.modules.embedding_configs import EmbeddingBagConfig

from dlrm_exp.config import ModelConfig, table_name

#: Where tables are built before sharding: no storage, only shapes.
META = torch.device("meta")


def table_configs(cfg: ModelConfig) -> list[EmbeddingBagConfig]:
    """One ``EmbeddingBagConfig`` per sparse feature ``cat_<i>``, named ``t_cat_<i>`` as in
    TorchRec's DLRM example (:func:`dlrm_exp.config.table_name`), ``embedding_dim`` D wide, with
    ``num_embeddings`` capped by ``cfg.num_embeddings_cap``."""
    return [
        EmbeddingBagConfig(
            name=table_name(feature),
            embedding_dim=cfg.embedding_dim,
            num_embeddings=rows,
            feature_names=[feature],
        )
        for feature, rows in zip(cfg.feature_names, cfg.table_sizes, strict=True)
    ]


def table_shapes(cfg: ModelConfig) -> dict[str, list[int]]:
    """``{table name: [num_embeddings, embedding_dim]}``: what a checkpoint must match."""
    return {t.name: [t.num_embeddings, t.embedding_dim] for t in table_configs(cfg)}


#: What TorchRec's ``EmbeddingBagCollection`` puts before a table's name in parameter and
#: state-dict keys: ``...sparse_arch.embedding_bag_collection.embedding_bags.<table>.weight``.
_TABLE_KEY_PART = ".embedding_bags."


def is_table_key(key: str) -> bool:
    """Whether a parameter / state-dict key of the model is an embedding table's."""
    return _TABLE_KEY_PART in key


def table_of_key(key: str) -> str:
    """The table name in a table's key (``...embedding_bags.t_cat_0.weight`` -> ``t_cat_0``)."""
    return key.split(_TABLE_KEY_PART, 1)[1].split(".")[0]
