"""The plan as text (``plan.txt``, as TorchRec prints it) and as data (``plan.json``)."""

from torchrec.distributed.types import ShardingPlan
from torchrec.modules.embedding_configs import EmbeddingBagConfig

from dlrm_exp.planning.storage import FP32_BYTES


def plan_sharding_types(plan: ShardingPlan) -> set[str]:
    """The sharding types used anywhere in ``plan`` (TorchRec ``ShardingType`` strings)."""
    return {
        ps.sharding_type
        for module_plan in plan.plan.values()
        for ps in module_plan.values()  # type: ignore[union-attr]
    }


def plan_record(
    plan: ShardingPlan, tables: list[EmbeddingBagConfig], world_size: int
) -> dict[str, object]:
    """The plan as data (``plan.json``): per table its sharding type, compute kernel, ranks and
    shards (rank, row/column offsets, sizes), and the fp32 embedding bytes held by each rank.

    A data_parallel table has one full-size shard on every rank.
    """
    by_name = {t.name: t for t in tables}
    per_rank = [0] * world_size
    records: dict[str, object] = {}
    for module_path, module_plan in plan.plan.items():
        for name, ps in module_plan.items():  # type: ignore[union-attr]
            table = by_name[name]
            full = [table.num_embeddings, table.embedding_dim]
            if ps.sharding_spec is None:
                shards = [{"rank": r, "offsets": [0, 0], "sizes": full} for r in ps.ranks or []]
            else:
                shards = [
                    {
                        "rank": shard.placement.rank(),
                        "offsets": list(shard.shard_offsets),
                        "sizes": list(shard.shard_sizes),
                    }
                    for shard in ps.sharding_spec.shards  # type: ignore[attr-defined]
                ]
            for shard in shards:
                per_rank[shard["rank"]] += shard["sizes"][0] * shard["sizes"][1] * FP32_BYTES
            records[name] = {
                "module": module_path,
                "sharding_type": ps.sharding_type,
                "compute_kernel": ps.compute_kernel,
                "ranks": list(ps.ranks or []),
                "num_embeddings": table.num_embeddings,
                "embedding_dim": table.embedding_dim,
                "shards": shards,
            }
    return {"world_size": world_size, "tables": records, "embedding_bytes_per_rank": per_rank}


def plan_text(plan: ShardingPlan) -> str:
    """The plan as TorchRec prints it: per module, a table of param | sharding type | compute
    kernel | ranks."""
    return str(plan)
