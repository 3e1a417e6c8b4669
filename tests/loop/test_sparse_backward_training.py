"""Training with ``train.overlap_sparse_backward``: every step hands its sparse backward to the
helper thread, the tables and their optimizer state end bit for bit as in the serial run
(through a learning-rate warm-up, validations and checkpoints), and a resume from a checkpoint
continues bitwise."""

import shutil
import time

import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from conftest import SMALL, compose_cfg
from dlrm_exp.factories import sparse_backward
from dlrm_exp.modes.train import run_train

RUN = [
    *SMALL,
    "train.val_every_n_steps=16",
    "train.checkpoint_every_n_steps=8",
    "optimizer.lr_warmup_steps=8",  # the kernels' rate is set while a backward runs
    "hardware.threads_per_rank=2",
]
OVERLAP = "train.sparse_backward=overlap"


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


def test_overlapped_training_keeps_the_tables_and_resumes_bitwise(tmp_path, monkeypatch):
    handed = []
    helper = sparse_backward._helper()

    class LateHelper:
        """Starts each sparse backward 10 ms late: a step that read or set the tables before
        it landed would see the previous update missing (the small tables' backward is
        otherwise over before the training thread gets there)."""

        def submit(self, backward, grad):
            handed.append(1)
            return helper.submit(lambda: time.sleep(0.01) or backward(grad))

    monkeypatch.setattr(sparse_backward, "_helper", LateHelper)
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
    for key in ("val", "test", "val_history", "final_train_loss", "steps"):
        assert getattr(resumed, key) == getattr(overlapped, key), key
    c = _checkpoint(tmp_path / "resumed", 32)
    assert all(torch.equal(a[k], c[k]) for k in a)
