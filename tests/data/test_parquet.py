"""data=parquet on files the tests write: the feature schema's rules, id policies, nulls,
rank shares and row-group shuffling, and every bad input named with its file and column."""

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from dlrm_exp.config import (
    DenseColumn,
    EvictionPolicy,
    FeatureSchema,
    IdPolicy,
    ManagedCollision,
    ParquetDataConfig,
    SparseFeature,
    criteo_schema,
)
from dlrm_exp.data import load_splits, parquet_files
from dlrm_exp.data.id_policy import string_hash64, to_rows
from dlrm_exp.errors import ConfigError, DataError


def schema(**sparse_overrides) -> FeatureSchema:
    sparse = {
        "user": SparseFeature(column="user", num_embeddings=100),
        "item": SparseFeature("item", 100, table="t_item", id_policy=IdPolicy.strict),
        "recent": SparseFeature(
            "recent", 100, table="t_item", multi_hot=True, id_policy=IdPolicy.strict
        ),
    }
    sparse.update(sparse_overrides)
    return FeatureSchema(
        label="click",
        dense=[DenseColumn(column="price", log1p=True), DenseColumn(column="age")],
        sparse=sparse,
    )


def table(n: int = 12, **columns) -> pa.Table:
    """n rows: clicks alternate, price = row, age = -row, user "u<row>", item row,
    recent [row, row + 1]."""
    data = {
        "click": pa.array([i % 2 for i in range(n)], pa.int64()),
        "price": pa.array([float(i) for i in range(n)]),
        "age": pa.array([-float(i) for i in range(n)]),
        "user": pa.array([f"u{i}" for i in range(n)]),
        "item": pa.array(list(range(n)), pa.int64()),
        "recent": pa.array([[i, i + 1] for i in range(n)], pa.list_(pa.int64())),
    }
    data.update(columns)
    return pa.table(data)


def write(path, tbl, row_group_size=4):
    pq.write_table(tbl, path, row_group_size=row_group_size)
    return path


def config(path, sch=None, **kwargs) -> ParquetDataConfig:
    kwargs.setdefault("val_fraction", 0.0)
    kwargs.setdefault("test_fraction", 0.0)
    return ParquetDataConfig(path=str(path), schema=sch or schema(), **kwargs)


def _decoded_rows(monkeypatch) -> list[int]:
    """The row count of every table the Parquet reader decodes from now on (a row group's,
    or the part of it a step needs)."""
    from dlrm_exp.data import parquet

    decoded: list[int] = []
    original = parquet.decode

    def spy(tbl, sch, where):
        decoded.append(tbl.num_rows)
        return original(tbl, sch, where)

    monkeypatch.setattr(parquet, "decode", spy)
    return decoded


def all_rows(split, keys, world_size=1, rank=0, seed=None, batch_size=100):
    return list(split.batches(batch_size, rank, world_size, keys, seed))


def test_schema_tables_shared_and_rules():
    s = schema()
    assert [(t.name, t.num_embeddings, t.feature_names) for t in s.tables()] == [
        ("t_user", 100, ["user"]),
        ("t_item", 100, ["item", "recent"]),
    ]
    with pytest.raises(ConfigError, match="disagree on num_embeddings"):
        schema(recent=SparseFeature(column="recent", num_embeddings=7, table="t_item"))
    with pytest.raises(ConfigError, match=r"column\(s\) \['item'\] more than once"):
        schema(other=SparseFeature(column="item", num_embeddings=5))
    mc = IdPolicy.managed_collision
    with pytest.raises(ConfigError, match="t_item disagree on managed collision"):
        schema(recent=SparseFeature("recent", 100, table="t_item", id_policy=mc))
    with pytest.raises(ConfigError, match="user.num_embeddings must be at least 2"):
        schema(user=SparseFeature("user", 1, id_policy=mc))
    with pytest.raises(ConfigError, match="user.eviction_interval must be positive"):
        schema(user=SparseFeature("user", 100, id_policy=mc, eviction_interval=0))
    managed = schema(user=SparseFeature("user", 100, id_policy=mc, eviction_interval=4))
    assert managed.tables()[0].managed_collision == ManagedCollision(EvictionPolicy.lfu, 4)
    assert managed.tables()[1].managed_collision is None
    with pytest.raises(ConfigError, match="at least one column"):
        FeatureSchema(label="click", sparse={"u": SparseFeature("u", 3)})


def string_hash_reference(text: str) -> int:
    """The documented string hash in plain Python integers."""
    mask = 2**64 - 1
    poly = sum(b * pow(0x100000001B3, i, 2**64) for i, b in enumerate(text.encode())) & mask
    return splitmix64_reference(poly ^ splitmix64_reference(len(text.encode())))


