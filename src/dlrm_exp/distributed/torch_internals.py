"""The private torch and CPython hooks that :mod:`dlrm_exp.distributed.comm_stats` needs, behind
one adapter.

Counting the bytes TorchRec sends needs three things no public API gives:

* who called a ``torch.distributed`` collective: the calling frame's module
  (``sys._getframe``, CPython);
* whether autograd's engine is running, i.e. the call is part of a backward pass
  (``torch._C._current_graph_task_id``, private; -1 outside backward, as
  ``torch.autograd.graph`` itself reads it);
* replacing ``torch.distributed`` module attributes for the length of a job, restored on
  exit (TorchRec calls the collectives through the module attribute);
* the DDP modules of a sharded model: a ``ShardedEmbeddingBagCollection`` keeps the DDP it
  wraps its ``data_parallel`` tables' lookup in in ``_lookups``, a plain list that
  ``nn.Module.modules()`` does not walk (private TorchRec).

Every use of them goes through this module, so a torch release that removes one fails here, at
:func:`check_available`, with the hook's name and the torch version, not deep inside a run:
``tests/distributed/test_torch_internals.py`` runs the check and each hook on the installed
torch.
"""

import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def check_available() -> None:
    """Check that the private hooks this module wraps exist in the installed torch / Python.

    Raises:
        RuntimeError: a hook is missing (names it and the torch version).
    """
    missing = [
        name
        for name, present in (
            ("torch._C._current_graph_task_id", hasattr(torch._C, "_current_graph_task_id")),
            ("sys._getframe", hasattr(sys, "_getframe")),
        )
        if not present
    ]
    if missing:
        raise RuntimeError(
            f"torch {torch.__version__} lacks {', '.join(missing)}, which counting collective "
            "bytes relies on (dlrm_exp.distributed.torch_internals): use a supported torch "
            "(docs/install.md)"
        )


def caller_module(depth: int = 1) -> str:
    """The ``__name__`` of the module whose code called the function that calls this one
    (``depth=1``), or ``depth`` frames further up; ``""`` when it has none."""
    return sys._getframe(depth + 1).f_globals.get("__name__", "")


def in_backward() -> bool:
    """Whether autograd's engine is running a backward pass on this thread now."""
    return torch._C._current_graph_task_id() != -1


@contextmanager
def patched(module: ModuleType, replacements: Mapping[str, Callable[..., Any]]) -> Iterator[None]:
    """Set ``module.<name> = replacement`` for each entry for the duration of the block, and
    restore the originals on exit, also on an exception.

    Raises:
        AttributeError: ``module`` has no attribute of a given name (nothing is replaced).
    """
    originals = {name: getattr(module, name) for name in replacements}
    try:
        for name, replacement in replacements.items():
            setattr(module, name, replacement)
        yield
    finally:
        for name, original in originals.items():
            setattr(module, name, original)


def ddp_modules(model: nn.Module) -> list[DistributedDataParallel]:
    """Every ``DistributedDataParallel`` of ``model``: its submodules' and those a sharded
    TorchRec module keeps in its ``_lookups`` list (outside ``modules()``)."""
    found = []
    for module in model.modules():
        lookups = getattr(module, "_lookups", None)
        extra = lookups if isinstance(lookups, list) else []
        for candidate in [module, *extra]:
            if isinstance(candidate, DistributedDataParallel) and candidate not in found:
                found.append(candidate)
    return found
