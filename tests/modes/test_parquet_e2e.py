"""data=parquet end to end: a non-Criteo schema (strings, lists, a shared table) chosen with
``--config-dir``, trained on 1 and 2 processes, planned, and its refusals at compose time."""

import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from torchmetrics.functional.classification import binary_auroc

from conftest import compose_cfg, compose_raw, run_cli, tensorboard_experiment, two_process_job
from dlrm_exp.config import load_schema_file
from dlrm_exp.config.build import build_config
from dlrm_exp.data.synthetic_parquet import SyntheticLayout, write_synthetic_parquet
from dlrm_exp.loop.checkpoint import CheckpointError
from dlrm_exp.modes.evaluate import run_evaluate
from dlrm_exp.modes.job import Job
from dlrm_exp.modes.predict import run_predict
from dlrm_exp.modes.train import run_train

pytestmark = pytest.mark.slow

SCHEMA = """\
label: clicked
dense:
  - {column: price, log1p: true}
  - {column: hour}
sparse:
  user_id: {column: user_id, num_embeddings: 2000}
  item: {column: item, table: t_item, num_embeddings: 1000}
  recent_items: {column: recent_items, table: t_item, num_embeddings: 1000, multi_hot: true}
  tags: {column: tags, num_embeddings: 500, multi_hot: true}
"""


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """A config dir holding ``data/schema/toy.yaml`` and 8,192 planted-signal rows."""
    root = tmp_path_factory.mktemp("parquet")
    return root, _write_toy(root)


def overrides(root, *extra):
    return [
        f"hydra.searchpath=[file://{root / 'conf'}]",
        "data=parquet",
        "data/schema=toy",
        f"data.path={root / 'toy.parquet'}",
        "model=tiny",
        "train.batch_size=128",
        "train.progress_bar=false",
        *extra,
    ]


