"""After training: evaluate, predict and export a checkpoint written by a 2-process row-wise
run (one shared training run for every test here)."""

import json
import logging
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from conftest import compose_cfg, compose_raw, two_process_job
from dlrm_exp.config.build import build_config
from dlrm_exp.data.criteo_format import write_criteo_tsv
from dlrm_exp.errors import ConfigError, DataError, OutputFolderInUseError
from dlrm_exp.factories.inference import InferenceDLRM
from dlrm_exp.loop.checkpoint import CheckpointError
from dlrm_exp.modes.evaluate import run_evaluate
from dlrm_exp.modes.evaluate import summary as evaluate_summary
from dlrm_exp.modes.export import load_trained, run_export
from dlrm_exp.modes.job import Job
from dlrm_exp.modes.predict import run_predict
from dlrm_exp.record.run_record import RunMetrics
from dlrm_exp.util.folder_lock import held_output_file

pytestmark = pytest.mark.slow

DATA = [
    "data.num_train_samples=8192",
    "data.num_val_samples=2048",
    "data.num_test_samples=2048",
    "train.batch_size=256",
    "train.progress_bar=false",
]


#: The acceptance run, small: 2 processes, row-wise, a checkpoint at the end.
TRAINED = two_process_job(
    "after-training",
    [*DATA, "sharding=rowwise", "train.checkpoint_every_n_steps=100"],
    choices={"sharding": "rowwise"},
)


@pytest.fixture(scope="module")
def trained(two_process_runs):
    """(run folder, record) of ``TRAINED``."""
    run = two_process_runs[TRAINED]
    return run.run_dir, run.metrics


def test_evaluate_on_one_process_gives_the_training_runs_final_numbers(trained, tmp_path, caplog):
    run_dir, metrics = trained
    cfg = compose_cfg([*DATA, "mode=evaluate", f"checkpoint={run_dir}"])
    with caplog.at_level(logging.WARNING, logger="dlrm_exp.modes.setup"):
        result = run_evaluate(cfg, Job(tmp_path))
    assert "train.dense_precision" not in caplog.text and "managed_collision" not in caplog.text
    assert "trained on other data" not in caplog.text
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
    record = (run_dir / "metrics.json").read_bytes()  # the training run's
    into_training = compose_cfg([*DATA, "mode=evaluate", f"checkpoint={run_dir}"])
    with pytest.raises(ConfigError, match=r"holds another run's metrics.json \(a training"):
        run_evaluate(into_training, Job(run_dir))
    assert (run_dir / "metrics.json").read_bytes() == record
    again = run_evaluate(cfg, Job(tmp_path))  # an earlier evaluation's folder: replaced
    assert json.loads((tmp_path / "metrics.json").read_text())["val"] == again.val
    # its TensorBoard points too: set aside, not left beside the new record's (review)
    assert len(list(tmp_path.glob("events.out.tfevents.*"))) == 1
    assert len(list((tmp_path / "tensorboard_earlier_run").glob("events.*"))) == 1
    rerun = tmp_path / "interrupted"  # a sweep job's folder, its evaluation interrupted
    rerun.mkdir()
    RunMetrics.interrupted("SIGINT", "KeyboardInterrupt").write(rerun / "metrics.json")
    again = run_evaluate(cfg, Job(rerun))  # rerun there: the record of nothing is replaced
    assert json.loads((rerun / "metrics.json").read_text())["val"] == again.val
    bf16 = compose_cfg([*DATA, "mode=evaluate", f"checkpoint={run_dir}", "split=val",
                        "train.dense_precision=bf16"])  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="dlrm_exp.modes.setup"):
        run_evaluate(bf16, Job(tmp_path / "bf16"))  # the run trained the dense part in fp32
    assert "trained with train.dense_precision=fp32; this job computes the dense part in bf16" in (
        caplog.text
    )
    # what scored instead of what was asked, recorded and said as training does (it was
    # neither: contributor review); the optimizer's, which scoring does not run, left out
    other = compose_cfg([*DATA, "mode=evaluate", f"checkpoint={run_dir}", "split=val",
                         "sharding=columnwise", "qcomms=fp16"])  # fmt: skip
    scored = run_evaluate(other, Job(tmp_path / "other"))
    assert sorted(s["setting"] for s in scored.substitutions) == ["qcomms", "sharding"]
    saved = json.loads((tmp_path / "other" / "metrics.json").read_text())
    assert saved["substitutions"] == scored.substitutions and saved["effective_qcomms"] == {}
    assert "warning: qcomms fp16: ran no embedding collective" in evaluate_summary(
        scored, tmp_path / "other"
    )
    adam = compose_cfg([*DATA, "mode=evaluate", f"checkpoint={run_dir}", "split=val",
                        "optimizer=adam"])  # fmt: skip
    assert run_evaluate(adam, Job(tmp_path / "adam")).substitutions == []  # (no update runs)