def splitmix64_reference(x: int) -> int:
    mask = 2**64 - 1
    z = (x + 0x9E3779B97F4A7C15) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return z ^ (z >> 31)


def test_modulo_hash_is_stable_and_strict_refuses_with_counts():
    # The same ids must map to the same rows on every machine and release: strings by the
    # polynomial hash, integers by SplitMix64, checked against plain-Python references and
    # the published first output of SplitMix64 seeded with 0.
    texts = ["u1", "", "héllo wörld", "a" * 40, "0068fd1e"]
    hashed = string_hash64(pa.array(texts).slice(0))
    assert hashed.tolist() == [string_hash_reference(t) for t in texts]
    sliced = pa.array(["x", *texts, "y"]).slice(1, len(texts))  # an array with an offset
    assert string_hash64(sliced).tolist() == hashed.tolist()
    large = pa.array(texts, pa.large_string())
    assert string_hash64(large).tolist() == hashed.tolist()
    assert len(set(string_hash64(pa.array([f"{i:08x}" for i in range(10000)])).tolist())) == 10000
    strings = to_rows(pa.array(["u1", "u2", "u1"]), IdPolicy.modulo, 1000, "f")
    assert strings[0] == strings[2] and strings.tolist() == [
        string_hash_reference("u1") % 1000,
        string_hash_reference("u2") % 1000,
        string_hash_reference("u1") % 1000,
    ]
    assert splitmix64_reference(0) == 0xE220A8397B1DCDAF
    raw = [0, 1, -1, 2**62]
    ints = to_rows(pa.array(raw, pa.int64()), IdPolicy.modulo, 97, "f")
    assert ints.tolist() == [splitmix64_reference(x % 2**64) % 97 for x in raw]
    assert to_rows(pa.array([3, 0]), IdPolicy.strict, 4, "f").tolist() == [3, 0]
    with pytest.raises(DataError, match=r"a.parquet: column 'x': 2 of 4 ids outside \[0, 4\)"):
        to_rows(pa.array([3, 4, -1, 0]), IdPolicy.strict, 4, "a.parquet: column 'x'")
    with pytest.raises(DataError, match="holds strings, but id_policy=strict") as strings:
        to_rows(pa.array(["a"]), IdPolicy.strict, 4, "f")
    # the advice is a training run's: evaluate and predict refuse other policies and rows
    # for a checkpoint's tables, so it led to a second refusal there (own-data review)
    assert "when training; a trained model keeps its tables' rows and policies" in str(
        strings.value
    )
    # managed_collision: the same hash, kept to 63 bits (the managed-collision module's raw
    # ids), not reduced to the table's rows.
    managed = to_rows(pa.array(raw, pa.int64()), IdPolicy.managed_collision, 97, "f")
    assert managed.tolist() == [splitmix64_reference(x % 2**64) % (2**63 - 1) for x in raw]
    named = to_rows(pa.array(["u1"]), IdPolicy.managed_collision, 97, "f")
    assert named.tolist() == [string_hash_reference("u1") % (2**63 - 1)]


def test_values_lists_shared_table_and_nulls(tmp_path):
    n = 12
    tbl = table(
        n,
        click=pa.array([1, None, *[i % 2 for i in range(2, n)]], pa.int64()),
        price=pa.array([None, *[float(i) for i in range(1, n)]]),
        item=pa.array([None, *range(1, n)], pa.int64()),
        recent=pa.array([None, [1, None], *[[i, i + 1] for i in range(2, n)]]),
    )
    sch = schema()
    splits = load_splits(config(write(tmp_path / "a.parquet", tbl), sch), [], 2, 0)
    read = splits.info.read
    assert read["rows_read"] == n and read["skipped_null_label"] == 1
    assert read["nulls"] == {"price": 1, "item": 1, "recent": 1}
    assert len(splits.train) == n - 1
    (batch,) = all_rows(splits.train, sch.feature_names)
    assert batch.labels.tolist() == [1.0, *[i % 2 for i in range(2, n)]]
    # per input too: which file fed which split, and whose the nulls are (data review)
    clean = write(tmp_path / "clean.parquet", table(n))
    both = load_splits(config(clean, sch, val_path=str(tmp_path / "a.parquet")), [], 2, 0)
    inputs = both.info.read["inputs"]
    assert inputs["data.path"]["files"] == [str(clean)] and inputs["data.path"]["nulls"] == {}
    assert inputs["data.val_path"]["nulls"] == {"price": 1, "item": 1, "recent": 1}
    assert inputs["data.val_path"]["files"] == [str(tmp_path / "a.parquet")]
    assert batch.dense_features[:2, 0].tolist() == pytest.approx([0.0, math.log(3)])
    assert batch.dense_features[:2, 1].tolist() == [0.0, -2.0]  # no log1p on age
    kjt = batch.sparse_features.to_dict()
    assert kjt["item"].lengths().tolist() == [0, *[1] * (n - 2)]  # null -> empty bag
    assert kjt["item"].values().tolist() == list(range(2, n))
    # the null row (row 1) is gone; row 0's list is null -> empty bag
    assert kjt["recent"].lengths().tolist() == [0, *[2] * (n - 2)]
    user = kjt["user"].values().tolist()
    assert (
        user[0] == string_hash_reference("u0") % 100
        and user[1] == string_hash_reference("u2") % 100
    )


