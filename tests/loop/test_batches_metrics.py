"""Per-rank batching into TorchRec Batches, and the metric definitions."""

import math
import os
import platform
from pathlib import Path

import numpy as np
import pytest
import torch

from dlrm_exp.data.batches import ClickData, iter_batches, per_rank_sizes
from dlrm_exp.loop import metrics as loop_metrics
from dlrm_exp.loop.metrics import ClickMetrics, LogLossNE, Throughput, capped_warmup


def data(n, f=3):
    sparse = np.arange(n * f).reshape(n, f)
    return ClickData.from_numpy(np.ones((n, 13)), sparse, np.arange(n) % 2)


def test_per_rank_sizes_split_remainder_evenly():
    assert per_rank_sizes(10, 4, 1) == [4, 4, 2]
    assert per_rank_sizes(21, 4, 2) == [4, 4, 2]  # 16 + 2*2, one row dropped
    assert per_rank_sizes(1, 4, 2) == []
    assert per_rank_sizes(8, 4, 2) == [4]


def test_a_training_split_with_fewer_rows_than_ranks_is_refused():
    """No step ran, and the record's epoch fractions divided by 0 after a whole validation and
    test pass: a bare ZeroDivisionError (review)."""
    from dlrm_exp.errors import DataError
    from dlrm_exp.modes.train import _check_a_step

    with pytest.raises(DataError, match="has 1 row\\(s\\), fewer than the 2 ranks"):
        _check_a_step(1, 2, per_rank_sizes(1, 4, 2))
    _check_a_step(2, 2, per_rank_sizes(2, 4, 2))  # a row each: one step


def test_batches_cover_rows_in_order_per_rank():
    d = data(21)
    keys = ["cat_0", "cat_1", "cat_2"]
    r0 = list(iter_batches(d, 4, 0, 2, keys))
    r1 = list(iter_batches(d, 4, 1, 2, keys))
    assert [len(b.labels) for b in r0] == [4, 4, 2] == [len(b.labels) for b in r1]
    rows0 = torch.cat([b.sparse_features["cat_0"].values() for b in r0]) // 3
    rows1 = torch.cat([b.sparse_features["cat_0"].values() for b in r1]) // 3
    assert rows0.tolist() == [0, 1, 2, 3, 8, 9, 10, 11, 16, 17]
    assert rows1.tolist() == [4, 5, 6, 7, 12, 13, 14, 15, 18, 19]


def test_one_process_with_slices_sees_every_step_as_the_ranks_do():
    """mode=verify's reference (1 process, batch W x B, slices=W): on the remainder step it
    took all N % (W x B) rows (and sliced them B, rest); W ranks take (N % (W x B)) // W each,
    so the reference diverged from a correct run there."""
    d, keys = data(31), ["cat_0", "cat_1", "cat_2"]  # 24 rows + a remainder of 7: 2 a rank
    for seed in (None, (0, 1)):
        ranks = [list(iter_batches(d, 4, r, 3, keys, seed)) for r in range(3)]
        together = list(d.batches(12, 0, 1, keys, seed, slices=3))
        assert [len(b.labels) for b in together] == [12, 12, 6]
        for joint, *parts in zip(together, *ranks, strict=True):
            rows = [b.sparse_features["cat_0"].values() for b in parts]
            assert joint.sparse_features["cat_0"].values().tolist() == torch.cat(rows).tolist()


def test_kjt_is_one_hot_and_key_major():
    (batch,) = list(iter_batches(data(2), 2, 0, 1, ["cat_0", "cat_1", "cat_2"]))
    kjt = batch.sparse_features
    assert kjt.keys() == ["cat_0", "cat_1", "cat_2"]
    assert kjt.lengths().tolist() == [1] * 6
    assert kjt.values().tolist() == [0, 3, 1, 4, 2, 5]
    assert batch.dense_features.shape == (2, 13) and batch.labels.dtype == torch.float32


def test_logloss_and_ne_match_definitions():
    logits = torch.tensor([2.0, -1.0, 0.5, -3.0])
    labels = torch.tensor([1.0, 0.0, 0.0, 1.0])
    m = LogLossNE()
    m.update(logits, labels)
    out = m.compute()
    p = torch.sigmoid(logits).double()
    y = labels.double()
    logloss = float(-(y * p.log() + (1 - y) * (1 - p).log()).mean())
    ctr = 0.5
    entropy = -(ctr * math.log(ctr) + (1 - ctr) * math.log(1 - ctr))
    assert out["logloss"] == pytest.approx(logloss)
    assert out["ne"] == pytest.approx(logloss / entropy)