def test_predict_writes_one_probability_per_valid_row_in_order(trained, tmp_path, monkeypatch):
    run_dir, _ = trained
    tsv = write_criteo_tsv(tmp_path / "day.tsv", 1000, seed=5, strip_trailing_rate=0.3)
    with open(tsv, "a") as f:
        f.write("1\tnot\ta\trow\n")  # line 1001: skipped and reported
    overrides = [
        "mode=predict",
        f"checkpoint={run_dir}",
        "data=criteo_tsv",
        f"data.path={tsv}",
        "predict.batch_size=300",
    ]
    report = run_predict(compose_cfg(overrides), Job(tmp_path))
    table = pq.read_table(tmp_path / "predictions.parquet")
    assert table.num_rows == report["rows_written"] == 1000
    assert table.column("line").to_pylist() == list(range(1, 1001))
    p = table.column("probability").to_numpy()
    assert p.dtype == np.float32 and ((p > 0) & (p < 1)).all()
    labels = [int(line.split("\t")[0]) for line in tsv.read_text().splitlines()[:1000]]
    assert table.column("label").to_pylist() == labels
    assert report["read"]["rows_skipped"] == 1
    assert report["read"]["first_bad_lines"][0].endswith(":1001 (field_count)")
    folder = compose_cfg([*overrides, f"predict.output={tmp_path}"])
    with pytest.raises(ConfigError, match=r"predict.output=.* is a folder: name the file"):
        run_predict(folder, Job(tmp_path / "again"))  # before loading or scoring anything
    record = (run_dir / "metrics.json").read_bytes()
    other_file = compose_cfg([*overrides, f"predict.output={run_dir / 'metrics.json'}"])
    with pytest.raises(ConfigError, match=r"metrics.json exists and holds no predictions"):
        run_predict(other_file, Job(tmp_path / "again"))
    assert (run_dir / "metrics.json").read_bytes() == record
    assert not list(tmp_path.glob("*.partial"))
    # the file names the checkpoint that made it; a .csv name got Parquet (review)
    made = pq.read_schema(tmp_path / "predictions.parquet").metadata
    assert made[b"dlrm_exp.checkpoint"].decode() == report["checkpoint"]
    assert made[b"dlrm_exp.step"].decode() == str(report["step"])  # a best is replaced
    csv = compose_cfg([*overrides, f"predict.output={tmp_path / 'p.csv'}"])
    with pytest.raises(ConfigError, match=r"p.csv: predictions are written as Parquet; .*p.parq"):
        run_predict(csv, Job(tmp_path / "again"))
    # a second run given the same output while the first writes it: both wrote one .partial
    # and the first to finish published it mid-write (an unreadable file its report vouched for)
    published = (tmp_path / "predictions.parquet").read_bytes()
    with held_output_file(tmp_path / "predictions.parquet", "predict.output"):  # the first
        with pytest.raises(OutputFolderInUseError, match=r"predict.output=.*predictions.parquet "
                           "is being written by another run .* name another file"):  # fmt: skip
            same = f"predict.output={tmp_path / 'predictions.parquet'}"
            run_predict(compose_cfg([*overrides, same]), Job(tmp_path / "second"))
    assert (tmp_path / "predictions.parquet").read_bytes() == published
    # ~ is the home folder, as in data.path (a literal ./~ failed after scoring every row)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    home = compose_cfg([*overrides, "predict.output='~/p.parquet'"])
    assert run_predict(home, Job(tmp_path / "home_run"))["rows_written"] == 1000
    assert (tmp_path / "home" / "p.parquet").is_file()


def test_predict_scores_unlabeled_rows_and_refuses_a_mostly_malformed_file(
    trained, tmp_path, caplog
):
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
    # labeled rows whose trailing empty fields were cut (38 fields): not taken for unlabeled
    # ones (the label then read as I1, every column shifted), but asked about
    cut = tmp_path / "cut.tsv"
    cut.write_text(
        "".join(
            "\t".join(line.split("\t")[:38]) + "\n" for line in labeled.read_text().splitlines()
        )
    )
    ask = ["mode=predict", f"checkpoint={run_dir}", "data=criteo_tsv", f"data.path={cut}"]
    with pytest.raises(DataError, match=r"widest line among the first 300 has 38 fields .*"
                       r"set predict.has_label=true or predict.has_label=false"):  # fmt: skip
        run_predict(compose_cfg(ask), Job(tmp_path / "cut"))
    told = run_predict(compose_cfg([*ask, "predict.has_label=true"]), Job(tmp_path / "told"))
    assert told["rows_written"] == 300
    lines = labeled.read_text().splitlines()
    malformed = tmp_path / "malformed.tsv"
    malformed.write_text("".join(f"{line}\n" if i % 4 == 0 else "1\tbroken\n"
                                 for i, line in enumerate(lines[:100])))  # fmt: skip
    cfg = compose_cfg(
        ["mode=predict", f"checkpoint={run_dir}", "data=criteo_tsv", f"data.path={malformed}"]
    )
    with pytest.raises(DataError, match=r"75 of 100 rows could not be scored \(75.0% > data.max"):
        run_predict(cfg, Job(tmp_path / "malformed"))
    assert not list((tmp_path / "malformed").glob("predictions.parquet*"))  # (.lock stays)
    evaluate = [f"checkpoint={run_dir}", "data=criteo_tsv", f"data.path={malformed}"]
    with pytest.raises(DataError, match=r"^data.path: 75 of 100 rows could not be evaluated \(75"):
        run_evaluate(compose_cfg(["mode=evaluate", *evaluate]), Job(tmp_path / "evaluate"))
    with pytest.raises(DataError, match=r"\. Evaluation scores labelled rows; to score the valid"):
        run_evaluate(compose_cfg(["mode=evaluate", *evaluate]), Job(tmp_path / "evaluate"))
    # the refusal names the file the scored rows came from
    bad_val = [*evaluate[:2], f"data.path={labeled}", f"data.val_path={malformed}", "split=val"]
    with pytest.raises(DataError, match=r"^data.val_path: 75 of 100 rows could not be evaluated"):
        run_evaluate(compose_cfg(["mode=evaluate", *bad_val]), Job(tmp_path / "bad_val"))
    # each file against its own rows: 2 bad of 102 (2 %) passed beside a clean test file, as
    # 2 of 202 (Criteo review)
    (tmp_path / "val2.tsv").write_text("".join(f"{x}\n" for x in lines[:100]) + "1\tbroken\n" * 2)
    (tmp_path / "test2.tsv").write_text("".join(f"{x}\n" for x in lines[100:200]))
    both = [*evaluate[:2], f"data.path={labeled}", f"data.val_path={tmp_path / 'val2.tsv'}",
            f"data.test_path={tmp_path / 'test2.tsv'}"]  # fmt: skip
    with pytest.raises(DataError, match=r"^data.val_path: 2 of 102 rows could not be evaluated"):
        run_evaluate(compose_cfg(["mode=evaluate", *both]), Job(tmp_path / "both"))
    # the training file's rows are not held against splits read from files of their own
    clean = [*evaluate, f"data.val_path={labeled}", "split=val"]
    with caplog.at_level(logging.WARNING, logger="dlrm_exp.modes.setup"):
        scored = run_evaluate(compose_cfg(["mode=evaluate", *clean]), Job(tmp_path / "clean"))
    assert scored.val["samples"] == 300
    from dlrm_exp.modes.evaluate import summary

    # its rows read and skipped, as training prints them (it printed none: Criteo review)
    printed = summary(scored, tmp_path)
    assert re.search(r"\ndata [\d,]+ rows read, [\d,]+ valid, .* skipped\n", printed)
    # data.path is not even decoded when every scored split has files of its own (a Kaggle
    # training file is ~12 GB decoded): a file of no Criteo row goes unread
    garbage = tmp_path / "garbage.tsv"
    garbage.write_text("not a criteo row\n")
    unread = ["mode=evaluate", *clean[:2], f"data.path={garbage}", *clean[3:]]
    unread_run = run_evaluate(compose_cfg(unread), Job(tmp_path / "unread"))
    assert unread_run.val["samples"] == 300
    assert unread_run.data["rows"] == {"val": 300}  # no "train": 0 for rows never read
    # nor needed: a labelled file scored whole without data.path (own-data review)
    alone = build_config(compose_raw(["mode=evaluate", *clean[:2], *clean[3:]]))
    assert alone.data.path == []
    assert run_evaluate(alone, Job(tmp_path / "alone")).val == unread_run.val
    # a data.path given but read for no scored split need not exist; nor is it needed for a
    # test split of fraction 0 (it was read whole for nothing: diff review)
    for extra in ([f"data.path={tmp_path / 'gone.tsv'}", "split=val"], ["data.test_fraction=0"]):
        cfg = build_config(compose_raw(["mode=evaluate", *clean[:2], clean[3], *extra]))
        done = run_evaluate(cfg, Job(tmp_path / f"unread_{len(extra[0])}"))
        assert done.val == unread_run.val and "data.path" not in done.data["read"]["inputs"]
    # the checkpoint was trained on synthetic data: scored on Criteo rows, said so
    assert "the checkpoint was trained on other data than this job reads (its run set " in (
        caplog.text
    )
    with pytest.raises(
        DataError, match=r"^data\.path: 75 of 100 rows could not be evaluated"
    ):  # split=test: its rows come from data.path
        run_evaluate(compose_cfg(["mode=evaluate", *clean[:-1], "split=test"]), Job(tmp_path))


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
    assert not list(tmp_path.glob("predictions.parquet*"))  # (its hidden .lock stays)


