"""data=criteo_npy: the 1TB and Kaggle split rules, agreement with TorchRec's reader, id checks."""

import numpy as np
import pytest
import torch

from conftest import torchrec_criteo_rows
from dlrm_exp.config import CriteoNpyDataConfig, NpyDataset, OutOfRange
from dlrm_exp.data.criteo_npy import KAGGLE_PARTS, load_criteo_npy, split_bounds
from dlrm_exp.errors import DataError

SIZES = [100] * 26


def write_day(folder, day, rows, seed):
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    dense = rng.random((rows, 13), dtype=np.float32)
    sparse = rng.integers(0, 2**32, size=(rows, 26), dtype=np.int64)
    labels = rng.integers(0, 2, size=(rows, 1), dtype=np.int32)
    for kind, array in (("dense", dense), ("sparse", sparse), ("labels", labels)):
        np.save(folder / f"day_{day}_{kind}.npy", array)
    return dense, sparse, labels


def config(folder, **kw):
    return CriteoNpyDataConfig(path=str(folder), **kw)


def test_1tb_split_matches_torchrec_val_and_test(tmp_path):
    days = {d: write_day(tmp_path, d, rows, d) for d, rows in ((0, 50), (1, 40), (23, 31))}
    train, val, test, info = load_criteo_npy(config(tmp_path), SIZES, seed=0)
    assert info.days == [0, 1, 23]
    assert (len(train), len(val), len(test)) == (90, 16, 15)
    assert np.array_equal(train.labels.numpy(), np.concatenate([days[0][2], days[1][2]])[:, 0])
    for stage, split in (("val", val), ("test", test)):
        dense, labels, values = torchrec_criteo_rows(tmp_path, 23, stage, 4, hashes=SIZES)
        assert torch.equal(dense, split.dense)
        assert torch.equal(labels.float(), split.labels)
        assert torch.equal(values, split.sparse)
    for column in ("dense", "sparse", "labels"):  # held once: the splits are consecutive views
        first, second, third = (getattr(split, column) for split in (train, val, test))
        assert first.data_ptr() + first.nbytes == second.data_ptr(), column
        assert second.data_ptr() + second.nbytes == third.data_ptr(), column


def test_kaggle_split_in_sevenths_test_first_as_facebookresearch_dlrm():
    """dlrm cuts the rows into 7 days as ``np.array_split`` does and halves the last with
    ``test_indices, val_indices = np.array_split(test_indices, 2)``: test first."""
    assert split_bounds(70, NpyDataset.criteo_kaggle, 70) == ((0, 60), (65, 70), (60, 65))
    for rows in (77, 80, 45_840_617):  # 45,840,617 Kaggle rows = 7 x 6,548,659 + 4
        last = np.array_split(np.arange(rows), KAGGLE_PARTS)[-1]
        test, val = np.array_split(last, 2)
        bounds = split_bounds(rows, NpyDataset.criteo_kaggle, 0)
        assert bounds == ((0, last[0]), (val[0], val[-1] + 1), (test[0], test[-1] + 1)), rows
    assert KAGGLE_PARTS == 7


def test_kaggle_reads_every_day_in_order_and_shuffles_only_train(tmp_path):
    days = [write_day(tmp_path, 0, 40, 1), write_day(tmp_path, 1, 30, 2)]
    plain = load_criteo_npy(config(tmp_path, dataset=NpyDataset.criteo_kaggle), SIZES, 0)
    assert [len(s) for s in plain[:3]] == [60, 5, 5]
    rows = np.concatenate([labels for _, _, labels in days])
    assert torch.equal(plain[2].labels, torch.from_numpy(rows[60:65, 0]).float())  # test first
    assert torch.equal(plain[1].labels, torch.from_numpy(rows[65:70, 0]).float())
    mixed = load_criteo_npy(
        config(tmp_path, dataset=NpyDataset.criteo_kaggle, shuffle_training_set=True), SIZES, 0
    )
    assert not torch.equal(plain[0].dense, mixed[0].dense)
    order = torch.from_numpy(np.random.default_rng(0).permutation(60))  # seeded: resume needs it
    for column in ("dense", "sparse", "labels"):  # rows move whole
        assert torch.equal(getattr(plain[0], column)[order], getattr(mixed[0], column)), column
    assert torch.equal(plain[1].dense, mixed[1].dense) and torch.equal(
        plain[2].dense, mixed[2].dense
    )


