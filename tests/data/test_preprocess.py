"""mode=preprocess: TorchRec's binary layout, read back by TorchRec itself; reports, gzip,
day names, resumable re-runs."""

import gzip
import json
import os

import numpy as np
import pytest
from torchrec.datasets.criteo import BinaryCriteoUtils

from conftest import torchrec_criteo_rows
from dlrm_exp.config import CategoricalTransform, DenseTransform, PreprocessConfig
from dlrm_exp.data.criteo_format import criteo_lines, write_criteo_tsv
from dlrm_exp.data.preprocess import contiguous
from dlrm_exp.data.preprocess.convert import preprocess_files
from dlrm_exp.data.preprocess.npy_stream import NpyRowWriter
from dlrm_exp.errors import DataError

SIZES = [1000] * 26


def _killed_at(monkeypatch, stop):
    """Make the conversion of day ``stop`` raise as a kill would; returns the real one."""
    from dlrm_exp.data.preprocess import convert as conversion

    real = conversion.convert_file

    def killed(path, day, *args):
        if day == stop:
            raise KeyboardInterrupt
        return real(path, day, *args)

    monkeypatch.setattr(conversion, "convert_file", killed)
    return real


def convert(files, out, **options):
    cfg = PreprocessConfig(output_dir=str(out), num_workers=1, **options)
    return preprocess_files(files, out, cfg, SIZES, progress=False)


def test_torchrec_transform_is_byte_equal_to_tsv_to_npys(tmp_path):
    tsv = write_criteo_tsv(tmp_path / "train.txt", 500, seed=3)
    BinaryCriteoUtils.tsv_to_npys(
        str(tsv), *(str(tmp_path / f"tr_{k}.npy") for k in ("dense", "sparse", "labels"))
    )
    convert([tsv], tmp_path / "out", dense_transform=DenseTransform.torchrec)
    for kind in ("dense", "sparse", "labels"):
        ours = np.load(tmp_path / "out" / f"day_0_{kind}.npy")
        theirs = np.load(tmp_path / f"tr_{kind}.npy")
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
        assert ours.tobytes() == theirs.tobytes(), kind
    assert not list((tmp_path / "out").glob("*raw*")), "the raw counts file is removed"


@pytest.mark.parametrize("mmap_mode", [False, True])
def test_torchrec_reader_gives_our_rows(tmp_path, mmap_mode):
    tsv = write_criteo_tsv(tmp_path / "day_0", 700, seed=4, strip_trailing_rate=0.5)
    convert([tsv], tmp_path / "out")
    out = tmp_path / "out"
    dense, labels, values = torchrec_criteo_rows(
        out, 0, "train", 100, mmap_mode=mmap_mode, hashes=SIZES
    )
    dense, labels = dense.numpy(), labels.numpy()
    expected = [line.split("\t") for line in criteo_lines(700, seed=4, strip_trailing_rate=0.5)]
    assert labels.tolist() == [int(f[0]) for f in expected]
    first_dense = [int(f[1] or 0) for f in expected]
    np.testing.assert_allclose(dense[:, 0], np.log1p(np.maximum(first_dense, 0)), rtol=1e-6)
    cats = [(f + [""] * 40)[14] for f in expected]
    assert values[:, 0].tolist() == [int(c or "0", 16) % 1000 for c in cats]


def test_report_counts_bad_rows_with_line_numbers(tmp_path):
    lines = criteo_lines(20, seed=5)
    lines[3] = "2" + lines[3][1:]
    lines[7] = lines[7].replace("\t", ",")
    (tmp_path / "day_5").write_text("\n".join(lines) + "\n")
    report = convert([tmp_path / "day_5"], tmp_path / "out")
    day = report["days"][0]
    assert day["day"] == 5 and day["rows_valid"] == 18
    assert day["skipped_by_reason"] == {"field_count": 1, "label": 1, "dense": 0, "categorical": 0}
    assert day["first_bad_lines"] == [
        f"{tmp_path / 'day_5'}:4 (label)",
        f"{tmp_path / 'day_5'}:8 (field_count)",
    ]
    saved = json.loads((tmp_path / "out" / "preprocess_report.json").read_text())
    assert saved["rows_skipped"] == 2
    assert np.load(tmp_path / "out" / "day_5_labels.npy").shape == (18, 1)


def test_gzip_with_or_without_suffix_and_day_names(tmp_path):
    plain = write_criteo_tsv(tmp_path / "in" / "day_2", 50, seed=6)
    write_criteo_tsv(tmp_path / "in" / "day_10.gz", 60, seed=7)
    hidden = tmp_path / "in" / "day_3.tsv"
    hidden.write_bytes(gzip.compress(plain.read_bytes()))
    report = convert(
        [tmp_path / "in" / n for n in ("day_10.gz", "day_2", "day_3.tsv")], tmp_path / "o"
    )
    assert report["days_converted"] == [2, 3, 10]
    assert np.load(tmp_path / "o" / "day_10_sparse.npy").shape == (60, 26)
    a, b = (np.load(tmp_path / "o" / f"day_{d}_dense.npy") for d in (2, 3))
    assert np.array_equal(a, b)