def test_null_ids_inside_a_list_are_dropped_from_their_bag(tmp_path):
    tbl = table(4, recent=pa.array([[1, None, 2], None, [None], [3]]))
    splits = load_splits(config(write(tmp_path / "a.parquet", tbl)), [], 2, 0)
    (batch,) = all_rows(splits.train, schema().feature_names)
    recent = batch.sparse_features.to_dict()["recent"]
    assert recent.lengths().tolist() == [2, 0, 0, 1]
    assert recent.values().tolist() == [1, 2, 3]


def test_ranks_take_disjoint_contiguous_shares_and_shuffle_moves_row_groups(tmp_path):
    n = 40  # 10 row groups of 4; 2 ranks x 20 rows, batches of 6
    path = write(tmp_path / "a.parquet", table(n))
    split = load_splits(config(path), [], 2, 0).train
    keys = schema().feature_names

    def items(rank, seed=None):
        batches = all_rows(split, keys, world_size=2, rank=rank, seed=seed, batch_size=6)
        assert [len(b.labels) for b in batches] == [6, 6, 6, 2]
        return [v for b in batches for v in b.sparse_features.to_dict()["item"].values().tolist()]

    assert items(0) == list(range(20)) and items(1) == list(range(20, 40))
    shuffled = items(0, (0, 1)) + items(1, (0, 1))
    assert sorted(shuffled) == list(range(40)) and shuffled != list(range(40))
    groups = [shuffled[i : i + 4] for i in range(0, 40, 4)]
    assert all(g == list(range(g[0], g[0] + 4)) for g in groups)  # whole row groups move
    assert shuffled == items(0, (0, 1)) + items(1, (0, 1))  # the same order on every call
    # mode=verify's reference: 1 process with slices=2 sees each step as both ranks together
    ranks = [all_rows(split, keys, world_size=2, rank=r, batch_size=6) for r in (0, 1)]
    together = list(split.batches(12, 0, 1, keys, slices=2))
    assert len(together) == 4
    for joint, first, second in zip(together, *ranks, strict=True):
        assert joint.labels.tolist() == first.labels.tolist() + second.labels.tolist()
        for key in ("item", "recent"):
            parts = [b.sparse_features.to_dict()[key].values().tolist() for b in (first, second)]
            assert joint.sparse_features.to_dict()[key].values().tolist() == sum(parts, [])


def test_a_resumed_epoch_starts_at_its_step_without_reading_the_row_groups_before(
    tmp_path, monkeypatch
):
    """``skip`` gives the batches from step ``skip`` on, as reading them all would, and
    decodes none of the row groups that only earlier steps held (resume from step 3 of 4:
    before, it read every row group of the epoch again)."""
    path = write(tmp_path / "a.parquet", table(40))  # 10 row groups of 4
    split = load_splits(config(path), [], 2, 0).train
    keys = schema().feature_names
    decoded = _decoded_rows(monkeypatch)
    for rank in (0, 1):
        whole = list(split.batches(6, rank, 2, keys, (0, 1)))
        decoded.clear()
        rest = list(split.batches(6, rank, 2, keys, (0, 1), skip=3))
        assert [b.sparse_features.to_dict()["item"].values().tolist() for b in rest] == [
            b.sparse_features.to_dict()["item"].values().tolist() for b in whole[3:]
        ]
        assert sum(decoded) == 2  # the last 2 rows of the rank's 20: one row group's part


def test_fractions_cut_rows_in_file_order_and_explicit_val_file(tmp_path):
    path = write(tmp_path / "a.parquet", table(20))
    splits = load_splits(config(path, val_fraction=0.2, test_fraction=0.1), [], 2, 0)
    assert splits.info.rows == {"train": 14, "val": 4, "test": 2}
    keys = schema().feature_names
    val = all_rows(splits.val, keys)[0].sparse_features.to_dict()["item"].values().tolist()
    assert val == [14, 15, 16, 17]
    extra = write(tmp_path / "v.parquet", table(5))
    splits = load_splits(config(path, val_path=str(extra), test_fraction=0.5), [], 2, 0)
    assert splits.info.rows == {"train": 10, "val": 5, "test": 10}
    recent = pa.array([[i, i] for i in range(100)], pa.list_(pa.int64()))  # ids < 100 rows
    hundred = write(tmp_path / "h.parquet", table(100, recent=recent))
    splits = load_splits(config(hundred, val_fraction=0.29, test_fraction=0.57), [], 2, 0)
    assert splits.info.rows == {"train": 14, "val": 29, "test": 57}  # not 28 and 56


