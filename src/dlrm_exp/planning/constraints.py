"""Planner constraints: what the ``sharding`` group asks of every table."""

from torchrec.distributed.planner import ParameterConstraints
from torchrec.distributed.types import CacheParams, ShardingType
from torchrec.modules.embedding_configs import DataType, EmbeddingBagConfig

from dlrm_exp.config import ComputeKernel, ShardingConfig, ShardingStrategy
from dlrm_exp.util.substitution import Substitution


def table_placement(
    cfg: ShardingConfig, table: str, fused_optimizer: bool = True, managed: set[str] | None = None
) -> tuple[ShardingStrategy, ComputeKernel]:
    """The sharding type and kernel ``table`` is planned with (see :func:`build_constraints`):
    the group's choice, except ``row_wise`` / ``fused`` for a managed-collision table and
    ``data_parallel`` / ``dense`` for ``auto`` without a fused sparse optimizer or with the
    ``dense`` kernel (the only type that kernel goes with)."""
    kind, kernel = cfg.table_choice(table)
    if table in (managed or set()):
        return ShardingStrategy.row_wise, ComputeKernel.fused
    if kind is ShardingStrategy.auto and (not fused_optimizer or kernel is ComputeKernel.dense):
        return ShardingStrategy.data_parallel, ComputeKernel.dense
    return kind, kernel


def build_constraints(
    cfg: ShardingConfig,
    tables: list[EmbeddingBagConfig],
    offered_types: list[str],
    pooling_factors: list[float] | None = None,
    fused_optimizer: bool = True,
    managed: set[str] | None = None,
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
    ``fused_uvm_caching`` gets ``CacheParams(load_factor=cache_load_factor)``. The
    managed-collision tables (``managed``) are ``row_wise`` with the fused kernel whatever the
    group says: the only placement TorchRec's managed-collision sharder offers (recorded as a
    substitution, :func:`managed_collision_substitution`). Each table's pooled output is
    fp32 (``output_dtype``: what the kernels give, fp16 tables too), so the planner's
    collective and buffer estimates do not follow the weights' dtype.
    """
    constraints = {}
    position = 0
    for table in tables:
        kind, kernel = table_placement(cfg, table.name, fused_optimizer, managed)
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
            # what the kernels output (FBGEMM's default, fp16 tables too): without it the
            # storage estimates took the weights' dtype, halving fp16 tables' output buffers
            # (the collectives: planning.output_comms)
            output_dtype=DataType.FP32,
        )
    return constraints


def managed_collision_substitution(cfg: ShardingConfig, managed: set[str]) -> Substitution | None:
    """The substitution when managed-collision tables run ``row_wise`` / ``fused`` although the
    ``sharding`` group asked another placement for them (see :func:`build_constraints`;
    ``auto`` with the fused kernel lets the planner pick ``row_wise``: no substitution)."""
    placed = {
        (ShardingStrategy.row_wise, ComputeKernel.fused),
        (ShardingStrategy.auto, ComputeKernel.fused),
    }
    moved = sorted(t for t in managed if cfg.table_choice(t) not in placed)
    if not moved or cfg.sharding_type is ShardingStrategy.from_file:
        return None
    kind, kernel = cfg.table_choice(moved[0])
    return Substitution(
        "sharding",
        f"{kind.value}/{kernel.value} for {', '.join(moved)}",
        "row_wise/fused",
        "TorchRec's managed-collision sharder offers only row_wise",
    )
