"""What the pipelines record of themselves (:mod:`dlrm_exp.factories.pipeline`)."""

from torchrec.distributed.types import (
    EmbeddingModuleShardingPlan,
    ParameterSharding,
    ShardingPlan,
)

from dlrm_exp.config import Pipeline, TrainConfig
from dlrm_exp.factories.pipeline import pipeline_substitution


def _plan(*kernels: str) -> ShardingPlan:
    tables = {
        f"t{i}": ParameterSharding(sharding_type="table_wise", compute_kernel=k, ranks=[0])
        for i, k in enumerate(kernels)
    }
    module = EmbeddingModuleShardingPlan(tables)
    return ShardingPlan({"sparse_arch.embedding_bag_collection": module})


def test_a_prefetching_pipeline_without_a_cached_table_records_that_it_prefetched_nothing():
    """PrefetchTrainPipelineSparseDist fills the HBM caches of fused_uvm_caching tables; with
    none in the plan it was accepted without a word (GPU review)."""
    prefetch = TrainConfig(pipeline=Pipeline.prefetch_sparse_dist)
    substitution = pipeline_substitution(prefetch, _plan("fused", "fused"))
    assert substitution is not None
    assert substitution.line().startswith(
        "train.pipeline prefetch_sparse_dist: ran without prefetching instead (it prefetches "
        "the rows of fused_uvm_caching tables"
    )
    assert pipeline_substitution(prefetch, _plan("fused", "fused_uvm_caching")) is None
    plain = TrainConfig(pipeline=Pipeline.sparse_dist)
    assert pipeline_substitution(plain, _plan("fused")) is None
