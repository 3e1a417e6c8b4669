"""``mode=verify`` says whether the job trains the reference's maths, and why not."""

import warnings

import pytest

from conftest import compose_cfg
from dlrm_exp.modes.verify import Trace, compare, inexact_because, reference_config, summary


def _trace(losses):
    return Trace(losses=losses, tables={}, dense={}, sharding_types=["row_wise"])


def test_exact_pipelines_in_fp32_are_judged_and_the_others_reported():
    assert inexact_because(compose_cfg(["train.pipeline=base"])) == []
    assert inexact_because(compose_cfg(["train.dense_precision=bf16"])) == [
        "the dense part computes in bf16"
    ]
    fp16 = ["+model.embedding_data_type_per_table.t_cat_3=fp16", "train.dense_precision=bf16"]
    assert inexact_because(compose_cfg(fp16)) == [
        "the dense part computes in bf16",
        "fp16 tables against the reference's fp32 ones",
    ]
    reference = reference_config(
        compose_cfg(
            ["train.pipeline=base", "train.dense_precision=bf16", "model.embedding_data_type=fp16"]
        )
    )
    assert reference.train.pipeline.value == "sparse_dist"
    assert reference.train.dense_precision.value == "fp32"
    assert {t.value for t in reference.model.table_data_types} == {"fp32"}

    result = compare(_trace([0.5, 0.6]), _trace([0.5, 0.5]), "fp32", exact=False)
    assert result["passed"] is None
    result |= {"world_size": 2, "sharding_type": "row_wise", "pipeline": "sparse_dist"}
    text = summary(
        {
            **result,
            "dense_precision": "fp32",
            "table_data_types": ["fp32", "fp16"],
            "inexact_because": ["fp16 tables against the reference's fp32 ones"],
        }
    )
    assert "tables fp32/fp16: changes the numerics on purpose (fp16 tables" in text
    assert "not judged" in text
    exact = compare(_trace([0.5]), _trace([0.5]), "fp32", exact=True)
    exact |= {"world_size": 2, "sharding_type": "row_wise", "pipeline": "base"}
    text = summary(
        {**exact, "dense_precision": "fp32", "table_data_types": ["fp32"], "inexact_because": []}
    )
    assert "exact, same maths as the reference" in text and "PASS" in text
    # judged: a deviation beyond the precision's tolerance fails, one inside it passes
    off = compare(_trace([0.5, 0.5 * (1 + 2e-5)]), _trace([0.5, 0.5]), "fp32", exact=True)
    assert off["passed"] is False and off["max_rel_loss_deviation"] == pytest.approx(2e-5)
    off |= {"world_size": 2, "sharding_type": "row_wise", "pipeline": "base"}
    text = summary(
        {**off, "dense_precision": "fp32", "table_data_types": ["fp32"], "inexact_because": []}
    )
    assert "FAIL" in text and "PASS" not in text
    near = compare(_trace([0.5, 0.5 * (1 + 5e-6)]), _trace([0.5, 0.5]), "fp32", exact=True)
    assert near["passed"] is True


def test_a_diverged_run_fails_the_comparison_even_when_not_judged():
    """A job that is not judged (fp16 tables, bf16 dense) passed with NaN losses: nothing
    compared them, and the deviation was NaN."""
    nan = float("nan")
    for exact in (False, True):
        result = compare(_trace([0.7, nan]), _trace([0.7, 0.6]), "fp32", exact=exact)
        assert result["passed"] is False and result["finite"] is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy RuntimeWarning printed for a diverged loss
        diverged = _trace([0.7, float("inf")])
        reference_diverged = compare(_trace([0.7, 0.6]), diverged, "fp32", False)
    assert reference_diverged["passed"] is False
    assert compare(_trace([0.7, 0.6]), _trace([0.7, 0.6]), "fp32", exact=False)["passed"] is None


def test_an_unsupported_precision_is_refused_before_the_workers_start(tmp_path, monkeypatch):
    """verify int8 row-wise started both workers, which each failed (15 s, the error twice);
    training refuses it before any process starts, and so does verify now."""
    from dlrm_exp.errors import ConfigError
    from dlrm_exp.modes import verify

    def no_launch(*args, **kwargs):
        raise AssertionError("workers started")

    monkeypatch.setattr(verify, "launch_workers", no_launch)
    cfg = compose_cfg(
        ["mode=verify", "hardware.nproc_per_node=2", "sharding=rowwise", "qcomms=int8"]
    )
    with pytest.raises(ConfigError, match="qcomms int8 with row_wise sharding is not supported"):
        verify.run_verify_many([cfg], [tmp_path])
    mixed = compose_cfg(
        ["sharding=tablewise", "+sharding.per_table_sharding_type.t_cat_0=grid_shard"]
    )
    assert verify._asked_sharding_types(mixed) == {"table_wise", "grid_shard"}
    assert verify._asked_sharding_types(compose_cfg([])) == set()  # auto: the plan's, later


def test_the_reference_runs_on_the_ranks_thread_count(monkeypatch):
    """The reference ran on every core while each of 2 ranks had half of them: its sums
    added in another order, and seed 2 missed verify's tolerance (review). It now takes the
    ranks' count, or ``hardware.threads_per_rank`` where set."""
    import os

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    two = ["hardware.nproc_per_node=2"]
    reference = reference_config(compose_cfg(two))
    assert reference.hardware.threads_per_rank == 4 and reference.hardware.nproc_per_node == 1
    given = reference_config(compose_cfg([*two, "hardware.threads_per_rank=3"]))
    assert given.hardware.threads_per_rank == 3


def test_verify_on_several_hosts_is_one_refusal(tmp_path):
    """``mode=verify hardware.nnodes=2`` was told to start with torchrun on every host, which
    verify then refused (review): one message now says it runs on one host."""
    from dlrm_exp.errors import ConfigError
    from dlrm_exp.modes.verify import run_verify

    with pytest.raises(ConfigError, match="runs its ranks and their reference on one host"):
        run_verify(compose_cfg(["mode=verify", "hardware.nnodes=2"]), tmp_path)


def test_verify_as_a_submitit_task_says_which_launcher_to_drop(tmp_path, monkeypatch):
    """Under hydra/launcher=local its tasks look launched, and verify said to run it without
    torchrun, which the user never used (distributed review)."""
    from dlrm_exp.errors import ConfigError
    from dlrm_exp.modes.verify import run_verify

    monkeypatch.setenv("SUBMITIT_EXECUTOR", "local")
    with pytest.raises(ConfigError, match="without hydra/launcher=local / slurm_gpu"):
        run_verify(compose_cfg(["mode=verify", "hardware.nproc_per_node=2"]), tmp_path)


def test_the_summary_names_each_collectives_precisions():
    """FP16 forward / BF16 backward comms were labelled "bf16 comms", the lowest precision
    alone, which sets the tolerance (distributed review)."""
    from dlrm_exp.modes.verify import _comms

    fp16_bf16 = {"reduce_scatter": {"forward": "FP16", "backward": "BF16"}}
    ran = {"precision": "bf16", "requested_precision": "bf16", "effective_qcomms": fp16_bf16}
    assert _comms(ran) == "bf16 comms (reduce_scatter FP16/BF16)"
    none = {"precision": "fp32", "requested_precision": "bf16", "effective_qcomms": {}}
    assert _comms(none) == "fp32 comms (bf16 asked; it did not run)"
