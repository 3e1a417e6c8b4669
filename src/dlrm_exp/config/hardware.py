"""Schema of the ``hardware`` group: device, backend, processes and the planner's Topology."""

from dataclasses import dataclass
from enum import Enum
from typing import ClassVar

from dlrm_exp.config.checks import (
    is_not_value,
    is_value,
    require,
    require_positive,
    require_read,
)


class ComputeDevice(Enum):
    cpu = "cpu"
    cuda = "cuda"


class Backend(Enum):
    """torch.distributed backend: gloo (CPU) or nccl (CUDA)."""

    gloo = "gloo"
    nccl = "nccl"


@dataclass
class HardwareConfig:
    """Where and how the job runs, and the planner's ``Topology`` (group ``hardware``).

    Attributes:
        compute_device: ``cpu`` or ``cuda``.
        backend: torch.distributed backend (``gloo`` for CPU, ``nccl`` for CUDA).
        nproc_per_node: worker processes per host; above 1 (with ``nnodes``) the job starts
            them through torch.distributed's elastic launcher, unless already run by torchrun.
        nnodes: hosts; multi-host jobs are started by torchrun on every host.
        local_world_size: ranks per host as the planner sees it (null: ``nproc_per_node``).
        ddr_cap: host memory per rank for the planner, GiB. Null: measured on this machine
            (total RAM / local world size); TorchRec's own default (128 GiB) would let plans
            through that cannot be allocated here.
        hbm_cap: device memory per rank for the planner, GiB (cuda only: refused on CPU).
            Null: the device's own memory; refused when this machine has none (plan for GPUs
            elsewhere with a GPU preset or a value).
        intra_host_bw: bandwidth between ranks of one host, GB/s (null: TorchRec's default).
        inter_host_bw: network bandwidth of one rank to other hosts, GB/s: the host's network
            divided by its ranks, as TorchRec's ``Topology`` counts one NIC share per device
            (null: TorchRec's default, 12.5).
        hbm_mem_bw: device memory bandwidth, GB/s, for the planner's compute estimates
            (null: TorchRec's default, 897).
        hbm_to_ddr_mem_bw: bandwidth between a GPU and host memory, GB/s, at which the
            planner costs the ``fused_uvm_caching`` kernel's cache misses (TorchRec's name;
            null: its default, 32, a PCIe Gen4 x16 link; Gen5: 64). Cuda only.
        collective_timeout_s: seconds a collective may wait for a peer before the job fails
            (torch.distributed's own default is 30 minutes).
        threads_per_rank: intra-op CPU threads of each rank (``torch.set_num_threads``);
            null: ``OMP_NUM_THREADS`` when set, else this host's cores divided by its ranks,
            so ranks do not oversubscribe the cores.
        reuse_host_memory: keep freed host buffers for the next step instead of returning
            them to the kernel (glibc ``mallopt``: mmap threshold 32 MiB, trim threshold
            64 MiB; :mod:`dlrm_exp.distributed.host_memory`); each process then holds up to
            64 MiB of freed memory. False: glibc's defaults.
    """

    compute_device: ComputeDevice = ComputeDevice.cpu
    backend: Backend = Backend.gloo
    nproc_per_node: int = 1
    nnodes: int = 1
    local_world_size: int | None = None
    ddr_cap: float | None = None
    hbm_cap: float | None = None
    intra_host_bw: float | None = None
    inter_host_bw: float | None = None
    hbm_mem_bw: float | None = None
    hbm_to_ddr_mem_bw: float | None = None
    collective_timeout_s: float = 600.0
    threads_per_rank: int | None = None
    reuse_host_memory: bool = True

    #: The bandwidths (GB/s) the planner's ``Topology`` takes, by TorchRec's names.
    BANDWIDTHS: ClassVar[tuple[str, ...]] = (
        "intra_host_bw",
        "inter_host_bw",
        "hbm_mem_bw",
        "hbm_to_ddr_mem_bw",
    )
    #: The keys that describe GPU memory, refused on CPU (:meth:`_check_no_gpu_memory_keys`).
    GPU_MEMORY: ClassVar[tuple[str, ...]] = ("hbm_cap", "hbm_mem_bw", "hbm_to_ddr_mem_bw")

    def bandwidths(self) -> dict[str, float | None]:
        """``{TorchRec name: GB/s}`` of :data:`BANDWIDTHS` (None: TorchRec's default)."""
        return {key: getattr(self, key) for key in self.BANDWIDTHS}

    def __post_init__(self) -> None:
        require_positive(
            {
                "hardware.nproc_per_node": self.nproc_per_node,
                "hardware.nnodes": self.nnodes,
                "hardware.collective_timeout_s": self.collective_timeout_s,
            }
        )
        require_positive(
            {
                "hardware.local_world_size": self.local_world_size,
                "hardware.ddr_cap": self.ddr_cap,
                "hardware.hbm_cap": self.hbm_cap,
                **{f"hardware.{key}": gbps for key, gbps in self.bandwidths().items()},
                "hardware.threads_per_rank": self.threads_per_rank,
            },
            nullable=True,
        )
        if self.local_world_size is not None:
            require(
                self.world_size % self.local_world_size == 0,
                f"hardware.local_world_size ({self.local_world_size}) must divide the world size "
                f"({self.world_size} = nproc_per_node x nnodes): set "
                f"hardware.local_world_size={self.nproc_per_node}",
            )
        if self.compute_device is ComputeDevice.cpu:
            keys = [key for key in self.GPU_MEMORY if getattr(self, key) is not None]
            nulls = " ".join(f"hardware.{key}=null" for key in keys)
            require(  # with the nulls still to set: one refusal, not one a key (docs review)
                self.backend is Backend.gloo,
                "hardware.backend=nccl needs CUDA devices: set hardware.backend=gloo for CPU"
                + (f" (and {nulls}: GPU memory, which nothing reads on CPU)" if nulls else ""),
            )
            self._check_no_gpu_memory_keys(keys, nulls)

    @staticmethod
    def _check_no_gpu_memory_keys(keys: list[str], nulls: str) -> None:
        """``hbm_cap``, ``hbm_mem_bw`` and ``hbm_to_ddr_mem_bw`` (``keys``: those set)
        describe GPU memory: on CPU nothing reads them (TorchRec's CPU kernels are costed by
        DDR bandwidth), so set ones are refused rather than ignored (GPU review), all named
        in one message with the overrides that unset them (``nulls``). In a sweep a job of
        a GPU preset reads them, unless the command line holds every job on the CPU."""
        gpu = {"hardware.compute_device": is_value("cuda"), "hardware": is_not_value("cpu")}
        named = ", ".join(f"hardware.{key}" for key in keys)
        require_read(
            not keys,
            f"{named} describe{'s' * (len(keys) == 1)} GPU memory, which only "
            f"hardware.compute_device=cuda reads: on CPU set {nulls} (a GPU preset sets "
            f"{'them' if len(keys) > 1 else 'it'}: hardware=cpu runs on this machine; plan for "
            "the preset's GPUs with its compute_device=cuda and mode=plan)",
            gpu,
        )

    @property
    def world_size(self) -> int:
        """Ranks in the job: ``nproc_per_node * nnodes``."""
        return self.nproc_per_node * self.nnodes
