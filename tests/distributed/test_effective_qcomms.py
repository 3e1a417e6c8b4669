"""The precision each collective runs in, read back from a model built on one process: TorchRec
runs the reduce-scatter of row-wise layouts in FP16/BF16 when FP8 is asked, and the run records
and names that substitution (no training)."""

import pytest

from conftest import compose_cfg
from dlrm_exp.distributed.launch import process_group
from dlrm_exp.distributed.qcomms import effective_qcomms, qcomms_substitution
from dlrm_exp.factories.experiment import build_experiment

FP16_BF16 = {"forward": "FP16", "backward": "BF16"}
FP8 = {"forward": "FP8", "backward": "FP8"}


def _built(*overrides: str):
    cfg = compose_cfg(list(overrides))
    with process_group(cfg.hardware) as ctx:
        return build_experiment(cfg, ctx)


@pytest.mark.parametrize(
    ("sharding", "qcomms", "effective", "ran"),
    [
        ("rowwise", "fp8", {"reduce_scatter": FP16_BF16}, "reduce_scatter FP16/BF16"),
        ("tablewise", "fp8", {"pooled_all_to_all": FP8}, None),
        (
            "tablerowwise",
            "fp8",
            {"pooled_all_to_all": FP8, "reduce_scatter": FP16_BF16},
            "reduce_scatter FP16/BF16",
        ),
        ("rowwise", "fp16_bf16", {"reduce_scatter": FP16_BF16}, None),
        ("rowwise", "none", {}, None),
        ("rowwise", "fp32", {}, None),
        ("dataparallel", "fp16", {}, "no embedding collective"),
    ],
)
def test_effective_precisions_are_read_from_the_built_model(sharding, qcomms, effective, ran):
    """The codecs a model built on one process holds are those 2+ ranks run with (the plan
    is the same); the substitution is judged as on 2 ranks."""
    cfg = compose_cfg([f"sharding={sharding}", f"qcomms={qcomms}"])
    experiment = _built(f"sharding={sharding}", f"qcomms={qcomms}")
    assert effective_qcomms(experiment.model) == effective
    substitution = qcomms_substitution(cfg.qcomms, effective, world_size=2)
    assert (substitution and substitution.ran) == ran
    if ran and ran.startswith("reduce_scatter"):
        assert substitution.line() == (
            "qcomms fp8: ran reduce_scatter FP16/BF16 instead (TorchRec has no FP8 "
            "reduce_scatter; precisions are forward/backward); recorded in metrics.json"
        )


def test_on_one_rank_no_precision_is_recorded_as_run():
    """TorchRec skips the collectives of a one-rank group, codecs and all: qcomms=fp16 on one
    process trains bitwise like qcomms=none, so nothing may say FP16 ran."""
    experiment = _built("sharding=tablewise", "qcomms=fp16")
    assert effective_qcomms(experiment.model)  # the codecs exist, but never encode
    assert experiment.effective_qcomms == {}
    (substitution,) = experiment.substitutions
    assert substitution.ran == "no embedding collective" and "one rank" in substitution.line()
    assert not _built("sharding=tablewise", "qcomms=none").substitutions


def test_adam_on_cpu_with_auto_sharding_is_named_as_a_substitution():
    """FBGEMM's CPU kernels have no fused Adam: ``sharding=auto`` replicates the tables."""
    experiment = _built("optimizer=adam", "sharding=auto")
    assert {
        t.sharding_type
        for t in experiment.plan.plan["model.sparse_arch.embedding_bag_collection"].values()
    } == {"data_parallel"}
    (substitution,) = experiment.substitutions
    assert (substitution.setting, substitution.asked) == ("optimizer", "adam")
    assert "FBGEMM's CPU kernels cannot fuse adam" in substitution.line()
    assert not _built("optimizer=adam", "sharding=dataparallel").substitutions  # as asked
