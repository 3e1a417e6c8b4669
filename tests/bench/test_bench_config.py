"""The benchmarks compose their configs on their own (they run outside Hydra's entry point)."""

import math
import re

import pytest

from dlrm_exp.bench import fast
from dlrm_exp.bench.quality import MLPERF_ON_THIS_MACHINE
from dlrm_exp.bench.training import compose_config, whole_run
from dlrm_exp.config import (
    Config,
    CriteoMultiHotDataConfig,
    DensePrecision,
    EmbeddingDataType,
    SparseOptimizer,
)


def test_benchmarks_compose_the_default_and_the_mlperf_recipe():
    assert isinstance(compose_config([]), Config)
    mlperf = compose_config(MLPERF_ON_THIS_MACHINE)
    assert isinstance(mlperf.data, CriteoMultiHotDataConfig) and mlperf.data.path is None
    assert mlperf.model.num_embeddings_cap == 100000 and mlperf.train.batch_size == 2048


def test_the_fast_bench_composes_its_recipe_levers_and_preset():
    recipe = compose_config(fast.RECIPE)
    assert recipe.model.embedding_dim == 64 and len(recipe.model.table_sizes) == 26
    assert recipe.optimizer.sparse_optimizer is SparseOptimizer.sgd
    assert recipe.train.dense_precision is DensePrecision.fp32
    preset = compose_config([*fast.RECIPE, *fast.FAST])
    assert preset.train.dense_precision is DensePrecision.bf16
    assert preset.train.symmetric_interaction
    assert preset.model.embedding_data_type is EmbeddingDataType.fp32  # slower fp16 backward
    assert preset.model.table_sizes == recipe.model.table_sizes  # the preset sets no model
    for _, overrides, _ in fast.LEVERS:
        compose_config([*fast.RECIPE, *overrides])


def test_the_fast_bench_table_gives_each_lever_its_median_ratio_to_the_reference():
    results = {
        "reference": [100.0, 200.0, 100.0],
        "fp32": [100.0, 200.0, 110.0],
        **{name: [150.0, 200.0, 100.0] for name, _, _ in fast.LEVERS},
        "fast": [210.0, 380.0, 190.0],
    }
    table, speedup = fast.speed_table(results)
    # ratios 2.1, 1.9, 1.9 (not the ratio of medians): pairs sqrt(2.1 * 1.9), 1.9, their median
    assert speedup == pytest.approx((math.sqrt(2.1 * 1.9) + 1.9) / 2)
    assert "x1.95" in table and "x1.00" in table and "train.pipeline=base alone" in table


def test_a_steady_drift_of_the_machine_cancels_in_the_ratio():
    """Equal sides on a machine 1 % slower per run, rounds AB, BA, AB: the plain median of the
    per-round ratios read x1.01 (review); one round is its own ratio."""
    from dlrm_exp.bench.training import drift_free_ratio

    speed = iter(0.99**k for k in range(6))
    rounds = [(next(speed), next(speed)) for _ in range(3)]  # (first, second) of each round
    ratios = [a / b if i % 2 == 0 else b / a for i, (a, b) in enumerate(rounds)]
    assert ratios[0] > 1.01 - 1e-9 and drift_free_ratio(ratios) == pytest.approx(1.0)
    assert drift_free_ratio([1.3]) == 1.3


def test_the_dense_part_target_is_the_median_of_every_run_or_missed():
    """A run without a fraction (its peak probe failed) was dropped: the median of the other
    two read as met (review)."""
    from types import SimpleNamespace

    def run(fraction, peak=400e9):
        util = {"fraction_of_matmul_peak": fraction, "peak_matmul_flops_per_sec": peak}
        return SimpleNamespace(utilization={**util, "peak_dtype": "bf16"})

    fraction, line = fast.dense_part([run(0.52), run(0.49), run(0.55)])
    assert fraction == 0.52 and "52.0%, 49.0%, 55.0%" in line and "(400, 400, 400 GFLOP/s)" in line
    fraction, line = fast.dense_part([run(0.52), run(None, None), run(0.55)])
    assert math.isnan(fraction) and "n/a" in line and "the target is missed" in line


def test_the_dense_parts_bound_is_a_step_of_the_lookups_chain():
    """At 4 MFLOP a sample, 3 of them on the lookups' chain, batch 1000, 5 ms of lookups and a
    1 TFLOP/s median peak, no step is under 5 + 3 ms: the dense part runs at most 0.5 TFLOP/s,
    50 % of the peak, whatever the rest of the step does."""
    from types import SimpleNamespace

    def run(peak):
        util = {"dense_flops_per_sample": 4e6, "peak_matmul_flops_per_sec": peak}
        return SimpleNamespace(utilization=util)

    bound, line = fast.dense_bound([run(0.9e12), run(1e12), run(2e12)], 0.005, 1000, 3_000_000)
    assert bound == pytest.approx(0.5) and "5.0 ms a step" in line and "(75%: " in line
    assert "no step is under 8.0 ms" in line and "at most 50.0%" in line
    # the quickstart's chain: the symmetric interaction's 2 x 27^2 x 64 FLOPs forward and one
    # bmm backward, the over arch's 2 x (415 x 512 + 512 x 512 + 512 x 256 + 256) forward and
    # as much again for its input gradients (its weight gradients are off the chain)
    assert fast.chained_flops() == 2 * 93_312 + 2 * 1_211_904
    bound, line = fast.dense_bound([run(1e12), run(None)], 0.005, 1000, 3_000_000)
    assert math.isnan(bound) and "n/a" in line


