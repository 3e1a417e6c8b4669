"""The planner's ``Topology``: ranks, per-rank memory capacity (configured or measured) and
bandwidths."""

from dataclasses import dataclass

import torch
from torchrec.distributed.planner.types import HardwareConfig as TorchRecHardwareConfig
from torchrec.distributed.planner.types import (
    KernelConfig,
    Topology,
    TopologyFactory,
    TrainerConfig,
)

from dlrm_exp.config import ComputeDevice, HardwareConfig
from dlrm_exp.errors import ConfigError
from dlrm_exp.planning.storage import GIB
from dlrm_exp.util.cgroup import total_memory_bytes


def machine_memory_bytes() -> int:
    """The RAM this process may use, bytes: the machine's (psutil), or its container's limit
    when lower (psutil reads the node's: a pod planned against it was killed by the kernel
    instead of being told to cap its tables; :func:`~dlrm_exp.util.cgroup.total_memory_bytes`)."""
    return total_memory_bytes()


@dataclass(frozen=True)
class MemoryCapacity:
    """Per-rank memory the planner may use, bytes, and where the number came from."""

    ddr_bytes: int
    hbm_bytes: int | None
    source: str
    hbm_source: str = ""

    def for_tables(self, on_hbm: bool) -> tuple[int, str, str]:
        """``(bytes, kind, source)`` one rank offers the embedding tables: its HBM when
        ``on_hbm`` and the HBM is known, else its DDR (kind ``"HBM"`` or ``"DDR"``)."""
        if on_hbm and self.hbm_bytes:
            return self.hbm_bytes, "HBM", self.hbm_source
        return self.ddr_bytes, "DDR", self.source


def memory_capacity(cfg: HardwareConfig, local_world_size: int) -> MemoryCapacity:
    """Per-rank DDR (and HBM) capacity: the config's values, else measured on this machine.

    A null ``ddr_cap`` becomes total RAM / ``local_world_size``; a null ``hbm_cap``
    on CUDA becomes the memory of device 0.

    Raises:
        ConfigError: CUDA with a null ``hbm_cap`` on a machine without a CUDA device (nothing
            to measure; TorchRec would plan against its own default of 32 GiB unsaid).
    """
    if cfg.ddr_cap is not None:
        ddr, source = int(cfg.ddr_cap * GIB), "hardware.ddr_cap"
    else:
        total = machine_memory_bytes()
        ddr = total // local_world_size
        source = f"measured: {total / GIB:.1f} GiB RAM / {local_world_size} rank(s)"
    hbm: int | None = None
    hbm_source = ""
    if cfg.compute_device is ComputeDevice.cuda:
        if cfg.hbm_cap is not None:
            hbm, hbm_source = int(cfg.hbm_cap * GIB), "hardware.hbm_cap"
        elif torch.cuda.is_available():
            hbm = torch.cuda.get_device_properties(0).total_memory
            hbm_source = f"measured: {torch.cuda.get_device_name(0)}"
        else:
            raise ConfigError(
                "hardware.compute_device=cuda with hardware.hbm_cap=null takes the GPU memory "
                "from device 0, but this machine has no CUDA device: set hardware.hbm_cap="
                "<GiB per GPU> or choose a GPU preset (hardware=a100_80gb_x8, h100_80gb_x8, ...)"
            )
    return MemoryCapacity(ddr_bytes=ddr, hbm_bytes=hbm, source=source, hbm_source=hbm_source)


def gbps_to_bytes_per_ms(gbps: float) -> float:
    """GB/s to the planner's bytes/ms, with TorchRec's convention GB = 1024**3 bytes
    (``INTRA_NODE_BANDWIDTH = 600 * 1024**3 / 1000`` is its 600 GB/s)."""
    return gbps * 1024**3 / 1000


def build_topology(
    cfg: HardwareConfig, world_size: int, local_world_size: int, capacity: MemoryCapacity
) -> Topology:
    """TorchRec ``Topology`` for ``world_size`` ranks with the given per-rank capacity and the
    config's bandwidths (GB/s; null keeps TorchRec's 600 GB/s intra-host, 12.5 GB/s
    inter-host, 897 GB/s HBM, 32 GB/s between HBM and host memory)."""
    gbps = cfg.bandwidths()
    bandwidths = any(v is not None for v in gbps.values())
    hardware = TorchRecHardwareConfig(
        **{key: None if v is None else gbps_to_bytes_per_ms(v) for key, v in gbps.items()}
    )
    return TopologyFactory.create_topology(
        trainer_config=TrainerConfig(
            world_size=world_size,
            local_world_size=local_world_size,
            ddr_cap_bytes=capacity.ddr_bytes,
            hbm_cap_bytes=capacity.hbm_bytes,
        ),
        hardware_config=hardware,
        kernel_config=KernelConfig(
            compute_device=cfg.compute_device.value, use_hardware_based_bandwidth=bandwidths
        ),
    )
