"""Validation cadence (``val_per_epoch``) and the target-AUROC stop."""

import json
import logging

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from conftest import SMALL, compose_cfg
from dlrm_exp.modes.train import run_train


def test_val_per_epoch_validates_evenly_and_without_a_target_nothing_changes(tmp_path, caplog):
    metrics = run_train(compose_cfg([*SMALL, "train.val_per_epoch=4"]), tmp_path, {})
    assert [h["step"] for h in metrics.val_history] == [8, 16, 24, 32]  # 32 steps per epoch
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert "target_auroc" not in saved and "reached_target" not in saved

    # one validation that reaches the target and would trip early stopping (no improvement
    # by 0.5): the target stops training, and it alone is given as the reason (the log and
    # TensorBoard said early stopping while metrics.json said target_auroc)
    first, second = (h["auroc"] for h in metrics.val_history[:2])
    assert first < second
    both = [*SMALL, "train.val_per_epoch=4", f"train.target_auroc={second!r}",
            "train.early_stopping.patience=1", "train.early_stopping.min_delta=0.5"]  # fmt: skip
    with caplog.at_level(logging.INFO, logger="dlrm_exp"):
        stopped = run_train(compose_cfg(both), tmp_path / "both", {})
    assert (stopped.stop_reason, stopped.target_step, stopped.steps) == ("target_auroc", 16, 16)
    assert "target AUROC" in caplog.text and "early stopping at step" not in caplog.text


def test_target_auroc_stops_training_then_tests(tmp_path):
    """The acceptance run on the default data: ``train.target_auroc=0.75
    train.val_every_n_steps=32`` stops before step 512 with ``reached_target: true``."""
    cfg = compose_cfg(
        ["train.target_auroc=0.75", "train.val_every_n_steps=32", "train.progress_bar=false"]
    )
    metrics = run_train(cfg, tmp_path, {})
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["reached_target"] is True and saved["target_auroc"] == 0.75
    assert saved["stop_reason"] == "target_auroc" and saved["weights"] == "final"
    assert saved["target_step"] == metrics.steps < 512 and metrics.steps % 32 == 0
    assert saved["target_epoch"] == metrics.steps / 2048  # 1,048,576 rows / 512 per step
    history = metrics.val_history
    assert history[-1]["step"] == metrics.steps and history[-1]["auroc"] >= 0.75
    assert all(h["auroc"] < 0.75 for h in history[:-1])
    assert metrics.val["auroc"] == history[-1]["auroc"] and metrics.test["samples"] == 32768
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    marks = events.Scalars("val/reached_target_auroc")
    assert [(m.step, m.value) for m in marks] == [(metrics.steps, 0.75)]


def test_an_unreached_target_trains_to_the_end(tmp_path):
    cfg = compose_cfg([*SMALL, "train.target_auroc=0.99", "train.val_per_epoch=2"])
    metrics = run_train(cfg, tmp_path, {})
    assert metrics.steps == 32 and metrics.reached_target is False
    assert metrics.target_step is None and metrics.target_epoch is None

    # a target first reached by the last step's validation: reached, but training ended at
    # its end (no stop), so the last step's checkpoint is written as for any run
    first, last = (h["auroc"] for h in metrics.val_history)
    assert first < last
    at_end = [*SMALL, f"train.target_auroc={last!r}", "train.val_per_epoch=2",
              "train.checkpoint_every_n_steps=20"]  # fmt: skip
    reached = run_train(compose_cfg(at_end), tmp_path / "end", {})
    assert (reached.reached_target, reached.target_step, reached.stop_reason) == (True, 32, "end")
    assert (tmp_path / "end" / "checkpoints" / "step_32").is_dir()


def test_val_per_epoch_counts_each_epoch_from_its_start():
    """Multiples of steps_per_epoch // N from step 0 drifted in later epochs and validated
    at 2040 and again at 2048 (N=20, 2048 steps an epoch): two of early stopping's patience
    a few steps apart. Now N validations an epoch, the last at its end."""
    from dlrm_exp.loop.trainer import epoch_positions

    positions = epoch_positions(2048, 20)
    assert len(positions) == 20 and positions[:2] == (102, 204) and positions[-2:] == (1945, 2048)
    assert epoch_positions(32, 4) == (8, 16, 24, 32) and epoch_positions(3, 5) == (1, 2, 3)
    assert epoch_positions(2048, None) == ()


def test_two_epochs_validate_at_the_same_points_of_each(tmp_path):
    args = [*SMALL, "train.epochs=2", "train.val_per_epoch=3", "model=tiny",
            "train.early_stopping.patience=null", "data.num_val_samples=256"]  # fmt: skip
    metrics = run_train(compose_cfg(args), tmp_path, {})
    assert [h["step"] for h in metrics.val_history] == [10, 21, 32, 42, 53, 64]