def test_folder_and_glob_inputs(tmp_path):
    write(tmp_path / "b.parquet", table(4))
    write(tmp_path / "a.parquet", table(6))
    (tmp_path / "notes.txt").write_text("not data")
    assert len(load_splits(config(tmp_path), [], 2, 0).train) == 10
    assert len(load_splits(config(tmp_path / "a*.parquet"), [], 2, 0).train) == 6
    with pytest.raises(DataError, match="no such file, folder or glob match"):
        load_splits(config(tmp_path / "z*.parquet"), [], 2, 0)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t.drop(["age"]), r"a.parquet: no column 'age' \(dense in data.schema\)"),
        (
            lambda t: t.set_column(5, "recent", pa.array([1.5] * len(t))),
            r"a.parquet: column 'recent' \(sparse feature recent\) is double, "
            r"data.schema expects a list of ids",
        ),
        (  # the key that says which (own-data review: not named)
            lambda t: t.set_column(5, "recent", pa.array(list(range(len(t))), pa.int64())),
            r"expects a list of ids per row \(list<int> or list<string>\): set "
            r"data.schema.sparse.recent.multi_hot=false for one id per row",
        ),
        (
            lambda t: t.set_column(4, "item", pa.array([[i] for i in range(len(t))])),
            r"expects one id per row \(int or string\): set data.schema.sparse.item.multi_hot="
            r"true for a list per row",
        ),
        (
            lambda t: t.set_column(1, "price", pa.array(["x"] * len(t))),
            r"a.parquet: column 'price' \(dense\) is string, data.schema expects numbers",
        ),
        (lambda t: t.slice(0, 0), r"a.parquet: the file holds no rows"),
        (
            lambda t: t.set_column(0, "click", pa.array([None] * len(t), pa.int64())),
            r"a.parquet \(data.path\): no row has a label \(4 rows read\)",  # (a.parquet...)
        ),
    ],
)
def test_bad_files_are_refused_naming_file_and_column(tmp_path, change, message):
    path = write(tmp_path / "a.parquet", change(table(4)))
    with pytest.raises(DataError, match=message):
        load_splits(config(path), [], 2, 0)


