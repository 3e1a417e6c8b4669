"""Optimizers: the sparse one fused into backward, the dense one, and their combination.

Follows TorchRec's golden training example: ``apply_optimizer_in_backward`` on the embedding
parameters before sharding (FBGEMM then fuses the update into the backward kernel), and a
``KeyedOptimizerWrapper`` over every parameter without an in-backward optimizer.
"""

from collections.abc import Callable
from typing import Any

import torch
from torchrec.models.dlrm import DLRMTrain
from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper
from torchrec.optim.optimizers import in_backward_optimizer_filter
from torchrec.optim.rowwise_adagrad import RowWiseAdagrad

from dlrm_exp.config import (
    ComputeDevice,
    DenseOptimizer,
    EmbeddingDataType,
    ModelConfig,
    OptimizerConfig,
    SparseOptimizer,
)
from dlrm_exp.config.optimizer import fbgemm_steps_replicas
from dlrm_exp.factories.replicated_optim import FbgemmReplicaOptimizer
from dlrm_exp.planning.tables import is_table_key
from dlrm_exp.util.substitution import Substitution

#: Position of the dense optimizer in :func:`build_optimizer`'s ``CombinedOptimizer``.
_DENSE_INDEX = 1


#: Position of the data-parallel tables' optimizer, where there are any.
_REPLICA_INDEX = 2


def dense_learning_rate(optimizer: CombinedOptimizer) -> float:
    """The learning rate the dense optimizer of :func:`build_optimizer` applies now."""
    rate = _rate_of(optimizer, _DENSE_INDEX)
    assert rate is not None  # (build_optimizer always has one)
    return rate


def replica_learning_rate(optimizer: CombinedOptimizer) -> float | None:
    """The learning rate the optimizer of :func:`build_optimizer`'s data-parallel tables
    applies now; None where no table is data_parallel."""
    return _rate_of(optimizer, _REPLICA_INDEX)


def _rate_of(optimizer: CombinedOptimizer, index: int) -> float | None:
    """The rate the ``index``-th optimizer of ``optimizer`` applies now; None past the end."""
    if len(optimizer.optimizers) <= index:
        return None
    _key, part = optimizer.optimizers[index]
    return float(part.param_groups[0]["lr"])


def _sparse_class(cfg: OptimizerConfig) -> tuple[type[torch.optim.Optimizer], dict[str, Any]]:
    """The ``torch.optim`` class TorchRec maps to FBGEMM's fused optimizer, and its kwargs."""
    if cfg.sparse_optimizer is SparseOptimizer.rowwise_adagrad:
        return RowWiseAdagrad, {"lr": cfg.learning_rate, "eps": cfg.eps}
    if cfg.sparse_optimizer is SparseOptimizer.adagrad:  # FBGEMM EXACT_ADAGRAD
        return torch.optim.Adagrad, {"lr": cfg.learning_rate, "eps": cfg.eps}
    if cfg.sparse_optimizer is SparseOptimizer.adam:  # FBGEMM ADAM (betas 0.9, 0.999)
        return torch.optim.Adam, {"lr": cfg.learning_rate, "eps": cfg.eps}
    return torch.optim.SGD, {"lr": cfg.learning_rate}


def _dense_factory(cfg: OptimizerConfig) -> Callable[[Any], torch.optim.Optimizer]:
    """The dense optimizer over a parameter list: ``torch.optim`` Adagrad, Adam or SGD."""
    lr, eps = cfg.dense_learning_rate, cfg.eps
    if cfg.dense_optimizer is DenseOptimizer.adagrad:
        return lambda params: torch.optim.Adagrad(params, lr=lr, eps=eps)
    if cfg.dense_optimizer is DenseOptimizer.adam:
        return lambda params: torch.optim.Adam(params, lr=lr, eps=eps)
    return lambda params: torch.optim.SGD(params, lr=lr)


def apply_sparse_optimizer(model: DLRMTrain, cfg: OptimizerConfig) -> None:
    """Attach the sparse optimizer to the embedding tables, to run inside backward.

    Must be called on the unsharded (meta) model, before ``DistributedModelParallel``.
    """
    cls, kwargs = _sparse_class(cfg)
    apply_optimizer_in_backward(cls, model.model.sparse_arch.parameters(), kwargs)


def build_optimizer(model: torch.nn.Module, cfg: OptimizerConfig) -> CombinedOptimizer:
    """``CombinedOptimizer`` for a ``DistributedModelParallel``: the fused sparse optimizer,
    the dense optimizer, and (if any) the sparse optimizer for data-parallel tables.

    ``step()`` steps the dense optimizer and the data-parallel tables; the fused sparse update
    already happened in backward. TorchRec drops the in-backward optimizer of tables it shards
    ``data_parallel`` (their replicas sit behind DDP), which would leave them to the dense
    optimizer at the dense learning rate; here they keep the configured sparse optimizer and
    step after DDP averaged their gradients, which is the update the fused kernel makes for
    sharded tables. On CPU that update runs in FBGEMM's fused kernel itself
    (:class:`~dlrm_exp.factories.replicated_optim.FbgemmReplicaOptimizer`), so its arithmetic is the
    sharded tables' to the bit; elsewhere, and for Adam (which FBGEMM's CPU kernels lack,
    :data:`~dlrm_exp.config.optimizer.CPU_FUSED`), in TorchRec's ``RowWiseAdagrad`` /
    ``torch.optim``.
    """
    dense_factory = _dense_factory(cfg)
    cls, kwargs = _sparse_class(cfg)
    plain = dict(in_backward_optimizer_filter(model.named_parameters()))
    replicated_tables = {k: v for k, v in plain.items() if is_table_key(k)}
    dense = {k: v for k, v in plain.items() if k not in replicated_tables}
    optimizers: list[Any] = [model.fused_optimizer, KeyedOptimizerWrapper(dense, dense_factory)]
    assert len(optimizers) == _DENSE_INDEX + 1 == _REPLICA_INDEX
    if replicated_tables:
        on_cpu = all(p.device.type == "cpu" for p in replicated_tables.values())
        fbgemm = fbgemm_steps_replicas(cfg.sparse_optimizer, on_cpu)

        def replica_factory(params: Any) -> torch.optim.Optimizer:
            if fbgemm:
                return FbgemmReplicaOptimizer(
                    params, cfg.sparse_optimizer, cfg.learning_rate, cfg.eps
                )
            return cls(params, **kwargs)

        optimizers.append(KeyedOptimizerWrapper(replicated_tables, replica_factory))
    return CombinedOptimizer(optimizers)


def rounding_substitution(
    model: ModelConfig, optimizer: OptimizerConfig, device: ComputeDevice
) -> Substitution | None:
    """The substitution when fp16 tables are asked to update with stochastic rounding on the
    CPU, whose FBGEMM kernels round to nearest (measured with fbgemm-gpu-cpu 1.8.0: 24 fp16
    weights of 1.0 under 20 SGD updates of -1e-4 each, a fifth of the fp16 spacing below 1.0,
    never moved with ``stochastic_rounding=True``, where stochastic rounding moves about one
    in five per update); None otherwise."""
    fp16 = EmbeddingDataType.fp16 in model.table_data_types
    if not (fp16 and optimizer.stochastic_rounding and device is ComputeDevice.cpu):
        return None
    return Substitution(
        "optimizer.stochastic_rounding",
        "true",
        "round to nearest",
        "FBGEMM's CPU kernels update fp16 tables with round-to-nearest; stochastic rounding "
        "runs on CUDA",
    )