def test_clashing_day_numbers(tmp_path):
    write_criteo_tsv(tmp_path / "day_1", 5)
    write_criteo_tsv(tmp_path / "day_1.gz", 5)
    with pytest.raises(DataError, match="both become day_1"):
        convert([tmp_path / "day_1", tmp_path / "day_1.gz"], tmp_path / "o")


def test_rerun_skips_finished_days_and_redoes_changed_ones(tmp_path):
    files = [write_criteo_tsv(tmp_path / f"day_{d}", 30, seed=d) for d in range(3)]
    out = tmp_path / "o"
    assert convert(files, out)["days_converted"] == [0, 1, 2]
    (out / "day_1.json").unlink()  # as if killed while writing day 1
    write_criteo_tsv(files[2], 40, seed=9)  # day 2's input changed
    again = convert(files, out)
    assert again["days_skipped_finished"] == [0]
    assert again["days_converted"] == [1, 2]
    # the report still counts every day of the folder (a re-run left its own only: review)
    assert [m["day"] for m in again["folder_days"]] == [0, 1, 2]
    assert again["folder_rows_valid"] == 30 + 30 + 40
    assert convert(files, out)["folder_rows_valid"] == 100  # nothing converted: still 100
    assert np.load(out / "day_2_labels.npy").shape == (40, 1)
    assert convert(files, out, overwrite=True)["days_converted"] == [0, 1, 2]
    other = convert(files, out, categorical=CategoricalTransform.hash)
    assert other["days_converted"] == [0, 1, 2], "other options are not the finished conversion"
    assert np.load(out / "day_0_sparse.npy").max() < 1000


def test_another_input_for_a_converted_day_is_refused_not_written_over(tmp_path):
    """train.tsv then test.tsv into one folder would both be day_0: the second run would
    silently replace the first's files."""
    out = tmp_path / "o"
    train = write_criteo_tsv(tmp_path / "train.tsv", 20, seed=1)
    convert([train], out)
    before = (out / "day_0_labels.npy").read_bytes()
    test = write_criteo_tsv(tmp_path / "test.tsv", 10, seed=2)
    with pytest.raises(DataError, match=r"already holds day_0 converted from .*train.tsv"):
        convert([test], out)
    assert (out / "day_0_labels.npy").read_bytes() == before
    assert convert([test], out, overwrite=True)["days_converted"] == [0]  # when asked


def test_parallel_workers_give_the_same_files(tmp_path, monkeypatch):
    """A plain file cut into many byte ranges, parsed by a pool of 2 forked workers, gives the
    files one block parsed inline gives (the pool starts only above RANGE_BYTES of input:
    made small here, and the blocks sent to it counted)."""
    import dlrm_exp.data.preprocess.convert as pre

    tsv = write_criteo_tsv(tmp_path / "day_0", 3000, seed=8, strip_trailing_rate=0.5)
    convert([tsv], tmp_path / "seq")  # one block, inline
    sent = []
    submit = pre._submit
    monkeypatch.setattr(pre, "RANGE_BYTES", 20_000)
    monkeypatch.setattr(pre, "_submit", lambda pool, *a: sent.append(pool) or submit(pool, *a))
    cfg = PreprocessConfig(output_dir="x", num_workers=2)
    preprocess_files([tsv], tmp_path / "par", cfg, SIZES, progress=False)
    assert len(sent) > 10 and all(pool is not None for pool in sent)
    for kind in ("dense", "sparse", "labels"):
        assert np.array_equal(
            np.load(tmp_path / "par" / f"day_0_{kind}.npy"),
            np.load(tmp_path / "seq" / f"day_0_{kind}.npy"),
        )


def test_binary_input_and_unwritable_output(tmp_path):
    (tmp_path / "day_0").write_bytes(b"\x00\x01\x02binary")
    with pytest.raises(DataError, match="not a Criteo TSV text file"):
        convert([tmp_path / "day_0"], tmp_path / "o")
    assert not list((tmp_path / "o").glob("*.npy")), "nothing half-written is left"
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(DataError, match="cannot write"):
        convert([write_criteo_tsv(tmp_path / "day_1", 3)], blocker / "sub")


def test_npy_writer_abort_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError, match="^crash$"):
        with NpyRowWriter(tmp_path / "a.npy", np.float32, 13) as writer:
            writer.append(np.zeros((4, 13)))
            raise RuntimeError("crash")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("code", ["ENOSPC", "EDQUOT"])  # a full disk, a quota
