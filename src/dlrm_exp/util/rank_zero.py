"""Work one rank does for every rank of a job: rank 0 computes, the others receive its result,
or the user error it raised, through ``torch.distributed.broadcast_object_list``."""

from collections.abc import Callable
from datetime import timedelta
from typing import TypeVar

import torch.distributed as dist

from dlrm_exp.errors import UserError

T = TypeVar("T")


def several_ranks() -> bool:
    """Whether this process is one of several ranks: a default process group of more than one
    rank exists (a one-rank group has no one to share a collective with)."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def is_rank_zero() -> bool:
    """Whether this process is rank 0 of its job, or runs without a process group (for what
    every rank computes alike but one should say: a warning about the data)."""
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def on_rank_zero(compute: Callable[[], T], wait: timedelta | None = None) -> T:
    """``compute()`` on rank 0 of the default process group, its result broadcast to every
    rank (a collective: every rank calls it). Without a process group of more than one rank
    (one process, a parent's pre-flight) it simply returns ``compute()``.

    For what every rank would otherwise compute alike at a cost (reading a dataset's labels
    from a shared file system), or what must be decided once (TorchRec's planner is not
    guaranteed to plan alike in every process).

    ``wait``: how long the other ranks wait for rank 0, when ``compute`` may outlast the job's
    collective timeout (``hardware.collective_timeout_s``): the broadcast then goes over a gloo
    group of its own with that timeout (made and destroyed here, by every rank). None: the
    default group and its timeout. A rank 0 that dies ends the job through its launcher
    either way.

    Raises:
        UserError: the one ``compute()`` raised on rank 0, raised on every rank, so no rank
            waits for a result that will not come. Any other exception ends rank 0 only; the
            launcher then stops the others.
    """
    if not several_ranks():
        return compute()
    group = None if wait is None else dist.new_group(backend="gloo", timeout=wait)
    outcome: list[object] = [None]
    if dist.get_rank() == 0:
        try:
            outcome[0] = compute()
        except UserError as err:
            outcome[0] = err
    dist.broadcast_object_list(outcome, src=0, group=group)
    if group is not None:
        dist.destroy_process_group(group)
    if isinstance(outcome[0], UserError):
        raise outcome[0]
    return outcome[0]  # type: ignore[return-value]
