"""Process-group set-up: torchrun / elastic workers, or one in-process rank."""

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.distributed as dist

from dlrm_exp.config import ComputeDevice, HardwareConfig
from dlrm_exp.errors import ConfigError


@dataclass(frozen=True)
class DistContext:
    """This process's place in the job."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        """Rank 0 writes the run folder, logs and the progress bar."""
        return self.rank == 0


def _launched_by_torchrun() -> bool:
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def _device(cfg: HardwareConfig, local_rank: int) -> torch.device:
    if cfg.compute_device is ComputeDevice.cuda:
        if not torch.cuda.is_available():
            raise ConfigError(
                "hardware.compute_device=cuda but no CUDA device is visible: use hardware=cpu"
            )
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


@contextmanager
def process_group(cfg: HardwareConfig) -> Iterator[DistContext]:
    """Join (or create) the default process group for the job and tear it down at exit.

    Under torchrun (``RANK``/``WORLD_SIZE``/``MASTER_*`` set) it joins the launched job;
    otherwise it is a single rank with an in-memory store (no port is opened). A process group
    that already exists is reused and left in place.

    Raises:
        ConfigError: CUDA was asked for but is not available.
    """
    created = False
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = _device(cfg, local_rank)
    if not dist.is_initialized():
        if _launched_by_torchrun():
            dist.init_process_group(backend=cfg.backend.value)
        else:
            # TorchRec reads these to size its intra-host groups; set them rather than let it guess.
            for key, value in (
                ("RANK", "0"),
                ("LOCAL_RANK", "0"),
                ("WORLD_SIZE", "1"),
                ("LOCAL_WORLD_SIZE", "1"),
            ):
                os.environ.setdefault(key, value)
            dist.init_process_group(
                backend=cfg.backend.value, store=dist.HashStore(), rank=0, world_size=1
            )
        created = True
    try:
        yield DistContext(
            rank=dist.get_rank(),
            world_size=dist.get_world_size(),
            local_rank=local_rank,
            local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", dist.get_world_size())),
            device=device,
        )
    finally:
        if created:
            dist.destroy_process_group()
