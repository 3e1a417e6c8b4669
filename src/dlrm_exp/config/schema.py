"""The feature schema (``data.schema``): which columns of a user's click log are the label,
the dense features and the sparse features, which embedding table each sparse feature looks up
and how its raw ids become rows of that table.

The layout follows NVIDIA DLRM's ``FeatureSpec`` and TorchEasyRec's feature configs, with
TorchRec's terms: a sparse feature is a key of the ``KeyedJaggedTensor``; several features may
share one table (TorchRec's ``EmbeddingBagConfig(feature_names=[...])``).
"""

import re
from collections import Counter
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path

from omegaconf import MISSING, OmegaConf

from dlrm_exp.config.checks import require
from dlrm_exp.config.model import EmbeddingTable, EvictionPolicy, ManagedCollision
from dlrm_exp.errors import ConfigError

#: Feature and table names: TorchRec makes module and parameter names of them.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class IdPolicy(Enum):
    """How a sparse column's raw ids become rows of a table of ``num_embeddings`` rows.

    - ``strict``: ids are already rows, integers in ``[0, num_embeddings)``; any other value is
      counted and the data refused.
    - ``modulo``: a stable 64-bit hash of the id (integers by SplitMix64, strings by a
      polynomial hash of their UTF-8 bytes finished by SplitMix64, see
      :mod:`dlrm_exp.data.id_policy`; the same on every process, run and machine) modulo
      ``num_embeddings``: the hashing trick, for ids of any type and range.
    - ``hex_modulo``: TorchRec's Criteo rule ``int(id, 16) % num_embeddings``: strings are
      read as hexadecimal (at most 16 digits; empty reads as 0, as ``int(x or "0", 16)`` in
      TorchRec's Criteo reader), integers are taken as they are (non-negative rows, Python's
      ``%``). The shipped ``criteo`` schema's categorical features use it, so Criteo TSV and
      Parquet give the rows TorchRec's DLRM example trains on.
    - ``managed_collision``: TorchRec's ``MCHManagedCollisionModule`` maps the ids (hashed to
      63 bits as under ``modulo``, so raw ids spread evenly over the ranks) to rows: the ids
      its eviction policy keeps get a row each, all others share the table's last row. The
      mapping is part of the model's state (checkpoints, resume, export); the table is sharded
      ``row_wise`` (the only type TorchRec's managed-collision sharder offers).
    """

    strict = "strict"
    modulo = "modulo"
    hex_modulo = "hex_modulo"
    managed_collision = "managed_collision"


@dataclass
class DenseColumn:
    """One dense input column (float; nulls read as 0 and counted).

    Attributes:
        column: the column name in the file.
        log1p: feed ``log(1 + max(x, 0))`` instead of x (Criteo's transform of counts).
    """

    column: str = MISSING
    log1p: bool = False


@dataclass
class SparseFeature:
    """One sparse feature: a key of the batch's ``KeyedJaggedTensor``, pooled by its table.

    Attributes:
        column: the column in the file: one id per row (integer or string), or a list of ids
            (``multi_hot: true``).
        table: the embedding table it looks up; features naming the same table share its rows
            (default: ``t_<feature>``).
        num_embeddings: rows of the table (features sharing a table must agree).
        multi_hot: the column holds a list of ids per row (sum-pooled like any
            ``EmbeddingBag`` feature); null entries are empty bags.
        id_policy: see :class:`IdPolicy`.
        pooling_factor: mean ids per row, for the planner's cost estimates (null: 1;
            ``mode=schema`` writes the measured mean of a list feature).
        eviction_policy / eviction_interval: with ``id_policy=managed_collision``, see
            :class:`~dlrm_exp.config.model.ManagedCollision` (features sharing a table must
            agree).
    """

    column: str = MISSING
    num_embeddings: int = MISSING
    table: str | None = None
    multi_hot: bool = False
    id_policy: IdPolicy = IdPolicy.modulo
    pooling_factor: float | None = None
    eviction_policy: EvictionPolicy = EvictionPolicy.lfu
    eviction_interval: int = 1

    @property
    def managed_collision(self) -> ManagedCollision | None:
        """The managed-collision settings under ``id_policy=managed_collision``, else None."""
        if self.id_policy is not IdPolicy.managed_collision:
            return None
        return ManagedCollision(self.eviction_policy, self.eviction_interval)

    @property
    def pooling(self) -> float:
        """Ids per row the planner assumes: ``pooling_factor``, else 1."""
        return 1.0 if self.pooling_factor is None else float(self.pooling_factor)