def test_a_full_disk_is_one_line_saying_the_converted_days_stay(
    tmp_path, cli_here, monkeypatch, code
):
    """A 53-line traceback ending in ENOSPC (crash review, a 100 MB tmpfs)."""
    import errno

    from dlrm_exp.modes import preprocess

    def full(*args, **kwargs):
        raise OSError(getattr(errno, code), "No space left")

    monkeypatch.setattr(preprocess, "run_preprocess", full)
    tsv = write_criteo_tsv(tmp_path / "train.txt", 40, seed=1)
    out, run = f"preprocess.output_dir={tmp_path / 'npy'}", f"hydra.run.dir={tmp_path / 'r'}"
    done = cli_here(["mode=preprocess", f"data.path={tsv}", out, run])
    assert done.returncode == 1 and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"Error: preprocess.output_dir={tmp_path / 'npy'}: its disk ran full;")
    assert line.endswith("free some space, then the same command converts the rest")


def test_cli_preprocess_and_its_errors(tmp_path, cli_here):
    tsv = write_criteo_tsv(tmp_path / "train.txt", 40, seed=1)
    done = cli_here(
        [
            "mode=preprocess",  # data=criteo_tsv is implied
            f"data.path={tsv}",
            f"preprocess.output_dir={tmp_path / 'npy'}",
            f"hydra.run.dir={tmp_path / 'run'}",
        ]
    )
    assert done.returncode == 0, done.stderr
    assert "40 rows written" in done.stdout
    assert (tmp_path / "npy" / "day_0_dense.npy").is_file()
    assert (tmp_path / "run" / "preprocess_report.json").is_file()
    no_out = cli_here(
        [
            "mode=preprocess",
            "data=criteo_tsv",
            f"data.path={tsv}",
            f"hydra.run.dir={tmp_path / 'run2'}",
        ]
    )
    assert no_out.returncode == 1 and "preprocess.output_dir" in no_out.stderr
    assert "Traceback" not in no_out.stderr
    no_tsv = cli_here(
        [
            "mode=preprocess",
            "data=synthetic",
            f"preprocess.output_dir={tmp_path}",
            f"hydra.run.dir={tmp_path / 'run3'}",
        ]
    )
    assert no_tsv.returncode == 1 and "data=criteo_tsv" in no_tsv.stderr
    into_input = cli_here(  # a re-run would read the outputs as TSV input
        [
            "mode=preprocess",
            f"data.path={tmp_path}",
            f"preprocess.output_dir={tmp_path}/.",
            f"hydra.run.dir={tmp_path / 'run4'}",
        ]
    )
    assert into_input.returncode == 1 and "Traceback" not in into_input.stderr
    assert f"preprocess.output_dir={tmp_path}/. is the folder data.path reads" in (
        into_input.stderr
    )
    assert not (tmp_path / "day_0.json").exists()  # refused before writing
    refusals = {
        f"preprocess.output_dir={tmp_path}": "is the folder of data.path's",  # beside its input
        f"preprocess.output_dir={tsv}": "is a file: name a folder",
        f"data.val_path=[{tsv}]": "converts the files of data.path only",
        "preprocess.row_group_size=100": "applies to preprocess.format=parquet only",  # ignored
    }
    for i, (argument, message) in enumerate(refusals.items()):
        out = [] if "output_dir" in argument else [f"preprocess.output_dir={tmp_path / 'o'}"]
        refused = cli_here(
            [
                "mode=preprocess",
                f"data.path={tsv}",
                argument,
                *out,
                f"hydra.run.dir={tmp_path / f'r{i}'}",
            ]
        )
        assert refused.returncode == 1 and message in refused.stderr, refused.stderr
    assert not (tmp_path / "day_0.json").exists() and not (tmp_path / "o").exists()
    # the implied data=criteo_tsv went after the flags, where --cfg took it for its value
    shown = cli_here(["mode=preprocess", f"data.path={tsv}", "--cfg", "job"])
    assert shown.returncode == 0 and f"path: {tsv}" in shown.stdout, shown.stderr


def test_contiguous_ids_equal_torchrec_sparse_to_contiguous(tmp_path):
    """categorical=contiguous gives the ids of TorchRec's ``sparse_to_contiguous`` (first
    occurrence order over the days, rare ids -> 1); a re-run with another threshold redoes only
    the re-indexing."""
    files = [
        write_criteo_tsv(tmp_path / "tsv" / f"day_{d}", 300, seed=d, vocab_size=40)
        for d in range(3)
    ]
    out = tmp_path / "out"
    report = convert(files, out, categorical=CategoricalTransform.contiguous)
    raw = [str(out / f"day_{d}_sparse_raw.npy") for d in range(3)]
    (tmp_path / "tr").mkdir()
    BinaryCriteoUtils.sparse_to_contiguous(raw, str(tmp_path / "tr"), frequency_threshold=3)
    ours = [np.load(out / f"day_{d}_sparse.npy") for d in range(3)]
    theirs = [np.load(tmp_path / "tr" / f"day_{d}_sparse_raw_contig_freq.npy") for d in range(3)]
    assert all(np.array_equal(a, b) for a, b in zip(ours, theirs, strict=True))
    assert (np.concatenate(ours) == 1).any() and ours[0].dtype == np.int64
    sizes = report["contiguous"]["num_embeddings_per_feature"]
    assert sizes == (np.concatenate(ours).max(axis=0) + 1).tolist()

    again = convert(files, out, categorical=CategoricalTransform.contiguous, frequency_threshold=1)
    assert again["days_skipped_finished"] == [0, 1, 2]
    assert not (np.concatenate([np.load(out / f"day_{d}_sparse.npy") for d in range(3)]) == 1).any()
    assert again["contiguous"]["frequency_threshold"] == 1


