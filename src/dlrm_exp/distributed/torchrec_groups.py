"""TorchRec's intra- and cross-host process groups take the job's collective timeout.

TorchRec makes the groups its ``table_row_wise`` and ``grid_shard`` tables use
(``torchrec.distributed.comm.intra_and_cross_node_pg`` and its 2D variant) with
``dist.new_group`` and no timeout, so torch's default applies (30 minutes on gloo), not
``hardware.collective_timeout_s``: a rank that hung in one of their collectives held the
others that long. The groups are module globals of ``torchrec.distributed.comm``, made when
such a table is sharded; :func:`time_out_torchrec_groups` sets their timeout afterwards with
torch's ``_set_pg_timeout`` (private, the setter torch's own tests use). Both private names
are read here only, and a release without them leaves the groups as TorchRec made them, with
a warning.
"""

import logging
from datetime import timedelta

import torch.distributed as dist

log = logging.getLogger(__name__)

#: The module globals of ``torchrec.distributed.comm`` that hold its groups.
GROUPS = ("_INTRA_PG", "_CROSS_PG", "_INTRA_PG_2D", "_CROSS_PG_2D")


def time_out_torchrec_groups(timeout: timedelta) -> int:
    """Give TorchRec's intra- and cross-host groups that exist in this process ``timeout``;
    returns how many were set (0 where no table needed them)."""
    from torchrec.distributed import comm

    groups = [g for g in (getattr(comm, name, None) for name in GROUPS) if g is not None]
    set_timeout = getattr(dist.distributed_c10d, "_set_pg_timeout", None)
    if groups and set_timeout is None:
        log.warning(
            "this torch has no _set_pg_timeout: TorchRec's intra- and cross-host groups keep "
            "torch's default timeout, not hardware.collective_timeout_s"
        )
        return 0
    for group in groups:
        set_timeout(timeout, group)  # type: ignore[misc]
    return len(groups)