def test_not_parquet_and_truncated_files_are_refused_with_the_file(tmp_path):
    text = tmp_path / "a.parquet"
    text.write_text("label,price\n1,2\n")
    with pytest.raises(DataError, match=r"a.parquet: not a readable Parquet file") as csv:
        load_splits(config(text), [], 2, 0)
    assert "convert CSV / TSV with pyarrow" in str(csv.value)  # (own-data review)
    good = write(tmp_path / "b.parquet", table(8)).read_bytes()
    cut = tmp_path / "c.parquet"
    cut.write_bytes(good[: len(good) // 2])
    with pytest.raises(DataError, match=r"c.parquet: not a readable Parquet file") as cut_short:
        load_splits(config(cut), [], 2, 0)
    assert "convert CSV" not in str(cut_short.value)  # a Parquet file cut short
    empty = tmp_path / "d.parquet"
    empty.write_bytes(b"")
    with pytest.raises(DataError, match=r"d.parquet: not a readable Parquet file") as nothing:
        load_splits(config(empty), [], 2, 0)
    assert "convert CSV" not in str(nothing.value)  # no CSV either (diff review)


def test_strict_ids_out_of_range_are_refused_before_training_or_stop_the_stream(tmp_path):
    """From the footer's statistics at load time (decoding found them only when their row
    group was read: a test file's after training); without statistics, as they are read."""
    sch = schema()
    tbl = table(8, item=pa.array([1, 2, 3, 5, 6, 7, 8, 170], pa.int64()))
    with pytest.raises(DataError, match=r"a.parquet row group 1: column 'item' holds ids from "
                       r"6 to 170, outside \[0, 100\) under id_policy=strict"):  # fmt: skip
        load_splits(config(write(tmp_path / "a.parquet", tbl), sch), [], 2, 0)
    listed = table(8, recent=pa.array([[i, 100 * i] for i in range(8)], pa.list_(pa.int64())))
    with pytest.raises(DataError, match=r"row group 0: column 'recent' holds ids from 0 to 300"):
        load_splits(config(write(tmp_path / "l.parquet", listed), sch), [], 2, 0)
    # a row group whose unlabelled rows hold them is not refused (those rows are never read)
    unlabelled = table(8, item=tbl.column("item"), click=pa.array([0, 1, 0, 1, 0, 1, 0, None]))
    assert len(load_splits(config(write(tmp_path / "u.parquet", unlabelled), sch), [], 2, 0).train)
    bare = tmp_path / "b.parquet"
    pq.write_table(tbl, bare, row_group_size=4, write_statistics=False)
    split = load_splits(config(bare, sch), [], 2, 0).train
    with pytest.raises(DataError, match=r"b.parquet row group 1: column 'item' .*: 1 of 4 ids"):
        all_rows(split, sch.feature_names)


def test_streaming_holds_one_row_group_not_the_file(tmp_path, monkeypatch):
    path = write(tmp_path / "a.parquet", table(64), row_group_size=8)
    split = load_splits(config(path), [], 2, 0).train
    largest = _decoded_rows(monkeypatch)
    assert sum(len(b.labels) for b in all_rows(split, schema().feature_names, batch_size=5)) == 64
    assert max(largest) == 8 and len(largest) == 8
    assert np.sum(largest) == 64


def test_the_start_reads_no_list_column_whose_footer_counts_no_null(tmp_path, monkeypatch):
    """The null count of a multi-hot column read every row group of it at start (for such
    logs most of the bytes) where the footer already said there was none."""
    path = write(tmp_path / "a.parquet", table(64), row_group_size=8)
    read_columns: list[str] = []
    original = parquet_files.read_row_group

    def recording(parquet, file, group, columns):
        read_columns.extend(columns)
        return original(parquet, file, group, columns)

    monkeypatch.setattr(parquet_files, "read_row_group", recording)
    splits = load_splits(config(path), [], 2, 0)
    assert set(read_columns) == {"click"} and "recent" not in splits.info.read["nulls"]


def test_the_shipped_criteo_schema_reads_raw_criteo_columns(tmp_path):
    """conf/data/schema/criteo.yaml on the raw layout (nullable counts, hex string ids), as
    make bench's Parquet benchmark converts a Criteo TSV."""
    from dlrm_exp.bench.parquet import criteo_parquet
    from dlrm_exp.config import conf_dir, load_schema_file
    from dlrm_exp.data.criteo_format import write_criteo_tsv

    tsv = write_criteo_tsv(tmp_path / "day_0.tsv", 300, seed=0, empty_rate=0.2)
    path = criteo_parquet(tsv, tmp_path / "day_0.parquet", 128)
    sch = load_schema_file(conf_dir() / "data" / "schema" / "criteo.yaml")
    splits = load_splits(config(path, sch), [], 13, 0)
    assert splits.info.read["rows_read"] == 300 and splits.info.read["nulls"]["I1"] > 0
    (batch,) = all_rows(splits.train, sch.feature_names, batch_size=300)
    assert batch.dense_features.shape == (300, 13) and batch.dense_features.min() >= 0
    kjt = batch.sparse_features.to_dict()
    lengths = kjt["cat_0"].lengths()
    assert 0 < int((lengths == 0).sum()) < 300  # empty ids are empty bags
    # C1 read as TorchRec reads it: int(C1, 16) % num_embeddings (hex_modulo)
    c1 = [c for line in tsv.read_text().splitlines() if (c := line.split("\t")[14])]
    assert kjt["cat_0"].values().tolist() == [int(c, 16) % 100000 for c in c1]


def test_features_of_one_table_apart_in_the_schema_keep_their_own_ids(tmp_path):
    """Keys are grouped by table (TorchRec's order); decoding follows the keys, so a feature
    between two that share a table does not get their ids."""
    sch = FeatureSchema(
        label="click",
        dense=[DenseColumn(column="price")],
        sparse={
            "a": SparseFeature("item", 100, table="w", id_policy=IdPolicy.strict),
            "b": SparseFeature("user", 1000),
            "c": SparseFeature("recent", 100, table="w", multi_hot=True, id_policy=IdPolicy.strict),
        },
    )
    assert sch.feature_names == ["a", "c", "b"]
    splits = load_splits(config(write(tmp_path / "a.parquet", table(4)), sch), [], 1, 0)
    (batch,) = all_rows(splits.train, sch.feature_names)
    kjt = batch.sparse_features.to_dict()
    assert kjt["a"].values().tolist() == [0, 1, 2, 3]
    assert kjt["c"].values().tolist() == [0, 1, 1, 2, 2, 3, 3, 4]
    assert kjt["b"].values().tolist() == [string_hash_reference(f"u{i}") % 1000 for i in range(4)]


def test_nan_is_missing_and_labels_must_be_clicks(tmp_path):
    nan = float("nan")
    tbl = table(
        4,
        click=pa.array([1.0, nan, 0.0, 1.0]),
        price=pa.array([nan, 1.0, float("inf"), 3.0]),
    )
    splits = load_splits(config(write(tmp_path / "a.parquet", tbl)), [], 2, 0)
    assert splits.info.read["skipped_null_label"] == 1 and len(splits.train) == 3
    (batch,) = all_rows(splits.train, schema().feature_names)
    assert batch.dense_features[:, 0].tolist() == pytest.approx([0.0, 0.0, math.log(4)])
    bad = table(4, click=pa.array([1, 0, 2, -1], pa.int64()))
    with pytest.raises(DataError, match=r"b.parquet row group 0: 2 of 4 labels are not 0 or 1"):
        load_splits(config(write(tmp_path / "b.parquet", bad)), [], 2, 0)  # while scanning


def test_a_decimal_column_is_a_dense_number(tmp_path):
    """A SQL or Spark export's ``decimal128`` price was refused as no number (review)."""
    from decimal import Decimal

    cents = [Decimal("1.50"), None, Decimal("3.00"), Decimal("0.25")]
    prices = pa.array(cents, pa.decimal128(12, 2))
    tbl = table(4, price=prices)
    splits = load_splits(config(write(tmp_path / "d.parquet", tbl)), [], 2, 0)
    (batch,) = all_rows(splits.train, schema().feature_names)
    expected = [math.log1p(1.5), 0.0, math.log1p(3.0), math.log1p(0.25)][: len(splits.train)]
    assert batch.dense_features[:, 0].tolist() == pytest.approx(expected)


def test_strict_dictionary_ids_check_the_values_used(tmp_path):
    ids = pa.DictionaryArray.from_arrays(pa.array([0, 1, 0], pa.int32()), pa.array([3, 7, 900]))
    assert to_rows(ids, IdPolicy.strict, 10, "f").tolist() == [3, 7, 3]  # 900 is never used
    huge = pa.array([3, 2**63], pa.uint64())  # reported as it is, not wrapped negative
    with pytest.raises(
        DataError, match=r"1 of 2 ids outside \[0, 10\) .* \(first: 9223372036854775808\)"
    ):
        to_rows(huge, IdPolicy.strict, 10, "f")


def test_names_torchrec_cannot_take_are_refused():
    with pytest.raises(ConfigError, match=r"feature name 'user.id' must be letters"):
        schema(**{"user.id": SparseFeature("user.id", 10)})
    with pytest.raises(ConfigError, match=r"table name 't-x' must be letters"):
        schema(x=SparseFeature("x", 10, table="t-x"))


def test_a_cap_applies_to_the_schema_ids(tmp_path):
    from conftest import compose_cfg

    cfg = compose_cfg(
        ["data=parquet", "data/schema=criteo", "data.path=x", "model.num_embeddings_cap=1000"]
    )
    assert cfg.model.table_sizes == [1000] * 26
    assert {f.num_embeddings for f in cfg.data.schema.sparse.values()} == {1000}


def test_preprocess_refuses_two_inputs_with_one_output_name(tmp_path):
    from dlrm_exp.data.criteo_format import write_criteo_tsv
    from dlrm_exp.data.criteo_parquet import write_criteo_parquet

    first = write_criteo_tsv(tmp_path / "a" / "train.txt", 10, seed=0)
    second = write_criteo_tsv(tmp_path / "b" / "train.txt", 10, seed=1)
    with pytest.raises(DataError, match="same Parquet file"):
        write_criteo_parquet([first, second], tmp_path / "out", criteo_schema([100] * 26), 64)
    assert not (tmp_path / "out").exists()  # nothing written


def test_preprocess_names_parquet_files_of_other_inputs_in_its_folder(tmp_path, caplog):
    """Files of another input with the same settings were read with this run's by a data.path
    naming the folder, with no word (the npy output warns)."""
    from dlrm_exp.data.criteo_format import write_criteo_tsv
    from dlrm_exp.data.criteo_parquet import write_criteo_parquet

    schema, out = criteo_schema([100] * 26), tmp_path / "out"
    day_0 = write_criteo_tsv(tmp_path / "day_0", 10, seed=0)
    write_criteo_parquet([day_0], out, schema, 64)
    write_criteo_parquet([day_0], out, schema, 64)  # the same input again: nothing to say
    assert "from other inputs" not in caplog.text
    write_criteo_parquet([write_criteo_tsv(tmp_path / "day_1", 10, seed=1)], out, schema, 64)
    assert f"preprocess.output_dir={out} also holds day_0.parquet from other inputs" in caplog.text


def test_pooling_factors_reach_the_planner_per_feature_of_each_table():
    from conftest import compose_cfg
    from dlrm_exp.planning.constraints import build_constraints
    from dlrm_exp.planning.tables import table_configs

    cfg = compose_cfg(
        [
            "data=parquet",
            "data/schema=criteo",
            "data.path=x",
            "data.schema.sparse.cat_1.pooling_factor=3.5",
            "data.schema.sparse.cat_2.table=t_cat_1",
            "data.schema.sparse.cat_2.pooling_factor=2",
        ]
    )
    tables = table_configs(cfg.model)
    assert [t.feature_names for t in tables[:3]] == [["cat_0"], ["cat_1", "cat_2"], ["cat_3"]]
    constraints = build_constraints(
        cfg.sharding, tables, ["table_wise"], cfg.data.pooling_factors()
    )
    assert constraints["t_cat_0"].pooling_factors == [1.0]
    assert constraints["t_cat_1"].pooling_factors == [3.5, 2.0]
    assert constraints["t_cat_3"].pooling_factors == [1.0]


def test_verify_names_the_tables_that_sum_several_ids():
    from conftest import compose_cfg
    from dlrm_exp.modes.verify import pooled_tables

    cfg = compose_cfg(
        [
            "data=parquet",
            "data/schema=criteo",
            "data.path=x",
            "data.schema.sparse.cat_2.table=t_cat_1",
            "data.schema.sparse.cat_5.multi_hot=true",
        ]
    )
    assert pooled_tables(cfg) == ["t_cat_1", "t_cat_5"]
    assert pooled_tables(compose_cfg()) == []
    multi_hot = compose_cfg(["data=criteo_multihot"])
    sizes = multi_hot.data.multi_hot_sizes
    assert pooled_tables(multi_hot) == [f"t_cat_{i}" for i, m in enumerate(sizes) if m > 1]


def test_a_file_named_by_two_splits_or_twice_is_refused(tmp_path):
    """Its rows would be trained and validated on (or trained on twice): refused before
    reading, naming the file and the keys."""
    from dlrm_exp.data import check_input_paths

    (tmp_path / "data").mkdir()
    write(tmp_path / "data" / "a.parquet", table())
    write(tmp_path / "data" / "b.parquet", table())
    folder, b = str(tmp_path / "data"), str(tmp_path / "data" / "b.parquet")
    both = config(folder, val_path=[b])
    for check in (lambda: load_splits(both, [], 2, 0), lambda: check_input_paths(both)):
        with pytest.raises(DataError, match=r"b.parquet is named by data.path and data.val_path"):
            check()
    with pytest.raises(DataError, match=r"b.parquet is named twice by data.path"):
        load_splits(ParquetDataConfig(path=[folder, b], schema=schema()), [], 2, 0)


def test_ids_of_another_type_in_another_split_and_bad_labels_are_refused_before_training(
    tmp_path,
):
    """``user`` (modulo) as strings in training and integers in validation would hash the same
    id to different rows; a label of 2 in the test file would stop the run only after training.
    Both are found while scanning, naming the files."""
    train = write(tmp_path / "train.parquet", table())
    ints = write(tmp_path / "val.parquet", table(user=pa.array(list(range(12)), pa.int64())))
    with pytest.raises(DataError, match=r"val.parquet: column 'user' holds integer ids, .*"
                       r"train.parquet holds string ones"):  # fmt: skip
        load_splits(config(train, val_path=str(ints)), [], 2, 0)
    clicks = pa.array([0, 1, 2] + [0] * 9, pa.int64())
    bad = write(tmp_path / "test.parquet", table(click=clicks))
    with pytest.raises(DataError, match=r"test.parquet row group 0: 1 of 4 labels are not 0 or 1"):
        load_splits(config(train, test_path=str(bad)), [], 2, 0)


def test_a_reader_keeps_a_bounded_number_of_files_open(tmp_path, monkeypatch):
    """Shuffled row groups visit every file: with more files than the open-file limit a reader
    that kept each one open failed ('Too many open files'). It keeps the most recent open,
    and gives the same rows."""
    from dlrm_exp.data import parquet

    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(6):
        write(folder / f"part-{i}.parquet", table(8), row_group_size=4)
    cfg = config(folder)
    keys = schema().feature_names
    wide = all_rows(load_splits(cfg, [], 2, 0).train, keys, seed=(0, 1))
    open_now, most = set(), [0]
    real = parquet.open_parquet

    def counted(path):
        handle = real(path)
        open_now.add(id(handle))
        most[0] = max(most[0], len(open_now))
        close = handle.close
        handle.close = lambda: (open_now.discard(id(handle)), close())
        return handle

    monkeypatch.setattr(parquet, "open_parquet", counted)
    monkeypatch.setattr(parquet, "OPEN_FILES", 2)
    narrow = all_rows(load_splits(cfg, [], 2, 0).train, keys, seed=(0, 1))
    assert most[0] == 3 and not open_now  # 2 kept + the one opening; all closed at the end
    assert [b.labels.tolist() for b in narrow] == [b.labels.tolist() for b in wide]


def test_strict_string_ids_are_refused_from_the_files_schema(tmp_path):
    """Under id_policy=strict a string column was refused only when a row group was decoded,
    which for a test split came after training."""
    import pyarrow as pa

    from conftest import compose_cfg
    from dlrm_exp.data.parquet_files import check_id_kinds

    cfg = compose_cfg(["data=parquet", "data/schema=criteo", "data.path=x",
                       "data.schema.sparse.cat_0.id_policy=strict"])  # fmt: skip
    schema = cfg.data.schema
    columns = [schema.label, *schema.feature_columns]
    arrow = pa.schema([(c, pa.string() if c.startswith("C") else pa.float32()) for c in columns])
    with pytest.raises(
        DataError, match=r"t.parquet: column 'C1' holds strings, but id_policy=strict"
    ):
        check_id_kinds(tmp_path / "t.parquet", arrow, schema, {})


def test_a_label_column_of_nulls_only_is_no_label_for_rows_to_score():
    """pyarrow and pandas type a column of nulls only ``null``: predict refused such a label
    column as not numbers, though rows to score may have null labels."""
    from dlrm_exp.data.parquet_files import check_columns, has_label_column

    nulls = table(4, click=pa.nulls(4)).schema
    assert not has_label_column(nulls, schema()) and has_label_column(table(4).schema, schema())
    check_columns(Path("rows.parquet"), nulls, schema(), require_label=False)
    with pytest.raises(DataError, match=r"column 'click' \(label\) is null, data.schema expects"):
        check_columns(Path("rows.parquet"), nulls, schema())  # training needs labels
    # a label column of strings: rows to score need no label (it was refused: own-data review)
    strings = table(4, click=pa.array(["yes", "no", "yes", "no"])).schema
    assert not has_label_column(strings, schema())
    check_columns(Path("rows.parquet"), strings, schema(), require_label=False)
    with pytest.raises(DataError, match=r"column 'click' \(label\) is string"):
        check_columns(Path("rows.parquet"), strings, schema())  # training still refuses it


def test_dense_values_beyond_float32_read_finite(tmp_path):
    """A float64 sentinel (1e300, float64's max) became inf in the float32 batch, with log1p
    too (the cast came before the log): a NaN loss, or a test split scored n/a."""
    big = np.finfo(np.float64).max
    tbl = table(4, price=pa.array([1e300, -1e300, 3.0, 1e39]), age=pa.array([1e39, -big, 5.0, 2.0]))
    splits = load_splits(config(write(tmp_path / "a.parquet", tbl)), [], 2, 0)
    (batch,) = all_rows(splits.train, schema().feature_names)
    dense = batch.dense_features
    assert torch.isfinite(dense).all()
    assert dense[:, 0].tolist() == pytest.approx([math.log1p(1e300), 0.0, math.log(4), 89.80], 1e-4)
    assert dense[:, 1].tolist() == [0.0, 0.0, 5.0, 2.0]  # beyond float32: 0, as inf is


def test_a_column_of_nulls_only_in_one_file_reads_as_nulls(tmp_path):
    """A feature absent from one day's file: pyarrow (and pandas) type such a column
    ``null`` (``list<null>`` for lists), which was refused ("is null, data.schema expects
    numbers"), though nulls read as 0 and empty bags, and mode=schema wrote a schema for it."""
    write(tmp_path / "a.parquet", table(4))
    nulls = {"price": pa.nulls(4), "user": pa.nulls(4), "item": pa.nulls(4),
             "recent": pa.nulls(4, pa.list_(pa.null()))}  # fmt: skip
    write(tmp_path / "b.parquet", table(4, **nulls))
    assert all(pa.types.is_null(pq.read_schema(tmp_path / "b.parquet").field(c).type)
               for c in ("price", "user", "item"))  # fmt: skip
    splits = load_splits(config(tmp_path), [], 2, 0)
    assert splits.info.read["nulls"] == {"price": 4, "user": 4, "item": 4, "recent": 4}
    (batch,) = all_rows(splits.train, schema().feature_names)
    assert batch.dense_features[4:, 0].tolist() == [0.0] * 4
    kjt = batch.sparse_features.to_dict()
    for name in ("user", "item", "recent"):
        assert kjt[name].lengths().tolist()[4:] == [0] * 4, name
    assert kjt["recent"].lengths().tolist()[:4] == [2] * 4
    # a list column of nulls only as pandas writes it, typed null (not list<null>)
    write(tmp_path / "b.parquet", table(4, recent=pa.nulls(4)))
    (batch,) = all_rows(load_splits(config(tmp_path), [], 2, 0).train, schema().feature_names)
    assert batch.sparse_features.to_dict()["recent"].lengths().tolist()[4:] == [0] * 4
