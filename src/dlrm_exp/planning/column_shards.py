"""What a column-splitting sharding type (``column_wise``, ``table_column_wise``,
``grid_shard``) ran as: TorchRec cuts a table into column shards of at least 128 columns
(its shard width), so a table below 256 columns is one column shard, placed as
``table_wise`` (``table_row_wise`` for grid); and FBGEMM's row-wise Adagrad keeps one
momentum per row *and column shard*, so a table cut into several column shards is updated
otherwise than unsharded (two half-row means instead of one row mean: ``mode=verify``
measured 1.99e-2 at embedding_dim 256 on 2 ranks, 0 with ``optimizer=adagrad``). Both ran
without a word, and a strategy comparison compared identical layouts (distributed review).
"""

from torchrec.distributed.types import ShardingPlan

from dlrm_exp.config import Config, SparseOptimizer
from dlrm_exp.util.substitution import Substitution
from dlrm_exp.util.text import first_few

#: The placement a column-splitting sharding type amounts to with one column shard.
_WHOLE_COLUMNS = {
    "column_wise": "table_wise",
    "table_column_wise": "table_wise",
    "grid_shard": "table_row_wise",
}


def _column_shards(plan: ShardingPlan) -> dict[str, tuple[str, int]]:
    """``{table: (its sharding type, its column shards)}`` of the column-splitting tables of
    ``plan`` (the distinct column offsets of its shards)."""
    found = {}
    for module_plan in plan.plan.values():
        for name, ps in module_plan.items():  # type: ignore[union-attr]
            if ps.sharding_type in _WHOLE_COLUMNS and ps.sharding_spec is not None:
                columns = {int(s.shard_offsets[1]) for s in ps.sharding_spec.shards}
                found[name] = (ps.sharding_type, len(columns))
    return found


def column_substitutions(cfg: Config, plan: ShardingPlan) -> list[Substitution]:
    """The substitutions of module docs: per column-splitting type whose tables are one column
    shard each, and the row-wise Adagrad of tables cut into several."""
    tables = _column_shards(plan)
    found = []
    for kind, whole in _WHOLE_COLUMNS.items():
        single = sorted(t for t, (k, n) in tables.items() if k == kind and n == 1)
        if single:
            found.append(Substitution(
                "sharding", kind,
                f"one column shard per table ({first_few(single, 2)}): {whole}'s layout",
                f"embedding_dim {cfg.model.embedding_dim} is one column shard: TorchRec's hold at "
                "least 128 columns, so below 256 a table is not cut",
            ))  # fmt: skip
    cut = sorted(t for t, (_, n) in tables.items() if n > 1)
    if cut and cfg.optimizer.sparse_optimizer is SparseOptimizer.rowwise_adagrad:
        found.append(Substitution(
            "optimizer", "rowwise_adagrad", "one momentum per row and column shard",
            f"FBGEMM keeps row-wise state per shard: {first_few(cut, 2)} cut into column shards "
            "are updated otherwise than unsharded (optimizer=adagrad keeps one per element)",
        ))  # fmt: skip
    return found
