"""The plan as text (``plan.txt``, as TorchRec prints it) and as data (``plan.json``)."""

from dataclasses import asdict, dataclass
from typing import Any

from torchrec.distributed.types import ShardingPlan, ShardingType
from torchrec.modules.embedding_configs import DATA_TYPE_NUM_BITS, EmbeddingBagConfig


def plan_sharding_types(plan: ShardingPlan) -> set[str]:
    """The sharding types used anywhere in ``plan`` (TorchRec ``ShardingType`` strings)."""
    return _used(plan, "sharding_type")


def plan_table_types(plan: ShardingPlan) -> dict[str, str]:
    """``{table: its sharding type}`` in ``plan`` (TorchRec ``ShardingType`` strings)."""
    return {
        name: ps.sharding_type
        for module_plan in plan.plan.values()
        for name, ps in module_plan.items()  # type: ignore[union-attr]
    }


def plan_compute_kernels(plan: ShardingPlan) -> set[str]:
    """The compute kernels used anywhere in ``plan`` (TorchRec ``EmbeddingComputeKernel``
    strings)."""
    return _used(plan, "compute_kernel")


def _used(plan: ShardingPlan, field: str) -> set[str]:
    """The values of a ``ParameterSharding`` ``field`` over every table of ``plan``."""
    return {
        getattr(ps, field)
        for module_plan in plan.plan.values()
        for ps in module_plan.values()  # type: ignore[union-attr]
    }


def replicated_tables(plan: ShardingPlan) -> set[str]:
    """The tables ``plan`` places data_parallel (a whole replica on every rank)."""
    return {
        name
        for module_plan in plan.plan.values()
        for name, ps in module_plan.items()  # type: ignore[union-attr]
        if ps.sharding_type == ShardingType.DATA_PARALLEL.value
    }


@dataclass(frozen=True)
class ShardRecord:
    """One shard of a table: the rank holding it, its (row, column) offsets and sizes."""

    rank: int
    offsets: list[int]
    sizes: list[int]


@dataclass(frozen=True)
class TablePlan:
    """Where one table went: sharding type and compute kernel (TorchRec's strings), the ranks
    and shards, the table's shape and weight precision (``fp32`` or ``fp16``), and the share of
    its rows the ``fused_uvm_caching`` kernel caches in HBM (``CacheParams.load_factor``;
    None: TorchRec's default, or no cache)."""

    module: str
    sharding_type: str
    compute_kernel: str
    ranks: list[int]
    num_embeddings: int
    embedding_dim: int
    shards: list[ShardRecord]
    data_type: str = "fp32"
    cache_load_factor: float | None = None


@dataclass(frozen=True)
class PlanRecord:
    """The plan as data (``plan.json``): the ranks it was made for (in all and per host: a
    table-row-wise or grid table is cut per host), per table its :class:`TablePlan`, and the
    embedding weight bytes each rank holds."""

    world_size: int
    local_world_size: int
    tables: dict[str, TablePlan]
    embedding_bytes_per_rank: list[int]

    def to_json(self) -> dict[str, Any]:
        """The ``plan.json`` content (``world_size``, ``local_world_size``, ``tables``,
        ``embedding_bytes_per_rank``)."""
        return asdict(self)


def _shards(ps: Any, table: EmbeddingBagConfig) -> list[ShardRecord]:
    """The shards of one parameter sharding; a data_parallel table has one full-size shard on
    every rank."""
    if ps.sharding_spec is None:
        full = [table.num_embeddings, table.embedding_dim]
        return [ShardRecord(r, [0, 0], list(full)) for r in ps.ranks or []]
    return [
        ShardRecord(shard.placement.rank(), list(shard.shard_offsets), list(shard.shard_sizes))
        for shard in ps.sharding_spec.shards
    ]


def plan_record(
    plan: ShardingPlan, tables: list[EmbeddingBagConfig], world_size: int, local_world_size: int
) -> PlanRecord:
    """The plan as data: per table its sharding type, compute kernel, ranks and shards (rank,
    row/column offsets, sizes), and the embedding weight bytes held by each rank (at each table's
    ``data_type``)."""
    by_name = {t.name: t for t in tables}
    per_rank = [0] * world_size
    records: dict[str, TablePlan] = {}
    for module_path, module_plan in plan.plan.items():
        for name, ps in module_plan.items():  # type: ignore[union-attr]
            table = by_name[name]
            shards = _shards(ps, table)
            element_bytes = DATA_TYPE_NUM_BITS[table.data_type] // 8
            for shard in shards:
                per_rank[shard.rank] += shard.sizes[0] * shard.sizes[1] * element_bytes
            records[name] = TablePlan(
                module_path,
                ps.sharding_type,
                ps.compute_kernel,
                list(ps.ranks or []),
                table.num_embeddings,
                table.embedding_dim,
                shards,
                table.data_type.value.lower(),
                ps.cache_params.load_factor if ps.cache_params is not None else None,
            )
    return PlanRecord(world_size, local_world_size, records, per_rank)


def plan_text(plan: ShardingPlan) -> str:
    """The plan as TorchRec prints it: per module, a table of param | sharding type | compute
    kernel | ranks."""
    return str(plan)
