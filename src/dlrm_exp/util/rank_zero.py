"""Work one rank does for every rank of a job: rank 0 computes, the others receive its result,
or the user error it raised, through ``torch.distributed.broadcast_object_list``."""

from collections.abc import Callable
from typing import TypeVar

import torch.distributed as dist

from dlrm_exp.errors import UserError

T = TypeVar("T")


def on_rank_zero(compute: Callable[[], T]) -> T:
    """``compute()`` on rank 0 of the default process group, its result broadcast to every
    rank (a collective: every rank calls it). Without a process group of more than one rank
    (one process, a parent's pre-flight) it simply returns ``compute()``.

    For what every rank would otherwise compute alike at a cost (reading a dataset's labels
    from a shared file system), or what must be decided once (TorchRec's planner is not
    guaranteed to plan alike in every process).

    Raises:
        UserError: the one ``compute()`` raised on rank 0, raised on every rank, so no rank
            waits for a result that will not come. Any other exception ends rank 0 only; the
            launcher then stops the others.
    """
    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return compute()
    outcome: list[object] = [None]
    if dist.get_rank() == 0:
        try:
            outcome[0] = compute()
        except UserError as err:
            outcome[0] = err
    dist.broadcast_object_list(outcome, src=0)
    if isinstance(outcome[0], UserError):
        raise outcome[0]
    return outcome[0]  # type: ignore[return-value]