def test_contiguous_ids_read_in_feature_groups_and_row_blocks_equal_torchrec(tmp_path, monkeypatch):
    """Days read a few features at a time, in blocks of rows (as a host with little memory
    does), give TorchRec's ids: each id's first row and count carry over the groups and days."""
    rng = np.random.default_rng(5)
    raw = []
    for d, rows in enumerate((700, 0, 513)):
        raw.append(tmp_path / f"day_{d}_sparse_raw.npy")
        np.save(raw[-1], rng.integers(0, [3, 50, 400, 7, 1000], size=(rows, 5)) * 31 + 10**12)
    (tmp_path / "tr").mkdir()
    BinaryCriteoUtils.sparse_to_contiguous(
        [str(p) for p in raw], str(tmp_path / "tr"), frequency_threshold=2, columns=5
    )
    monkeypatch.setattr(contiguous, "_CHUNK_ROWS", 64)
    assert contiguous.feature_groups(700, 5, 2 * 8 * 700) == [range(0, 2), range(2, 4), range(4, 5)]
    out = [tmp_path / f"ours_{d}.npy" for d in range(3)]
    sizes = contiguous.contiguous_ids(raw, out, 2, budget_bytes=2 * 8 * 700)
    ours = np.concatenate([np.load(p) for p in out])
    theirs = [np.load(tmp_path / "tr" / f"day_{d}_sparse_raw_contig_freq.npy") for d in range(3)]
    assert np.array_equal(ours, np.concatenate(theirs))
    assert (ours == contiguous.RARE_ID).any() and sizes == (ours.max(axis=0) + 1).tolist()


def test_a_day_converted_later_shares_the_contiguous_ids_of_the_earlier_days(tmp_path):
    """Days 0-1 converted, then day 2 alone: every day is re-indexed together, so an id has
    one row on every day (as converting all three at once gives)."""
    files = [
        write_criteo_tsv(tmp_path / "tsv" / f"day_{d}", 200, seed=d, vocab_size=30)
        for d in range(3)
    ]
    at_once, later = tmp_path / "once", tmp_path / "later"
    convert(files, at_once, categorical=CategoricalTransform.contiguous)
    convert(files[:2], later, categorical=CategoricalTransform.contiguous)
    report = convert(files[2:], later, categorical=CategoricalTransform.contiguous)
    assert report["contiguous"]["days"] == [0, 1, 2]
    for d in range(3):
        name = f"day_{d}_sparse.npy"
        assert np.array_equal(np.load(later / name), np.load(at_once / name)), name


def test_windows_line_endings_convert_like_unix_ones(tmp_path):
    lines = criteo_lines(400, seed=12, strip_trailing_rate=0.5)
    (tmp_path / "lf").mkdir()
    (tmp_path / "crlf").mkdir()
    (tmp_path / "lf" / "day_0").write_text("\n".join(lines) + "\n")
    (tmp_path / "crlf" / "day_0").write_bytes(("\r\n".join(lines) + "\r\n").encode())
    report = convert([tmp_path / "crlf" / "day_0"], tmp_path / "out_crlf")
    convert([tmp_path / "lf" / "day_0"], tmp_path / "out_lf")
    assert report["days"][0]["rows_skipped"] == 0 and report["days"][0]["rows_valid"] == 400
    for kind in ("dense", "sparse", "labels"):
        assert np.array_equal(
            np.load(tmp_path / "out_crlf" / f"day_0_{kind}.npy"),
            np.load(tmp_path / "out_lf" / f"day_0_{kind}.npy"),
        )


def _load(out, dataset="criteo_kaggle"):
    from dlrm_exp.config import CriteoNpyDataConfig, NpyDataset
    from dlrm_exp.data.criteo_npy import load_criteo_npy

    return load_criteo_npy(
        CriteoNpyDataConfig(path=str(out), dataset=NpyDataset(dataset)), SIZES, 0
    )


