"""Schema of the ``sharding`` group: sharding type and compute kernel, per table if wanted."""

from dataclasses import dataclass, field
from enum import Enum

from dlrm_exp.config.checks import is_value, require, require_read


class ShardingStrategy(Enum):
    """Sharding type for every table; values equal TorchRec's ``ShardingType`` strings.

    ``auto`` lets TorchRec's planner choose per table; ``from_file`` reuses a ``plan.json``
    (``sharding.plan_path``) as it is.
    """

    auto = "auto"
    from_file = "from_file"
    table_wise = "table_wise"
    row_wise = "row_wise"
    column_wise = "column_wise"
    table_row_wise = "table_row_wise"
    table_column_wise = "table_column_wise"
    grid_shard = "grid_shard"
    data_parallel = "data_parallel"


class ComputeKernel(Enum):
    """Embedding compute kernel; values equal TorchRec's ``EmbeddingComputeKernel`` strings.

    ``fused``: FBGEMM table-batched kernel with the optimizer fused into backward; ``dense``:
    plain autograd tables (needed by data_parallel); ``fused_uvm_caching``: tables in host
    memory (CUDA unified memory) with an HBM cache of ``cache_load_factor`` of the rows.
    """

    fused = "fused"
    dense = "dense"
    fused_uvm_caching = "fused_uvm_caching"


@dataclass
class ShardingConfig:
    """How embedding tables are sharded (group ``sharding``).

    Attributes:
        sharding_type: one type for every table (``auto``: TorchRec's planner chooses).
        compute_kernel: ``fused`` (default), ``dense`` (required by ``data_parallel``) or
            ``fused_uvm_caching`` (CUDA only).
        cache_load_factor: share of a table's rows kept in the HBM cache for
            ``fused_uvm_caching`` (TorchRec's ``ParameterConstraints.cache_params``); (0, 1].
        per_table_sharding_type: sharding type by table name (``t_cat_0`` ...), overriding
            ``sharding_type`` for mixed plans:
            ``+sharding.per_table_sharding_type.t_cat_0=data_parallel``.
        per_table_compute_kernel: compute kernel by table name, overriding ``compute_kernel``:
            ``+sharding.per_table_compute_kernel.t_cat_0=dense``.
        plan_path: with ``sharding_type=from_file``, the ``plan.json`` of an earlier run or
            ``mode=plan`` (or the folder holding it) to use exactly (world size, tables, shapes
            and modules must match; see :func:`dlrm_exp.planning.plan_file.load_plan`).
    """

    sharding_type: ShardingStrategy = ShardingStrategy.auto
    compute_kernel: ComputeKernel = ComputeKernel.fused
    cache_load_factor: float | None = None
    per_table_sharding_type: dict[str, ShardingStrategy] = field(default_factory=dict)
    per_table_compute_kernel: dict[str, ComputeKernel] = field(default_factory=dict)
    plan_path: str | None = None

    def __post_init__(self) -> None:
        if self.sharding_type is ShardingStrategy.from_file:
            require(
                bool(self.plan_path),
                "sharding=from_file needs the plan to use: "
                "sharding.plan_path=<run folder>/plan.json",
            )
            require(
                not self.overridden_tables,
                "sharding=from_file takes every table's placement from the plan: drop the "
                "per_table_* overrides",
            )
            require(
                self.cache_load_factor is None,
                "sharding=from_file takes every table's cache_load_factor from the plan: drop "
                "sharding.cache_load_factor (or plan again with it)",
            )
            return
        require_read(
            self.plan_path is None,
            f"sharding.plan_path={self.plan_path} is read by sharding=from_file only (sharding="
            f"{self.sharding_type.value} plans anew and would ignore it): add sharding=from_file",
            {"sharding": is_value("from_file"), "sharding.sharding_type": is_value("from_file")},
        )
        require(
            self.cache_load_factor is None or 0 < self.cache_load_factor <= 1,
            f"sharding.cache_load_factor must be in (0, 1], got {self.cache_load_factor}",
        )
        choices = self.choices()
        cached = ComputeKernel.fused_uvm_caching
        require(
            self.cache_load_factor is None or cached in {k for _, k in choices.values()},
            f"sharding.cache_load_factor={self.cache_load_factor} sizes the HBM cache of the "
            f"{cached.value} kernel, which no table uses: set sharding.compute_kernel="
            f"{cached.value} (or drop it)",
        )
        for table, (kind, kernel) in choices.items():
            fix = (
                "sharding.compute_kernel"
                if table is None
                else f"+sharding.per_table_compute_kernel.{table}"
            )
            where = "sharding" if table is None else f"table {table}"
            require(
                kind is not ShardingStrategy.from_file,
                f"sharding.per_table_sharding_type.{table}=from_file: a plan file places every "
                "table: use sharding=from_file sharding.plan_path=<plan.json>",
            )  # (the group-wide from_file returned above)
            if kind is ShardingStrategy.data_parallel:
                require(
                    kernel is ComputeKernel.dense,
                    f"{where}: data_parallel replicates tables with the dense compute kernel: "
                    f"set {fix}=dense",
                )
            elif kind is not ShardingStrategy.auto:
                require(
                    kernel is not ComputeKernel.dense,
                    f"{where}: {kind.value} shards need the fused (or fused_uvm_caching) "
                    f"compute kernel; dense goes with data_parallel: set {fix}=fused",
                )

    @property
    def overridden_tables(self) -> list[str]:
        """Table names with a per-table sharding type or compute kernel, sorted."""
        return sorted(set(self.per_table_sharding_type) | set(self.per_table_compute_kernel))

    def table_choice(self, table: str | None) -> tuple[ShardingStrategy, ComputeKernel]:
        """Effective (sharding type, compute kernel) of ``table`` (None: the group default)."""
        if table is None:
            return self.sharding_type, self.compute_kernel
        return (
            self.per_table_sharding_type.get(table, self.sharding_type),
            self.per_table_compute_kernel.get(table, self.compute_kernel),
        )

    def choices(self) -> dict[str | None, tuple[ShardingStrategy, ComputeKernel]]:
        """:meth:`table_choice` of the group default (key None) and of every table in
        :attr:`overridden_tables`."""
        return {t: self.table_choice(t) for t in [None, *self.overridden_tables]}