def test_mmap_gives_the_same_rows(tmp_path):
    write_day(tmp_path, 0, 20, 1)
    write_day(tmp_path, 1, 20, 2)
    a = load_criteo_npy(config(tmp_path), SIZES, 0)
    b = load_criteo_npy(config(tmp_path, mmap_mode=True), SIZES, 0)
    for x, y in zip(a[:3], b[:3], strict=True):
        assert torch.equal(x.dense, y.dense[:]) and torch.equal(x.sparse, y.sparse[:])
        assert torch.equal(x.labels, y.labels[:])


def test_ids_hashed_or_refused(tmp_path):
    _, sparse, _ = write_day(tmp_path, 0, 20, 1)
    write_day(tmp_path, 1, 20, 2)
    train = load_criteo_npy(config(tmp_path), SIZES, 0)[0]
    assert torch.equal(train.sparse, torch.from_numpy(sparse % 100))
    with pytest.raises(DataError, match=r"feature cat_0 has ids in .* table has 100 rows"):
        load_criteo_npy(config(tmp_path, out_of_range=OutOfRange.error), SIZES, 0)
    np.save(tmp_path / "day_0_sparse.npy", sparse % 100)
    np.save(tmp_path / "day_1_sparse.npy", sparse % 100)
    load_criteo_npy(config(tmp_path, out_of_range=OutOfRange.error), SIZES, 0)


@pytest.mark.parametrize("mmap_mode", [False, True])
def test_out_of_range_ids_are_reported_over_every_day(tmp_path, mmap_mode):
    for day in range(3):
        _, sparse, _ = write_day(tmp_path, day, 20, day)
        sparse %= 100
        if day == 1:
            sparse[5, 3] = 150  # cat_3 too high on day 1
        if day == 2:
            sparse[7, 3], sparse[0, 9] = -1, 100  # cat_3 negative and cat_9 too high on day 2
        np.save(tmp_path / f"day_{day}_sparse.npy", sparse)
    cfg = config(tmp_path, mmap_mode=mmap_mode, out_of_range=OutOfRange.error)
    with pytest.raises(DataError) as err:
        load_criteo_npy(cfg, SIZES, 0)
    assert str(err.value).startswith(
        "data.path: feature cat_3 has ids in [-1, 150] but its table has 100 rows (out of range "
        "in 2 of 3 day(s): day_1, day_2; 2 of 26 features out of range)"
    )


def test_bad_folders(tmp_path):
    with pytest.raises(DataError, match="no such folder"):
        load_criteo_npy(config(tmp_path / "nope"), SIZES, 0)
    with pytest.raises(DataError, match="mode=preprocess"):
        load_criteo_npy(config(tmp_path), SIZES, 0)
    write_day(tmp_path, 0, 10, 1)
    with pytest.raises(DataError, match="at least 2 days"):
        load_criteo_npy(config(tmp_path), SIZES, 0)
    write_day(tmp_path, 1, 10, 1)
    (tmp_path / "day_1_labels.npy").unlink()
    with pytest.raises(DataError, match="day_1_labels.npy is missing"):
        load_criteo_npy(config(tmp_path), SIZES, 0)
    np.save(tmp_path / "day_1_labels.npy", np.zeros((9, 1), np.int32))
    with pytest.raises(DataError, match="disagree on the row count"):
        load_criteo_npy(config(tmp_path), SIZES, 0)
    (tmp_path / "day_1_labels.npy").write_bytes(b"not npy")
    with pytest.raises(DataError, match="not a readable npy file"):
        load_criteo_npy(config(tmp_path), SIZES, 0)