def test_training_refuses_a_conversion_that_did_not_finish(tmp_path):
    """A preprocess killed while redoing day 1 left day 1's old files without their marker,
    and data=criteo_npy trained on them (rc 0); so it did on a contiguous folder whose
    re-index over all days was cut off."""
    files = [write_criteo_tsv(tmp_path / f"day_{d}", 30, seed=d) for d in range(3)]
    out = tmp_path / "o"
    convert(files, out)
    _load(out)
    (out / "day_1.json").unlink()  # what a kill in day 1's conversion leaves
    with pytest.raises(DataError, match=r"day_1 has no day_<n>.json .* run that command again"):
        _load(out)
    (out / "day_1.json").write_text("{not json")  # there, but unreadable: said so (review)
    with pytest.raises(DataError, match=r"day_1 has no readable day_<n>.json \(day_1.json does"):
        _load(out)
    contiguous = tmp_path / "c"
    convert(files, contiguous, categorical=CategoricalTransform.contiguous)
    _load(contiguous)
    (contiguous / "contiguous.json").unlink()
    with pytest.raises(DataError, match=r"the re-index of contiguous ids over every day did not"):
        _load(contiguous)
    # killed while re-indexing: a day's raw ids still there, its re-indexed file not yet ("day_0_
    # sparse.npy is missing" named no cause; crash review)
    (contiguous / "day_0_sparse.npy").rename(contiguous / "day_0_sparse_raw.npy")
    with pytest.raises(DataError, match=r"day_0_sparse.npy is missing beside its raw ids .*"
                       r"did not finish; run the same mode=preprocess again"):  # fmt: skip
        _load(contiguous)


