"""Running batches through TorchRec's pipeline: draining it, and evaluating a split.

TorchRec's pipeline keeps up to two batches in flight, so each phase gets its own iterator and
the pipeline is drained (``StopIteration``) before switching phases, as in TorchRec's DLRM
example; no training batch is ever evaluated and vice versa.
"""

from collections.abc import Iterable, Iterator

import torch
from torchrec.datasets.utils import Batch
from torchrec.distributed.train_pipeline.train_pipelines import TrainPipeline, TrainPipelineBase

from dlrm_exp.loop.metrics import ClickMetrics
from dlrm_exp.record import metric_table

#: The metrics a validation or test pass reports (besides ``samples``), as in the metric table.
QUALITY = tuple(q.key for q in metric_table.QUALITY)


def drain(pipeline: TrainPipeline, batches: Iterator[Batch]) -> Iterator[tuple]:
    """Run ``pipeline.progress`` until the iterator and the pipeline are empty, yielding each
    step's output ``(loss, logits (B,), labels (B,))``. ``TrainPipelineBase`` does not notice
    a new iterator by itself (the others do), so it is reset for the next phase."""
    while True:
        try:
            yield pipeline.progress(batches)
        except StopIteration:
            if isinstance(pipeline, TrainPipelineBase):
                pipeline.reset()
            return


def evaluate(
    pipeline: TrainPipeline,
    model: torch.nn.Module,
    batches: Iterable[Batch],
    device: torch.device,
) -> dict[str, float]:
    """AUROC, log loss, NE and the sample count of ``model`` over ``batches`` (all ranks: a
    collective), in eval mode and without gradients; ``model`` is the pipeline's model and is
    back in train mode afterwards."""
    model.eval()
    metrics = ClickMetrics(device)
    with torch.no_grad():
        for _loss, logits, labels in drain(pipeline, iter(batches)):
            metrics.update(logits, labels)
    model.train()
    return metrics.compute()


def quality(metrics: dict[str, float]) -> dict[str, float]:
    """The :data:`QUALITY` entries of an evaluation (for TensorBoard)."""
    return {k: metrics[k] for k in QUALITY}