def _bad_day(folder, case):
    """Day 1 of two, broken the way ``case`` says."""
    write_day(folder, 0, 20, 1)
    _, sparse, labels = write_day(folder, 1, 20, 2)
    if case == "labels":
        labels[[3, 9, 11], 0] = [2, -1, 2]
        np.save(folder / "day_1_labels.npy", labels)
    elif case == "half_labels":
        np.save(folder / "day_1_labels.npy", labels.astype(np.float32) / 2)
    elif case == "float_ids":
        np.save(folder / "day_1_sparse.npy", sparse.astype(np.float64) + 0.7)
    elif case == "string_ids":
        np.save(folder / "day_1_sparse.npy", sparse.astype(str))
    elif case == "garbage":  # numpy's advice, allow_pickle=True, would run code from it
        (folder / "day_1_dense.npy").write_bytes(b"not an npy file at all")
    elif case == "empty_file":
        (folder / "day_1_dense.npy").write_bytes(b"")
    elif case == "padded":
        for kind in ("dense", "sparse", "labels"):
            (folder / f"day_1_{kind}.npy").rename(folder / f"day_01_{kind}.npy")
    elif case == "rows":
        np.save(folder / "day_1_dense.npy", np.zeros((19, 13), np.float32))
    elif case == "empty_last_day":
        for kind, width in (("dense", 13), ("sparse", 26), ("labels", 1)):
            np.save(folder / f"day_1_{kind}.npy", np.zeros((0, width), np.int32))


@pytest.mark.parametrize("mmap_mode", [False, True])
@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("labels", r"day_1_labels.npy: 3 of 20 labels are neither 0 nor 1 \(first at row 3: 2\)"),
        ("half_labels", r"day_1_labels.npy: \d+ of 20 labels are neither 0 nor 1 .*: 0.5\)"),
        ("float_ids", r"day_1_sparse.npy: dtype float64, expected integer \(e.g. int64\)"),
        ("string_ids", r"day_1_sparse.npy: dtype <U\d+, expected integer"),
        ("empty_file", r"day_1_dense.npy: not a readable npy file"),
        ("garbage", r"day_1_dense.npy: not a readable npy file \(not an npy array\)$"),
        ("padded", r"holds day_01_dense.npy: day numbers are written without leading zeros "
         r"\(day_1_\*.npy"),
        ("rows", r"day_1 files disagree on the row count: day_1_dense.npy 19, day_1_sparse.npy "
         r"20, day_1_labels.npy 20"),
        ("empty_last_day", r"data.dataset=criteo_1tb splits 20 rows into train 20, val 0, test 0 "
         r"\(every day but the last trains, the last \(0 rows\) is halved\): every split "),
    ],
)  # fmt: skip
def test_bad_day_files_are_refused_naming_the_file(tmp_path, case, message, mmap_mode):
    """Labels other than 0/1 trained and then crashed in evaluation (or scored AUROC 0.0);
    float ids were truncated; an empty file gave a raw EOFError; day_01 was read as day_1;
    an empty last day left validation and test empty, all without a word."""
    _bad_day(tmp_path, case)
    with pytest.raises(DataError, match=message):
        load_criteo_npy(config(tmp_path, mmap_mode=mmap_mode), SIZES, 0)