def test_click_metrics_auroc_and_degenerate_cases():
    m = ClickMetrics(torch.device("cpu"))
    m.update(torch.tensor([3.0, 1.0, -1.0, -2.0]), torch.tensor([1.0, 0.0, 1.0, 0.0]))
    assert m.compute()["auroc"] == pytest.approx(0.75)
    one_class = ClickMetrics(torch.device("cpu"))
    one_class.update(torch.tensor([1.0, 2.0]), torch.tensor([0.0, 0.0]))
    values = one_class.compute()
    assert math.isnan(values["auroc"]) and values["positives"] == 0
    # the summary says why it is n/a (it said n/a for no reason: review)
    from dlrm_exp.record.metric_table import split_line

    assert split_line("val", values).endswith(
        "| 2 samples (every row is label 0: AUROC, NE and calibration are undefined)"
    )
    assert "every row" not in split_line("val", m.compute())
    empty = ClickMetrics(torch.device("cpu")).compute()
    assert empty["samples"] == 0
    assert all(math.isnan(empty[k]) for k in ("auroc", "logloss", "ne"))
    # a NaN logit: torchmetrics ranks it somewhere and gives a finite AUROC (0.25 here), which
    # early stopping, the target and keep_best would take; the log loss is NaN, so is AUROC now
    nan_logit = ClickMetrics(torch.device("cpu"))
    nan_logit.update(torch.tensor([3.0, 1.0, -1.0, math.nan]), torch.tensor([1.0, 0.0, 1.0, 0.0]))
    assert math.isnan(nan_logit.compute()["auroc"])


