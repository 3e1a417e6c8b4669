"""Batches built ahead by a background thread: the same batches in the same order, errors
raised at their batch, and a consumer that stops early stops the thread."""

import threading
import time

import pytest
import torch

from conftest import SMALL, compose_cfg
from dlrm_exp.data.batches import ClickData, iter_batches
from dlrm_exp.data.prefetch import prefetched
from dlrm_exp.errors import DataError

KEYS = ["cat_0", "cat_1"]


def _data(n: int) -> ClickData:
    return ClickData.from_numpy(
        torch.arange(n * 13, dtype=torch.float32).reshape(n, 13).numpy(),
        torch.arange(n * 2).reshape(n, 2).numpy(),
        (torch.arange(n) % 2).numpy(),
    )


def _threads() -> int:
    return sum(t.name == "dlrm_exp-prefetch" for t in threading.enumerate())


def test_prefetched_batches_are_the_batches_in_order():
    data = _data(50)
    inline = list(iter_batches(data, 8, 0, 1, KEYS))
    for depth in (0, 1, 3):
        ahead = list(prefetched(iter_batches(data, 8, 0, 1, KEYS), depth))
        assert len(ahead) == len(inline) == 7
        for a, b in zip(ahead, inline, strict=True):
            assert torch.equal(a.dense_features, b.dense_features)
            assert torch.equal(a.sparse_features.values(), b.sparse_features.values())
    assert _threads() == 0


def test_an_error_building_a_batch_is_raised_at_that_batch():
    def failing():
        yield from iter_batches(_data(16), 8, 0, 1, KEYS)
        raise DataError("row group 3 of a.parquet: label 2 is not a click")

    got = prefetched(failing(), 2)
    assert len([next(got), next(got)]) == 2
    with pytest.raises(DataError, match="row group 3 of a.parquet"):
        next(got)
    assert _threads() == 0


def test_a_consumer_that_stops_early_stops_the_thread():
    built = []

    def endless():
        while True:
            built.append(len(built))
            yield from iter_batches(_data(8), 8, 0, 1, KEYS)

    got = prefetched(endless(), 2)
    next(got)
    time.sleep(0.2)  # the thread fills its queue, then waits
    got.close()
    assert _threads() == 0 and len(built) <= 4  # 1 taken + 2 queued + 1 waiting to be


def test_training_with_batches_built_ahead_gives_the_same_run(tmp_path, monkeypatch):
    """``train.prefetch_batches=2`` on CPU (the default builds inline there) trains the same
    model: the thread changes when a batch is built, not which."""
    from dlrm_exp.modes import train
    from dlrm_exp.modes.train import run_train

    depths = []

    def spy(batches, depth, pin=False):
        depths.append(depth)
        return prefetched(batches, depth, pin)

    monkeypatch.setattr(train, "prefetched", spy)
    args = [*SMALL, "train.max_steps=12", "train.val_every_n_steps=6"]
    inline = run_train(compose_cfg(args), tmp_path / "inline", {})
    assert set(depths) == {0}
    depths.clear()
    ahead = run_train(compose_cfg([*args, "train.prefetch_batches=2"]), tmp_path / "ahead", {})
    assert set(depths) == {2} and len(depths) >= 4  # train, 2 validations, test
    assert ahead.val_history == inline.val_history and ahead.test == inline.test
    assert ahead.final_train_loss == inline.final_train_loss
    assert (inline.prefetch_batches, ahead.prefetch_batches) == (0, 2)  # what ran, recorded
    assert inline.loss_read_lag == ahead.loss_read_lag == 0  # CPU: each loss read at once
    assert compose_cfg([]).train.prefetch_depth(cuda=False) == 0
    assert compose_cfg([]).train.prefetch_depth(cuda=True) == 2