@pytest.mark.parametrize("mmap_mode", [False, True])
def test_non_finite_dense_values_are_refused_naming_the_file_and_row(tmp_path, mmap_mode):
    """A NaN and an inf in the last day: every validation or test metric came out
    null in a completed run, without a word (data review). Training rows are left to
    train.on_nonfinite (stop at, or skip, their step)."""
    trained = write_day(tmp_path, 0, 20, seed=0)[0]
    trained[5, 1] = np.inf
    np.save(tmp_path / "day_0_dense.npy", trained)
    dense = write_day(tmp_path, 1, 20, seed=1)[0]
    dense[13, 2], dense[15, 3] = np.nan, np.inf
    np.save(tmp_path / "day_1_dense.npy", dense)
    where = (
        r"day_1_dense.npy: 2 dense value\(s\) not finite in rows 0 to 19 \(first at row 13, "
        r"column 2: nan\)"
    )
    # read whole: checked as each day is copied (every rank); mapped: by rank 0's scan of the
    # held-out rows before training (a per-batch check raised on one rank only, mid-step)
    with pytest.raises(DataError, match=where):
        load_criteo_npy(config(tmp_path, mmap_mode=mmap_mode), SIZES, 0)
    dense[13, 2], dense[15, 3] = 0.0, 0.0  # day 0's inf alone: trains (on_nonfinite's)
    np.save(tmp_path / "day_1_dense.npy", dense)
    assert len(load_criteo_npy(config(tmp_path, mmap_mode=mmap_mode), SIZES, 0)[0]) == 20