def test_throughput_excludes_warmup_and_pauses(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(loop_metrics.time, "perf_counter", lambda: clock[0])

    def after(seconds: float) -> None:
        clock[0] += seconds

    t = Throughput(warmup_steps=2)
    t.resume()
    for _ in range(2):
        after(5.0)  # warm-up steps: neither time nor rows count
        t.step(100)
    assert t.samples_per_sec is None
    after(1.0)
    t.step(100)
    after(1.0)
    t.step(100)
    assert t.samples == 200 and t.seconds == 2.0 and t.samples_per_sec == 100.0
    after(10.0)  # a validation between a step and the next resume: not counted
    t.resume()
    after(0.5)
    assert t.step(100) == 0.5
    assert t.samples == 300 and t.seconds == 2.5
    after(0.25)  # work the last step left running (a sparse backward on the helper thread)
    t.extend_last()
    assert t.samples == 300 and t.seconds == 2.75
    fresh = Throughput(warmup_steps=1)
    fresh.step(100)
    after(3.0)
    fresh.extend_last()  # the last step was warm-up: its tail is not counted either
    assert fresh.seconds == 0.0


def test_a_short_run_warms_up_over_at_most_half_its_steps():
    assert capped_warmup(10, 100) == 10
    assert capped_warmup(10, 8) == 4  # a resume with 8 steps left measures its last 4
    assert capped_warmup(10, 1) == 0


def test_calibration_is_mean_predicted_over_observed_ctr():
    """A model that predicts 0.25 for every row of a set with 50 % clicks under-predicts by
    half (calibration 0.5); predicting the set's click rate is calibrated (1.0)."""
    labels = torch.tensor([1.0, 0.0, 1.0, 0.0])
    under = LogLossNE()
    under.update(torch.full((4,), math.log(0.25 / 0.75)), labels)
    assert under.compute()["calibration"] == pytest.approx(0.5)
    exact = LogLossNE()
    exact.update(torch.zeros(4), labels)
    assert exact.compute()["calibration"] == pytest.approx(1.0)
    metrics = ClickMetrics(torch.device("cpu"))
    metrics.update(torch.full((4,), math.log(0.6 / 0.4)), labels)
    assert metrics.compute()["calibration"] == pytest.approx(1.2)


def test_the_peak_memory_restarts_for_each_run_in_one_process():
    """A sweep's one-process jobs share a process: each must report its own peak, also when
    the earlier job's objects sit in reference cycles (TorchRec's modules do), which only the
    cycle collector frees."""
    import gc

    from dlrm_exp.loop.metrics import peak_memory_gib, reset_peak_memory

    gc.disable()  # the test decides when the collector runs, not the allocation count
    try:
        reset_peak_memory(torch.device("cpu"))
        earlier_run = {"tables": np.ones(2**28 // 8)}  # 256 MiB, touched
        earlier_run["self"] = earlier_run
        with_big = peak_memory_gib()
        del earlier_run
        reset_peak_memory(torch.device("cpu"))
        if Path("/proc/self/clear_refs").exists():
            assert peak_memory_gib() < with_big - 0.2  # the earlier 256 MiB no longer counts
        else:  # not Linux: the peak over the process's life
            assert peak_memory_gib() >= with_big
    finally:
        gc.enable()


@pytest.mark.skipif(
    not Path("/proc/self/clear_refs").exists()
    or platform.libc_ver()[0] != "glibc"
    or "alloc" in os.environ.get("LD_PRELOAD", ""),  # jemalloc, tcmalloc: no glibc heap
    reason="Linux's VmHWM reset and glibc's malloc_trim",
)
def test_the_free_heap_an_earlier_run_left_is_not_the_next_run_s_peak():
    """An earlier job's freed blocks left between live ones stay in glibc's heap, resident
    (the heap shrinks only from its top): a tiny sweep's fourth job read 0.473 GiB against
    0.450 alone. The reset hands those pages back first."""
    from dlrm_exp.loop.metrics import peak_memory_gib, reset_peak_memory

    reset_peak_memory(torch.device("cpu"))
    before = peak_memory_gib()
    blocks = [bytes(64 * 1024) for _ in range(4096)]  # 256 MiB of heap blocks, touched
    kept = blocks[::16]  # 16 MiB of them stay live, between the freed ones
    del blocks
    reset_peak_memory(torch.device("cpu"))
    assert peak_memory_gib() < before + 0.1 and len(kept) == 256


def test_one_rank_metrics_make_no_collective(monkeypatch):
    """With a one-rank process group there is nothing to gather: no all-gather runs (on a gloo
    thread it would give that thread an OpenMP team and slow every later training step)."""
    import torch.distributed as dist

    logits, labels = torch.linspace(-3, 3, 40_000), (torch.arange(40_000) % 3 == 0).float()
    alone = ClickMetrics(torch.device("cpu"))
    alone.update(logits, labels)
    expected = alone.compute()

    def no_collective(*args, **kwargs):
        raise AssertionError("a collective ran with one rank")

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        for name in ("all_gather", "all_reduce", "barrier", "all_gather_into_tensor"):
            monkeypatch.setattr(dist, name, no_collective)
        metrics = ClickMetrics(torch.device("cpu"))
        metrics.update(logits, labels)
        assert metrics.compute() == expected
    finally:
        monkeypatch.undo()
        dist.destroy_process_group()


def test_max_steps_beyond_the_epochs_is_said_not_dropped_silently():
    """``experiment=golden`` (1,000 steps) on 8,192 rows of batch 32 trained 256 steps, the
    end of its one epoch, without a word (docs walk-through)."""
    from dlrm_exp.loop.trainer import step_budget

    assert step_budget(256, 1, None) == (256, None)
    assert step_budget(256, 4, 1000) == (1000, None)
    total, line = step_budget(256, 1, 1000)
    assert total == 256 and line is not None
    assert line.startswith("train.max_steps=1000 is more than train.epochs=1 of 256 steps give")


def test_held_out_rows_left_unscored_on_several_ranks_are_said(caplog):
    """99 validation rows on 2 ranks scored 98, and the run's AUROC differed from evaluate's
    on one process without a word (Criteo review)."""
    from types import SimpleNamespace

    from conftest import compose_cfg
    from dlrm_exp.modes.setup import warn_unscored

    splits = SimpleNamespace(val=[0] * 99, test=[0] * 100)
    cfg = compose_cfg(["train.batch_size=64"])
    with caplog.at_level("WARNING"):
        warn_unscored(cfg, splits, ("val", "test"), 2)
        warn_unscored(cfg, splits, ("val",), 1)
    assert caplog.messages == [
        "val: the last 1 of its 99 rows are not scored on 2 ranks (every rank scores as many "
        "rows as the others); mode=evaluate on one process scores every row"
    ]