def test_training_refuses_a_folder_whose_conversion_stopped_before_some_days(tmp_path, monkeypatch):
    """A preprocess of days 0-2 killed after day 1's marker left a folder of 2 finished days,
    and data=criteo_npy trained on it, validating on day 1 (review); a refused conversion
    (another input for a day) leaves the folder as it was, readable."""
    from dlrm_exp.data.preprocess import convert as conversion

    files = [write_criteo_tsv(tmp_path / f"day_{d}", 30, seed=d) for d in range(3)]
    out = tmp_path / "o"
    finish = _killed_at(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        convert(files, out)
    with pytest.raises(DataError, match=r"set out to write day_2 here and did not finish .* "
                       r"run that command again"):  # fmt: skip
        _load(out)
    monkeypatch.setattr(conversion, "convert_file", finish)
    (tmp_path / "later").mkdir()  # another run into the folder keeps day_2 pending (it was
    later = write_criteo_tsv(tmp_path / "later" / "day_5", 30, seed=5)  # forgotten: review)
    convert([later], out)
    with pytest.raises(DataError, match=r"set out to write day_2 here"):
        _load(out)
    assert convert(files, out)["days_converted"] == [2]  # the same command finishes it
    _load(out)
    assert not (out / conversion.PENDING_FILE).exists()
    (tmp_path / "x").mkdir()
    other = write_criteo_tsv(tmp_path / "x" / "day_1", 30, seed=9)
    with pytest.raises(DataError, match=r"already holds day_1 converted from"):
        convert([files[0], other], out)
    _load(out)


def test_a_day_refused_before_others_is_named_with_the_days_it_stopped(tmp_path):
    """Its pending days were refused as "interrupted: run that command again", which fails
    on the same day (diff review)."""
    files = [write_criteo_tsv(tmp_path / f"day_{d}", 30, seed=d) for d in range(3)]
    files[1].write_text("not\ta\tcriteo\trow\n" * 30)
    out = tmp_path / "o"
    with pytest.raises(DataError, match="no valid Criteo row"):
        convert(files, out)
    refused = (r"run refused day_1 \(.*day_1: .*\) and did not write day_2 after it; mend "
               r"day_1's file or leave it out of data.path")  # fmt: skip
    with pytest.raises(DataError, match=refused):
        _load(out)
    # another refused day later: each names its own days (one shared cause named a day left
    # out or mended, and blamed it for days it never held: diff review)
    (tmp_path / "more").mkdir()
    day_3 = write_criteo_tsv(tmp_path / "more" / "day_3", 30, seed=3)
    day_3.write_text("bad\n" * 5)
    day_4 = write_criteo_tsv(tmp_path / "more" / "day_4", 30, seed=4)
    with pytest.raises(DataError, match="no valid Criteo row"):
        convert([day_3, day_4], out)
    convert([day_4], out)  # day_3 left out: day_4 written; day_2 is still day_1's
    with pytest.raises(DataError, match=refused):
        _load(out)
    convert([files[0], files[2]], out)  # day_1 left out: the rest converted, nothing pending
    _load(out)
    (out / "preprocess_pending.json").write_text('{"days": [1')  # there, but unreadable
    with pytest.raises(DataError, match=r"set out to write days \(unreadable\)"):
        _load(out)


def test_a_refused_last_day_leaves_a_folder_that_trains_and_says_so(tmp_path, caplog):
    """A truncated or empty last day held no later day up, so nothing stayed pending and the
    folder read as one day shorter, the day before held out, without a word (data review)."""
    from dlrm_exp.data.preprocess import convert as conversion

    files = [write_criteo_tsv(tmp_path / f"day_{d}", 30, seed=d) for d in range(3)]
    good = files[2].read_text()
    files[2].write_text("")
    out = tmp_path / "o"
    with pytest.raises(DataError):
        convert(files, out)
    with caplog.at_level("WARNING", logger="dlrm_exp.data.criteo_npy"):
        _load(out)  # trains on days 0-1
    (warned,) = [r.getMessage() for r in caplog.records if "refused day_2" in r.getMessage()]
    assert "reading the days there, the last of them (day_1)" in warned
    with pytest.raises(DataError):  # refused again: one refusal of the day (the run drops
        # the earlier one of a day it converts), one warning
        convert(files, out)
    assert len(conversion.Pending.read(out).refusals) == 1
    files[2].write_text(good)  # mended: converted, the record gone
    assert convert(files, out)["days_converted"] == [2]
    assert not (out / conversion.PENDING_FILE).exists()


def test_a_killed_conversions_unfinished_files_go_at_the_next_run(tmp_path, caplog):
    """kill -9 while day 1 was converted again left its .tmp files; the next run skipped the
    finished day and kept them for good (data review)."""
    files = [write_criteo_tsv(tmp_path / f"day_{d}", 30, seed=d) for d in range(2)]
    out = tmp_path / "o"
    convert(files, out)
    left = out / "day_1_dense.npy.tmp"
    left.write_bytes(b"\0" * 4096)
    with caplog.at_level("WARNING", logger="dlrm_exp.data.preprocess.convert"):
        assert convert(files, out)["days_converted"] == []
    assert not left.exists() and "removed 1 unfinished file(s)" in caplog.text
    _load(out)


def test_an_input_that_changes_while_it_is_converted_gets_no_marker(tmp_path, monkeypatch):
    """The marker recorded the input's size and time after reading: a file still being written
    was then skipped by every later run as finished, though only its start was converted."""
    from dlrm_exp.data.preprocess import convert as conversion

    tsv = write_criteo_tsv(tmp_path / "day_0", 30, seed=0)
    read_blocks = conversion._run_blocks

    def read_then_grow(path, *args):
        read_blocks(path, *args)
        with open(path, "a") as f:
            f.write(tsv.read_text().splitlines()[0] + "\n")

    monkeypatch.setattr(conversion, "_run_blocks", read_then_grow)
    with pytest.raises(DataError, match=r"day_0 changed while day_0 was converted"):
        convert([tsv], tmp_path / "o")
    assert not (tmp_path / "o" / "day_0.json").exists()


def test_a_day_that_skips_too_many_rows_is_refused_not_written(tmp_path):
    """Criteo's unlabeled test.txt (39 fields) converted: the rows whose first count is 0 or 1
    and whose first id is all digits parse, shifted by a column, and the day was written."""
    labeled = write_criteo_tsv(tmp_path / "train.txt", 200, seed=4)
    unlabeled = tmp_path / "day_0"
    unlabeled.write_text("".join(line.split("\t", 1)[1] + "\n"
                                 for line in labeled.read_text().splitlines()))  # fmt: skip
    cfg = PreprocessConfig(output_dir=str(tmp_path / "o"), num_workers=1)
    with pytest.raises(DataError, match=r"rows could not be converted \(nothing written for "
                       r"day_0\) .* convert only labeled files"):  # fmt: skip
        preprocess_files([unlabeled], tmp_path / "o", cfg, SIZES, False, max_skipped_fraction=0.01)
    assert not list((tmp_path / "o").glob("day_0*"))


def test_training_refuses_days_converted_with_different_settings(tmp_path):
    """Day 1 converted again with TorchRec's dense transform beside day 0's log1p: the re-run
    only warned, and data=criteo_npy trained on the two transforms as one dataset."""
    files = [write_criteo_tsv(tmp_path / f"day_{d}", 30, seed=d) for d in range(2)]
    out = tmp_path / "o"
    convert(files, out)
    # now refused by the conversion itself, the folder left as it was (npy review)
    mixed = (r"holds day_0 converted with dense_transform=log1p, categorical=raw, and this "
             r"run converts with dense_transform=torchrec")  # fmt: skip
    with pytest.raises(DataError, match=mixed):
        convert([files[1]], out, dense_transform=DenseTransform.torchrec, overwrite=True)
    _load(out)
    # a mix made otherwise (an earlier version; files copied in): training refuses it
    other = tmp_path / "other"
    convert([files[1]], other, dense_transform=DenseTransform.torchrec)
    for name in ("day_1_dense.npy", "day_1_sparse.npy", "day_1_labels.npy", "day_1.json"):
        (out / name).write_bytes((other / name).read_bytes())
    with pytest.raises(DataError, match=r"converted with different settings \(day_0: "
                       r"dense_transform=log1p.*; day_1: dense_transform=torchrec"):  # fmt: skip
        _load(out)


def test_a_day_redone_then_cut_off_is_re_indexed_by_the_next_run(tmp_path, monkeypatch):
    """Day 1's input changed; the re-run converted it, then was killed in day 2. The next run
    found nothing to convert, trusted the earlier contiguous.json and left day 1's contiguous
    ids those of its old rows."""

    files = [
        write_criteo_tsv(tmp_path / "tsv" / f"day_{d}", 60, seed=d, vocab_size=30) for d in range(3)
    ]
    out, fresh = tmp_path / "o", tmp_path / "fresh"
    contiguous = {"categorical": CategoricalTransform.contiguous}
    convert(files, out, **contiguous)
    write_criteo_tsv(files[1], 60, seed=7, vocab_size=30)
    os.utime(files[2], ns=(1, 1))  # touched: day 2 is converted again too
    _killed_at(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        convert(files, out, **contiguous)
    monkeypatch.undo()
    assert convert(files[:2], out, **contiguous)["days_converted"] == []
    convert(files, fresh, **contiguous)
    for d in range(3):
        name = f"day_{d}_sparse.npy"
        assert np.array_equal(np.load(out / name), np.load(fresh / name)), name


def test_a_hash_conversion_drops_the_raw_ids_of_an_earlier_contiguous_one(tmp_path, caplog):
    """Left behind, they made a later contiguous run of day 0 alone rewrite day 1's hashed
    ids as contiguous ones while day 1's marker still said hash."""
    files = [write_criteo_tsv(tmp_path / f"day_{d}", 30, seed=d) for d in range(2)]
    out = tmp_path / "o"
    convert(files, out, categorical=CategoricalTransform.contiguous)
    convert(files, out, categorical=CategoricalTransform.hash)
    assert not list(out.glob("*_sparse_raw.npy"))
    hashed = (out / "day_1_sparse.npy").read_bytes()
    with caplog.at_level("WARNING"), pytest.raises(DataError, match="holds day_1 converted"):
        convert(files[:1], out, categorical=CategoricalTransform.contiguous)  # (a mix: refused)
    assert (out / "day_1_sparse.npy").read_bytes() == hashed
    # refused before the warning that day_1 is read with this run's days (review)
    assert "also holds day_1 from other inputs" not in caplog.text


def test_a_file_named_twice_is_refused(tmp_path):
    from dlrm_exp.data.preprocess.convert import run_preprocess

    tsv = write_criteo_tsv(tmp_path / "s.tsv", 10, seed=1)
    cfg = PreprocessConfig(output_dir=str(tmp_path / "o"), num_workers=1)
    with pytest.raises(DataError, match=r"s\.tsv is named twice by data\.path"):
        run_preprocess([str(tsv), str(tsv)], cfg, SIZES)


def test_an_input_without_a_valid_row_is_refused_writing_nothing(tmp_path):
    """It wrote a 0-row day (rc 0), where data=criteo_tsv says there is no valid row."""
    empty = tmp_path / "day_0.tsv"
    empty.write_text("")
    with pytest.raises(
        DataError, match=r"no valid Criteo row in .*day_0.tsv: the file\(s\) are empty"
    ):
        convert([empty], tmp_path / "o")
    assert not list((tmp_path / "o").glob("day_0*"))
    junk = tmp_path / "day_1.tsv"
    junk.write_text("not\ta\tcriteo\tline\n" * 3)
    with pytest.raises(DataError, match=r"read 3 line\(s\), skipped .*nothing written for day_1"):
        convert([junk], tmp_path / "o")
    # old-Mac \r line ends: one endless line, read whole into one worker (about 6x the file's
    # size in memory); refused at the first MiB as data=criteo_tsv refuses it
    rows = write_criteo_tsv(tmp_path / "rows.txt", 100, seed=5).read_text().splitlines()
    cr = tmp_path / "day_2.tsv"
    cr.write_bytes("".join(row + "\r" for row in rows * 60).encode())
    assert cr.stat().st_size > 1 << 20
    with pytest.raises(DataError, match=r"day_2.tsv: the line at byte 0 runs over 1 MiB without"):
        convert([cr], tmp_path / "o")
    assert not list((tmp_path / "o").glob("day_2*"))


def test_a_day_that_fails_keeps_the_earlier_days_re_index(tmp_path):
    """Adding a day to a contiguous folder removed contiguous.json before converting it: a
    day that then failed left the folder refused by data=criteo_npy until the whole re-index
    ran again (hours for the 1TB days; preprocess review)."""
    files = [write_criteo_tsv(tmp_path / "tsv" / f"day_{d}", 200, seed=d) for d in range(2)]
    out = tmp_path / "o"
    convert(files, out, categorical=CategoricalTransform.contiguous)
    record = (out / "contiguous.json").read_bytes()
    unlabeled = tmp_path / "tsv" / "day_2"
    unlabeled.write_text("".join(line.split("\t", 1)[1] + "\n"
                                 for line in files[0].read_text().splitlines()))  # fmt: skip
    with pytest.raises(DataError, match="nothing written for day_2"):
        convert([unlabeled], out, categorical=CategoricalTransform.contiguous)
    assert (out / "contiguous.json").read_bytes() == record
    assert len(_load(out)[0]) > 0  # the folder still trains


def test_a_day_redone_from_a_refused_input_keeps_its_finished_files(tmp_path):
    """Day 0 converted again (overwrite) from a file without a valid row was refused
    ("nothing written for day_0") but had removed day_0.json first: data=criteo_npy then
    refused the finished day until it was converted again from a good file (data review)."""
    files = [write_criteo_tsv(tmp_path / "tsv" / f"day_{d}", 30, seed=d) for d in range(3)]
    out = tmp_path / "o"
    convert(files, out)
    before = {p.name: p.read_bytes() for p in out.glob("day_0*")}
    bad = tmp_path / "bad" / "day_0"
    bad.parent.mkdir()
    bad.write_text("".join("x" + line[1:] + "\n" for line in files[0].read_text().splitlines()))
    with pytest.raises(DataError, match="nothing written for day_0"):
        convert([bad], out, overwrite=True)
    assert {p.name: p.read_bytes() for p in out.glob("day_0*")} == before
    assert len(_load(out)[0]) > 0


def test_a_re_indexed_day_that_cannot_be_finished_leaves_no_partial_file(tmp_path, monkeypatch):
    """A failed close (a full disk, an fsync error) left the day's .tmp behind: about 40 GB
    for a 1TB day, on the disk that was full (whole-session review)."""
    from dlrm_exp.data.preprocess import npy_stream

    def full(tmp, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(npy_stream, "replace_durably", full)
    with pytest.raises(OSError, match="No space left"):
        with npy_stream.NpyRowWriter(tmp_path / "day_0_sparse.npy", np.int64, 26) as writer:
            writer.append(np.zeros((4, 26), dtype=np.int64))
    assert list(tmp_path.iterdir()) == []


def test_ids_hashed_for_other_tables_are_refused_by_data_criteo_npy(tmp_path):
    """A folder hashed for 1,000-row tables trained under a cap of 300 without a word: its
    ids, hashed again, looked up other rows than the same TSV rows do (Criteo review)."""
    from dlrm_exp.config import CriteoNpyDataConfig, NpyDataset
    from dlrm_exp.data.criteo_npy import load_criteo_npy

    files = [write_criteo_tsv(tmp_path / "day_0", 60, seed=1)]
    convert(files, tmp_path / "o", categorical=CategoricalTransform.hash)
    cfg = CriteoNpyDataConfig(path=str(tmp_path / "o"), dataset=NpyDataset.criteo_kaggle)
    assert len(load_criteo_npy(cfg, SIZES, seed=0)[0]) > 0  # the tables it was hashed for
    with pytest.raises(DataError, match=r"holds ids hashed for tables of \[1000, 1000"):
        load_criteo_npy(cfg, [300] * 26, seed=0)


def test_a_contiguous_folder_read_by_smaller_tables_is_warned_of(tmp_path, caplog):
    """Its ids beyond a table's rows were hashed into it without a word (npy review)."""
    import json

    from dlrm_exp.config import CriteoNpyDataConfig, NpyDataset
    from dlrm_exp.data.criteo_npy import load_criteo_npy

    files = [write_criteo_tsv(tmp_path / f"day_{d}", 60, seed=d) for d in range(2)]
    out = tmp_path / "o"
    convert(files, out, categorical=CategoricalTransform.contiguous, frequency_threshold=1)
    needed = json.loads((out / "contiguous.json").read_text())["num_embeddings_per_feature"]
    cfg = CriteoNpyDataConfig(path=str(out), dataset=NpyDataset.criteo_1tb)
    with caplog.at_level("WARNING", logger="dlrm_exp.data.criteo_npy"):
        load_criteo_npy(cfg, needed, 0)
        assert "smaller" not in caplog.text
        load_criteo_npy(cfg, [3] * 26, 0)
    assert f"tables are smaller (cat_0 {needed[0]:,} > 3, " in caplog.text
    assert f"Set model.num_embeddings_per_feature={needed} to give every id its own" in caplog.text


def test_days_converted_again_in_place_are_another_conversion_to_a_resume(tmp_path):
    """Converted again with TorchRec's dense transform, the days kept their names and sizes:
    the files' digest stayed, and a resume kept validations of the log1p rows (npy review)."""
    from dlrm_exp.config import CriteoNpyDataConfig
    from dlrm_exp.data import input_digests

    files = [write_criteo_tsv(tmp_path / f"day_{d}", 30, seed=d) for d in range(2)]
    out = tmp_path / "o"
    convert(files, out)
    cfg = CriteoNpyDataConfig(path=str(out))
    before = input_digests(cfg)
    convert(files, out)  # unchanged: skipped, the same conversion
    assert input_digests(cfg) == before
    convert(files, out, overwrite=True)  # the same input again: the same days
    assert input_digests(cfg) == before
    convert(files, out, dense_transform=DenseTransform.torchrec, overwrite=True)
    after = input_digests(cfg)
    assert after["data.path.files"] == before["data.path.files"]
    assert after["data.path.conversion"] != before["data.path.conversion"]
    assert cfg.rows_differ("data.path.conversion", before, after, ("val",))
    assert "data.path.conversion" not in input_digests(CriteoNpyDataConfig(path=str(tmp_path)))
