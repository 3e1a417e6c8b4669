"""After training: evaluate, predict and export a checkpoint written by a 2-process row-wise
run (one shared training run for every test here)."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from conftest import compose_cfg
from dlrm_exp.data.criteo_format import write_criteo_tsv
from dlrm_exp.errors import DataError
from dlrm_exp.factories.inference import InferenceDLRM
from dlrm_exp.loop.checkpoint import CheckpointError
from dlrm_exp.modes.evaluate import run_evaluate
from dlrm_exp.modes.export import load_trained, run_export
from dlrm_exp.modes.job import Job
from dlrm_exp.modes.predict import run_predict
from dlrm_exp.modes.train import run_train

pytestmark = pytest.mark.slow

DATA = [
    "data.num_train_samples=8192",
    "data.num_val_samples=2048",
    "data.num_test_samples=2048",
    "train.batch_size=256",
    "train.progress_bar=false",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The acceptance run, small: 2 processes, row-wise, a checkpoint at the end."""
    run_dir = tmp_path_factory.mktemp("train")
    cfg = compose_cfg(
        [
            *DATA,
            "hardware.nproc_per_node=2",
            "sharding=rowwise",
            "train.checkpoint_every_n_steps=100",
        ]
    )
    return run_dir, run_train(cfg, run_dir, {"sharding": "rowwise"})


def test_evaluate_on_one_process_gives_the_training_runs_final_numbers(trained, tmp_path):
    run_dir, metrics = trained
    cfg = compose_cfg([*DATA, "mode=evaluate", f"checkpoint={run_dir}"])
    result = run_evaluate(cfg, Job(tmp_path))
    assert result.world_size == 1 and result.step == metrics.steps == 16
    for split in ("val", "test"):
        ours, theirs = getattr(result, split), getattr(metrics, split)
        assert ours["auroc"] == theirs["auroc"] and ours["samples"] == theirs["samples"]
        assert ours["logloss"] == pytest.approx(theirs["logloss"], rel=1e-12)
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["mode"] == "evaluate" and saved["val"]["auroc"] == metrics.val["auroc"]
    only_test = run_evaluate(
        compose_cfg([*DATA, "mode=evaluate", f"checkpoint={run_dir}", "split=test"]),
        Job(tmp_path / "t"),
    )
    assert only_test.val == {} and only_test.test["auroc"] == metrics.test["auroc"]


def test_predict_writes_one_probability_per_valid_row_in_order(trained, tmp_path):
    run_dir, _ = trained
    tsv = write_criteo_tsv(tmp_path / "day.tsv", 1000, seed=5, strip_trailing_rate=0.3)
    with open(tsv, "a") as f:
        f.write("1\tnot\ta\trow\n")  # line 1001: skipped and reported
    cfg = compose_cfg(
        [
            "mode=predict",
            f"checkpoint={run_dir}",
            "data=criteo_tsv",
            f"data.path={tsv}",
            "predict.batch_size=300",
        ]
    )
    report = run_predict(cfg, Job(tmp_path))
    table = pq.read_table(tmp_path / "predictions.parquet")
    assert table.num_rows == report["rows_written"] == 1000
    assert table.column("line").to_pylist() == list(range(1, 1001))
    p = table.column("probability").to_numpy()
    assert p.dtype == np.float32 and ((p > 0) & (p < 1)).all()
    labels = [int(line.split("\t")[0]) for line in tsv.read_text().splitlines()[:1000]]
    assert table.column("label").to_pylist() == labels
    assert report["read"]["rows_skipped"] == 1
    assert report["read"]["first_bad_lines"][0].endswith(":1001 (field_count)")


def test_predict_scores_unlabeled_rows_and_refuses_a_mostly_malformed_file(trained, tmp_path):
    """Rows to score in Criteo's test.txt layout (no label: 39 fields) are detected and all
    scored, with the same probabilities as the labeled rows and no label column; a file whose
    rows are mostly malformed fails predict and evaluate with the counts (over 1 % skipped)."""
    run_dir, _ = trained
    labeled = write_criteo_tsv(tmp_path / "day.tsv", 300, seed=6, strip_trailing_rate=0.0)
    unlabeled = tmp_path / "test.tsv"
    unlabeled.write_text(
        "".join(line.split("\t", 1)[1] + "\n" for line in labeled.read_text().splitlines())
    )
    tables = {}
    for name, tsv in (("labeled", labeled), ("unlabeled", unlabeled)):
        cfg = compose_cfg(
            ["mode=predict", f"checkpoint={run_dir}", "data=criteo_tsv", f"data.path={tsv}"]
        )
        report = run_predict(cfg, Job(tmp_path / name))
        assert report["rows_written"] == 300 and report["read"]["rows_skipped"] == 0
        tables[name] = pq.read_table(tmp_path / name / "predictions.parquet")
    assert tables["unlabeled"].schema.names == ["file", "line", "probability"]
    assert tables["unlabeled"].column("probability").to_pylist() == (
        tables["labeled"].column("probability").to_pylist()
    )
    lines = labeled.read_text().splitlines()
    malformed = tmp_path / "malformed.tsv"
    malformed.write_text("".join(f"{line}\n" if i % 4 == 0 else "1\tbroken\n"
                                 for i, line in enumerate(lines[:100])))  # fmt: skip
    cfg = compose_cfg(
        ["mode=predict", f"checkpoint={run_dir}", "data=criteo_tsv", f"data.path={malformed}"]
    )
    with pytest.raises(DataError, match=r"75 of 100 rows could not be scored \(75.0% > data.max"):
        run_predict(cfg, Job(tmp_path / "malformed"))
    assert not list((tmp_path / "malformed").glob("*.parquet*"))
    evaluate = [f"checkpoint={run_dir}", "data=criteo_tsv", f"data.path={malformed}"]
    with pytest.raises(DataError, match=r"75 of 100 rows could not be evaluated \(75.0% > "):
        run_evaluate(compose_cfg(["mode=evaluate", *evaluate]), Job(tmp_path / "evaluate"))


