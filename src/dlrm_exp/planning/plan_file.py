"""``sharding=from_file``: a ``plan.json`` (from a run or ``mode=plan``) back into a TorchRec
``ShardingPlan``, placement for placement.

``plan.json`` records per table its module, sharding type, compute kernel, ranks, shards (rank,
offsets, sizes) and cache load factor, see :func:`dlrm_exp.planning.plan_record.plan_record`.
Rebuilding the ``ParameterSharding`` with an ``EnumerableShardingSpec`` of exactly those shards
makes the new job use the same plan, which its own ``plan.json`` then shows. Every placement is
checked against what this job can run (:class:`Offered`) first: TorchRec would otherwise leave
a table of an unknown module unsharded, or fail deep inside sharding.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.distributed._shard.sharding_spec import EnumerableShardingSpec, ShardMetadata
from torchrec.distributed.types import (
    CacheParams,
    EmbeddingModuleShardingPlan,
    ModuleSharder,
    ParameterSharding,
    ShardingPlan,
    ShardingType,
)
from torchrec.modules.embedding_configs import EmbeddingBagConfig

from dlrm_exp.errors import ConfigError
from dlrm_exp.util.text import first_few

_UNSHARDED = {ShardingType.DATA_PARALLEL.value}
#: The table precisions a plan.json records: those a job trains (bf16 tables are refused).
_DATA_TYPES = ("fp32", "fp16")
#: The keys every table entry of a plan.json has.
_ENTRY_KEYS = ("module", "sharding_type", "compute_kernel", "ranks", "num_embeddings",
               "embedding_dim", "shards")  # fmt: skip


@dataclass(frozen=True)
class Offered:
    """What this job can run, to check a plan file against.

    Attributes:
        modules: each table's module path in the model (the module its sharder shards).
        placements: per table, the compute kernels its sharder offers on this device by
            sharding type (TorchRec strings); only ``data_parallel`` / ``dense`` where the
            sparse optimizer cannot be fused (``restriction`` says why).
        device_type: ``cpu`` or ``cuda``.
        restriction: why only ``data_parallel`` / ``dense`` is offered, or None.
    """

    modules: dict[str, str]
    placements: dict[str, dict[str, list[str]]]
    device_type: str
    restriction: str | None = None


def offered_placements(
    module: torch.nn.Module,
    sharders: list[ModuleSharder],
    device_type: str,
    restriction: str | None = None,
) -> Offered:
    """The module path and the (sharding type, compute kernels) offered for every table of
    ``module``: the first module on each path whose type one of ``sharders`` shards holds the
    tables of its ``shardable_parameters`` (as TorchRec's enumerator walks it). With a
    ``restriction`` (a sparse optimizer FBGEMM cannot fuse here), only ``data_parallel`` /
    ``dense``."""
    by_type = {s.module_type: s for s in sharders}
    modules: dict[str, str] = {}
    placements: dict[str, dict[str, list[str]]] = {}

    def walk(path: str, node: torch.nn.Module) -> None:
        sharder = by_type.get(type(node))
        if sharder is None:
            for name, child in node.named_children():
                walk(f"{path}.{name}" if path else name, child)
            return
        offered = {
            kind: list(sharder.compute_kernels(kind, device_type))
            for kind in sharder.sharding_types(device_type)
        }
        if restriction is not None:
            offered = {k: ["dense"] for k in offered if k in _UNSHARDED}
        for table in sharder.shardable_parameters(node):
            modules[table], placements[table] = path, offered

    walk("", module)
    return Offered(modules, placements, device_type, restriction)


def _placement(rank: int, device_type: str, local_world_size: int) -> str:
    if device_type == "cuda":
        return f"rank:{rank}/cuda:{rank % local_world_size}"
    return f"rank:{rank}/{device_type}"


def load_plan(
    path: str | Path,
    tables: list[EmbeddingBagConfig],
    world_size: int,
    local_world_size: int,
    offered: Offered,
) -> ShardingPlan:
    """Read ``path`` and rebuild its plan for this job.

    Args:
        path: a ``plan.json`` written by a run or ``mode=plan``, or the folder holding one.
        tables: the model's tables, which the plan must list with the same shapes.
        world_size: ranks of this job; the plan must be for as many.
        local_world_size: ranks per host (a shard on rank r goes to ``cuda:r % local``).
        offered: what this job can run (:func:`offered_placements`).

    Returns:
        The ``ShardingPlan`` with the file's sharding types, compute kernels, ranks, shards and
        cache load factors.

    Raises:
        ConfigError: the file is missing or not a plan.json, or it does not match the job:
            another world size, another number of ranks per host for table-row-wise or
            grid tables, missing or extra tables, another table shape or module, a
            sharding type or compute kernel this job cannot run, a rank outside the world, or
            shards that leave their table or do not tile it. The message names the mismatch.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "plan.json"
    planned, planned_world, planned_local = _read_record(path)
    where = f"plan {path}"
    _check_job(where, planned, planned_world, tables, world_size)
    _check_ranks_per_host(where, planned, planned_local, local_world_size)
    modules: dict[str, EmbeddingModuleShardingPlan] = {}

    def place(rank: int) -> str:
        return _placement(rank, offered.device_type, local_world_size)

    for table in tables:
        entry = planned[table.name]
        ranks, spec = _checked_placement(where, table, entry, world_size, offered, place)
        module = modules.setdefault(entry["module"], EmbeddingModuleShardingPlan())
        load_factor = entry.get("cache_load_factor")
        module[table.name] = ParameterSharding(
            sharding_type=entry["sharding_type"],
            compute_kernel=entry["compute_kernel"],
            ranks=ranks,
            sharding_spec=spec,
            cache_params=None if load_factor is None else CacheParams(load_factor=load_factor),
        )
    return ShardingPlan(plan=modules)  # type: ignore[arg-type]


def _read_record(path: Path) -> tuple[dict[str, Any], int, int | None]:
    """The file's ``tables``, ``world_size`` and ranks per host (``local_world_size``; in
    ``hardware`` in files written before it joined the plan record; None in a file without
    it); a ConfigError if it is missing or no plan."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        planned: dict[str, Any] = record["tables"]
        planned_world = int(record["world_size"])
        local = record.get(
            "local_world_size", (record.get("hardware") or {}).get("local_world_size")
        )
        planned_local = None if local is None else int(local)
    except FileNotFoundError:
        raise ConfigError(
            f"sharding.plan_path: no plan at {path} (give a run's or mode=plan's plan.json, "
            "or its folder)"
        ) from None
    except OSError as err:
        raise ConfigError(f"sharding.plan_path: cannot read {path}: {err.strerror}") from None
    except (ValueError, KeyError, TypeError) as err:
        raise ConfigError(
            f"sharding.plan_path: {path} is not a dlrm_exp plan.json ({type(err).__name__}: {err})"
        ) from None
    if not isinstance(planned, dict) or not all(isinstance(e, dict) for e in planned.values()):
        raise ConfigError(f"sharding.plan_path: {path} is not a dlrm_exp plan.json (tables)")
    return planned, planned_world, planned_local


#: Sharding types whose shards TorchRec cuts per host (their row blocks follow the ranks of
#: a host: a plan for another number of ranks per host indexes shards that do not exist).
_PER_HOST = ("table_row_wise", "grid_shard")


def _check_ranks_per_host(
    where: str, planned: dict[str, Any], planned_local: int | None, local_world_size: int
) -> None:
    """A plan with table-row-wise or grid tables is for this job's ranks per host."""
    per_host = sorted(t for t, e in planned.items() if e.get("sharding_type") in _PER_HOST)
    if planned_local is None or planned_local == local_world_size or not per_host:
        return
    raise ConfigError(
        f"{where} is for {planned_local} rank(s) per host, this job has {local_world_size}: "
        f"its {first_few(per_host)} are cut per host "
        f"(table_row_wise / grid_shard): plan again for {local_world_size} rank(s) per host "
        f"(mode=plan hardware.local_world_size={local_world_size}), or run this job with "
        f"{planned_local} per host"
    )


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
    offered: Offered,
    place: Callable[[int], str],
) -> tuple[list[int], EnumerableShardingSpec | None]:
    """One table's ranks and shards (None: unsharded), checked against its shape, its module,
    what this job offers and the world; ``place`` gives a rank's placement string."""
    name = table.name
    missing = [key for key in _ENTRY_KEYS if key not in entry]
    if missing:
        raise ConfigError(f"{where}: table {name} lacks {missing}: not a dlrm_exp plan.json")
    # an edited file: "shards": null was a raw TypeError traceback (review)
    lists = [key for key in ("ranks", "shards") if not isinstance(entry[key], list)]
    if lists or not all(isinstance(r, int) and not isinstance(r, bool) for r in entry["ranks"]):
        raise ConfigError(
            f"{where}: table {name} has ranks {entry['ranks']!r} and shards "
            f"{str(entry['shards'])[:60]}: lists (of rank numbers, of shards) in a dlrm_exp "
            "plan.json"
        )
    # informational (the fit is checked for this job's dtypes), but a value that is no table
    # precision marks an edited or foreign file (review: "fp99" passed)
    if entry.get("data_type", "fp32") not in _DATA_TYPES:
        raise ConfigError(
            f"{where}: table {name} has data_type {entry['data_type']!r}: one of "
            f"{', '.join(_DATA_TYPES)} in a dlrm_exp plan.json"
        )
    shape = [table.num_embeddings, table.embedding_dim]
    if [entry["num_embeddings"], entry["embedding_dim"]] != shape:
        raise ConfigError(
            f"{where}: table {name} is planned as "
            f"{entry['num_embeddings']} x {entry['embedding_dim']}, the model has "
            f"{shape[0]} x {shape[1]} (model.num_embeddings_per_feature / embedding_dim / "
            "num_embeddings_cap)"
        )
    _check_offered(where, name, entry, offered)
    ranks = list(entry["ranks"])
    if any(not 0 <= r < world_size for r in ranks):
        raise ConfigError(f"{where}: table {name} has ranks {ranks} outside 0..{world_size - 1}")
    if entry["sharding_type"] in _UNSHARDED:
        return ranks, None
    shards = [_shard(where, name, s, shape, world_size, place) for s in entry["shards"]]
    _check_tiling(where, name, shards, shape)
    return ranks, EnumerableShardingSpec(shards)