def test_a_whole_run_of_the_fast_bench_that_fails_says_what_it_printed(tmp_path):
    with pytest.raises(RuntimeError) as err:
        whole_run(["model=nonexistent"], tmp_path / "run")
    assert str(err.value).startswith("python -m dlrm_exp model=nonexistent failed:")
    assert "Could not find 'model/nonexistent'" in str(err.value)


def test_the_training_bench_refuses_settings_the_plain_loop_would_not_run():
    from dlrm_exp.bench.training import main, unlike_the_plain_loop

    assert unlike_the_plain_loop(compose_config([])) == ""
    assert unlike_the_plain_loop(compose_config(fast.RECIPE)) == ""
    unlike = unlike_the_plain_loop(compose_config([*fast.RECIPE, *fast.FAST]))
    assert unlike == "train.dense_precision=bf16, train.symmetric_interaction=true"
    overlap = unlike_the_plain_loop(compose_config([*fast.RECIPE, *fast.FAST_OVERLAP]))
    assert overlap.endswith(", train.sparse_backward=overlap")
    fp16 = compose_config(["model.embedding_data_type=fp16", "train.pipeline=base"])
    assert (
        unlike_the_plain_loop(fp16) == "model.embedding_data_type (not fp32), train.pipeline=base"
    )
    # both loops run on the run's device: a GPU is no difference (it was refused)
    gpu = compose_config(["hardware.compute_device=cuda", "hardware.backend=nccl"])
    assert unlike_the_plain_loop(gpu) == ""
    assert main(["train.dense_precision=bf16"]) == 2  # refused before anything runs
    assert main(["hardware.nproc_per_node=2"]) == 2  # it ran one process (performance review)


def test_the_training_bench_hands_batches_on_as_the_run_does(monkeypatch, capsys):
    """Its framework loop took the batch list as it was: train.prefetch_batches changed
    nothing, and a GPU comparison with and without prefetching compared one loop
    (performance review)."""
    from dlrm_exp.bench import training

    depths = []

    def spy(batches, depth, pin=False):
        depths.append((depth, pin))
        return iter(batches)

    monkeypatch.setattr(training, "prefetched", spy)
    args = ["--rounds", "1", "--steps", "4", "--warmup", "1", "train.batch_size=64"]
    assert training.main([*args, "train.prefetch_batches=2"]) in (0, 1)
    assert depths and set(depths) == {(2, False)}
    assert "framework" in capsys.readouterr().out


def test_a_whole_run_of_the_fast_bench_probes_its_own_peak(tmp_path, monkeypatch):
    """The dense-part fraction divides by the matmul peak: each whole run probes it in its
    own process, whatever reading the user's cache holds (a cached peak is reused after a
    spot check of one size within 20 %, which moves a fraction at the target's edge)."""
    import torch

    from dlrm_exp.perf.peak import PROBED, measured_peak

    monkeypatch.setenv("DLRM_EXP_CACHE_DIR", str(tmp_path / "user_cache"))
    measured_peak(torch.device("cpu"), torch.float32)  # a fresh reading the run could reuse
    metrics = whole_run(
        ["data.num_train_samples=512", "data.num_val_samples=256", "data.num_test_samples=256",
         "train.batch_size=128", "train.progress_bar=false"],
        tmp_path / "run",
    )  # fmt: skip
    assert metrics.utilization["peak_source"] == PROBED


def test_a_bench_refuses_a_mistake_in_one_line(capsys):
    """A misspelt or refused override, and ``--rounds 0``, were raw tracebacks (review)."""
    from dlrm_exp.bench import training

    for overrides, message in [
        (["train.batchsize=4"], "Error: unknown config key train.batchsize: did you mean"),
        (["train.batch_size=-1"], "Error: train.batch_size must be positive, got -1"),
        (["model=tinyy"], "Error: In 'config': Could not find 'model/tinyy'"),
        # built as a run's config: OmegaConf's MissingMandatoryValue text named no fix
        (["data=criteo_tsv"], "Error: data.path is required: set data.path=<tsv file or"),
    ]:
        with pytest.raises(SystemExit, match=re.escape(message)):
            compose_config(overrides)
    with pytest.raises(SystemExit) as parsed:
        training.main(["--rounds", "0"])
    assert parsed.value.code == 2 and "--rounds: 0 is below 1" in capsys.readouterr().err
