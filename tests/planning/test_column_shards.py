"""What a column-splitting sharding type ran as (distributed review): one column shard per
table is table_wise (table_row_wise for grid); row-wise Adagrad over several column shards
keeps one momentum per row and shard."""

from types import SimpleNamespace

from conftest import compose_cfg
from dlrm_exp.planning.column_shards import column_substitutions


def _plan(kind: str, columns: list[int]) -> SimpleNamespace:
    shards = [SimpleNamespace(shard_offsets=[0, c]) for c in columns]
    sharding = SimpleNamespace(sharding_type=kind, sharding_spec=SimpleNamespace(shards=shards))
    return SimpleNamespace(plan={"sparse": {"t_cat_0": sharding}})


def test_one_column_shard_is_table_wise_and_row_wise_adagrad_over_several_is_said():
    cfg = compose_cfg([])  # model=tiny: embedding_dim 16, rowwise_adagrad
    (whole,) = column_substitutions(cfg, _plan("grid_shard", [0, 0]))
    assert (whole.setting, whole.asked) == ("sharding", "grid_shard")
    assert whole.ran == "one column shard per table (t_cat_0): table_row_wise's layout"
    (cut,) = column_substitutions(cfg, _plan("column_wise", [0, 128]))
    assert (cut.setting, cut.ran) == ("optimizer", "one momentum per row and column shard")
    adagrad = compose_cfg(["optimizer=adagrad"])  # (one per element: as unsharded)
    assert column_substitutions(adagrad, _plan("column_wise", [0, 128])) == []
    assert column_substitutions(cfg, _plan("table_wise", [0])) == []
