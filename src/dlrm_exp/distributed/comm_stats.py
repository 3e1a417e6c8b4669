"""Bytes a rank hands to TorchRec's collectives, measured at the ``torch.distributed`` API.

TorchRec calls ``torch.distributed.all_to_all_single`` / ``reduce_scatter_tensor`` /
``all_gather_into_tensor`` (and their list forms) through the module attribute, so wrapping
those attributes sees every tensor it sends, after the qcomms codec encoded it: with FP16
forward comms the pooled embeddings arrive here as float16, half the bytes of FP32.

Each call is booked by who made it and when:

* ``forward`` / ``backward``: pooled-embedding collectives made by
  ``torchrec.distributed.comm_ops`` (all-to-all for table/column-wise, reduce-scatter for
  row-wise, all-gather in its backward), split by whether autograd's engine is running;
* ``input_dist``: the sparse input (KeyedJaggedTensor ids, lengths and their splits) sent by
  ``torchrec.distributed.dist_data``;
* ``allreduce``: DDP's gradient all-reduce (the dense and over arch, the interaction's weights
  and ``data_parallel`` tables: every parameter TorchRec does not shard). DDP's reducer runs
  in C++, past the wrapped functions, and a communication hook that counted its buckets
  changed the maths at world sizes other than powers of two (it divides the bucket, DDP
  multiplies each gradient by 1 / world size: diff review); so it is counted from the
  parameters each of the model's DDP modules reduces, once per step: TorchRec's DDP runs
  with a static graph and no unused parameter, so every bucket is reduced in every backward.

Bytes are those of the larger side of each collective (``numel * element_size``), so that
every sharding type is counted alike: the input of an all-to-all or a reduce-scatter (the
rank's rows for every rank, its own slice included), the output of an all-gather (its input
goes to every rank: row-wise's backward). Counted by its input, an all-gather showed W
times fewer bytes than the reduce-scatter it mirrors (half at 2 ranks, 1/8 at 8). An
all-reduce's input and output are one buffer. Nothing is counted on one process (no
collective leaves it).
"""

import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from dlrm_exp.distributed.torch_internals import (
    caller_module,
    check_available,
    ddp_modules,
    in_backward,
    patched,
)

#: Collective name -> (position, keyword) of the tensor(s) counted: the larger side (see the
#: module docstring), the input but for an all-gather's output.
_SENT_ARG: dict[str, tuple[int, str]] = {
    "all_to_all_single": (1, "input"),
    "all_to_all": (1, "input_tensor_list"),
    "reduce_scatter_tensor": (1, "input"),
    "reduce_scatter": (1, "input_list"),
    "all_gather_into_tensor": (0, "output_tensor"),
    "all_gather": (0, "tensor_list"),
}
#: The phases the wrapped collectives' bytes are booked by (the module docstring says what each
#: holds; ``allreduce`` is :func:`allreduce_bytes`, from the parameters).
PHASES = ("forward", "backward", "input_dist")
_CALLERS = {
    "torchrec.distributed.comm_ops": "embeddings",
    "torchrec.distributed.dist_data": "input_dist",
}


def _nbytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    return 0


class CollectiveBytes:
    """Counts bytes per phase (``forward``, ``backward``, ``input_dist``) while ``active``.

    Use :meth:`installed` around the whole job (it wraps the ``torch.distributed`` functions
    and restores them on exit) and set ``active`` around the steps to measure.
    """

    def __init__(self) -> None:
        self.bytes: dict[str, int] = defaultdict(int)
        self.calls: dict[str, int] = defaultdict(int)
        self.active = False
        # the sparse backward may run on a helper thread (train.sparse_backward=overlap)
        self._lock = threading.Lock()

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        position, keyword = _SENT_ARG[name]

        def counted(*args: Any, **kwargs: Any) -> Any:
            if self.active:
                caller = _CALLERS.get(caller_module())
                if caller is not None:
                    sent = args[position] if len(args) > position else kwargs.get(keyword)
                    if caller == "input_dist":
                        phase = "input_dist"
                    else:
                        phase = "backward" if in_backward() else "forward"
                    with self._lock:
                        self.bytes[phase] += _nbytes(sent)
                        self.calls[phase] += 1
            return original(*args, **kwargs)

        return counted

    @contextmanager
    def installed(self) -> Iterator["CollectiveBytes"]:
        """Wrap the ``torch.distributed`` collectives for the duration of the block.

        Raises:
            RuntimeError: the installed torch lacks a private hook the count needs.
        """
        check_available()
        wrapped = {name: self._wrap(name, getattr(dist, name)) for name in _SENT_ARG}
        with patched(dist, wrapped):
            yield self

    def per_step(self, steps: int) -> dict[str, float]:
        """Mean bytes per measured step and phase (:data:`PHASES`)."""
        return {phase: (self.bytes.get(phase, 0) / steps if steps else 0.0) for phase in PHASES}


def allreduce_bytes(model: nn.Module) -> int:
    """Bytes one rank's DDP modules all-reduce in one backward (module docstring): the
    gradient of every parameter each reduces (not those it was told to ignore: TorchRec's
    sharded tables), of the DDP ``DistributedModelParallel`` wraps and of a
    ``data_parallel`` tables' lookup; 0 on one process."""
    total = 0
    for ddp in ddp_modules(model):
        if ddp.process_group.size() > 1:
            ignored = ddp.parameters_to_ignore
            total += sum(
                _nbytes(p)
                for name, p in ddp.module.named_parameters()
                if name not in ignored and p.requires_grad
            )
    return total
