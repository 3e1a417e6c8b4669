"""Schema of the ``model`` group: the DLRM shape, and the names of its features and tables."""

from dataclasses import dataclass, field
from enum import Enum

from omegaconf import MISSING

from dlrm_exp.config.checks import (
    check_layer_sizes,
    field_defaults,
    is_value,
    require,
    require_read,
)
from dlrm_exp.config.criteo import CRITEO_NUM_DENSE


def feature_names(num_features: int) -> list[str]:
    """Sparse feature keys ``cat_0 .. cat_{F-1}`` (TorchRec's ``DEFAULT_CAT_NAMES`` scheme)."""
    return [f"cat_{i}" for i in range(num_features)]


def table_name(feature: str) -> str:
    """The embedding table of sparse feature ``feature``: ``t_<feature>``, e.g. ``t_cat_0``,
    as in TorchRec's DLRM example."""
    return f"t_{feature}"


class EmbeddingDataType(Enum):
    """Precision of the embedding table weights (TorchRec's ``DataType`` of an
    ``EmbeddingBagConfig``; FBGEMM's ``weights_precision``). Optimizer state stays fp32.

    ``bf16`` is refused: TorchRec cannot shard BF16 tables yet (pytorch/torchrec#3187).
    """

    fp32 = "fp32"
    fp16 = "fp16"
    bf16 = "bf16"

    @property
    def element_bytes(self) -> int:
        """Bytes per weight element: 4 for fp32, 2 for fp16 / bf16."""
        return 4 if self is EmbeddingDataType.fp32 else 2


class EvictionPolicy(Enum):
    """Which raw ids keep their rows when a managed-collision table is full: TorchRec's
    ``LFU_EvictionPolicy`` (most frequent), ``LRU_EvictionPolicy`` (most recent) or
    ``DistanceLFU_EvictionPolicy`` (frequency discounted by the steps since last seen)."""

    lfu = "lfu"
    lru = "lru"
    distance_lfu = "distance_lfu"


#: Raw ids handed to a managed-collision table lie in ``[0, MANAGED_ID_RANGE)``: TorchRec's
#: ``MCHManagedCollisionModule`` default ``input_hash_size`` (2**63 - 1), which keeps clear of
#: its empty-slot marker ``torch.iinfo(torch.int64).max``.
MANAGED_ID_RANGE = 2**63 - 1


@dataclass
class ManagedCollision:
    """A table whose raw ids are mapped to rows by TorchRec's ``MCHManagedCollisionModule``
    (``id_policy=managed_collision``): its ``num_embeddings - 1`` rows belong to the raw ids
    the eviction policy keeps, the last row is shared by every other id.

    Attributes:
        eviction_policy: see :class:`EvictionPolicy`.
        eviction_interval: training steps between evictions (TorchRec's ``eviction_interval``):
            the ids seen since the last one compete for rows. Resume is exact when
            ``train.checkpoint_every_n_steps`` is a multiple of it (the ids seen since the last
            eviction are not checkpointed; TorchRec keeps them in a non-persistent buffer).
    """

    eviction_policy: EvictionPolicy = EvictionPolicy.lfu
    eviction_interval: int = 1


@dataclass
class EmbeddingTable:
    """One embedding table of a model built from a feature schema (``data.schema``).

    Attributes:
        name: the table name (TorchRec's ``EmbeddingBagConfig.name``).
        num_embeddings: rows.
        feature_names: the sparse features that look it up (several share one table).
        managed_collision: set when its features use ``id_policy=managed_collision``.
    """

    name: str = MISSING
    num_embeddings: int = MISSING
    feature_names: list[str] = MISSING
    managed_collision: ManagedCollision | None = None


class InteractionType(Enum):
    """DLRM feature interaction (TorchRec ``DLRM`` / ``DLRM_DCN`` / ``DLRM_Projection``)."""

    original = "original"
    dcn = "dcn"
    projection = "projection"


#: The shipped ``model=`` options of each interaction with keys of its own (conf/model/).
_MODELS = {InteractionType.dcn: ("mlperf",), InteractionType.projection: ()}
#: The keys only one interaction reads.
_INTERACTION_KEYS = {
    InteractionType.dcn: ("dcn_num_layers", "dcn_low_rank_dim"),
    InteractionType.projection: (
        "interaction_branch1_layer_sizes",
        "interaction_branch2_layer_sizes",
    ),
}


