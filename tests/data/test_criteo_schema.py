"""One code path for Criteo: ``data=criteo_tsv`` decodes its lines by the shipped Criteo
feature schema, whose id rule is TorchRec's ``int(C, 16) % N``, so the same rows as a TSV file
and as Parquet give the same batches, whatever the schema's id policies."""

from dataclasses import replace

import pyarrow as pa
import pytest
import torch

from dlrm_exp.bench.parquet import criteo_parquet
from dlrm_exp.config import CriteoTsvDataConfig, IdPolicy, ParquetDataConfig, criteo_schema
from dlrm_exp.data import load_splits
from dlrm_exp.data.criteo_format import write_criteo_tsv
from dlrm_exp.data.criteo_tsv import criteo_id_kinds
from dlrm_exp.data.id_policy import to_rows
from dlrm_exp.errors import DataError


def test_hex_modulo_is_torchrecs_criteo_rule():
    texts = ["68fd1e64", "FFFFFFFF", "", "0", "abcdef0123456789"]
    rows = to_rows(pa.array(texts), IdPolicy.hex_modulo, 1000, "f")
    assert rows.tolist() == [int(t or "0", 16) % 1000 for t in texts]
    offset = pa.array(["zz", *texts]).slice(1)  # an array with an offset
    assert to_rows(offset, IdPolicy.hex_modulo, 1000, "f").tolist() == rows.tolist()
    large = pa.array(texts, pa.large_string())
    assert to_rows(large, IdPolicy.hex_modulo, 1000, "f").tolist() == rows.tolist()
    ints = to_rows(pa.array([5, 1234, -3], pa.int64()), IdPolicy.hex_modulo, 1000, "f")
    assert ints.tolist() == [5, 234, 997]  # integers as they are, Python's %
    big = to_rows(pa.array([2**64 - 1, 2**63], pa.uint64()), IdPolicy.hex_modulo, 7, "f")
    assert big.tolist() == [(2**64 - 1) % 7, 2**63 % 7]  # unsigned 64-bit ids, not wrapped
    where = "a.parquet: column 'C1'"
    with pytest.raises(DataError, match=rf"{where}: 2 of 4 ids are not hex.*'0x1'"):
        to_rows(pa.array(["0x1", "1", "g", "ff"]), IdPolicy.hex_modulo, 10, where)
    with pytest.raises(DataError, match="at most 16 digits"):
        to_rows(pa.array(["1" * 17]), IdPolicy.hex_modulo, 10, "f")


def test_tsv_and_parquet_of_the_same_rows_give_the_same_batches(tmp_path):
    tsv = write_criteo_tsv(tmp_path / "day_0.tsv", 400, seed=1, empty_rate=0.1)
    parquet = criteo_parquet(tsv, tmp_path / "day_0.parquet", 64, empty_ids_null=False)
    schema = criteo_schema([97] * 26)
    for name, policy in (("cat_3", IdPolicy.modulo), ("cat_4", IdPolicy.managed_collision)):
        schema.sparse[name] = replace(schema.sparse[name], id_policy=policy)
    common = {"path": None, "schema": schema, "val_fraction": 0.1, "test_fraction": 0.2}
    from_tsv = load_splits(CriteoTsvDataConfig(**common | {"path": str(tsv)}), [], 13, 0)
    from_parquet = load_splits(
        ParquetDataConfig(**common | {"path": str(parquet)}, shuffle_row_groups=False), [], 13, 0
    )
    keys = schema.feature_names
    for split in ("train", "val", "test"):
        a = list(getattr(from_tsv, split).batches(40, 0, 1, keys))
        b = list(getattr(from_parquet, split).batches(40, 0, 1, keys))
        assert len(a) == len(b) > 0
        for x, y in zip(a, b, strict=True):
            assert torch.equal(x.dense_features, y.dense_features)
            assert torch.equal(x.labels, y.labels)
            assert torch.equal(x.sparse_features.values(), y.sparse_features.values())
            assert torch.equal(x.sparse_features.lengths(), y.sparse_features.lengths())
    (first,) = list(from_tsv.train.batches(len(from_tsv.train), 0, 1, keys))
    ids = first.sparse_features.to_dict()
    assert int(ids["cat_0"].values().max()) < 97 and int(ids["cat_3"].values().max()) < 97
    assert int(ids["cat_4"].values().max()) >= 97  # raw ids for the managed-collision module
    c1 = [line.split("\t")[14] for line in tsv.read_text().splitlines()][: len(from_tsv.train)]
    assert ids["cat_0"].values().tolist() == [int(c or "0", 16) % 97 for c in c1]


def test_blocks_decode_alike_merged_or_alone_and_strict_names_the_lines(tmp_path):
    from dlrm_exp.data.criteo_format import criteo_lines
    from dlrm_exp.data.criteo_tsv import decode_block, merge_blocks, read_files
    from dlrm_exp.data.preprocess.tsv_parse import padded_block, parse_block

    lines = criteo_lines(300, seed=2, empty_rate=0.1)
    schema = criteo_schema([1000] * 26)
    schema.sparse["cat_2"] = replace(schema.sparse["cat_2"], id_policy=IdPolicy.modulo)

    def parse(text):
        return parse_block(padded_block(text.encode(), "x"))

    halves = [parse("\n".join(lines[:100]) + "\n"), parse("\n".join(lines[100:]) + "\n")]
    merged = decode_block(merge_blocks(halves), schema, "x")
    whole = decode_block(parse("\n".join(lines) + "\n"), schema, "x")
    for column in ("dense", "sparse", "labels"):
        assert torch.equal(getattr(merged, column), getattr(whole, column))
    counts = replace(schema, dense=schema.dense[1:])  # I1, a count, as a hashed feature
    counts.sparse["cat_9"] = replace(schema.sparse["cat_9"], column="I1", id_policy=IdPolicy.modulo)
    block = halves[0]
    ids = decode_block(block, counts, "x").sparse[:, counts.feature_names.index("cat_9")]
    expected = to_rows(pa.array(block.dense[:, 0]), IdPolicy.modulo, 1000, "x")
    assert ids.tolist() == expected.tolist()  # hashed as the integer it is
    # what a checkpoint records of it: hashed C columns as strings, the count as an integer
    counts.sparse["cat_2"] = replace(schema.sparse["cat_2"], id_policy=IdPolicy.modulo)
    assert criteo_id_kinds(counts) == {"cat_2": "string", "cat_9": "integer"}
    path = tmp_path / "day_0.tsv"
    path.write_text("\n".join(lines) + "\n")
    schema.sparse["cat_0"] = replace(schema.sparse["cat_0"], id_policy=IdPolicy.strict)
    with pytest.raises(DataError, match=rf"{path} lines 1\.\.300: column 'C1' .* ids outside"):
        read_files([path], schema, 5)
