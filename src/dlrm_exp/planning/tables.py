"""The embedding tables of a model: the planner's (and the model's) ``EmbeddingBagConfig``s."""

import functools
from typing import Any

import torch
from torchrec.distributed.sharding_plan import calculate_shard_sizes_and_offsets
from torchrec.modules.embedding_configs import DataType, EmbeddingBagConfig

from dlrm_exp.config import Config, EmbeddingDataType, ModelConfig, ShardingStrategy

#: Where tables are built before sharding: no storage, only shapes.
META = torch.device("meta")


def table_configs(cfg: ModelConfig) -> list[EmbeddingBagConfig]:
    """One ``EmbeddingBagConfig`` per table: per sparse feature ``cat_<i>``, named ``t_cat_<i>``
    as in TorchRec's DLRM example (:func:`dlrm_exp.config.table_name`), or the tables of the
    feature schema (``model.tables``, features may share one), ``embedding_dim`` D wide, with
    ``num_embeddings`` capped by ``cfg.num_embeddings_cap`` and the weight precision of
    ``cfg.embedding_data_type`` / ``embedding_data_type_per_table`` (TorchRec's ``data_type``)."""
    return [
        EmbeddingBagConfig(
            name=name,
            embedding_dim=cfg.embedding_dim,
            num_embeddings=rows,
            feature_names=features,
            data_type=torchrec_data_type(data_type),
        )
        for name, features, rows, data_type in zip(
            cfg.table_names, cfg.table_features, cfg.table_sizes, cfg.table_data_types, strict=True
        )
    ]


def torchrec_data_type(data_type: EmbeddingDataType) -> DataType:
    """TorchRec's ``DataType`` of a table precision (``fp16`` -> ``DataType.FP16``)."""
    return DataType[data_type.value.upper()]


@functools.cache
def whole_pieces(kind: ShardingStrategy, embedding_dim: int, ranks_per_host: int = 0) -> int:
    """How many shards a table of sharding type ``kind`` lies on ranks as, each whole on one
    rank: 1 for table_wise; for column_wise and table_column_wise its column shards, as
    TorchRec's ``calculate_shard_sizes_and_offsets`` cuts them (blocks of at least
    ``MIN_CW_DIM``, 128 columns: one shard below 256 columns, whatever the ranks);
    for table_row_wise and grid_shard, given ``ranks_per_host``, the shards of one host:
    TorchRec places such a table on one host and splits its rows (of each column shard) over
    that host's ranks only, so it is ``ranks_per_host`` pieces (per column shard) a rank each,
    not a share of every rank (the memory advice counted it so, and its cap and rank count did
    not fit); 0 for a table split over all ranks (row_wise; table_row_wise and grid_shard
    without ``ranks_per_host``) or held by each (data_parallel)."""
    if kind is ShardingStrategy.table_wise:
        return 1
    if kind in (ShardingStrategy.column_wise, ShardingStrategy.table_column_wise):
        one_row = torch.empty(1, embedding_dim, device=META)
        return len(calculate_shard_sizes_and_offsets(one_row, 1, 1, kind.value)[0])
    if kind is ShardingStrategy.table_row_wise:
        return ranks_per_host
    if kind is ShardingStrategy.grid_shard:
        return ranks_per_host * whole_pieces(ShardingStrategy.column_wise, embedding_dim)
    return 0


def table_shapes(cfg: ModelConfig) -> dict[str, list[int]]:
    """``{table name: [num_embeddings, embedding_dim]}``: what a checkpoint must match."""
    return {t.name: [t.num_embeddings, t.embedding_dim] for t in table_configs(cfg)}


def model_inputs(cfg: Config) -> dict[str, list[dict[str, Any]]] | None:
    """What a model of a feature schema reads by position, which a checkpoint must match:
    the sparse features in the order its ``EmbeddingBagCollection`` pools them (the
    interaction takes their embeddings in that order), each with its column, and the dense
    columns in the dense arch's order with their ``log1p``: ``{"sparse": [{"feature",
    "column"}, ...], "dense": [{"column", "log1p"}, ...]}``. A schema run again on a file
    storing its columns in another order kept the tables' names and shapes and scored every
    row with the inputs swapped (own-data review). None without a schema: the Criteo-shaped
    inputs have one fixed order."""
    schema = cfg.data.feature_schema()
    if schema is None:
        return None
    return {
        "sparse": [
            {"feature": f, "column": schema.sparse[f].column} for f in cfg.model.feature_names
        ],
        "dense": [{"column": c.column, "log1p": c.log1p} for c in schema.dense],
    }


#: What TorchRec's ``EmbeddingBagCollection`` puts before a table's name in parameter and
#: state-dict keys: ``...sparse_arch.embedding_bag_collection.embedding_bags.<table>.weight``.
_TABLE_KEY_PART = ".embedding_bags."


def is_table_key(key: str) -> bool:
    """Whether a parameter / state-dict key of the model is an embedding table's."""
    return _TABLE_KEY_PART in key


def table_of_key(key: str) -> str:
    """The table name in a table's key (``...embedding_bags.t_cat_0.weight`` -> ``t_cat_0``)."""
    return key.split(_TABLE_KEY_PART, 1)[1].split(".")[0]


#: The short names of table weight dtypes (``model.embedding_data_type`` values).
DTYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


def table_weight_dtypes(model: torch.nn.Module) -> dict[str, str]:
    """``{table name: dtype}`` of the table weights ``model`` holds (``"fp32"``, ``"fp16"``),
    read from its state dict: what TorchRec and FBGEMM allocated, not what was asked."""
    return {
        table_of_key(key): DTYPE_NAMES.get(tensor.dtype, str(tensor.dtype))
        for key, tensor in model.state_dict().items()
        if is_table_key(key) and key.endswith(".weight")
    }
