"""Planner constraints: what the ``sharding`` group asks of every table."""

from torchrec.distributed.planner import ParameterConstraints
from torchrec.distributed.types import CacheParams, ShardingType
from torchrec.modules.embedding_configs import EmbeddingBagConfig

from dlrm_exp.config import ComputeKernel, ShardingConfig, ShardingStrategy


def build_constraints(
    cfg: ShardingConfig,
    tables: list[EmbeddingBagConfig],
    offered_types: list[str],
    pooling_factors: list[float] | None = None,
    fused_optimizer: bool = True,
) -> dict[str, ParameterConstraints]:
    """``ParameterConstraints`` for every table: its sharding type and compute kernel (the
    group's, or its ``per_table_*`` override), and the ids per sample of each of its features
    (``pooling_factors``, one per feature in the tables' feature order; default 1: one-hot;
    the multi-hot sizes with ``data=criteo_multihot``, the schema's ``pooling_factor`` with
    ``data=parquet``) for the planner's cost estimates.

    For ``auto`` the planner may pick any type the sharder offers (``offered_types``) that
    works with the compute kernel: data_parallel only goes with the dense kernel. Without a
    fused sparse optimizer on this device (``fused_optimizer=False``: Adam on CPU, see
    :data:`dlrm_exp.config.optimizer.CPU_FUSED`), ``auto`` tables are data_parallel with the
    dense kernel, the only placement whose update does not need FBGEMM's fused kernel.
    ``fused_uvm_caching`` gets ``CacheParams(load_factor=cache_load_factor)``.
    """
    constraints = {}
    position = 0
    for table in tables:
        kind, kernel = cfg.table_choice(table.name)
        if kind is ShardingStrategy.auto and not fused_optimizer:
            kind, kernel = ShardingStrategy.data_parallel, ComputeKernel.dense
        if kind is ShardingStrategy.auto:
            dp = ShardingType.DATA_PARALLEL.value
            types = [t for t in offered_types if (kernel is ComputeKernel.dense) == (t == dp)]
        else:
            types = [kind.value]
        cache = None
        if kernel is ComputeKernel.fused_uvm_caching and cfg.cache_load_factor is not None:
            cache = CacheParams(load_factor=cfg.cache_load_factor)
        count = len(table.feature_names)
        pooling = pooling_factors[position : position + count] if pooling_factors else []
        position += count
        constraints[table.name] = ParameterConstraints(
            sharding_types=types,
            compute_kernels=[kernel.value],
            cache_params=cache,
            pooling_factors=[float(p) for p in pooling] or [1.0] * count,
        )
    return constraints
