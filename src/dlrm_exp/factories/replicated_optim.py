"""The sparse optimizer of data_parallel tables, computed by FBGEMM's own fused kernel.

Sharded tables are updated inside backward by FBGEMM's TBE kernel (``EmbOptimType``
``EXACT_ROWWISE_ADAGRAD`` / ``EXACT_ADAGRAD`` / ``EXACT_SGD``). A ``data_parallel`` table is a
replica behind DDP: it can only be updated after DDP averaged its gradient, so TorchRec leaves
it to a plain ``torch.optim`` optimizer. TorchRec's Python ``RowWiseAdagrad`` computes the same
formula with other roundings (``lr * (g / std)`` against FBGEMM's ``g * (lr / std)``, another
sum order for ``mean(g**2)``), enough for Adagrad's step size to turn a one-ulp difference into
a visibly different trajectory after some steps.

:class:`FbgemmReplicaOptimizer` instead feeds the averaged gradient rows through a TBE with the
same optimizer whose weights *are* the replica's storage: every table, however it is sharded,
is then updated by the same kernel (bitwise so on CPU, see
``tests/factories/test_replicated_optim.py``).
CPU only (:func:`dlrm_exp.factories.optim.build_optimizer` uses TorchRec's optimizers elsewhere).
"""

from typing import Any

import torch
from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation
from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
    ComputeDevice,
    SplitTableBatchedEmbeddingBagsCodegen,
)

from dlrm_exp.config import SparseOptimizer

#: FBGEMM's ``weights_precision`` of each table dtype the replicas may have.
_WEIGHTS_PRECISION = {torch.float32: SparseType.FP32, torch.float16: SparseType.FP16}

_FBGEMM_TYPE = {
    SparseOptimizer.rowwise_adagrad: EmbOptimType.EXACT_ROWWISE_ADAGRAD,
    SparseOptimizer.adagrad: EmbOptimType.EXACT_ADAGRAD,
    SparseOptimizer.sgd: EmbOptimType.EXACT_SGD,
}


class FbgemmReplicaOptimizer(torch.optim.Optimizer):
    """Apply FBGEMM's fused TBE optimizer to whole-table parameters with dense gradients.

    Args:
        params: (num_embeddings, embedding_dim) float32 or float16 CPU tables (the TBE's
            ``weights_precision`` follows), contiguous; their ``grad`` the same shape (rows
            never looked up are all zero and are left untouched, as the fused kernel leaves
            rows outside the batch).
        optimizer: which FBGEMM optimizer.
        lr: learning rate.
        eps: Adagrad's denominator term (ignored by SGD).

    State per table: ``momentum1`` (rowwise Adagrad (N,), Adagrad (N*D,), SGD none), the
    TBE's own accumulator tensor.

    Raises:
        ValueError: a parameter that is not a contiguous 2-D float32 / float16 CPU tensor.
    """

    def __init__(
        self, params: Any, optimizer: SparseOptimizer, lr: float, eps: float = 1e-8
    ) -> None:
        super().__init__(params, {"lr": lr, "eps": eps})
        self._kind = _FBGEMM_TYPE[optimizer]
        self._kernels: dict[torch.Tensor, SplitTableBatchedEmbeddingBagsCodegen] = {}
        for group in self.param_groups:
            for p in group["params"]:
                supported = p.dtype in _WEIGHTS_PRECISION
                if p.dim() != 2 or not supported or p.is_cuda or not p.is_contiguous():
                    raise ValueError(
                        "FbgemmReplicaOptimizer takes contiguous 2-D float32 / float16 CPU tables, "
                        f"got {tuple(p.shape)} {p.dtype} on {p.device}"
                    )
                # built now, before any gradient: the TBE allocates (and fills) a table of its
                # own before it takes p's storage, which in the first step came on top of the
                # weights, their gradient and the state (a second copy of the largest table)
                self._kernel(p, group)

    def _kernel(
        self, p: torch.Tensor, group: dict[str, Any]
    ) -> SplitTableBatchedEmbeddingBagsCodegen:
        tbe = self._kernels.get(p)
        if tbe is None:
            rows, dim = p.shape
            with torch.random.fork_rng(devices=[]):  # its own table's init draws none of the run's
                tbe = SplitTableBatchedEmbeddingBagsCodegen(
                    [(rows, dim, EmbeddingLocation.HOST, ComputeDevice.CPU)],
                    optimizer=self._kind,
                    weights_precision=_WEIGHTS_PRECISION[p.dtype],
                    learning_rate=group["lr"],
                    eps=group["eps"],
                )
            tbe.weights_host = torch.nn.Parameter(p.detach().view(-1))  # shares p's storage
            self._kernels[p] = tbe
        state = self.state[p]
        momentum = getattr(tbe, "momentum1_host", None)
        if momentum is not None and momentum.numel():
            saved = state.get("momentum1")
            if saved is not None and saved.data_ptr() != momentum.data_ptr():
                momentum.detach().copy_(saved.reshape(momentum.shape))  # after load_state_dict
            state["momentum1"] = momentum.detach()
        tbe.set_learning_rate(group["lr"])
        return tbe

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # noqa: D102 (torch.optim.Optimizer.step)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                tbe = self._kernel(p, group)
                rows = p.grad.ne(0).any(dim=1).nonzero().squeeze(1)
                if rows.numel() == 0:
                    continue
                offsets = torch.arange(rows.numel() + 1, dtype=rows.dtype)
                with torch.enable_grad():
                    tbe(rows, offsets).backward(p.grad.index_select(0, rows).float())