#: Run in a fresh interpreter that imports only torch, fbgemm_gpu and the standard library:
#: loads the artifact, scores the inputs, reads every table back from the artifact's own
#: tensors, fails if ``dlrm_exp`` or ``torchrec`` got imported, and saves what it found.
#: Tables are either TorchRec's float ``EmbeddingBag`` weights (export.quantization=none) or
#: the rows packed in the ``weights_host`` bytes of FBGEMM's IntN table-batched embedding
#: bags (``QuantEmbeddingBagCollection``), typed per table by ``weights_tys``; an int8 row is
#: an fp16 scale and an fp16 bias, then ``dim`` uint8 codes (FBGEMM's inference layout).
LOAD_AND_READ_TABLES = textwrap.dedent(
    """
    import sys, torch, fbgemm_gpu
    from fbgemm_gpu.split_embedding_configs import SparseType
    from fbgemm_gpu.split_table_batched_embeddings_ops_inference import rounded_row_size_in_bytes

    def packed_tables(state, prefix):
        host, offsets = state[prefix + "weights_host"], state[prefix + "weights_offsets"].tolist()
        dims = state[prefix + "D_offsets"].diff().tolist()
        ends = offsets[1:] + [host.numel()]
        for t, ty in enumerate(state[prefix + "weights_tys"].tolist()):
            sparse_type, dim = SparseType.from_int(ty), dims[t]
            rows = int(state[prefix + "rows_per_table"][t])
            stride = rounded_row_size_in_bytes(dim, sparse_type, 16)  # TorchRec's row alignment
            packed = host[offsets[t] : offsets[t] + rows * stride].view(rows, stride)
            scale_bias = None
            if sparse_type is SparseType.INT8:
                scale_bias = packed[:, :4].contiguous().view(torch.float16).float()
                weights = packed[:, 4 : 4 + dim].float() * scale_bias[:, :1] + scale_bias[:, 1:]
            elif sparse_type is SparseType.FP16:
                weights = packed[:, : 2 * dim].contiguous().view(torch.float16).float()
            else:
                weights = None
            yield dict(type=sparse_type.value, storage=str(host.dtype), rows=rows, dim=dim,
                       bytes=ends[t] - offsets[t], weights=weights, scale_bias=scale_bias)

    def float_table(weight):
        return dict(type=SparseType.from_dtype(weight.dtype).value, storage=str(weight.dtype),
                    rows=weight.shape[0], dim=weight.shape[1],
                    bytes=weight.numel() * weight.element_size(), weights=weight.float(),
                    scale_bias=None)

    model = torch.jit.load(sys.argv[1])
    output = model(*torch.load(sys.argv[2]))
    state = model.state_dict()
    tables = [float_table(w) for k, w in state.items()
              if ".embedding_bags." in k and k.endswith(".weight")]
    for key in state:
        if key.endswith("weights_host"):
            tables += packed_tables(state, key[: -len("weights_host")])
    leaked = sorted(m for m in sys.modules if m.startswith(("dlrm_exp", "torchrec")))
    assert not leaked, f"loading the artifact imported {leaked[:5]}"
    torch.save({"output": output, "tables": tables}, sys.argv[3])
    """
)

#: FBGEMM's inference tables (``rounded_row_size_in_bytes``, ``align_to_cacheline`` in
#: ``fbgemm_gpu.split_table_batched_embeddings_ops_inference``): each row padded to TorchRec's
#: ``DEFAULT_ROW_ALIGNMENT`` (16 bytes), each table to a 128-byte cache line; an int8 row
#: carries its fp16 scale and bias (4 bytes).
ROW_ALIGNMENT, CACHE_LINE, SCALE_BIAS_BYTES = 16, 128, 4
#: Largest |difference| of the exported click probabilities from the trained model's, and
#: whether it must be nonzero (a quantized table cannot reproduce fp32 exactly). Measured on
#: the ``trained`` run: 0 (none), 2.8e-5 (fp16), 2.7e-4 (int8); bounds about 10x that.
OUTPUT_TOLERANCE = {"none": (1e-6, False), "fp16": (3e-4, True), "int8": (3e-3, True)}


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def expected_table_bytes(quantization: str, rows: int, dim: int) -> int:
    """Bytes a (rows, dim) table takes in an artifact exported with ``quantization``:
    rows x dim x 4 (fp32), rows x dim x 2 (fp16) or rows x (dim + 4) (int8: uint8 codes plus
    an fp16 scale and bias), with FBGEMM's row and cache-line padding for fp16 and int8."""
    if quantization == "none":
        return rows * dim * 4
    row = dim + SCALE_BIAS_BYTES if quantization == "int8" else dim * 2
    return _round_up(rows * _round_up(row, ROW_ALIGNMENT), CACHE_LINE)


