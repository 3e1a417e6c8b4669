"""``mode=verify`` says whether the job trains the reference's maths."""

from conftest import compose_cfg
from dlrm_exp.modes.verify import Trace, compare, exact_training, reference_config, summary


def _trace(losses):
    return Trace(losses=losses, tables={}, dense={}, sharding_types=["row_wise"])


def test_exact_pipelines_in_fp32_are_judged_and_the_others_reported():
    assert exact_training(compose_cfg(["train.pipeline=base"]))
    assert not exact_training(compose_cfg(["train.dense_precision=bf16"]))
    reference = reference_config(compose_cfg(["train.pipeline=base", "train.dense_precision=bf16"]))
    assert reference.train.pipeline.value == "sparse_dist"
    assert reference.train.dense_precision.value == "fp32"

    result = compare(_trace([0.5, 0.6]), _trace([0.5, 0.5]), "fp32", exact=False)
    assert result["passed"] is None
    result |= {"world_size": 2, "sharding_type": "row_wise", "pipeline": "sparse_dist"}
    text = summary({**result, "dense_precision": "bf16"})
    assert "the dense part computes in bf16" in text and "not judged" in text
    exact = compare(_trace([0.5]), _trace([0.5]), "fp32", exact=True)
    exact |= {"world_size": 2, "sharding_type": "row_wise", "pipeline": "base"}
    text = summary({**exact, "dense_precision": "fp32"})
    assert "exact, same maths as the reference" in text and "PASS" in text