def test_a_folder_whose_day_numbers_skip_some_is_warned_about(tmp_path, caplog):
    """day_0 and day_5 trained and tested on day 5 with only metrics.json's data.days to
    say so (data review): an unfinished copy or conversion looks like this."""
    from dlrm_exp.data import load_splits

    for day in (0, 5):
        write_day(tmp_path, day, 20, seed=day)
    load_splits(config(tmp_path), SIZES, 13, 0)
    (warned,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "holds days day_0, day_5 but not day_1, day_2, day_3, day_4: training on" in warned
    write_day(tmp_path, 1, 20, seed=1)
    for day in range(2, 5):
        write_day(tmp_path, day, 20, seed=day)
    caplog.clear()
    load_splits(config(tmp_path), SIZES, 13, 0)
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


@pytest.mark.slow
def test_preprocess_then_train_on_three_1tb_days(tmp_path, cli_here):
    from dlrm_exp.data.criteo_format import write_criteo_tsv

    for day in (0, 1, 23):
        write_criteo_tsv(tmp_path / "tsv" / f"day_{day}.gz", 3000, seed=day)
    pre = cli_here(
        [
            "mode=preprocess",
            "data=criteo_tsv",
            f"data.path={tmp_path / 'tsv'}",
            f"preprocess.output_dir={tmp_path / 'npy'}",
            f"hydra.run.dir={tmp_path / 'r1'}",
        ]
    )
    assert pre.returncode == 0, pre.stderr
    done = cli_here(
        [
            "data=criteo_npy",
            f"data.path={tmp_path / 'npy'}",
            "data.mmap_mode=true",  # the days stay mapped files; batches read their rows
            "train.batch_size=256",
            f"hydra.run.dir={tmp_path / 'r2'}",
        ]
    )
    assert done.returncode == 0, done.stderr
    import json

    metrics = json.loads((tmp_path / "r2" / "metrics.json").read_text())
    assert metrics["data"]["rows"] == {"train": 6000, "val": 1500, "test": 1500}
    assert metrics["data"]["days"] == [0, 1, 23] and metrics["data"]["mmap_mode"]
    assert metrics["data"]["folder"] == str((tmp_path / "npy").resolve())  # (review)
    assert 0 <= metrics["val"]["auroc"] <= 1 and 0 <= metrics["test"]["auroc"] <= 1


def test_shuffle_batches_permutes_full_batches_per_epoch_and_keeps_ranks_disjoint(tmp_path):
    from dlrm_exp.config import feature_names
    from dlrm_exp.data import iter_batches

    write_day(tmp_path, 0, 1000, 1)
    write_day(tmp_path, 1, 10, 2)
    train = load_criteo_npy(config(tmp_path), SIZES, 0)[0]
    keys = feature_names(26)

    def first_ids(rank, seed):  # each batch's first row's cat_0 id, this rank's steps in order
        return [
            b.sparse_features["cat_0"].values()[0].item()
            for b in iter_batches(train, 64, rank, 2, keys, seed)
        ]

    plain = [first_ids(r, None) for r in (0, 1)]
    epoch_0 = [first_ids(r, (0, 0)) for r in (0, 1)]
    assert len(epoch_0[0]) == 8  # 7 full steps of 2 x 64 rows, then the remainder of 52 rows
    assert epoch_0[0] != plain[0] and epoch_0[0][-1] == plain[0][-1]  # remainder stays last
    assert sorted(epoch_0[0]) == sorted(plain[0]) and sorted(epoch_0[1]) == sorted(plain[1])
    assert epoch_0 == [first_ids(r, (0, 0)) for r in (0, 1)]  # a function of (seed, epoch)
    assert first_ids(0, (0, 1)) != epoch_0[0]
    resumed = [b.sparse_features["cat_0"].values()[0].item()
               for b in iter_batches(train, 64, 1, 2, keys, (0, 0), skip=5)]  # fmt: skip
    assert resumed == epoch_0[1][5:]  # a resumed epoch: the same order from its step on
    rows = torch.cat([b.dense for b in [train]])  # every row once per epoch across both ranks
    seen = torch.cat(
        [b.dense_features for r in (0, 1) for b in iter_batches(train, 64, r, 2, keys, (0, 0))]
    )
    assert sorted(seen[:, 0].tolist()) == sorted(rows[:1000, 0].tolist())


def test_shuffle_batches_trains_two_epochs(tmp_path):
    from conftest import compose_cfg
    from dlrm_exp.modes.train import run_train

    write_day(tmp_path / "npy", 0, 512, 1)
    write_day(tmp_path / "npy", 1, 128, 2)
    cfg = compose_cfg(
        [
            "data=criteo_npy",
            f"data.path={tmp_path / 'npy'}",
            "data.shuffle_batches=true",
            "train.epochs=2",
            "train.batch_size=64",
            "train.progress_bar=false",
        ]
    )
    assert run_train(cfg, tmp_path / "run", {}).steps == 16


def test_mmap_days_are_views_and_give_the_in_memory_batches(tmp_path):
    from dlrm_exp.config import feature_names
    from dlrm_exp.data import iter_batches
    from dlrm_exp.data.row_span import RowSpan

    for day, rows in ((0, 50), (1, 40), (23, 31)):
        write_day(tmp_path, day, rows, day)
    in_memory = load_criteo_npy(config(tmp_path), SIZES, 0)
    mapped = load_criteo_npy(config(tmp_path, mmap_mode=True), SIZES, 0)
    assert isinstance(mapped[0].sparse, RowSpan)
    assert all(isinstance(part, np.memmap) for part in mapped[0].dense.parts)
    keys = feature_names(26)
    for a, b in zip(in_memory[:3], mapped[:3], strict=True):
        assert len(a) == len(b)
        for rank in (0, 1):  # 2 x 16 rows per step: step 1 of train crosses from day 0 to 1
            for x, y in zip(
                iter_batches(a, 16, rank, 2, keys), iter_batches(b, 16, rank, 2, keys), strict=True
            ):
                assert torch.equal(x.dense_features, y.dense_features)
                assert torch.equal(x.sparse_features.values(), y.sparse_features.values())
                assert torch.equal(x.labels, y.labels)
    with pytest.raises(DataError, match="feature cat_0 has ids in"):
        load_criteo_npy(config(tmp_path, mmap_mode=True, out_of_range=OutOfRange.error), SIZES, 0)


@pytest.mark.parametrize("mapped", [True, False])
def test_multi_hot_days_are_mapped_as_the_reference_maps_them(tmp_path, mapped):
    """``data=criteo_multihot data.path=...`` read every day whole into every rank (no
    ``mmap_mode`` reached its npy reader): about 1 TiB a rank on Criteo 1TB."""
    from dlrm_exp.config import CriteoMultiHotDataConfig
    from dlrm_exp.data import load_splits

    write_day(tmp_path, 0, 20, 1)
    write_day(tmp_path, 1, 20, 2)
    cfg = CriteoMultiHotDataConfig(path=str(tmp_path), multi_hot_sizes=[2] * 26)
    cfg.mmap_mode = mapped
    assert bool(load_splits(cfg, SIZES, 13, 0).info.mmap_mode) is mapped


def test_days_read_whole_that_would_not_fit_the_hosts_ranks_are_refused(tmp_path, monkeypatch):
    """np.empty does not fail: the 1TB days (1.05 TiB a rank) filled memory until the kernel
    killed the rank, after hundreds of GB read. Refused before reading, with the fix."""
    from types import SimpleNamespace

    from dlrm_exp.data import criteo_npy

    for day, rows in ((0, 600), (1, 400)):
        write_day(tmp_path, day, rows, day)
    need = 1000 * criteo_npy.ROW_BYTES  # 264,000 bytes for one rank
    available = {"bytes": need}
    monkeypatch.setattr(
        criteo_npy.psutil, "virtual_memory", lambda: SimpleNamespace(available=available["bytes"])
    )
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert len(load_criteo_npy(config(tmp_path), SIZES, 0)[0]) == 600  # fits: read
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # two ranks, two copies
    with pytest.raises(DataError, match=r"takes 0\.0 GiB on this host \(2 rank\(s\).*"
                       r"data\.mmap_mode=true"):  # fmt: skip
        load_criteo_npy(config(tmp_path), SIZES, 0)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    with pytest.raises(DataError, match="with the training set's shuffle"):  # 600 more x 216
        load_criteo_npy(config(tmp_path, shuffle_training_set=True), SIZES, 0)
    assert len(load_criteo_npy(config(tmp_path, mmap_mode=True), SIZES, 0)[0]) == 600  # mapped


def test_the_id_range_of_a_day_taken_in_blocks_is_the_whole_days(monkeypatch):
    from dlrm_exp.data import criteo_npy

    ids = np.random.default_rng(0).integers(-5, 1000, size=(50, 26))
    monkeypatch.setattr(criteo_npy, "_RANGE_ROWS", 7)  # 8 blocks, the last of 1 row
    high, low = criteo_npy._id_range(ids)
    assert (high == ids.max(axis=0)).all() and (low == ids.min(axis=0)).all()
    assert criteo_npy._id_range(ids[:0]) is None


def test_the_files_digest_of_a_day_folder_is_of_its_day_files(tmp_path):
    """A preprocess run again rewrites its reports in the folder, and a contiguous-id one keeps
    the raw ids beside the days: the digest a checkpoint records moved when either changed,
    and every resume forgot its validations (diff review, re-read)."""
    from dlrm_exp.data import input_digests
    from dlrm_exp.data.paths import files_digest

    for kind in ("dense", "sparse", "labels", "sparse_raw"):
        (tmp_path / f"day_0_{kind}.npy").write_bytes(b"0")
    (tmp_path / "notes.txt").write_text("a")  # (a report is read as preprocess's folder)
    cfg = CriteoNpyDataConfig(path=str(tmp_path))
    before = input_digests(cfg)
    (tmp_path / "notes.txt").write_text("ab")
    (tmp_path / "day_0_sparse_raw.npy").unlink()
    assert input_digests(cfg) == before and before["data.path.files"].startswith("3 files, ")
    # as earlier versions recorded it (a folder's files by name): their checkpoints resume
    # on the same data (day by day, every one's digest moved: diff review)
    assert before["data.path.files"] == files_digest(sorted(tmp_path.glob("day_*.npy")))
    (tmp_path / "day_1_dense.npy").write_bytes(b"0")  # a day without its other files: none
    assert input_digests(cfg) == {}