@dataclass
class FeatureSchema:
    """Label, dense columns and sparse features of a click log (``data.schema``).

    Attributes:
        label: the click column (0 / 1, or a boolean); rows with a null label are skipped and
            counted.
        dense: the dense columns, in the order of the model's dense input (B, num_dense).
        sparse: ``{feature name: SparseFeature}``, in the order of the batch's keys.

    Raises:
        ConfigError: (at compose time) a column named twice, no sparse feature, a table whose
            features disagree on ``num_embeddings`` or on managed collision, a non-positive
            ``num_embeddings`` or ``eviction_interval``, or a managed-collision table of fewer
            than 2 rows.
    """

    label: str = MISSING
    dense: list[DenseColumn] = field(default_factory=list)
    sparse: dict[str, SparseFeature] = field(default_factory=dict)

    def __post_init__(self) -> None:
        require(len(self.sparse) > 0, "data.schema.sparse must name at least one feature")
        require(
            len(self.dense) > 0,
            "data.schema.dense must name at least one column: DLRM's dense arch turns the dense "
            "input into the vector that joins the embeddings in the interaction",
        )
        twice = sorted(c for c, n in Counter([self.label, *self.feature_columns]).items() if n > 1)
        require(
            not twice,
            f"data.schema names column(s) {twice} more than once: each column is the label, "
            "one dense column or one sparse feature",
        )
        sizes: dict[str, int] = {}
        managed: dict[str, ManagedCollision | None] = {}
        for name, feature in self.sparse.items():
            key = f"data.schema.sparse.{name}"
            for what, value in (("feature", name), ("table", self.table_of(name))):
                require(
                    _NAME.fullmatch(value) is not None,
                    f"{key}: {what} name {value!r} must be letters, digits and _ (TorchRec "
                    "names modules after it); the column name may be anything",
                )
            require(
                feature.num_embeddings > 0,
                f"{key}.num_embeddings must be positive, got {feature.num_embeddings}",
            )
            require(
                feature.pooling_factor is None or feature.pooling_factor > 0,
                f"{key}.pooling_factor must be positive or null, got {feature.pooling_factor}",
            )
            require(
                feature.eviction_interval > 0,
                f"{key}.eviction_interval must be positive, got {feature.eviction_interval}",
            )
            require(
                feature.managed_collision is None or feature.num_embeddings >= 2,
                f"{key}.num_embeddings must be at least 2 under id_policy=managed_collision "
                "(the last row is shared by the ids without a row of their own)",
            )
            table = self.table_of(name)
            known = sizes.setdefault(table, feature.num_embeddings)
            require(
                known == feature.num_embeddings,
                f"features sharing table {table} disagree on num_embeddings ({known} and "
                f"{feature.num_embeddings} at {key}.num_embeddings): give them the same rows",
            )
            first = managed.setdefault(table, feature.managed_collision)
            require(
                first == feature.managed_collision,
                f"features sharing table {table} disagree on managed collision (at {key}: "
                "id_policy, eviction_policy, eviction_interval): one module maps a table's "
                "ids, so give them the same settings",
            )

    def sized(self, rows: list[int], key: str) -> "FeatureSchema":
        """This schema with ``num_embeddings`` ``rows[i]`` for its ``i``-th sparse feature (in
        schema order), checked again.

        Raises:
            ConfigError: ``rows`` (the config key ``key``) does not list one size per feature,
                or the new sizes break a rule (features sharing a table disagree).
        """
        names = list(self.sparse)
        require(
            len(rows) == len(names),
            f"data.schema has {len(names)} sparse features but {key} lists {len(rows)} "
            f"tables: give one row count per feature, in order ({', '.join(names[:3])}, ...)",
        )
        sparse = {
            name: replace(self.sparse[name], num_embeddings=int(n))
            for name, n in zip(names, rows, strict=True)
        }
        try:
            return FeatureSchema(self.label, list(self.dense), sparse)
        except ConfigError as err:
            raise ConfigError(f"{key}: {err}") from None

    def table_of(self, feature: str) -> str:
        """The table ``feature`` looks up: its ``table``, else ``t_<feature>``."""
        return self.sparse[feature].table or f"t_{feature}"

    @property
    def feature_columns(self) -> list[str]:
        """The columns read besides the label: the dense ones, then the sparse ones."""
        return [d.column for d in self.dense] + [f.column for f in self.sparse.values()]

    @property
    def num_dense(self) -> int:
        """Width of the dense input."""
        return len(self.dense)

    @property
    def feature_names(self) -> list[str]:
        """The sparse feature keys in the model's order: table by table (in the order of each
        table's first feature), a table's features in schema order; the order of the batch's
        ``KeyedJaggedTensor`` keys and of ``model.feature_names``."""
        return [f for table in self.tables() for f in table.feature_names]

    def tables(self) -> list[EmbeddingTable]:
        """The model's tables, in the order of each table's first feature."""
        out: dict[str, EmbeddingTable] = {}
        for name, feature in self.sparse.items():
            table = self.table_of(name)
            if table not in out:
                out[table] = EmbeddingTable(
                    table, feature.num_embeddings, [], feature.managed_collision
                )
            out[table].feature_names.append(name)
        return list(out.values())


def load_schema_file(path: str | Path) -> FeatureSchema:
    """A feature schema from a YAML file (the layout of ``conf/data/schema/*.yaml``), checked
    as at compose time (see :func:`parse_schema`)."""
    return parse_schema(Path(path).read_text(encoding="utf-8"))


def parse_schema(text: str) -> FeatureSchema:
    """A feature schema from YAML text, checked as at compose time.

    Raises:
        ConfigError: a rule of :class:`FeatureSchema` is broken.
        omegaconf.errors.ValidationError: a key is unknown or has the wrong type.
    """
    node = OmegaConf.merge(OmegaConf.structured(FeatureSchema), OmegaConf.create(text))
    schema = OmegaConf.to_object(node)
    assert isinstance(schema, FeatureSchema)
    return schema
