"""``train.on_nonfinite=skip``: a batch whose loss is NaN or infinite on any rank changes
nothing.

The sparse update is fused into backward (FBGEMM applies it inside the embedding kernel), so it
cannot be skipped after the fact; instead the batch's gradients are replaced by exact zeros
before any optimizer sees them:

* :class:`SkipNonFiniteDLRMTrain` computes, in forward, whether the loss is finite on every
  rank (one 1-element all-reduce per training step) and, for a skipped batch, reports the loss
  as NaN on every rank so the training loop counts the same skips everywhere;
* :func:`install_gradient_guards` (after ``DistributedModelParallel``) registers gradient hooks
  with ``torch.where(keep, grad, 0)`` (not a product, so NaN gradients become 0 too) on the
  pooled embeddings (B, F, D) flowing back into the sharded tables, and on every parameter
  without an in-backward optimizer (dense arch, interaction, over arch, data-parallel tables).

A zero gradient leaves SGD, Adagrad (its sum of squares adds 0; ``lr_decay`` is 0) and
FBGEMM's row-wise Adagrad (its row momentum adds the mean of 0) unchanged to the bit, so a
skipped step equals removing that global batch from the data (the learning-rate schedule
counts the steps that updated, so it skips it too). Adam does not ignore it (its
moments decay and move the weights): ``Config`` refuses ``skip`` with Adam.
"""

import logging
from typing import Any

import torch
import torch.distributed as dist
from torchrec.models.dlrm import DLRM, DLRMTrain
from torchrec.optim.optimizers import in_backward_optimizer_filter

from dlrm_exp.util.rank_zero import several_ranks

log = logging.getLogger(__name__)


class SkipNonFiniteDLRMTrain(DLRMTrain):
    """``DLRMTrain`` whose training batches with a non-finite loss (on any rank) get zero
    gradients once :func:`install_gradient_guards` ran.

    Forward returns ``(loss, (reported_loss, logits (B,), labels (B,)))`` like ``DLRMTrain``;
    ``reported_loss`` is NaN on every rank when the batch is skipped.
    """

    def __init__(self, dlrm_module: DLRM) -> None:
        super().__init__(dlrm_module)
        self.keep = torch.ones((), dtype=torch.bool)

    @classmethod
    def around(cls, train: DLRMTrain) -> "SkipNonFiniteDLRMTrain":
        """The same DLRM as ``train``'s, in this wrapper (a ``TrainWrapper``)."""
        return cls(train.model)

    def forward(self, batch: Any) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        loss, (reported, logits, labels) = super().forward(batch)
        # (not while TrainPipelineSparseDist traces forward symbolically: fx Proxies, no dist)
        if self.training and torch.is_grad_enabled() and isinstance(reported, torch.Tensor):
            finite = torch.isfinite(reported).to(torch.int32).reshape(1)
            if several_ranks():
                dist.all_reduce(finite, op=dist.ReduceOp.MIN)
            self.keep = finite[0].bool()
            reported = torch.where(self.keep, reported, torch.full_like(reported, float("nan")))
        return loss, (reported, logits, labels)

    def _zero_if_skipped(self, grad: torch.Tensor) -> torch.Tensor:
        return torch.where(self.keep, grad, torch.zeros_like(grad))


def install_gradient_guards(model: torch.nn.Module) -> None:
    """Register the zeroing gradient hooks on a ``DistributedModelParallel`` over a
    :class:`SkipNonFiniteDLRMTrain` (see the module docstring).

    Raises:
        TypeError: ``model.module`` is not a :class:`SkipNonFiniteDLRMTrain`.
    """
    train = model.module
    if not isinstance(train, SkipNonFiniteDLRMTrain):
        raise TypeError(f"expected SkipNonFiniteDLRMTrain, got {type(train).__name__}")

    def guard_sparse_output(_module: Any, _inputs: Any, output: Any) -> None:
        # (TrainPipelineSparseDist also runs forward symbolically: its outputs are fx Proxies)
        if isinstance(output, torch.Tensor) and output.requires_grad:
            output.register_hook(train._zero_if_skipped)

    train.model.sparse_arch.register_forward_hook(guard_sparse_output)
    plain = dict(in_backward_optimizer_filter(model.named_parameters()))
    for param in plain.values():
        if param.requires_grad:
            param.register_hook(train._zero_if_skipped)
    log.info("on_nonfinite=skip: gradient guards on %d parameters", len(plain))