def test_schema_builds_the_model_trains_and_predicts(toy, tmp_path, cli_here):
    root, bayes = toy
    cfg = compose_cfg(overrides(root, "train.checkpoint_every_n_steps=1000"))
    assert cfg.model.table_names == ["t_user_id", "t_item", "t_tags"]
    assert cfg.model.feature_names == ["user_id", "item", "recent_items", "tags"]
    assert cfg.model.num_dense_features == 2
    choices = {"model": "tiny", "sharding": "auto", "optimizer": "rowwise_adagrad"}
    metrics = run_train(cfg, tmp_path, {**choices, "qcomms": "none", "data": "parquet"})
    assert metrics.data["rows"] == {"train": 6554, "val": 819, "test": 819}
    assert metrics.data["read"]["rows_read"] == 8192
    assert metrics.data["read"]["files"] == [str(root / "toy.parquet")]  # as TSV's say (review)
    tables = set(re.findall(r"^(t_\w+)\s*\|", (tmp_path / "plan.txt").read_text(), re.M))
    assert tables == {"t_user_id", "t_item", "t_tags"}
    assert metrics.val["auroc"] > 0.6, (metrics.val, bayes)  # learned (Bayes ~0.8)

    # mode=predict: one probability per row, in order; on the validation rows they give the
    # run's val AUROC. Rows to score may lack the label column.
    table = pq.read_table(root / "toy.parquet")
    unlabeled = tmp_path / "unlabeled.parquet"
    pq.write_table(table.drop(["clicked"]), unlabeled, row_group_size=1000)
    result = cli_here(
        overrides(root, "mode=predict", f"checkpoint={tmp_path}", f"data.path={unlabeled}")
        + [f"hydra.run.dir={tmp_path / 'predict'}"]
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "predicted 8,192 rows of 1 file(s)" in result.stdout
    predicted = pq.read_table(tmp_path / "predict" / "predictions.parquet")
    assert predicted.column_names == ["file", "row", "probability"]
    assert b"/checkpoints/" in predicted.schema.metadata[b"dlrm_exp.checkpoint"]  # who made it
    assert predicted.column("row").to_pylist() == list(range(8192))
    val = slice(6554, 6554 + 819)
    probability = torch.tensor(predicted.column("probability").to_numpy()[val])
    labels = torch.tensor(table.column("clicked").to_numpy()[val]).long()
    assert float(binary_auroc(probability, labels)) == pytest.approx(metrics.val["auroc"], abs=1e-6)

    # float labels, NaN where a row has none (as training reads them): null in the output
    clicked = table.column("clicked").cast(pa.float64()).to_numpy().copy()
    clicked[:3] = np.nan
    floats = table.set_column(table.column_names.index("clicked"), "clicked", pa.array(clicked))
    pq.write_table(floats, tmp_path / "float_labels.parquet", row_group_size=1000)
    paths = [f"checkpoint={tmp_path}", f"data.path={tmp_path / 'float_labels.parquet'}"]
    run_predict(compose_cfg(overrides(root, "mode=predict", *paths)), Job(tmp_path / "nan"))
    echoed = pq.read_table(tmp_path / "nan" / "predictions.parquet").column("label").to_pylist()
    assert echoed == [None] * 3 + table.column("clicked").to_pylist()[3:]
    # a file of rows to score beside a labelled one: the labels kept, null for the other's
    # rows (every file's were dropped: review)
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for part in ("unlabeled", "float_labels"):
        (mixed / f"{part}.parquet").write_bytes((tmp_path / f"{part}.parquet").read_bytes())
    paths = [f"checkpoint={tmp_path}", f"data.path={mixed}"]
    run_predict(compose_cfg(overrides(root, "mode=predict", *paths)), Job(tmp_path / "mixed_out"))
    out = pq.read_table(tmp_path / "mixed_out" / "predictions.parquet").to_pydict()
    by_file = {f: [lab for g, lab in zip(out["file"], out["label"], strict=True) if g == f]
               for f in set(out["file"])}  # fmt: skip
    assert by_file[str(mixed / "float_labels.parquet")] == echoed
    assert set(by_file[str(mixed / "unlabeled.parquet")]) == {None}

    # one labelled file scored whole, without data.path (it was required beside
    # data.val_path, and data.val_fraction=1.0 refused: own-data review): the run's val rows
    # give its val AUROC
    pq.write_table(table.slice(val.start, 819), tmp_path / "val_rows.parquet")
    alone = [o for o in overrides(root) if not o.startswith("data.path=")]
    scored = [f"data.val_path={tmp_path / 'val_rows.parquet'}", "split=val"]
    cfg = build_config(compose_raw([*alone, "mode=evaluate", f"checkpoint={tmp_path}", *scored]))
    assert cfg.data.path == []
    result = run_evaluate(cfg, Job(tmp_path / "val_alone"))
    assert result.val["auroc"] == pytest.approx(metrics.val["auroc"], abs=1e-6)
    assert result.val["samples"] == 819 and not result.test
    assert result.data["read"]["files"] == [str(tmp_path / "val_rows.parquet")]
    assert result.data["rows"] == {"val": 819}  # no splits of 0 rows never read (review)

    # a schema listing the same features in another order (mode=schema run again on a file
    # storing its columns so), or the dense columns swapped, keeps every table's name and shape:
    # it was scored with the inputs swapped, AUROC 0.6150 -> 0.4613 (own-data review)
    reordered = SCHEMA.replace("  user_id: {column: user_id, num_embeddings: 2000}\n", "")
    reordered += "  user_id: {column: user_id, num_embeddings: 2000}\n"
    (root / "conf" / "data" / "schema" / "toy_reordered.yaml").write_text(reordered)
    swapped_dense = ["data.schema.dense.0.column=hour", "data.schema.dense.1.column=price"]
    for mode, run in (("predict", run_predict), ("evaluate", run_evaluate)):
        for extra, part in ((["data/schema=toy_reordered"], "sparse features"),
                            (swapped_dense, "inputs from other columns")):  # fmt: skip
            cfg = compose_cfg(overrides(root, f"mode={mode}", f"checkpoint={tmp_path}", *extra))
            with pytest.raises(CheckpointError, match=f"trained on its {part}"):
                run(cfg, Job(tmp_path / f"{mode}_{part[:6]}"))


def _write_toy(root):
    """The toy schema under ``root / "conf"`` and 8,192 planted rows as ``root / "toy.parquet"``;
    returns the planted rows' Bayes AUROC."""
    (root / "conf" / "data" / "schema").mkdir(parents=True, exist_ok=True)
    (root / "conf" / "data" / "schema" / "toy.yaml").write_text(SCHEMA)
    schema = load_schema_file(root / "conf" / "data" / "schema" / "toy.yaml")
    layout = SyntheticLayout(string_features=["user_id"])
    return write_synthetic_parquet(
        schema, root / "toy.parquet", 8192, row_group_size=1024, layout=layout
    )


def _prepare_two_process(root):
    data = root / "parquet_toy"
    _write_toy(data)
    return overrides(data)


#: Trained with the suite's other 2-process jobs, in one launch.
ROWWISE = two_process_job("parquet-rowwise", ["sharding=rowwise"], prepare=_prepare_two_process)


def test_two_processes_rowwise(two_process_runs):
    run = two_process_runs[ROWWISE]
    assert run.metrics.world_size == 2 and run.metrics.val["auroc"] > 0.55
    read = dict(run.metrics.data["read"])
    assert [Path(f).name for f in read.pop("files")] == ["toy.parquet"]
    assert read.pop("inputs")["data.path"]["rows_read"] == 8192
    assert read == {"rows_read": 8192, "skipped_null_label": 0, "row_groups": 8, "nulls": {}}
    assert run.cfg.model.table_names == ["t_user_id", "t_item", "t_tags"]


def test_plan_mode_and_refusals_at_compose_time(toy, cli_here):
    root, _ = toy
    result = cli_here(overrides(root, "mode=plan", "hardware.nproc_per_node=2"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "t_item" in result.stdout and "t_cat_0" not in result.stdout
    missing = cli_here(["data=parquet", "data.path=x.parquet"])
    assert missing.returncode != 0 and "data/schema" in missing.stderr
    assert "Traceback" not in missing.stderr
    mismatch = cli_here(overrides(root, "data.schema.sparse.item.num_embeddings=7"))
    assert mismatch.returncode != 0 and "disagree on num_embeddings" in mismatch.stderr
    managed = "data.schema.sparse.user_id.id_policy=managed_collision"
    planned = cli_here(overrides(root, "mode=plan", "hardware.nproc_per_node=2", managed))
    assert planned.returncode == 0, planned.stderr[-2000:]
    assert re.search(r"^t_user_id\s+[\d,]+\s+row_wise", planned.stdout, re.M), planned.stdout
    verify = cli_here(overrides(root, "mode=verify", managed))
    assert verify.returncode != 0 and "Traceback" not in verify.stderr
    assert "mode=verify cannot check managed-collision tables (t_user_id)" in verify.stderr


def test_verify_two_processes_matches_the_unsharded_reference(toy, tmp_path):
    """The reference sees each step as both ranks' contiguous shares together. SGD: with
    Adagrad, a shared or multi-hot table sums a row's gradients in another order sharded and
    unsharded, and the scale-free update amplifies that rounding after a few steps (mode=
    verify's message says so; seen here: exact for 5 steps, then up to 3e-3)."""
    root, _ = toy
    args = overrides(root, "mode=verify", "hardware.nproc_per_node=2", "sharding=rowwise")
    result = run_cli(
        ["-cd", str(root / "conf"), *args[1:], "optimizer=sgd", f"hydra.run.dir={tmp_path}"]
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    verdict = json.loads((tmp_path / "verify.json").read_text())
    assert verdict["max_rel_loss_deviation"] < 1e-6


def test_resume_with_shuffled_row_groups_is_exact(toy, tmp_path):
    """Row groups are reshuffled every epoch (seed, epoch): a run stopped at step 15 of 26
    and resumed ends with the uninterrupted run's metrics."""
    root, _ = toy
    extra = [
        "train.batch_size=512",
        "train.epochs=2",
        "train.checkpoint_every_n_steps=10",
        "train.early_stopping.patience=100",
    ]
    choices = {"model": "tiny", "sharding": "auto", "optimizer": "rowwise_adagrad",
               "qcomms": "none", "data": "parquet"}  # fmt: skip
    (tmp_path / "whole").mkdir()
    (tmp_path / "cut").mkdir()
    whole = run_train(compose_cfg(overrides(root, *extra)), tmp_path / "whole", choices)
    run_train(compose_cfg(overrides(root, *extra, "train.max_steps=15")), tmp_path / "cut", choices)
    resumed = run_train(
        compose_cfg(overrides(root, *extra, "train.resume=auto")), tmp_path / "cut", choices
    )
    assert whole.steps == resumed.steps == 26
    assert resumed.val == whole.val and resumed.test == whole.test

    # The checkpoint records how ids became rows; a job with another rule is refused, naming
    # the key, before it looks up other rows with the same weights.
    state = json.loads(
        (tmp_path / "cut" / "checkpoints" / "step_10" / "trainer_state.json").read_text()
    )
    assert state["id_policies"] == dict.fromkeys(
        ["user_id", "item", "recent_items", "tags"], "modulo"
    )
    other = ["data.schema.sparse.item.id_policy=strict", f"checkpoint={tmp_path / 'cut'}"]
    with pytest.raises(
        CheckpointError,
        match=r"data\.schema\.sparse\.item\.id_policy: checkpoint modulo, this job strict",
    ):
        run_evaluate(
            compose_cfg(overrides(root, *extra, "mode=evaluate", *other)), Job(tmp_path / "ev")
        )
    with pytest.raises(CheckpointError, match="other id policies"):
        run_predict(
            compose_cfg(overrides(root, *extra, "mode=predict", *other)), Job(tmp_path / "p")
        )
    with pytest.raises(CheckpointError, match="other id policies"):
        run_train(
            compose_cfg(overrides(root, *extra, "train.resume=auto", other[0])),
            tmp_path / "cut",
            choices,
        )

    # ... and how the data stored the ids it hashed: the same digits as a string hash to
    # another row, so data with item ids as strings is refused by every user of the checkpoint.
    assert state["id_kinds"]["user_id"] == "string" and state["id_kinds"]["item"] == "integer"
    table = pq.read_table(root / "toy.parquet")
    strings = table.set_column(
        table.column_names.index("item"), "item", table.column("item").cast(pa.string())
    )
    pq.write_table(strings, tmp_path / "item_strings.parquet")
    kinds = [f"data.path={tmp_path / 'item_strings.parquet'}", f"checkpoint={tmp_path / 'cut'}"]
    refused = r"item: trained on integer ids, this data holds string ones"
    for mode, job in (("evaluate", run_evaluate), ("predict", run_predict)):
        with pytest.raises(CheckpointError, match=refused):
            job(compose_cfg(overrides(root, *extra, f"mode={mode}", *kinds)), Job(tmp_path / mode))
    with pytest.raises(CheckpointError, match=refused):
        resume = overrides(root, *extra, "train.resume=auto", kinds[0])
        run_train(compose_cfg(resume), tmp_path / "cut", choices)


#: ``user_id`` under managed collision: 256 rows for the toy's 2,000 raw ids, so its module
#: evicts every step; asked table-wise (the table runs row-wise, recorded), checkpoints every
#: 8 steps.
MANAGED = [
    "data.schema.sparse.user_id.id_policy=managed_collision",
    "data.schema.sparse.user_id.num_embeddings=256",
    "sharding=tablewise",
    "train.checkpoint_every_n_steps=8",
]
MANAGED_RUN = two_process_job("parquet-managed", MANAGED, prepare=_prepare_two_process)
#: The same job resumed from the first one's step 8 checkpoint.
MANAGED_RESUMED = two_process_job(
    "parquet-managed-resumed",
    MANAGED,
    prepare=lambda root: [
        *_prepare_two_process(root),
        f"train.resume={root / MANAGED_RUN / 'checkpoints' / 'step_8'}",
    ],
)


def _id_rows(checkpoint, raw_ids):
    """The rows ``t_user_id``'s managed-collision module (as saved in ``checkpoint``, both
    ranks' shares) gives ``raw_ids``: an id without a row of its own gets -1."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    saved = checkpoint.parent / (checkpoint.name + ".pt")
    dcp_to_torch_save(str(checkpoint), str(saved))
    state = torch.load(saved, weights_only=True)["model"]
    prefix = next(k for k in state if k.endswith("t_user_id._mch_sorted_raw_ids"))[
        : -len("_mch_sorted_raw_ids")
    ]
    raw, rows = state[prefix + "_mch_sorted_raw_ids"], state[prefix + "_mch_remapped_ids_mapping"]
    held = raw != torch.iinfo(torch.int64).max
    lookup = dict(zip(raw[held].tolist(), rows[held].tolist(), strict=True))
    return [lookup.get(i, -1) for i in raw_ids.tolist()]


def test_managed_collision_resumes_with_its_id_mapping(two_process_runs):
    """Two ranks, one managed-collision table: each rank keeps 127 raw ids (its last row is
    shared by the rest); resumed from step 8, the run ends bitwise where the uninterrupted
    one did, and the same raw ids hit the same rows."""
    from dlrm_exp.config import IdPolicy
    from dlrm_exp.data.id_policy import to_rows

    whole, resumed = two_process_runs[MANAGED_RUN], two_process_runs[MANAGED_RESUMED]
    assert whole.metrics.managed_rows_held == {"t_user_id": 254}
    assert whole.metrics.table_rows == {"t_user_id": 256, "t_item": 1000, "t_tags": 500}
    assert [s["ran"] for s in whole.metrics.substitutions] == ["row_wise/fused"]
    assert whole.metrics.val["auroc"] > 0.55
    assert resumed.metrics.steps == whole.metrics.steps == 26
    assert resumed.metrics.val == whole.metrics.val and resumed.metrics.test == whole.metrics.test
    data = pq.read_table(whole.run_dir.parent / "parquet_toy" / "toy.parquet", columns=["user_id"])
    raw = to_rows(data.column("user_id").combine_chunks(), IdPolicy.managed_collision, 256, "")
    final = "checkpoints/step_26"
    rows = _id_rows(whole.run_dir / final, raw)
    assert rows == _id_rows(resumed.run_dir / final, raw)
    hits = [r for r in rows if r >= 0]
    assert len(set(hits)) == 254 and len(hits) > len(rows) // 4  # frequent ids hold rows
    assert rows != _id_rows(whole.run_dir / "checkpoints/step_8", raw)  # the mapping moved


def test_a_two_rank_managed_collision_checkpoint_scored_on_one_process_says_so(
    two_process_runs, tmp_path, caplog
):
    """Each training rank sent the ids it holds no row for to its own last row; one process
    sends them to the table's last row: evaluate (and predict, export) say so in one line. On
    a number of ranks that does not divide the saved one, evaluate is refused."""
    import logging

    whole = two_process_runs[MANAGED_RUN]
    data = whole.run_dir.parent / "parquet_toy"
    cfg = compose_cfg(overrides(data, *MANAGED, "mode=evaluate", f"checkpoint={whole.run_dir}"))
    with caplog.at_level(logging.WARNING, logger="dlrm_exp.modes.setup"):
        run_evaluate(cfg, Job(tmp_path))
    assert "t_user_id: managed_collision, trained on 2 rank(s)" in caplog.text
    assert "hardware.nproc_per_node=2 reproduces its numbers" in caplog.text
    # on 3 ranks TorchRec's id-map hook failed in load_state_dict (a raw AssertionError)
    from dlrm_exp.loop.checkpoint import find_checkpoint, load_model_weights
    from dlrm_exp.planning.tables import table_shapes

    with pytest.raises(CheckpointError, match=r"features \(user_id\) load only .*: 1, 2, not 3"):
        load_model_weights(find_checkpoint(str(whole.run_dir)), None, table_shapes(cfg.model),
                           cfg.data.id_policies(), None, world_size=3)  # fmt: skip


def test_a_sweep_over_id_policies_reports_table_rows(toy, tmp_path, cli_here):
    """``sharding=auto`` may place the managed-collision table row-wise: nothing substituted."""
    root, _ = toy
    args = overrides(root, "data.schema.sparse.user_id.num_embeddings=256", "train.max_steps=8")
    result = cli_here(
        ["-m", *args, "data.schema.sparse.user_id.id_policy=modulo,managed_collision",
         f"hydra.sweep.dir={tmp_path}"]
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    table = [r for r in (tmp_path / "summary.md").read_text().splitlines() if r.startswith("|")]
    header = [c.strip() for c in table[0].split("|")]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")] for line in table[2:4]}
    modulo = rows["data.schema.sparse.user_id.id_policy=modulo"]
    managed = rows["data.schema.sparse.user_id.id_policy=managed_collision"]
    at = header.index("table rows"), header.index("MC rows held"), header.index("val AUROC")
    assert modulo[at[0]] == managed[at[0]] == "1,756"
    assert modulo[at[1]] == "n/a" and managed[at[1]] == "255"
    assert float(modulo[at[2]]) > 0.5 and float(managed[at[2]]) > 0.5
    experiment = tensorboard_experiment(tmp_path)  # the swept key: an HParam of its own
    policy = "data.schema.sparse.user_id.id_policy"
    assert [info.name for info in experiment.hparam_infos if info.differs] == [policy]


def test_a_managed_collision_model_exports_with_its_id_map(toy, tmp_path, cli_here):
    """The exported model maps the 63-bit hashed raw ids itself: on every row of the file its
    probabilities are mode=predict's, and on the validation rows they give the run's val
    AUROC."""
    import fbgemm_gpu  # noqa: F401  (the exported model's ops)

    from dlrm_exp.data.decode import decode

    root, _ = toy
    managed = ["data.schema.sparse.user_id.id_policy=managed_collision",
               "data.schema.sparse.user_id.num_embeddings=256"]  # fmt: skip
    cfg = compose_cfg(overrides(root, *managed, "train.max_steps=12",
                                "train.checkpoint_every_n_steps=1000"))  # fmt: skip
    metrics = run_train(cfg, tmp_path, {"data": "parquet"})
    for mode in ("export", "predict"):  # export reads no rows: no data.path (own-data review)
        args = overrides(root, *managed, f"mode={mode}", f"checkpoint={tmp_path}")
        done = cli_here(
            [a for a in args if mode == "predict" or not a.startswith("data.path=")]
            + [f"hydra.run.dir={tmp_path / mode}"]
        )
        assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads((tmp_path / "export" / "export.json").read_text())
    assert record["inputs"]["managed_tables"] == ["t_user_id"]
    assert record["inputs"]["id_policies"]["user_id"] == "managed_collision"
    assert record["inputs"]["id_policies"]["tags"] == "modulo"
    assert record["inputs"]["id_kinds"]["user_id"] == "string"  # the toy's user ids
    # the columns each input is read from, in order (the record did not say: own-data review)
    features = ["user_id", "item", "recent_items", "tags"]
    assert record["inputs"]["model_inputs"] == {
        "sparse": [{"feature": f, "column": f} for f in features],
        "dense": [{"column": "price", "log1p": True}, {"column": "hour", "log1p": False}],
    }
    rows = decode(pq.read_table(root / "toy.parquet"), cfg.data.schema, "toy")
    batch = rows.batch(cfg.model.feature_names)
    exported = torch.jit.load(str(tmp_path / "export" / "model.pt"))
    with torch.no_grad():
        kjt = batch.sparse_features
        probability = exported(batch.dense_features, kjt.values(), kjt.lengths().int())
    predicted = pq.read_table(tmp_path / "predict" / "predictions.parquet").column("probability")
    assert torch.equal(probability, torch.tensor(predicted.to_numpy()))
    val = slice(6554, 6554 + 819)  # and they are the trained model's: its val AUROC
    auroc = binary_auroc(probability[val], batch.labels[val].long())
    assert float(auroc) == pytest.approx(metrics.val["auroc"], abs=1e-6)