def artifact_problems(
    loaded: dict, quantization: str, reference: list[torch.Tensor], expected: torch.Tensor
) -> list[str]:
    """What is wrong with an artifact exported with ``quantization``, as the loading
    subprocess read it back (``loaded``: its tables and output), against the trained model's
    fp32 tables (``reference``, in table order) and click probabilities (``expected``, (B,)).
    Checks each table's type, storage dtype, shape, bytes and values (fp16: the fp32 weights
    rounded to fp16, exactly; int8: within half a step of its row's scale, and not equal to
    fp32), and the output's difference. Empty when the artifact is what was asked."""
    kind = {"none": "fp32", "fp16": "fp16", "int8": "int8"}[quantization]
    storage = "torch.float32" if quantization == "none" else "torch.uint8"
    problems = [] if len(loaded["tables"]) == len(reference) else ["wrong table count"]
    for i, (table, fp32) in enumerate(zip(loaded["tables"], reference, strict=False)):
        rows, dim = fp32.shape
        if table["type"] != kind or table["storage"] != storage:
            problems.append(f"table {i} stored as {table['type']} in {table['storage']}")
        if (table["rows"], table["dim"]) != (rows, dim):
            problems.append(f"table {i} has shape {(table['rows'], table['dim'])}")
        elif table["bytes"] != expected_table_bytes(quantization, rows, dim):
            problems.append(f"table {i} takes {table['bytes']} bytes")
        problems += _value_problems(i, table, quantization, fp32)
    difference = float((loaded["output"] - expected).abs().max())
    tolerance, nonzero = OUTPUT_TOLERANCE[quantization]
    if not (0 < difference if nonzero else 0 <= difference) or difference > tolerance:
        allowed = f"{'(' if nonzero else '['}0, {tolerance}]"
        problems.append(f"output differs by {difference:.3g} (allowed: {allowed})")
    return problems


def _value_problems(i: int, table: dict, quantization: str, fp32: torch.Tensor) -> list[str]:
    weights, scale_bias = table["weights"], table["scale_bias"]
    if weights is None or weights.shape != fp32.shape:
        return [f"table {i}: no readable weights"]
    if quantization == "none":
        return [] if torch.equal(weights, fp32) else [f"table {i}: weights differ from fp32"]
    if quantization == "fp16":
        exact = torch.equal(weights, fp32.half().float())
        return [] if exact else [f"table {i}: weights are not the fp32 weights in fp16"]
    if scale_bias is None:
        return [f"table {i}: no per-row scale and bias"]
    within = ((weights - fp32).abs() <= scale_bias[:, :1] / 2 + 1e-6).all()
    rounded = not torch.equal(weights, fp32)
    return [] if within and rounded else [f"table {i}: weights are not fp32 rounded to int8"]


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    """``export(quantization)`` -> (record, what the loading subprocess read, reference tables,
    expected probabilities): one export and one load per quantization, shared by the tests."""
    run_dir, _ = trained
    cfg = compose_cfg(["mode=export", f"checkpoint={run_dir}"])
    dlrm, _ = load_trained(cfg, run_dir / "checkpoints" / "step_16")
    reference = [
        weight
        for key, weight in dlrm.state_dict().items()
        if key.startswith("sparse_arch.") and key.endswith(".weight")
    ]
    generator = torch.Generator().manual_seed(0)
    batch, sizes = 64, torch.tensor(cfg.model.table_sizes)
    dense = torch.rand(batch, 13, generator=generator) * 5
    values = (torch.rand(26 * batch, generator=generator) * sizes.repeat_interleave(batch)).long()
    inputs = (dense, values, torch.ones(26 * batch, dtype=torch.int32))
    with torch.no_grad():
        expected = InferenceDLRM(dlrm, cfg.model.feature_names)(*inputs)
    results = {}

    def export(quantization: str) -> tuple[dict, dict, list[torch.Tensor], torch.Tensor]:
        if quantization not in results:
            out = tmp_path_factory.mktemp(f"export_{quantization}")
            cfg = [f"checkpoint={run_dir}", f"export.quantization={quantization}"]
            record = run_export(compose_cfg(["mode=export", *cfg]), Job(out))
            torch.save(inputs, out / "inputs.pt")
            script = [sys.executable, "-c", LOAD_AND_READ_TABLES, record["artifact"]]
            done = subprocess.run(
                [*script, str(out / "inputs.pt"), str(out / "loaded.pt")],
                cwd=out,
                capture_output=True,
                text=True,
            )
            assert done.returncode == 0, done.stderr[-3000:]
            results[quantization] = (record, torch.load(out / "loaded.pt"))
        return (*results[quantization], reference, expected)

    return export


@pytest.mark.parametrize("quantization", ["none", "fp16", "int8"])
def test_export_loads_with_torch_and_fbgemm_alone_and_stores_its_tables_as_asked(
    exported, quantization
):
    """The artifact loads in an interpreter that imported neither dlrm_exp nor torchrec,
    scores like the trained model (quantized: close, never identical), and its saved tables
    have the asked type, dtype and bytes (see :func:`artifact_problems`)."""
    record, loaded, reference, expected = exported(quantization)
    saved = json.loads((Path(record["artifact"]).parent / "export.json").read_text())
    assert saved["quantization"] == quantization and len(saved["inputs"]["feature_names"]) == 26
    assert loaded["output"].shape == expected.shape == (64,)
    problems = artifact_problems(loaded, quantization, reference, expected)
    assert not problems, "\n".join(problems[:10])
    # an id past its table's rows: fp16 and int8 scored it as row 0 without a word, fp32
    # failed on FBGEMM's internal check (after-training review); each refuses it, saying why
    artifact = torch.jit.load(record["artifact"])
    dense, values, lengths = torch.load(Path(record["artifact"]).parent / "inputs.pt")
    artifact(dense, values, lengths)
    for bad in (saved["inputs"]["num_embeddings"][0], -1):
        wrong = values.clone()
        wrong[5] = bad
        with pytest.raises(torch.jit.Error, match="an id is outside its table's rows"):
            artifact(dense, wrong, lengths)


