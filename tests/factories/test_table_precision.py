"""``model.embedding_data_type=fp16``: tables train, are saved and resumed in fp16, say what ran,
and export as fp16 or quantized further (two processes, every sharding type:
tests/distributed/test_multiprocess.py)."""

import json
import logging
import shutil

import pytest
import torch
from torch.distributed.checkpoint import FileSystemReader

from conftest import SMALL, compose_cfg
from dlrm_exp.factories.inference import InferenceDLRM
from dlrm_exp.loop.checkpoint import complete_checkpoints
from dlrm_exp.modes.export import load_trained, run_export
from dlrm_exp.modes.job import Job
from dlrm_exp.modes.train import run_train

FP16 = [*SMALL, "model.embedding_data_type=fp16", "train.checkpoint_every_n_steps=16"]


def _saved_table_dtypes(checkpoint) -> set[torch.dtype]:
    metadata = FileSystemReader(str(checkpoint)).read_metadata().state_dict_metadata
    return {
        meta.properties.dtype
        for key, meta in metadata.items()
        if key.startswith("model.") and ".embedding_bags." in key
    }


@pytest.mark.slow
def test_fp16_tables_train_save_fp16_resume_bitwise_and_export(tmp_path, caplog):
    full = run_train(compose_cfg(FP16), tmp_path / "a", {})
    assert set(full.table_data_types.values()) == {"fp16"} and full.tables_ran == "fp16"
    assert full.embedding_bytes_per_rank == [sum(compose_cfg(SMALL).model.table_sizes) * 16 * 2]
    (rounding,) = full.substitutions  # FBGEMM's CPU kernels round to nearest
    assert rounding["setting"] == "optimizer.stochastic_rounding"
    assert rounding["ran"] == "round to nearest"
    first, last = complete_checkpoints(tmp_path / "a")
    assert _saved_table_dtypes(last) == {torch.float16}

    # resumed from step 16 in another run folder: the same numbers, bitwise
    (tmp_path / "b" / "checkpoints").mkdir(parents=True)
    shutil.copytree(first, tmp_path / "b" / "checkpoints" / first.name)
    resumed = run_train(compose_cfg([*FP16, "train.resume=auto"]), tmp_path / "b", {})
    assert (resumed.val, resumed.test, resumed.final_train_loss) == (
        full.val,
        full.test,
        full.final_train_loss,
    )

    # resumed with fp32 tables: DCP casts the fp16 weights, and the run says so in one line
    (tmp_path / "c" / "checkpoints").mkdir(parents=True)
    shutil.copytree(first, tmp_path / "c" / "checkpoints" / first.name)
    fp32 = [*SMALL, "train.resume=auto", "train.max_steps=17", "train.checkpoint_every_n_steps=17"]
    with caplog.at_level(logging.WARNING, logger="dlrm_exp.modes.setup"):
        widened = run_train(compose_cfg(fp32), tmp_path / "c", {})
    # once, among the changed settings (it was also warned table by table: review), and in
    # metrics.json too (only the log said it: review)
    assert caplog.text.count("fp16 -> fp32") == 1
    assert "setting(s) differ from the run that wrote" in caplog.text
    assert "model.embedding_data_type fp16 -> fp32" in widened.resumed["changed_settings"]
    # a checkpoint of an earlier version (no table dtype among its settings): the weights'
    # dtypes say it, table by table
    (tmp_path / "d" / "checkpoints").mkdir(parents=True)
    older = shutil.copytree(first, tmp_path / "d" / "checkpoints" / first.name)
    state = json.loads((older / "trainer_state.json").read_text())
    del state["settings"]["model.embedding_data_type"]
    (older / "trainer_state.json").write_text(json.dumps(state))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dlrm_exp.modes.setup"):
        run_train(compose_cfg(fp32), tmp_path / "d", {})
    assert "resuming 26 table(s) in another dtype than checkpoint" in caplog.text
    assert "t_cat_0 fp16 -> fp32" in caplog.text
    # scored (evaluate, predict) with fp32 tables: exact, so only logged; scored with fp16
    # tables, an fp32 checkpoint rounds: warned (it was silent: resume review)
    from dlrm_exp.loop.checkpoint import read_trainer_state
    from dlrm_exp.modes.setup import warn_unlike_training

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="dlrm_exp.modes.setup"):
        warn_unlike_training(read_trainer_state(last), compose_cfg(SMALL), 1, last)
    assert [r.levelname for r in caplog.records] == ["INFO"]
    assert "scoring the 26 fp16 table(s) of" in caplog.text
    caplog.clear()
    rounded = complete_checkpoints(tmp_path / "c")[-1]  # fp32 tables, trained on from step 16
    with caplog.at_level(logging.WARNING, logger="dlrm_exp.modes.setup"):
        warn_unlike_training(read_trainer_state(rounded), compose_cfg(FP16), 1, rounded)
    assert "scoring 26 table(s) in another dtype than checkpoint" in caplog.text

    # export: `none` keeps the trained fp16 tables (half the fp32 bytes, the same outputs),
    # read from the checkpoint: the command need not repeat model.embedding_data_type
    cfg = compose_cfg(["mode=export", f"checkpoint={tmp_path / 'a'}", *SMALL])
    record = run_export(cfg, Job(tmp_path / "export"))
    assert record["trained_table_data_types"] == ["fp16"]
    assert record["trained_dense_precision"] == "fp32"  # from the checkpoint's settings
    assert record["table_bytes"] * 2 == record["table_bytes_fp32"]
    assert json.loads((tmp_path / "export" / "export.json").read_text()) == record
    dlrm, _ = load_trained(cfg, last)
    assert {p.dtype for n, p in dlrm.named_parameters() if "embedding_bags" in n} == {torch.float32}
    dense = torch.rand(8, 13, generator=torch.Generator().manual_seed(0))
    values = torch.zeros(26 * 8, dtype=torch.long)
    inputs = (dense, values, torch.ones(26 * 8, dtype=torch.int32))
    with torch.no_grad():
        expected = InferenceDLRM(dlrm, cfg.model.feature_names)(*inputs)
        exported = torch.jit.load(record["artifact"])(*inputs)
    assert torch.allclose(exported, expected, atol=1e-6)
