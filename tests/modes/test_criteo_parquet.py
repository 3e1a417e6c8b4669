"""mode=preprocess preprocess.format=parquet: Criteo TSV to Parquet with its schema, and the
Parquet path trains to exactly data=criteo_tsv's metrics on the same rows."""

import json

import pyarrow.parquet as pq
import pytest

from conftest import compose_cfg
from dlrm_exp.data.criteo_format import write_criteo_tsv
from dlrm_exp.modes.train import run_train

pytestmark = pytest.mark.slow

TRAIN = ["model=tiny", "train.batch_size=64", "train.epochs=2", "train.progress_bar=false"]
CHOICES = {"model": "tiny", "sharding": "auto", "optimizer": "rowwise_adagrad", "qcomms": "none"}


def test_parquet_from_preprocess_trains_exactly_like_the_tsv(tmp_path, cli_here):
    tsv = write_criteo_tsv(tmp_path / "day_0.tsv", 1200, strip_trailing_rate=0.3)
    with tsv.open("a") as f:
        f.write("1\t2\t3\n")  # one malformed row: skipped by both paths
    out = tmp_path / "converted"
    result = cli_here(
        [
            "mode=preprocess",
            "data=criteo_tsv",
            f"data.path={tsv}",
            "preprocess.format=parquet",
            f"preprocess.output_dir={out}",
            f"hydra.run.dir={tmp_path / 'pre'}",
        ]
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "1,200 rows written (1 skipped" in result.stdout
    assert f"--config-dir {out / 'conf'} data=parquet data/schema=criteo_preprocessed" in (
        result.stdout
    )
    assert f"data.path=[{out / 'day_0.parquet'}]" in result.stdout  # the inputs' order
    table = pq.read_table(out / "day_0.parquet")
    assert table.num_rows == 1200 and table.column_names[:3] == ["label", "I1", "I2"]

    runs = {}
    for name, overrides in {
        "tsv": ["data=criteo_tsv", f"data.path={tsv}"],
        "parquet": [
            f"hydra.searchpath=[file://{out / 'conf'}]",
            "data=parquet",
            "data/schema=criteo_preprocessed",
            f"data.path={out}",
            "data.shuffle_row_groups=false",
        ],
    }.items():
        run_dir = tmp_path / name
        run_dir.mkdir()
        run_train(compose_cfg([*overrides, *TRAIN]), run_dir, {**CHOICES, "data": name})
        runs[name] = json.loads((run_dir / "metrics.json").read_text())
    tsv_run, parquet_run = runs["tsv"], runs["parquet"]
    assert (
        parquet_run["data"]["rows"]
        == tsv_run["data"]["rows"]
        == {
            "train": 960,
            "val": 120,
            "test": 120,
        }
    )
    for split in ("val", "test"):  # exactly: same rows, same values, same batches
        assert parquet_run[split] == tsv_run[split]
    assert parquet_run["val_history"] == tsv_run["val_history"]


def test_tsv_features_take_any_id_policy_of_the_schema(tmp_path):
    """data=criteo_tsv reads through data.schema, so its features take the schema's id
    policies: cat_0 under managed collision trains with a managed-collision table."""
    tsv = write_criteo_tsv(tmp_path / "day_0.tsv", 600, seed=3)
    overrides = [
        "data=criteo_tsv",
        f"data.path={tsv}",
        "data.schema.sparse.cat_0.id_policy=managed_collision",
        "data.schema.sparse.cat_1.id_policy=modulo",
        *TRAIN,
    ]
    cfg = compose_cfg(overrides)
    assert list(cfg.model.managed_tables) == ["t_cat_0"]
    run_train(cfg, tmp_path, {**CHOICES, "data": "criteo_tsv"})
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    held = metrics["managed_rows_held"]["t_cat_0"]
    assert metrics["table_rows"]["t_cat_0"] == 1000 and 0 < held <= 1000
    assert 0 < metrics["val"]["auroc"] < 1


def test_a_second_conversion_with_other_settings_into_the_folder_is_refused(tmp_path):
    """Two preprocess.format=parquet runs into one folder, the second with smaller tables: the
    folder held files whose rows were hashed into other table sizes, read as one dataset."""
    from dlrm_exp.data.criteo_parquet import write_criteo_parquet
    from dlrm_exp.errors import DataError

    day_0 = write_criteo_tsv(tmp_path / "day_0.tsv", 50, seed=1)
    day_1 = write_criteo_tsv(tmp_path / "day_1.tsv", 50, seed=2)
    tsv = ["data=criteo_tsv", f"data.path={day_0}"]
    out = tmp_path / "out"
    write_criteo_parquet([day_0], out, compose_cfg(tsv).data.schema, 100)
    write_criteo_parquet([day_0], out, compose_cfg(tsv).data.schema, 100)  # the same: fine
    smaller = compose_cfg([*tsv, "model.num_embeddings_cap=50"]).data.schema
    with pytest.raises(DataError, match=r"holds Parquet files converted with other settings"):
        write_criteo_parquet([day_1], out, smaller, 100)
    assert not (out / "day_1.parquet").exists()


def test_an_output_file_of_another_input_is_replaced_only_when_asked(tmp_path):
    """a/day.tsv then c/day.tsv into one folder: the second replaced a/day.tsv's day.parquet
    without a word (data review); the npy conversion refuses another input for a day."""
    from dlrm_exp.data.criteo_parquet import write_criteo_parquet
    from dlrm_exp.errors import DataError

    first = write_criteo_tsv(tmp_path / "a" / "day.tsv", 50, seed=1)
    other = write_criteo_tsv(tmp_path / "c" / "day.tsv", 10, seed=2)
    schema = compose_cfg(["data=criteo_tsv", f"data.path={first}"]).data.schema
    out = tmp_path / "out"
    write_criteo_parquet([first], out, schema, 100)
    write_criteo_parquet([first], out, schema, 100)  # its own input again: replaced
    with pytest.raises(DataError, match=rf"converted from {first}\); {other} would replace it"):
        write_criteo_parquet([other], out, schema, 100)
    assert pq.read_table(out / "day.parquet").num_rows == 50
    write_criteo_parquet([other], out, schema, 100, overwrite=True)
    assert pq.read_table(out / "day.parquet").num_rows == 10
    # a file converted before outputs recorded their input: replaced, with a warning (review)
    older = pq.read_table(out / "day.parquet").replace_schema_metadata(None)
    pq.write_table(older, out / "day.parquet")
    write_criteo_parquet([first], out, schema, 100)
    assert pq.read_table(out / "day.parquet").num_rows == 50


def test_an_unwritable_output_folder_is_one_line_before_any_row_is_read(tmp_path, cli_here):
    """It was a raw FileNotFoundError traceback for Parquet (the npy format refused it in
    words of its own); both formats now say it alike."""
    taken = tmp_path / "a_file"
    taken.write_text("")
    day_0 = write_criteo_tsv(tmp_path / "day_0.tsv", 50, seed=1)
    for fmt in ("parquet", "npy"):
        result = cli_here(
            ["mode=preprocess", f"data.path={day_0}", f"preprocess.format={fmt}",
             f"preprocess.output_dir={taken / 'out'}", f"hydra.run.dir={tmp_path / fmt}"]
        )  # fmt: skip
        assert result.returncode != 0 and "Traceback" not in result.stderr
        assert f"cannot write preprocess.output_dir: {taken / 'out'}" in result.stderr


def test_two_conversions_into_one_output_folder_are_one_at_a_time(tmp_path, cli_here):
    """A second mode=preprocess into a folder another was converting truncated the first's
    day_<n>_*.tmp files, whose zeroed rows a day marker then vouched for (crash review)."""
    import subprocess
    import sys

    out = tmp_path / "out"
    out.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], "
         "os.O_RDWR | os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); "
         "time.sleep(60)", str(out / ".lock")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        day_0 = write_criteo_tsv(tmp_path / "day_0.tsv", 50, seed=1)
        for fmt in ("npy", "parquet"):
            args = [f"data.path={day_0}", f"preprocess.format={fmt}"]
            args += [f"preprocess.output_dir={out}", f"hydra.run.dir={tmp_path / fmt}"]
            done = cli_here(["mode=preprocess", *args])
            assert done.returncode != 0 and "Traceback" not in done.stderr
            assert f"preprocess.output_dir={out} is being written by another run" in done.stderr
        assert sorted(p.name for p in out.iterdir()) == [".lock"]  # nothing written
        # a sweep's job so refused records its failure (its own folder is its own: review)
        sweep = tmp_path / "sweep"
        done = cli_here(["-m", "mode=preprocess", f"data.path={day_0}",
                         f"preprocess.output_dir={out}", f"hydra.sweep.dir={sweep}"])  # fmt: skip
        record = json.loads((sweep / "0" / "metrics.json").read_text())
        assert record["status"] == "failed" and record["error_type"] == "OutputFolderInUseError"
    finally:
        holder.kill()
        holder.wait()


def test_unlabeled_rows_are_refused_beyond_the_skipped_fraction(tmp_path):
    """Criteo's test.txt (no label) read as labeled rows: most skipped, the rest shifted by a
    column; the Parquet conversion wrote those as valid (the npy one refused them)."""
    from dlrm_exp.data.criteo_parquet import write_criteo_parquet
    from dlrm_exp.errors import DataError

    labeled = write_criteo_tsv(tmp_path / "day.tsv", 200, seed=3)
    rows = [line.split("\t", 1)[1] for line in labeled.read_text().splitlines()]
    unlabeled = tmp_path / "test.tsv"
    unlabeled.write_text("\n".join(rows) + "\n")
    schema = compose_cfg(["data=criteo_tsv", f"data.path={unlabeled}"]).data.schema
    with pytest.raises(DataError, match=r"could not be converted \(nothing written for test"):
        write_criteo_parquet([unlabeled], tmp_path / "out", schema, 100, 5, 0.01)
    assert not (tmp_path / "out" / "test.parquet").exists()
    write_criteo_parquet([labeled], tmp_path / "out", schema, 100, 5, 0.01)  # labeled: fine
