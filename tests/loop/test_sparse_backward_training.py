"""Training with ``train.sparse_backward=overlap``: every step hands its sparse backward to the
helper thread, the tables and their optimizer state end bit for bit as in the serial run
(through a learning-rate warm-up, validations and checkpoints), and a resume from a checkpoint
continues bitwise; ``mode=verify`` gathers the tables after the last update, and a failed
step leaves no backward running."""

import math
import shutil
import time

import numpy as np
import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from conftest import SMALL, compose_cfg
from dlrm_exp.errors import NonFiniteLossError
from dlrm_exp.factories import sparse_backward
from dlrm_exp.loop.trainer import Trainer
from dlrm_exp.modes.train import run_train
from dlrm_exp.modes.verify import reference_config, trace

RUN = [
    *SMALL,
    "train.val_every_n_steps=16",
    "train.checkpoint_every_n_steps=8",
    "optimizer.lr_warmup_steps=8",  # the kernels' rate is set while a backward runs
    "hardware.threads_per_rank=2",
    "train.on_nonfinite=skip",  # its gradient guards run on the training thread's backward
]
OVERLAP = "train.sparse_backward=overlap"
_HELPER = sparse_backward._POOL  # the process's helper, before a test replaces it


def _flat(state: dict, prefix: str = "") -> dict[str, torch.Tensor]:
    out = {}
    for key, value in state.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        elif isinstance(value, torch.Tensor):
            out[prefix + key] = value
    return out


def _checkpoint(run_dir, step: int) -> dict[str, torch.Tensor]:
    saved = run_dir.parent / f"{run_dir.name}_step_{step}.pt"
    dcp_to_torch_save(run_dir / "checkpoints" / f"step_{step}", saved)
    return _flat(torch.load(saved, weights_only=False))


def _late_helper(monkeypatch, fail_at: int | None = None) -> list[int]:
    """Start each sparse backward 10 ms late on the helper: a step that read or set the tables
    before it landed would see the previous update missing (the small tables' backward is
    otherwise over before the training thread gets there). The hand-off ``fail_at`` (1-based)
    raises on the helper. Returns the list that counts the hand-offs."""
    handed: list[int] = []
    helper = _HELPER

    def late(backward, grad):
        time.sleep(0.01)
        if len(handed) == fail_at:
            raise RuntimeError("the helper's backward failed")
        backward(grad)

    class LateHelper:
        def submit(self, backward, grad):
            handed.append(1)
            return helper.submit(late, backward, grad)

    monkeypatch.setattr(sparse_backward, "_POOL", LateHelper())
    return handed


def test_overlapped_training_keeps_the_tables_and_resumes_bitwise(tmp_path, monkeypatch):
    handed = _late_helper(monkeypatch)
    overlapped = run_train(compose_cfg([*RUN, OVERLAP]), tmp_path / "overlap", {})
    assert len(handed) == 32 and overlapped.substitutions == []  # one per training step
    assert overlapped.sparse_backward == "overlap"
    serial = run_train(compose_cfg(RUN), tmp_path / "serial", {})
    assert serial.sparse_backward == "serial" and len(handed) == 32
    a, b = _checkpoint(tmp_path / "overlap", 32), _checkpoint(tmp_path / "serial", 32)
    tables = [k for k in a if "embedding_bags" in k]  # weights and row-wise Adagrad state
    assert len(tables) == 52 and all(torch.equal(a[k], b[k]) for k in tables)
    assert all(torch.allclose(a[k], b[k], rtol=1e-5, atol=1e-7) for k in a)
    assert abs(overlapped.val["auroc"] - serial.val["auroc"]) < 1e-4
    # resumed from its step 24 in another folder: the same run, bit for bit
    (tmp_path / "resumed" / "checkpoints").mkdir(parents=True)
    shutil.copytree(
        tmp_path / "overlap" / "checkpoints" / "step_24",
        tmp_path / "resumed" / "checkpoints" / "step_24",
    )
    resumed = run_train(compose_cfg([*RUN, OVERLAP, "train.resume=auto"]), tmp_path / "resumed", {})
    assert resumed.resumed["step"] == 24  # (a fresh run would end the same: deterministic)
    for key in ("val", "test", "val_history", "final_train_loss", "steps"):
        assert getattr(resumed, key) == getattr(overlapped, key), key
    c = _checkpoint(tmp_path / "resumed", 32)
    assert all(torch.equal(a[k], c[k]) for k in a)


def test_verify_gathers_the_tables_after_the_last_update(monkeypatch):
    _late_helper(monkeypatch)
    common = [*SMALL, "hardware.threads_per_rank=2"]
    overlapped = trace(compose_cfg([*common, OVERLAP]), steps=4)
    serial = trace(compose_cfg(common), steps=4)
    assert overlapped.tables.keys() == serial.tables.keys() and overlapped.tables
    assert all(np.array_equal(overlapped.tables[k], serial.tables[k]) for k in serial.tables)
    assert reference_config(compose_cfg([*common, OVERLAP])).train.sparse_backward.value == (
        "serial"
    )


def test_a_failed_step_waits_for_the_helper_and_raises_its_own_error(tmp_path, monkeypatch):
    """The helper's failure surfaces at the next lookup; where the step itself failed first
    (a NaN loss here), the step's error is raised and the helper's is logged. Either way the
    training thread gets its threads back."""
    _late_helper(monkeypatch, fail_at=3)
    with pytest.raises(RuntimeError, match="the helper's backward failed"):
        run_train(compose_cfg([*RUN, OVERLAP]), tmp_path / "helper", {})
    assert torch.get_num_threads() == 2
    _late_helper(monkeypatch, fail_at=3)
    real = Trainer._check_finite

    def nan_at_step_3(self, step_loss, state):
        real(self, math.nan if state.step == 3 else step_loss, state)

    monkeypatch.setattr(Trainer, "_check_finite", nan_at_step_3)
    with pytest.raises(NonFiniteLossError, match="at step 3"):
        run_train(compose_cfg([*RUN, OVERLAP, "train.on_nonfinite=stop"]), tmp_path / "nan", {})
    assert torch.get_num_threads() == 2