@pytest.mark.parametrize("asked", ["int8", "fp16"])
def test_an_fp32_artifact_fails_the_quantized_checks(exported, asked):
    """The checks of the test above can fail: an unquantized artifact read back by the same
    subprocess is refused as int8 (and as fp16) by its types, bytes, values and output."""
    _, loaded, reference, expected = exported("none")
    problems = "\n".join(artifact_problems(loaded, asked, reference, expected))
    assert "table 0 stored as fp32 in torch.float32" in problems
    assert "table 0 takes 64000 bytes" in problems
    assert "output differs by 0 " in problems
    assert f"table 0: {'no per-row scale' if asked == 'int8' else 'weights are not'}" in problems


def test_bad_checkpoints_are_one_clear_error_each(trained, tmp_path):
    run_dir, _ = trained
    cases = {
        str(tmp_path / "nowhere"): "no such folder",
        str(tmp_path / "a_file"): r"a_file \(a file, not a checkpoint folder\)",
        str(tmp_path): "no complete checkpoint in this run folder",
    }
    (tmp_path / "a_file").write_text("")
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


def test_an_evaluate_predict_or_export_folder_as_checkpoint_names_what_it_read(tmp_path):
    """Such a folder was told to train with train.checkpoint_every_n_steps (after-training
    review); the refusal names its mode and the checkpoint its run read."""
    from dlrm_exp.loop.checkpoint import find_checkpoint

    read = str(tmp_path / "run" / "checkpoints" / "step_8")
    records = [
        ("evaluate", "metrics.json", {"mode": "evaluate", "checkpoint": read}),
        ("predict", "predict_report.json", {"checkpoint": read}),
        ("export", "export.json", {"checkpoint": read}),
    ]
    for mode, name, record in records:
        (tmp_path / mode).mkdir()
        (tmp_path / mode / name).write_text(json.dumps(record))
        said = rf"holds a mode={mode} run's output, which writes none; that run read "
        said += f"checkpoint={read}"
        with pytest.raises(CheckpointError, match=said):
            find_checkpoint(str(tmp_path / mode))
    # an export into export.output_dir leaves its run folder's .hydra/ alone (re-read)
    (tmp_path / "elsewhere" / ".hydra").mkdir(parents=True)
    (tmp_path / "elsewhere" / ".hydra" / "config.yaml").write_text(
        f"mode: export\ncheckpoint: {read}\n"
    )
    with pytest.raises(CheckpointError, match=rf"a mode=export run's output, .*checkpoint={read}"):
        find_checkpoint(str(tmp_path / "elsewhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match=r"folder \(train with train.checkpoint_every_n"):
        find_checkpoint(str(tmp_path / "empty"))


def test_export_into_a_folder_it_cannot_write_names_export_output_dir(trained, tmp_path):
    run_dir, _ = trained
    (tmp_path / "afile").write_text("")
    out = tmp_path / "afile" / "sub"
    cfg = compose_cfg([*DATA, "mode=export", f"checkpoint={run_dir}", f"export.output_dir={out}"])
    refusal = r"cannot write export.output_dir: .*afile/sub: .*afile is a file, not a folder"
    with pytest.raises(ConfigError, match=refusal + r" \(choose another with export.output_dir="):
        run_export(cfg, Job(tmp_path / "job"))


def test_a_failed_export_leaves_no_record_of_another_artifact(trained, tmp_path, monkeypatch):
    """Exported again into one folder, a crash after the new model.pt replaced the old one
    left the old export.json beside it, describing another artifact. A failed save leaves no
    partial artifact; an artifact without its record (that crash) is still an export, which
    a new one replaces; a model.pt of another origin is refused."""
    from dlrm_exp.modes import export

    run_dir, _ = trained
    cfg = compose_cfg(["mode=export", f"checkpoint={run_dir}", f"export.output_dir={tmp_path}"])
    run_export(cfg, Job(tmp_path / "job"))
    assert (tmp_path / "export.json").is_file()

    def crash(*_):
        raise OSError("disk full")

    monkeypatch.setattr(export, "write_json_atomic", crash)
    int8 = compose_cfg([f"checkpoint={run_dir}", "mode=export", "export.quantization=int8",
                        f"export.output_dir={tmp_path}"])  # fmt: skip
    with pytest.raises(OSError, match="disk full"):
        run_export(int8, Job(tmp_path / "job"))
    assert (tmp_path / "model.pt").is_file() and not (tmp_path / "export.json").exists()
    monkeypatch.setattr(export, "publish_file", crash)  # a failed save leaves no model.pt.partial
    with pytest.raises(OSError, match="disk full"):
        run_export(int8, Job(tmp_path / "job"))
    assert not (tmp_path / "model.pt.partial").exists()
    monkeypatch.undo()
    run_export(int8, Job(tmp_path / "job"))  # the crash's artifact is an export: replaced
    assert (tmp_path / "export.json").is_file()
    mine = tmp_path / "mine"  # a model.pt of the user's own is never replaced (crash review)
    mine.mkdir()
    (mine / "model.pt").write_bytes(b"my model")
    into_mine = compose_cfg([f"checkpoint={run_dir}", "mode=export", f"export.output_dir={mine}"])
    with pytest.raises(ConfigError, match="model.pt is there and is no earlier export"):
        run_export(into_mine, Job(tmp_path / "job"))
    assert (mine / "model.pt").read_bytes() == b"my model"


def test_an_empty_file_among_the_inputs_takes_the_others_label_layout(tmp_path):
    """An empty file counted as labeled, so unlabeled rows beside it were refused as a mix."""
    from dlrm_exp.modes.predict import _labeled_files

    labeled = write_criteo_tsv(tmp_path / "day.tsv", 5, seed=1, strip_trailing_rate=0.0)
    unlabeled = tmp_path / "test.tsv"
    unlabeled.write_text(
        "".join(line.split("\t", 1)[1] + "\n" for line in labeled.read_text().splitlines())
    )
    empty = tmp_path / "empty.tsv"
    empty.write_text("\n")
    assert _labeled_files([unlabeled, empty], None) == {unlabeled: False, empty: False}
    assert _labeled_files([labeled, empty], None) == {labeled: True, empty: True}
    with pytest.raises(DataError, match="some files have a label column and some do not"):
        _labeled_files([labeled, unlabeled, empty], None)


def test_evaluate_warns_when_the_split_or_the_generated_data_differ(caplog):
    """Another data.val_fraction scores rows the run trained on; another seed on generated
    data scores another planted click model: both warned, naming the values; other files
    (what evaluate is for) and the training rows' order are not."""
    from dlrm_exp.modes.setup import warn_other_data_values

    tsv = compose_cfg(["mode=evaluate", "checkpoint=x", "data=criteo_tsv", "data.path=a.tsv"])
    saved = {"settings": {"seed": 3, "data.path": ["b.tsv"], "data.val_fraction": 0.2,
                          "data.test_fraction": 0.1}}  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="dlrm_exp.modes.setup"):
        warn_other_data_values(saved, tsv)
        assert "read its data with data.val_fraction=0.2 (here 0.1): " in caplog.text
        assert "seed" not in caplog.text and "data.path" not in caplog.text
        caplog.clear()
        own = compose_cfg(["mode=evaluate", "checkpoint=x", "data=criteo_tsv", "data.path=a.tsv",
                           "data.val_path=v.tsv"])  # fmt: skip
        warn_other_data_values(saved, own)  # the val rows are v.tsv's whatever the fraction
        assert caplog.text == ""
        # data.path unread (split=val from v.tsv): the other split's fraction says nothing of
        # the rows scored (it was warned: diff review)
        alone = build_config(compose_raw(["mode=evaluate", "checkpoint=x", "data=criteo_tsv",
                                          "data.val_path=v.tsv", "split=val"]))  # fmt: skip
        warn_other_data_values({"settings": {"data.test_fraction": 0.05}}, alone)
        assert caplog.text == ""
        warn_other_data_values({"settings": {"data.test_fraction": 0.05}}, own)
        assert "data.test_fraction=0.05 (here 0.1)" in caplog.text
        caplog.clear()
        synthetic = compose_cfg(["mode=evaluate", "checkpoint=x", "seed=1"])
        warn_other_data_values({"settings": {"seed": 2, "data.num_train_samples": 9}}, synthetic)
        assert "read its data with seed=2 (here 1): " in caplog.text
        caplog.clear()
        warn_other_data_values({"settings": {"seed": 1, "data.num_train_samples": 9}}, synthetic)
        assert caplog.text == ""
        # what decides no scored row, as a resume judges its validation's (re-read): the test
        # rows (the last of data.path) whatever the val cut; the planner's schema keys
        test = compose_cfg(["mode=evaluate", "checkpoint=x", "data=criteo_tsv",
                            "data.path=a.tsv", "split=test"])  # fmt: skip
        feature = "data.schema.sparse.C1"
        planner = {f"{feature}.pooling_factor": 9.0, f"{feature}.table": "t_other"}
        warn_other_data_values({"settings": {"data.val_fraction": 0.3, **planner}}, test)
        synthetic_test = compose_cfg(["mode=evaluate", "checkpoint=x", "split=test"])
        warn_other_data_values({"settings": {"data.num_val_samples": 9}}, synthetic_test)
        assert caplog.text == ""
        warn_other_data_values({"settings": {"data.test_fraction": 0.3}}, test)
        assert "data.test_fraction=0.3 (here 0.1)" in caplog.text
        caplog.clear()
        # a split file the run read and this job leaves out cuts data.path elsewhere: the
        # run's validation rows scored as test, its training rows as validation (review)
        warn_other_data_values({"settings": {"data.test_path": ["t.tsv"]}}, test)
        assert "data.test_path=['t.tsv'] (here [])" in caplog.text
        caplog.clear()
        # compared as a resume compares (loop.settings): the record holds inf as null (re-read)
        inf = compose_cfg(["mode=evaluate", "checkpoint=x", "data.categorical_signal=inf"])
        warn_other_data_values({"settings": {"data.categorical_signal": None}}, inf)
        assert caplog.text == ""
        caplog.clear()
        files = compose_cfg(["mode=evaluate", "checkpoint=x", "data=criteo_tsv", "data.path=a.tsv",
                             "data.val_path=v.tsv", "data.test_path=t.tsv"])  # fmt: skip
        other_days = {"data.val_path": ["v1.tsv"], "data.test_path": ["t1.tsv"]}
        warn_other_data_values({"settings": other_days}, files)  # what evaluate is for
        assert caplog.text == ""
        # new labelled files as a split's own, as after-training.md says, of a run that cut its
        # splits from data.path or read them from files (both warned: diff review)
        cut_run = {"data.path": ["tr.tsv"], "data.val_path": [], "data.test_path": [],
                   "data.val_fraction": 0.1, "data.test_fraction": 0.1}  # fmt: skip
        new_test = build_config(compose_raw(["mode=evaluate", "checkpoint=x", "data=criteo_tsv",
                                             "data.test_path=t2.tsv", "split=test"]))  # fmt: skip
        warn_other_data_values({"settings": cut_run}, new_test)
        files_run = {**cut_run, "data.val_path": ["v.tsv"], "data.test_path": ["t.tsv"]}
        new_val = build_config(compose_raw(["mode=evaluate", "checkpoint=x", "data=criteo_tsv",
                                            "data.val_path=v2.tsv",
                                            "data.test_fraction=0"]))  # fmt: skip
        warn_other_data_values({"settings": files_run}, new_val)
        assert caplog.text == ""


def test_a_file_with_cut_rows_of_39_fields_at_most_is_not_taken_for_unlabeled(tmp_path):
    """Labeled rows whose empty C26 was cut have 39 fields, as unlabeled ones: read as
    unlabeled, the label became I1 and every column shifted, scored without a word. Only
    whole 39-field rows (Criteo's test.txt keeps its empty fields) are unlabeled."""
    from dlrm_exp.modes.predict import has_label

    row = ["1", *["3"] * 13, *["a1b2c3d4"] * 25]  # label, 13 counts, C1..C25; C26 cut
    cut = tmp_path / "cut.tsv"
    cut.write_text("\t".join(row) + "\n" + "\t".join(row[:30]) + "\n")
    with pytest.raises(DataError, match=r"has 39 fields \(the narrowest 30\).*has_label=true"):
        has_label(cut, None)
    assert has_label(cut, True) is True
    whole = tmp_path / "test.tsv"
    whole.write_text(("\t".join(row[1:]) + "\t\n") * 2)  # 39 fields, the last one empty
    assert has_label(whole, None) is False
    whole.write_text(("\t".join(row) + "\t\n") + "\t".join(row[1:]) + "\t\n")
    assert has_label(whole, None) is True  # a 40-field line: labeled
    # an empty line, also a Windows one, is no row: not a 1-field line, nor labeled "0\t"
    # (a blank line at an unlabeled file's end was a rejected row: review)
    crlf = tmp_path / "crlf.tsv"
    crlf.write_bytes((("\t".join(row[1:]) + "\t\r\n") * 2 + "\r\n").encode())
    assert has_label(crlf, None) is False
    from dlrm_exp.modes.predict import _with_label_column

    assert _with_label_column(b"a\tb\n\nc\r\n\r\n\n") == b"0\ta\tb\n\n0\tc\r\n\r\n\n"


def test_the_other_data_warning_names_the_run_s_own_data_overrides(tmp_path, caplog):
    """It said "add the run's data=... and data.path=...": for a run of the default
    (synthetic) data no such value exists, and for a Criteo run the user had to find them.
    The run folder's .hydra/overrides.yaml has them."""
    from dlrm_exp.config.keys import flat_settings
    from dlrm_exp.modes.setup import run_data_overrides, warn_other_data_source

    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    typed = ["data=criteo_tsv", "data.path=day.tsv", "train.batch_size=64", "+data.seed=3"]
    preset = run / "preset" / ".hydra"
    preset.mkdir(parents=True)
    (preset / "overrides.yaml").write_text(json.dumps(["experiment=mlperf_dcnv2", "seed=1"]))
    assert run_data_overrides(run / "preset" / "checkpoints" / "best") == [
        "experiment=mlperf_dcnv2"
    ]
    (run / ".hydra" / "overrides.yaml").write_text(json.dumps(typed))
    checkpoint = run / "checkpoints" / "step_5"
    assert run_data_overrides(checkpoint) == [typed[0], typed[1], typed[3]]
    assert run_data_overrides(tmp_path / "elsewhere" / "checkpoints" / "step_5") is None
    criteo = compose_cfg(["data=criteo_tsv", "data.path=day.tsv"])
    synthetic = compose_cfg([])
    trained = {"settings": flat_settings("data", criteo.data)}
    with caplog.at_level(logging.WARNING, logger="dlrm_exp.modes.setup"):
        warn_other_data_source(trained, synthetic, run_data_overrides(checkpoint))
    assert "add the run's data overrides, data=criteo_tsv data.path=day.tsv +data." in caplog.text
    caplog.clear()
    default_run = {"settings": flat_settings("data", synthetic.data)}
    with caplog.at_level(logging.WARNING, logger="dlrm_exp.modes.setup"):
        warn_other_data_source(default_run, criteo, [])
    assert "leave out this job's data overrides (the run read the default data)" in caplog.text


def test_the_run_s_own_data_is_no_other_data(tmp_path, monkeypatch, caplog):
    """The digest of the files a checkpoint records (``data.path.files``) is no data key this
    job sets: every evaluate and predict of a run on files warned "trained on other data",
    the same overrides repeated (review)."""
    from dlrm_exp.modes.setup import warn_other_data_source
    from dlrm_exp.modes.train import job_settings

    monkeypatch.chdir(tmp_path)
    (tmp_path / "day.tsv").write_text("0\t1\n")
    criteo = compose_cfg(["data=criteo_tsv", "data.path=day.tsv"])
    trained = {"settings": job_settings(criteo)}
    assert "data.path.files" in trained["settings"]
    with caplog.at_level(logging.WARNING, logger="dlrm_exp.modes.setup"):
        warn_other_data_source(trained, criteo, [])
    assert caplog.text == ""


def test_an_empty_split_asked_for_is_refused(tmp_path):
    """``split=test`` with ``data.test_fraction=0`` scored nothing and recorded a completed
    run without a metric (review)."""
    from types import SimpleNamespace

    from dlrm_exp.errors import DataError
    from dlrm_exp.modes.evaluate import _check_rows

    cfg = compose_cfg(["mode=evaluate", f"checkpoint={tmp_path}", "split=test"])
    with pytest.raises(DataError, match=r"split=test: the test split has no rows here"):
        _check_rows(cfg, SimpleNamespace(val=[1], test=[]))
    _check_rows(cfg, SimpleNamespace(val=[], test=[1]))
    every = compose_cfg(["mode=evaluate", f"checkpoint={tmp_path}"])
    _check_rows(every, SimpleNamespace(val=[1], test=[]))  # split=all: the other is scored


def test_evaluate_warns_when_the_runs_own_path_names_other_files_now(tmp_path, caplog):
    """An npy folder that gained a day scored another held-out day under the same data.path,
    said by nothing (npy review); another path is other files on purpose."""
    from dlrm_exp.data import input_digests
    from dlrm_exp.modes.setup import warn_changed_inputs

    days = tmp_path / "days"
    days.mkdir()
    write_criteo_tsv(days / "day_0.tsv", 20, seed=0)
    cfg = compose_cfg(["mode=evaluate", "checkpoint=x", "data=criteo_tsv", f"data.path={days}"])
    saved = {"settings": {"data.path": [str(days)], **input_digests(cfg.data)}}
    with caplog.at_level(logging.WARNING, logger="dlrm_exp.modes.setup"):
        warn_changed_inputs(saved, cfg)
        assert caplog.text == ""
        write_criteo_tsv(days / "day_1.tsv", 20, seed=1)
        warn_changed_inputs(saved, cfg)
        assert "names other files now, or files converted otherwise (data.path.files 1 file" in (
            caplog.text
        )
        caplog.clear()
        other = compose_cfg(["mode=evaluate", "checkpoint=x", "data=criteo_tsv",
                             f"data.path={days / 'day_1.tsv'}"])  # fmt: skip
        warn_changed_inputs(saved, other)
        assert caplog.text == ""
        # a training file that changed beside val and test files of their own: the rows
        # scored are the same (it was warned: diff review)
        val, test = (write_criteo_tsv(tmp_path / f"{n}.tsv", 20, seed=3) for n in ("v", "t"))
        own = compose_cfg(["mode=evaluate", "checkpoint=x", "data=criteo_tsv",
                           f"data.path={days}", f"data.val_path={val}",
                           f"data.test_path={test}"])  # fmt: skip
        warn_changed_inputs(saved, own)
        assert caplog.text == ""


def test_evaluate_warns_of_npy_days_whose_ids_map_to_rows_otherwise(tmp_path, caplog):
    """A checkpoint trained on hashed ids scored a contiguous folder of the same tables
    without a word (val AUROC 0.6839 against 0.7201: npy review)."""
    from dlrm_exp.config import CategoricalTransform, PreprocessConfig
    from dlrm_exp.data import input_digests
    from dlrm_exp.data.preprocess.convert import preprocess_files
    from dlrm_exp.modes.setup import warn_changed_inputs, warn_other_ids

    tsv = [write_criteo_tsv(tmp_path / f"day_{d}", 40, seed=d) for d in range(2)]
    folders = {}
    for kind in ("hash", "contiguous"):
        out = tmp_path / kind
        cfg = PreprocessConfig(output_dir=str(out), num_workers=1,
                               categorical=CategoricalTransform(kind))  # fmt: skip
        preprocess_files(tsv, out, cfg, [1000] * 26, progress=False)
        folders[kind] = compose_cfg(["mode=evaluate", "checkpoint=x", "data=criteo_npy",
                                     f"data.path={out}", "model=tiny"])  # fmt: skip
    hashed = input_digests(folders["hash"].data)["data.path.ids"]
    assert hashed.startswith("hash ")
    trained = {"settings": {"data.path.ids": hashed}}
    with caplog.at_level(logging.WARNING, logger="dlrm_exp.modes.setup"):
        warn_other_ids(trained, folders["hash"])
        assert caplog.text == ""
        warn_other_ids(trained, folders["contiguous"])
    assert f"ids mode=preprocess mapped to rows as {hashed}; data.path=" in caplog.text
    assert "holds ids mapped as contiguous " in caplog.text
    # converted again in place (the run's path, its days' records the hashed folder's): the
    # id warning says it, and the changed-inputs warning no longer says the conversion too
    # (warned twice: re-read)
    caplog.clear()
    path = str(tmp_path / "contiguous")
    in_place = {"settings": {"data.path": path, **input_digests(folders["hash"].data)}}
    with caplog.at_level(logging.WARNING, logger="dlrm_exp.modes.setup"):
        warn_changed_inputs(in_place, folders["contiguous"])
        assert "(data.path.conversion " in caplog.text
        caplog.clear()
        warn_changed_inputs(in_place, folders["contiguous"], ids_warned=True)
    assert "data.path.conversion" not in caplog.text


def test_an_export_without_data_records_the_checkpoints_model_inputs(tmp_path):
    """The documented ``mode=export checkpoint=...`` (no ``data=``) of a Criteo TSV run
    recorded ``model_inputs: null``: the artifact's columns were lost from its record
    (after-training review)."""
    from dlrm_exp.modes.train import run_train

    tsv = write_criteo_tsv(tmp_path / "day.tsv", 200, seed=1)
    data = ["data=criteo_tsv", f"data.path={tsv}", "model=tiny"]
    run_train(compose_cfg([*data, "train.max_steps=2", "train.checkpoint_every_n_steps=2",
                           "train.batch_size=32",
                           "train.progress_bar=false"]), tmp_path / "run", {})  # fmt: skip
    state = next((tmp_path / "run" / "checkpoints").glob("*/trainer_state.json"))
    recorded = json.loads(state.read_text())["inputs"]
    assert recorded["sparse"][0] == {"feature": "cat_0", "column": "C1"}
    export = ["mode=export", f"checkpoint={tmp_path / 'run'}", "model=tiny"]
    record = run_export(compose_cfg(export), Job(tmp_path / "export"))
    assert record["inputs"]["model_inputs"] == recorded


def test_export_and_predict_run_on_one_process_whatever_the_training_ran_on(
    trained, tmp_path, caplog
):
    """A training run's ``hardware.nproc_per_node=2`` repeated (a dlrm_main preset's 8):
    export took it without a word, predict refused it (after-training review); both say that
    they run on one process, and do."""
    run_dir, _ = trained
    two = [f"checkpoint={run_dir}", "hardware.nproc_per_node=2", "hardware.local_world_size=2"]
    with caplog.at_level(logging.WARNING, logger="dlrm_exp.modes.setup"):
        record = run_export(compose_cfg(["mode=export", *two]), Job(tmp_path / "export"))
    assert Path(record["artifact"]).is_file()
    said = "runs on one process: hardware.nproc_per_node=2 is not used here"
    assert f"mode=export {said}" in caplog.text
    caplog.clear()
    tsv = write_criteo_tsv(tmp_path / "day.tsv", 20, seed=5)
    predict = ["mode=predict", *two, "data=criteo_tsv", f"data.path={tsv}"]
    with caplog.at_level(logging.WARNING, logger="dlrm_exp.modes.setup"):
        assert run_predict(compose_cfg(predict), Job(tmp_path / "predict"))["rows_written"] == 20
    assert f"mode=predict {said}" in caplog.text


def test_a_checkpoint_given_relative_is_recorded_absolute(trained, monkeypatch, tmp_path):
    """Records kept ``checkpoint=`` as typed, relative to a folder they do not record (the
    checkpoint's own trainer state is absolute: run-folder review)."""
    from dlrm_exp.loop.checkpoint import find_checkpoint, resolve_resume

    run_dir, _ = trained
    monkeypatch.chdir(run_dir.parent)
    found = find_checkpoint(run_dir.name, warn=False)
    assert found.is_absolute() and found.parent.parent == run_dir
    step = next((run_dir / "checkpoints").glob("step_*"))
    resumed = resolve_resume(f"{run_dir.name}/checkpoints/{step.name}", run_dir)
    assert resumed == step and resumed.is_absolute()
    # with .. folded (it kept them: diff review), resumes too
    assert find_checkpoint(f"{run_dir.name}/../{run_dir.name}", warn=False) == found
    again = resolve_resume(f"{run_dir.name}/../{run_dir.name}/checkpoints/{step.name}", run_dir)
    assert again == step
    # but through a symlinked folder, link/.. is its target's parent: kept (diff review)
    (tmp_path / "a" / "deep").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "a" / "deep")
    (tmp_path / "a" / "beside").symlink_to(run_dir)  # (no such name beside the link)
    monkeypatch.chdir(tmp_path)
    through = find_checkpoint("link/../beside", warn=False)
    assert through.resolve() == found.resolve()
    (tmp_path / "beside").mkdir()  # what text folding names: another folder, not taken
    assert find_checkpoint("link/../beside", warn=False).resolve() == found.resolve()