def test_predict_refuses_a_file_of_another_feature_count(trained, tmp_path):
    run_dir, _ = trained
    bad = tmp_path / "fifty.tsv"  # 50 columns: not the 40 of the Criteo schema
    bad.write_text("\n".join("\t".join(["1"] * 50) for _ in range(5)) + "\n")
    cfg = compose_cfg(
        ["mode=predict", f"checkpoint={run_dir}", "data=criteo_tsv", f"data.path={bad}"]
    )
    with pytest.raises(
        DataError, match=r"no valid Criteo row .*5 rows read, skipped: field_count 5"
    ):
        run_predict(cfg, Job(tmp_path))
    assert not list(tmp_path.glob("*.parquet*"))


LOAD_WITHOUT_DLRM_EXP = textwrap.dedent(
    """
    import sys, torch, fbgemm_gpu
    model = torch.jit.load(sys.argv[1])
    inputs = torch.load(sys.argv[2])
    torch.save(model(*inputs), sys.argv[3])
    assert not any(m.startswith("dlrm_exp") for m in sys.modules)
    """
)


@pytest.mark.parametrize(("quantization", "tolerance"), [("none", 1e-6), ("int8", 2e-2)])
def test_export_loads_without_dlrm_exp_and_reproduces_the_model(
    trained, tmp_path, quantization, tolerance
):
    run_dir, _ = trained
    cfg = compose_cfg(
        ["mode=export", f"checkpoint={run_dir}", f"export.quantization={quantization}"]
    )
    record = run_export(cfg, Job(tmp_path))
    saved = json.loads((tmp_path / "export.json").read_text())
    assert saved["quantization"] == quantization and len(saved["inputs"]["feature_names"]) == 26
    if quantization == "int8":
        assert record["table_bytes"] < record["table_bytes_fp32"]
    generator = torch.Generator().manual_seed(0)
    batch = 64
    dense = torch.rand(batch, 13, generator=generator) * 5
    sizes = torch.tensor(cfg.model.table_sizes).repeat_interleave(batch)
    values = (torch.rand(26 * batch, generator=generator) * sizes).long()
    lengths = torch.ones(26 * batch, dtype=torch.int32)
    torch.save((dense, values, lengths), tmp_path / "inputs.pt")
    subprocess.run(
        [
            sys.executable,
            "-c",
            LOAD_WITHOUT_DLRM_EXP,
            record["artifact"],
            str(tmp_path / "inputs.pt"),
            str(tmp_path / "out.pt"),
        ],
        check=True,
        cwd=tmp_path,
    )
    exported = torch.load(tmp_path / "out.pt")
    dlrm, _ = load_trained(cfg, run_dir / "checkpoints" / "step_16")
    with torch.no_grad():
        expected = InferenceDLRM(dlrm, cfg.model.feature_names)(dense, values, lengths)
    assert exported.shape == (batch,)
    assert float((exported - expected).abs().max()) <= tolerance


def test_bad_checkpoints_are_one_clear_error_each(trained, tmp_path):
    run_dir, _ = trained
    cases = {
        str(tmp_path / "nowhere"): "no such folder",
        str(tmp_path): "no complete checkpoint in this run folder",
    }
    partial = tmp_path / "step_9.partial"
    partial.mkdir()
    cases[str(partial)] = "not a complete checkpoint"
    for location, message in cases.items():
        cfg = compose_cfg([*DATA, "mode=evaluate", f"checkpoint={location}"])
        with pytest.raises(CheckpointError, match=message):
            run_evaluate(cfg, Job(tmp_path / "eval"))
    other = compose_cfg(
        [
            *DATA,
            "mode=evaluate",
            f"checkpoint={run_dir}",
            "model.embedding_dim=8",
            "model.dense_arch_layer_sizes=[64,8]",
        ]
    )
    with pytest.raises(CheckpointError, match=r"another model shape \(t_cat_0: checkpoint"):
        run_evaluate(other, Job(tmp_path / "eval"))
