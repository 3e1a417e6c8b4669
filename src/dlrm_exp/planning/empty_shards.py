"""Shards without rows that FBGEMM cannot look up on CPU.

A table split by rows over more ranks than it has rows (``row_wise``, ``table_row_wise``,
``grid_shard``) leaves some ranks a shard of 0 rows. Where such shards are all a rank holds of
one group of tables FBGEMM looks up together (one sharding type, compute kernel and weight
precision), its CPU kernel fails inside training: "weights[0] must be a GPU or MTIA tensor;
it is currently on device CPU" (measured: one table of 1 row on 2 ranks row-wise; a 1-row fp16
table beside 25 fp32 ones; a configuration review found it after the plan had passed).
"""

from collections.abc import Mapping

from torchrec.distributed.types import ShardingPlan

from dlrm_exp.config import EmbeddingDataType
from dlrm_exp.errors import ConfigError
from dlrm_exp.util.text import first_few

#: A group of tables FBGEMM looks up together on one rank: (rank, sharding type, compute
#: kernel, weight precision).
GroupKey = tuple[int, str, str, str]


def _row_groups(
    plan: ShardingPlan, data_types: Mapping[str, EmbeddingDataType]
) -> dict[GroupKey, list[tuple[str, int]]]:
    """``{group: [(table, rows of its shard there), ...]}`` over every sharded table of
    ``plan`` (a data_parallel table, whole on every rank, has no shards to split)."""
    groups: dict[GroupKey, list[tuple[str, int]]] = {}
    for module_plan in plan.plan.values():
        for name, ps in module_plan.items():  # type: ignore[union-attr]
            for shard in ps.sharding_spec.shards if ps.sharding_spec is not None else []:
                dtype = data_types.get(name, EmbeddingDataType.fp32).value
                key = (shard.placement.rank(), ps.sharding_type, ps.compute_kernel, dtype)
                groups.setdefault(key, []).append((name, int(shard.shard_sizes[0])))
    return groups


def check_cpu_row_shards(
    plan: ShardingPlan, data_types: Mapping[str, EmbeddingDataType], world_size: int
) -> None:
    """No rank of a CPU job holds, of a group of tables looked up together, only shards of 0
    rows (module docs).

    Args:
        plan: the job's sharding plan.
        data_types: each table's weight precision (``ModelConfig.table_data_type_of``).
        world_size: the job's ranks, for the advice.

    Raises:
        ConfigError: naming the rank, the tables and the overrides that shard them otherwise.
    """
    for (rank, kind, kernel, dtype), shards in sorted(_row_groups(plan, data_types).items()):
        if any(rows for _, rows in shards):
            continue
        names = sorted({name for name, _ in shards})
        whole = " ".join(f"+sharding.per_table_sharding_type.{n}=table_wise" for n in names)
        raise ConfigError(  # (every table's override: the first alone was refused next)
            f"rank {rank} would hold only empty {kind} shards (0 rows) of {dtype} table(s) "
            f"{first_few(names, 4)}, which FBGEMM's CPU kernel ({kernel}) cannot look up: they "
            f"have fewer rows than the ranks that split them; shard them whole ({whole}), or "
            f"give them at least {world_size} rows each (model.num_embeddings_per_feature)"
        )