def _check_offered(where: str, name: str, entry: dict[str, Any], offered: Offered) -> None:
    """The table sits in the module that holds it in this model, with a sharding type and
    compute kernel this job's sharder offers on its device."""
    if entry["module"] != offered.modules[name]:
        raise ConfigError(
            f"{where}: table {name} is planned in module {entry['module']!r}, this model holds "
            f"it in {offered.modules[name]!r}: plan again for this model"
        )
    kinds = offered.placements[name]
    kind, kernel = entry["sharding_type"], entry["compute_kernel"]
    because = f" ({offered.restriction})" if offered.restriction else ""
    if kind not in kinds:
        raise ConfigError(
            f"{where}: table {name} is planned {kind}, which this job cannot run on "
            f"{offered.device_type}{because}; offered: {', '.join(kinds)}"
        )
    if kernel not in kinds[kind]:
        raise ConfigError(
            f"{where}: table {name} is planned {kind} with compute kernel {kernel}, which this "
            f"job cannot run on {offered.device_type}{because}; offered with {kind}: "
            f"{', '.join(kinds[kind])}"
        )


def _shard(
    where: str,
    name: str,
    shard: Any,
    shape: list[int],
    world_size: int,
    place: Callable[[int], str],
) -> ShardMetadata:
    """One shard record as ``ShardMetadata`` placed on its rank, checked to lie inside the
    table and the world."""
    try:
        rank = int(shard["rank"])
        offsets = [int(o) for o in shard["offsets"]]
        sizes = [int(n) for n in shard["sizes"]]
    except (KeyError, TypeError, ValueError) as err:
        raise ConfigError(
            f"{where}: table {name} has a malformed shard {shard!r} ({err})"
        ) from None
    inside = len(offsets) == len(sizes) == 2 and all(  # empty shards: ranks beyond the rows
        0 <= o and 0 <= n and o + n <= limit
        for o, n, limit in zip(offsets, sizes, shape, strict=True)
    )
    if not inside or not 0 <= rank < world_size:
        raise ConfigError(
            f"{where}: table {name} has a shard at offsets {offsets} of sizes {sizes} on rank "
            f"{rank}, outside its {shape[0]} x {shape[1]} rows x columns or ranks "
            f"0..{world_size - 1}"
        )
    return ShardMetadata(shard_offsets=offsets, shard_sizes=sizes, placement=place(rank))


def _check_tiling(where: str, name: str, shards: list[ShardMetadata], shape: list[int]) -> None:
    """The shards (each inside the table) cover it exactly: none overlap, and their areas add
    up to the table's. Empty shards (TorchRec gives them to ranks beyond a table's rows)
    cover nothing."""
    held = [s for s in shards if s.shard_sizes[0] * s.shard_sizes[1]]
    for i, a in enumerate(held):
        for b in held[i + 1 :]:
            if all(
                a.shard_offsets[d] < b.shard_offsets[d] + b.shard_sizes[d]
                and b.shard_offsets[d] < a.shard_offsets[d] + a.shard_sizes[d]
                for d in (0, 1)
            ):
                raise ConfigError(
                    f"{where}: shards of table {name} overlap (at offsets {a.shard_offsets} "
                    f"and {b.shard_offsets})"
                )
    area = sum(s.shard_sizes[0] * s.shard_sizes[1] for s in shards)
    if area != shape[0] * shape[1]:
        raise ConfigError(
            f"{where}: the shards of table {name} cover {area} of its {shape[0] * shape[1]} values"
        )
