"""``train.pipeline`` -> one of TorchRec's training pipelines around the sharded model.

Every pipeline runs ``progress(iterator)`` -> ``(loss, logits (B,), labels (B,))`` per step,
so the loop and evaluation do not know which one they drive. Which pipelines change the
numerics (``mode=verify`` compares them with a single-process reference):

- ``sparse_dist``, ``base``, ``fused_sparse_dist``: exact; each step's forward sees the
  embeddings after the previous step's fused update.
- ``semi_sync``: from ``train.semi_sync_start_step`` on, the lookup of step i+1 runs before
  step i's embedding update lands, so a step sees embeddings one update staler (TorchRec's
  "semi-synchronous" training); not exact.
- ``prefetch_sparse_dist``: exact; prefetches ``fused_uvm_caching`` rows into the HBM cache
  (with no such table in the plan there is nothing to prefetch: recorded as a substitution,
  :func:`pipeline_substitution`).

``semi_sync``, ``fused_sparse_dist`` and ``prefetch_sparse_dist`` need CUDA
(:data:`dlrm_exp.config.train.CUDA_PIPELINES`; refused at compose time on CPU): they call
``record_stream`` with the device's current stream on the batch and the looked-up embeddings,
which CPU tensors reject ("unknown parameter type", TorchRec 1.8).
"""

import torch
from torchrec.distributed.train_pipeline.train_pipelines import (
    PrefetchTrainPipelineSparseDist,
    TrainPipeline,
    TrainPipelineBase,
    TrainPipelineFusedSparseDist,
    TrainPipelineSemiSync,
    TrainPipelineSparseDist,
)
from torchrec.distributed.types import ShardingPlan

from dlrm_exp.config import ComputeKernel, Pipeline, TrainConfig
from dlrm_exp.planning.plan_record import plan_compute_kernels
from dlrm_exp.util.substitution import Substitution

#: Pipelines whose every step equals the single-process reference (up to float reduction
#: order); ``semi_sync`` trains on one-update-stale embeddings instead.
EXACT_PIPELINES = frozenset(Pipeline) - {Pipeline.semi_sync}


def build_pipeline(
    cfg: TrainConfig,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
) -> TrainPipeline:
    """The ``train.pipeline`` TorchRec pipeline over ``model`` (the DMP-wrapped DLRM).

    Every pipeline trains on every batch before it raises ``StopIteration``: the pipelined
    ones run the batches in flight after the iterator ends (``execute_all_batches``), and
    ``base`` keeps only one batch ahead.
    """
    kind = cfg.pipeline
    if kind is Pipeline.base:
        return TrainPipelineBase(model, optimizer, device)
    if kind is Pipeline.semi_sync:
        start = cfg.semi_sync_start_step
        return TrainPipelineSemiSync(
            model,
            optimizer,
            device,
            execute_all_batches=True,
            **({} if start is None else {"start_batch": start}),  # null: TorchRec's default
        )
    classes = {
        Pipeline.sparse_dist: TrainPipelineSparseDist,
        Pipeline.fused_sparse_dist: TrainPipelineFusedSparseDist,
        Pipeline.prefetch_sparse_dist: PrefetchTrainPipelineSparseDist,
    }
    return classes[kind](model, optimizer, device, execute_all_batches=True)


def pipeline_substitution(cfg: TrainConfig, plan: ShardingPlan) -> Substitution | None:
    """The substitution when ``train.pipeline=prefetch_sparse_dist`` runs a ``plan`` with no
    ``fused_uvm_caching`` table: its prefetch stage fills the HBM caches of those tables, so
    it has nothing to prefetch (GPU review: accepted without a word); None otherwise."""
    cached = ComputeKernel.fused_uvm_caching.value
    if cfg.pipeline is not Pipeline.prefetch_sparse_dist or cached in plan_compute_kernels(plan):
        return None
    return Substitution(
        "train.pipeline",
        Pipeline.prefetch_sparse_dist.value,
        "without prefetching",
        f"it prefetches the rows of {cached} tables into their HBM cache, and the plan put no "
        f"table on that kernel: sharding.compute_kernel={cached} uses it, "
        "train.pipeline=sparse_dist runs without it",
    )
