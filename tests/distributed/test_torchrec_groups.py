"""TorchRec's intra- and cross-host groups take hardware.collective_timeout_s."""

from datetime import timedelta

import torch
import torch.distributed as dist

from dlrm_exp.distributed.torchrec_groups import GROUPS, time_out_torchrec_groups


def _timeout(group) -> timedelta:
    return group._get_backend(torch.device("cpu")).options._timeout


def test_torchrecs_groups_get_the_jobs_timeout(monkeypatch):
    """They were made without one: torch's 30-minute default held the other ranks of a
    table_row_wise or grid job that long when one hung (documented until now)."""
    from torchrec.distributed import comm

    created = not dist.is_initialized()
    if created:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        intra = dist.new_group([0], backend="gloo")
        for name in GROUPS:  # (none left from another test of this process)
            monkeypatch.setattr(comm, name, None)
        monkeypatch.setattr(comm, "_INTRA_PG", intra)
        assert _timeout(intra) == timedelta(minutes=30)
        assert time_out_torchrec_groups(timedelta(seconds=42)) == 1
        assert _timeout(intra) == timedelta(seconds=42)
    finally:
        if created:
            dist.destroy_process_group()
