"""``sharding=from_file``: a ``plan.json`` (from a run or ``mode=plan``) back into a TorchRec
``ShardingPlan``, placement for placement.

``plan.json`` records per table its sharding type, compute kernel, ranks and shards (rank,
offsets, sizes), see :func:`dlrm_exp.sharding.plan_record`. Rebuilding the
``ParameterSharding`` with an ``EnumerableShardingSpec`` of exactly those shards makes the new
job use the same plan, which its own ``plan.json`` then shows.
"""

import json
from pathlib import Path
from typing import Any

from torch.distributed._shard.sharding_spec import EnumerableShardingSpec, ShardMetadata
from torchrec.distributed.types import (
    EmbeddingModuleShardingPlan,
    ParameterSharding,
    ShardingPlan,
    ShardingType,
)
from torchrec.modules.embedding_configs import EmbeddingBagConfig

from dlrm_exp.errors import ConfigError

_UNSHARDED = {ShardingType.DATA_PARALLEL.value}


def _placement(rank: int, device_type: str, local_world_size: int) -> str:
    if device_type == "cuda":
        return f"rank:{rank}/cuda:{rank % local_world_size}"
    return f"rank:{rank}/{device_type}"


def load_plan(
    path: str | Path,
    tables: list[EmbeddingBagConfig],
    world_size: int,
    local_world_size: int,
    device_type: str,
) -> ShardingPlan:
    """Read ``path`` and rebuild its plan for this job.

    Args:
        path: a ``plan.json`` written by a run or ``mode=plan``.
        tables: the model's tables, which the plan must list with the same shapes.
        world_size: ranks of this job; the plan must be for as many.
        local_world_size: ranks per host (a shard on rank r goes to ``cuda:r % local``).
        device_type: ``cuda`` or ``cpu``, the device of the shards' placements.

    Returns:
        The ``ShardingPlan`` with the file's sharding types, compute kernels, ranks and shards.

    Raises:
        ConfigError: the file is missing or not a plan.json, or it does not match the job:
            another world size, missing or extra tables, another table shape, a rank outside
            the world, or shards that do not tile their table. The message names the mismatch.
    """
    path = Path(path)
    planned, planned_world = _read_record(path)
    where = f"plan {path}"
    _check_job(where, planned, planned_world, tables, world_size)
    modules: dict[str, EmbeddingModuleShardingPlan] = {}
    for table in tables:
        entry = planned[table.name]
        ranks, spec = _checked_placement(
            where, table, entry, world_size, local_world_size, device_type
        )
        module = modules.setdefault(entry["module"], EmbeddingModuleShardingPlan())
        module[table.name] = ParameterSharding(
            sharding_type=entry["sharding_type"],
            compute_kernel=entry["compute_kernel"],
            ranks=ranks,
            sharding_spec=spec,
        )
    return ShardingPlan(plan=modules)  # type: ignore[arg-type]


def _read_record(path: Path) -> tuple[dict[str, Any], int]:
    """The file's ``tables`` and ``world_size``; a ConfigError if it is missing or no plan."""
    try:
        record = json.loads(path.read_text())
        planned: dict[str, Any] = record["tables"]
        planned_world = int(record["world_size"])
    except FileNotFoundError:
        raise ConfigError(f"sharding.plan_path: no plan at {path}") from None
    except (ValueError, KeyError, TypeError) as err:
        raise ConfigError(
            f"sharding.plan_path: {path} is not a dlrm_exp plan.json ({type(err).__name__}: {err})"
        ) from None
    return planned, planned_world


def _check_job(
    where: str,
    planned: dict[str, Any],
    planned_world: int,
    tables: list[EmbeddingBagConfig],
    world_size: int,
) -> None:
    """The plan is for this job's world size and exactly this model's tables."""
    if planned_world != world_size:
        raise ConfigError(
            f"{where} is for {planned_world} ranks, this job has {world_size}: set "
            f"hardware.nproc_per_node x hardware.nnodes = {planned_world}, or plan again"
        )
    names = {t.name for t in tables}
    missing, extra = sorted(names - set(planned)), sorted(set(planned) - names)
    if missing or extra:
        raise ConfigError(
            f"{where} does not have this model's tables: missing {missing}, unknown {extra}"
        )


def _checked_placement(
    where: str,
    table: EmbeddingBagConfig,
    entry: dict[str, Any],
    world_size: int,
    local_world_size: int,
    device_type: str,
) -> tuple[list[int], EnumerableShardingSpec | None]:
    """One table's ranks and shards (None: unsharded), checked against its shape and the
    world."""
    shape = [table.num_embeddings, table.embedding_dim]
    if [entry["num_embeddings"], entry["embedding_dim"]] != shape:
        raise ConfigError(
            f"{where}: table {table.name} is planned as "
            f"{entry['num_embeddings']} x {entry['embedding_dim']}, the model has "
            f"{shape[0]} x {shape[1]} (model.num_embeddings_per_feature / embedding_dim / "
            "num_embeddings_cap)"
        )
    ranks = [int(r) for r in entry["ranks"]]
    if any(not 0 <= r < world_size for r in ranks):
        raise ConfigError(
            f"{where}: table {table.name} has ranks {ranks} outside 0..{world_size - 1}"
        )
    if entry["sharding_type"] in _UNSHARDED:
        return ranks, None
    shards = [
        ShardMetadata(
            shard_offsets=list(s["offsets"]),
            shard_sizes=list(s["sizes"]),
            placement=_placement(int(s["rank"]), device_type, local_world_size),
        )
        for s in entry["shards"]
    ]
    area = sum(s.shard_sizes[0] * s.shard_sizes[1] for s in shards)
    if area != shape[0] * shape[1]:
        raise ConfigError(
            f"{where}: the shards of table {table.name} cover {area} of its "
            f"{shape[0] * shape[1]} values"
        )
    return ranks, EnumerableShardingSpec(shards)