@dataclass
class ModelConfig:
    """DLRM shape (group ``model``). Field names follow TorchRec's ``DLRM`` constructors.

    Attributes:
        embedding_dim: D, the width of every embedding table (floats per row).
        num_embeddings_per_feature: rows of each table; one table per sparse feature, so its
            length is F (26 for Criteo).
        num_embeddings_cap: if set, every table gets ``min(rows, cap)`` rows, so a large shape
            (e.g. MLPerf DLRM-DCNv2, 204M rows) trains on a small machine.
        num_dense_features: width of the dense input (13 for Criteo).
        dense_arch_layer_sizes: MLP over the dense input; the last size must equal D.
        over_arch_layer_sizes: MLP over the interaction output; the last size must be 1.
        interaction_type: ``original`` (pairwise dots), ``dcn`` (low-rank DCN-v2 cross net,
            MLPerf DLRM-DCNv2) or ``projection``.
        dcn_num_layers: cross layers for ``dcn``.
        dcn_low_rank_dim: rank of each cross layer's weight for ``dcn``.
        interaction_branch1_layer_sizes: first projection MLP for ``projection``; the last
            size must be a multiple of D.
        interaction_branch2_layer_sizes: second projection MLP for ``projection``.
        embedding_data_type: precision of every table's weights (``fp32`` or ``fp16``: half
            the bytes per row; FBGEMM updates fp16 rows with stochastic rounding, see
            ``optimizer.stochastic_rounding``).
        embedding_data_type_per_table: ``{table name: data type}`` for tables that differ from
            ``embedding_data_type``, e.g. ``{t_cat_20: fp32}``.
        tables: the tables of a feature schema: filled from ``data.schema`` (``data=parquet``,
            ``data=criteo_tsv``, whose schema ``num_embeddings_per_feature`` sizes); empty for
            Criteo-shaped arrays (``criteo_npy``, ``synthetic``: one table ``t_cat_<i>`` per
            feature ``cat_<i>``).
    """

    embedding_dim: int = MISSING
    num_embeddings_per_feature: list[int] = MISSING
    num_embeddings_cap: int | None = None
    num_dense_features: int = CRITEO_NUM_DENSE
    dense_arch_layer_sizes: list[int] = MISSING
    over_arch_layer_sizes: list[int] = MISSING
    interaction_type: InteractionType = InteractionType.original
    dcn_num_layers: int = 3
    dcn_low_rank_dim: int = 512
    interaction_branch1_layer_sizes: list[int] = field(default_factory=lambda: [2048, 2048])
    interaction_branch2_layer_sizes: list[int] = field(default_factory=lambda: [2048, 2048])
    embedding_data_type: EmbeddingDataType = EmbeddingDataType.fp32
    embedding_data_type_per_table: dict[str, EmbeddingDataType] = field(default_factory=dict)
    tables: list[EmbeddingTable] = field(default_factory=list)

    def __post_init__(self) -> None:
        d = self.embedding_dim
        require(d > 0, f"model.embedding_dim must be positive, got {d}")
        up = -(-d // 4) * 4
        require(
            d % 4 == 0,
            f"model.embedding_dim={d} cannot be sharded: FBGEMM's fused embedding kernels need a "
            f"multiple of 4 columns per shard; set model.embedding_dim={up} and "
            f"model.dense_arch_layer_sizes=[...,{up}]",
        )
        require(
            len(self.num_embeddings_per_feature) > 0
            and all(n > 0 for n in self.num_embeddings_per_feature),
            "model.num_embeddings_per_feature must list one positive row count per table, "
            f"got {self.num_embeddings_per_feature}",
        )
        require(
            self.num_embeddings_cap is None or self.num_embeddings_cap > 0,
            f"model.num_embeddings_cap must be positive or null, got {self.num_embeddings_cap}",
        )
        require(
            self.num_dense_features > 0,
            f"model.num_dense_features must be positive, got {self.num_dense_features}",
        )
        self._check_arch_sizes()
        self._check_data_types()
        self._check_interaction_keys()
        if self.interaction_type is InteractionType.dcn:
            require(
                self.dcn_num_layers > 0 and self.dcn_low_rank_dim > 0,
                "model.dcn_num_layers and model.dcn_low_rank_dim must be positive for "
                f"interaction_type=dcn, got {self.dcn_num_layers} and {self.dcn_low_rank_dim}",
            )
        if self.interaction_type is InteractionType.projection:
            for name in ("interaction_branch1_layer_sizes", "interaction_branch2_layer_sizes"):
                sizes = getattr(self, name)
                check_layer_sizes(f"model.{name}", sizes)
                require(
                    sizes[-1] % d == 0,
                    f"model.{name}[-1] ({sizes[-1]}) must be a multiple of model.embedding_dim "
                    f"({d}) for interaction_type=projection",
                )

    def _check_interaction_keys(self) -> None:
        """Refuse a key of another interaction than ``interaction_type`` set away from its
        default: the model would ignore it without a word (``model.dcn_num_layers=2`` with
        ``interaction_type=original``)."""
        defaults = field_defaults(ModelConfig)
        for kind, keys in _INTERACTION_KEYS.items():
            changed = [k for k in keys if getattr(self, k) != defaults[k]]
            require_read(
                kind is self.interaction_type or not changed,
                f"model.{changed[0] if changed else ''} is read by model.interaction_type="
                f"{kind.value} only; interaction_type={self.interaction_type.value} would ignore "
                "it",
                {"model.interaction_type": is_value(kind.value), "model": is_value(*_MODELS[kind])},
            )

    def _check_arch_sizes(self) -> None:
        """The dense and over arch MLPs: positive sizes, the dense arch ending in D (its
        output joins the embeddings), the over arch of at least two layers ending in 1."""
        d = self.embedding_dim
        check_layer_sizes("model.dense_arch_layer_sizes", self.dense_arch_layer_sizes)
        check_layer_sizes("model.over_arch_layer_sizes", self.over_arch_layer_sizes)
        last_dense = self.dense_arch_layer_sizes[-1]
        require(
            last_dense == d,
            f"model.dense_arch_layer_sizes[-1] ({last_dense}) must equal model.embedding_dim "
            f"({d}): the dense arch output joins the embeddings in the interaction; "
            f"set model.dense_arch_layer_sizes=[...,{d}]",
        )
        last_over = self.over_arch_layer_sizes[-1]
        require(  # (TorchRec's OverArch raised "must have multiple layers" from training)
            len(self.over_arch_layer_sizes) > 1,
            f"model.over_arch_layer_sizes={self.over_arch_layer_sizes} must list at least two "
            "layers (TorchRec's OverArch: hidden layers, then the logit): set "
            "model.over_arch_layer_sizes=[<hidden>,...,1]",
        )
        require(
            last_over == 1,
            f"model.over_arch_layer_sizes[-1] ({last_over}) must be 1 (one click logit per "
            "sample): set model.over_arch_layer_sizes=[...,1]",
        )

    def _check_data_types(self) -> None:
        """bf16 tables are refused (the table names of ``embedding_data_type_per_table`` are
        checked by ``Config``, once a feature schema has named the tables)."""
        bf16 = [
            key
            for key, data_type in [
                ("model.embedding_data_type", self.embedding_data_type),
                *self.embedding_data_type_per_table.items(),
            ]
            if data_type is EmbeddingDataType.bf16
        ]
        require(
            not bf16,
            f"bf16 embedding tables ({', '.join(bf16)}) cannot be sharded by TorchRec yet "
            "(pytorch/torchrec#3187: sharding fails for BF16 tables); use fp16, which halves "
            "the table bytes the same way",
        )

    @property
    def table_data_types(self) -> list[EmbeddingDataType]:
        """The weight precision of each table, in table order."""
        return list(self.table_data_type_of.values())

    @property
    def table_data_type_of(self) -> dict[str, EmbeddingDataType]:
        """Each table's weight precision by table name, in table order
        (``embedding_data_type_per_table``, else ``embedding_data_type``)."""
        per_table = self.embedding_data_type_per_table
        return {name: per_table.get(name, self.embedding_data_type) for name in self.table_names}

    @property
    def table_sizes(self) -> list[int]:
        """Rows per table after ``num_embeddings_cap``, in table order."""
        cap = self.num_embeddings_cap
        rows = [t.num_embeddings for t in self.tables] or self.num_embeddings_per_feature
        return [n if cap is None else min(n, cap) for n in rows]

    @property
    def feature_names(self) -> list[str]:
        """The sparse feature keys, in table order: the schema's features, else
        ``cat_0 .. cat_{F-1}`` (one per table)."""
        if self.tables:
            return [f for t in self.tables for f in t.feature_names]
        return feature_names(len(self.num_embeddings_per_feature))

    @property
    def table_features(self) -> list[list[str]]:
        """The features of each table, in table order."""
        if self.tables:
            return [list(t.feature_names) for t in self.tables]
        return [[f] for f in self.feature_names]

    @property
    def managed_tables(self) -> dict[str, ManagedCollision]:
        """``{table: its managed-collision settings}`` for the tables whose ids
        ``MCHManagedCollisionModule`` maps (``id_policy=managed_collision``); empty otherwise."""
        return {t.name: t.managed_collision for t in self.tables if t.managed_collision}

    @property
    def table_names(self) -> list[str]:
        """The embedding table names: the schema's, else ``t_cat_0 .. t_cat_{F-1}``."""
        if self.tables:
            return [t.name for t in self.tables]
        return [table_name(f) for f in self.feature_names]
