"""Process-group set-up: torchrun / elastic workers, or one in-process rank."""

import logging
import os
import re
import signal
import socket
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from tqdm import tqdm

from dlrm_exp.config import ComputeDevice, HardwareConfig
from dlrm_exp.distributed.env import env_int, env_rank, launched_by_torchrun, launched_ranks
from dlrm_exp.distributed.host_memory import apply_host_memory
from dlrm_exp.distributed.submitit_env import in_submitit_task
from dlrm_exp.errors import ConfigError, Refusal, Terminated, WorkerFailedError
from dlrm_exp.util.classes import with_subclasses
from dlrm_exp.util.logs import configure_worker_logging

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DistContext:
    """This process's place in the job."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: torch.device
    #: intra-op CPU threads of this rank (:func:`rank_threads`; 0: not set here)
    threads: int = 0
    #: what this process's host allocator runs with (:mod:`dlrm_exp.distributed.host_memory`)
    host_allocator: str = ""

    @property
    def is_main(self) -> bool:
        """Rank 0 writes the run folder, logs and the progress bar."""
        return self.rank == 0


def init_worker(log_file: Path | None) -> int:
    """Set up a spawned worker (a fresh interpreter): rank 0 logs INFO to stderr and appends
    to ``log_file``, other ranks log warnings only. Returns the rank.

    tqdm's progress bars lock with a thread lock: its default, a ``multiprocessing`` lock,
    registers semaphores with the launcher's resource tracker, and a worker the agent stops
    with SIGTERM (the run's SIGTERM, a rank's failure) left them behind: "resource_tracker:
    There appear to be 2 leaked semaphore objects" after every stopped run (checkpoints
    review). Only rank 0 draws a bar; no process shares one."""
    rank = env_rank()
    configure_worker_logging(log_file if rank == 0 else None)
    tqdm.set_lock(threading.RLock())
    return rank


def needs_launch(cfg: HardwareConfig) -> bool:
    """The job wants more than one process and this process is not already one of them."""
    return cfg.nproc_per_node * cfg.nnodes > 1 and not launched_by_torchrun()


def check_devices(cfg: HardwareConfig) -> None:
    """Fail before anything starts when the job asks for GPUs this machine, or this
    environment, cannot train on.

    Raises:
        ConfigError: ``compute_device=cuda`` without CUDA (a CPU build of torch named as such;
            both suggest ``mode=plan``, which plans for any hardware), more processes per node
            than GPUs, or FBGEMM's CPU build (``fbgemm-gpu-cpu``) beside a CUDA torch (its
            kernels would fail inside TorchRec: GPU review).
    """
    if cfg.compute_device.value != "cuda":
        return
    if not torch.cuda.is_available():
        cause = (
            f"this torch ({torch.__version__}) is built without CUDA: install a CUDA torch and "
            "fbgemm-gpu (docs/install.md), "
            if torch.version.cuda is None
            else "this machine has none: "
        )
        raise ConfigError(
            f"hardware.compute_device=cuda trains on CUDA GPUs and {cause}use mode=plan to plan "
            "for it here, or hardware=cpu to train on this machine"
        )
    count = torch.cuda.device_count()
    if cfg.nproc_per_node > count and not launched_by_torchrun():
        raise ConfigError(
            f"hardware.nproc_per_node={cfg.nproc_per_node} but this machine has {count} GPU(s): "
            f"set hardware.nproc_per_node={count}"
        )
    import fbgemm_gpu  # here: the CLI's refusals need not load FBGEMM

    if getattr(fbgemm_gpu, "__variant__", None) == "cpu":
        raise ConfigError(
            "hardware.compute_device=cuda needs FBGEMM's CUDA build, and its CPU build "
            "(fbgemm-gpu-cpu) is installed: pip uninstall fbgemm-gpu-cpu, then install the "
            f"fbgemm-gpu release of this torch ({torch.__version__}; docs/install.md)"
        )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it, so two jobs on one
    machine do not collide)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: The start of the message torch's elastic agent makes up for a worker that left no error
#: file (it exited with a code, e.g. ``SystemExit``): the exit code says more.
_NO_ERROR_FILE = "To enable traceback see"


def _failure_cause(failure: Any) -> str:
    """A failed worker's cause: the signal that killed it, its recorded exception
    (``Type: message``, every line), or its exit code."""
    if failure.signal_name() not in ("", "<N/A>") and failure.exitcode < 0:
        return f"killed by signal {failure.signal_name()}"
    message = failure.message
    if isinstance(message, dict):
        message = message.get("message", "")
    text = str(message).strip()
    if not text or text.startswith(_NO_ERROR_FILE):
        return f"exit code {failure.exitcode}"
    return text


def _describe_failures(err: Exception) -> str:
    failures = getattr(err, "failures", {}) or {}
    lines = [f"rank {rank} failed: {_failure_cause(f)}" for rank, f in sorted(failures.items())]
    return "\n".join(lines) or str(err)


def _worker_refusal(err: Exception) -> Refusal | None:
    """The refusal the workers raised (a :class:`~dlrm_exp.errors.Refusal`: a checkpoint of
    another model, data it cannot read), as its own type and message, where every failed
    rank that recorded an exception recorded one of that type: the same error a single
    process raises, which the entry point and a sweep treat as a refusal, not a worker's
    crash followed by a hint to rerun (review). None for anything else."""
    failures = getattr(err, "failures", {}) or {}
    causes = [_failure_cause(f) for _, f in sorted(failures.items())]
    raised = [c.split(": ", 1) for c in causes if _RAISED.match(c)]
    types = {name for name, _ in raised}
    kinds = {cls.__name__: cls for cls in with_subclasses(Refusal)}
    if len(types) != 1 or not types <= kinds.keys():
        return None
    name, message = raised[0]
    return kinds[name](message)


#: A recorded exception's ``Type: message`` (not a signal or an exit code).
_RAISED = re.compile(r"^[A-Za-z_]\w*: ")


#: The signals torch's elastic agent handles (raising its ``SignalException``) while it runs.
_AGENT_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


def check_one_host(cfg: HardwareConfig) -> None:
    """What :func:`launch_workers` can start: the processes of this host only.

    Raises:
        ConfigError: ``nnodes > 1`` (start multi-host jobs with torchrun on every host).
    """
    if cfg.nnodes != 1:
        raise ConfigError(
            f"hardware.nnodes={cfg.nnodes}: start multi-host jobs with torchrun on every host "
            "(torchrun --nnodes N --nproc_per_node P --rdzv_endpoint HOST:PORT -m dlrm_exp ...)"
        )


def launch_workers(fn: Callable[..., Any], args: tuple, cfg: HardwareConfig) -> Any:
    """Run ``fn(*args)`` in ``nproc_per_node`` local worker processes with torch.distributed's
    elastic launcher (the machinery behind torchrun) and return rank 0's result.

    No restarts: a worker that raises or dies (e.g. ``kill -9``) makes the agent stop the
    others, and this raises within seconds instead of hanging.

    Raises:
        ConfigError: ``nnodes > 1`` (start multi-host jobs with torchrun on every host).
        Refusal: the workers refused the job (:func:`_worker_refusal`), its type and message.
        WorkerFailedError: a worker failed; the message names each failed rank and its cause.
        Terminated / KeyboardInterrupt: this process got SIGTERM (SIGHUP, SIGQUIT) / SIGINT;
            the agent has stopped the workers.
    """
    from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs, SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    check_one_host(cfg)
    # The agent's per-launch log folder (error files of failed workers) is read into the
    # failure before it is raised; without a folder of our own, every launch would leave a
    # /tmp/torchelastic_* folder behind.
    with tempfile.TemporaryDirectory(prefix="dlrm_exp_elastic_") as log_dir:
        config = LaunchConfig(
            min_nodes=1,
            max_nodes=1,
            nproc_per_node=cfg.nproc_per_node,
            run_id=f"dlrm_exp-{uuid.uuid4().hex[:8]}",
            rdzv_backend="c10d",
            rdzv_endpoint=f"127.0.0.1:{free_port()}",
            max_restarts=0,
            monitor_interval=0.5,
            start_method="spawn",
            logs_specs=DefaultLogsSpecs(log_dir=log_dir),
        )
        handlers = {s: signal.getsignal(s) for s in _AGENT_SIGNALS}
        try:
            results = elastic_launch(config, fn)(*args)
        except ChildFailedError as err:
            refusal = _worker_refusal(err)
            if refusal is not None:
                raise refusal from None
            raise WorkerFailedError(_describe_failures(err)) from None
        except SignalException as err:  # the agent stopped the workers first
            if err.sigval == signal.SIGINT:
                raise KeyboardInterrupt from None
            raise Terminated(int(err.sigval)) from None
        finally:  # the agent leaves its handlers, raising its SignalException, installed
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
    return results[0]


def _device(cfg: HardwareConfig, local_rank: int, local_world_size: int) -> torch.device:
    if cfg.compute_device is ComputeDevice.cuda:
        check_devices(cfg)
        index = rank_gpu(local_rank, local_world_size, torch.cuda.device_count())
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


def rank_gpu(local_rank: int, local_world_size: int, visible: int) -> int:
    """The GPU index of local rank ``local_rank`` of ``local_world_size`` among the ``visible``
    ones: its own local rank (TorchRec's plans place rank ``r`` on ``cuda:<r % local world
    size>``, so every rank must see all of its host's GPUs).

    Raises:
        ConfigError: the rank sees fewer GPUs than its local rank needs; among them, a launcher
            that bound one GPU to each of several tasks of a host (Slurm's
            ``--gpus-per-task`` / ``--gpu-bind``: every task sees its GPU as 0): sharding
            would fail later, TorchRec placing rank 1's shards on ``cuda:1``.
    """
    shown = f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}"
    if visible == 1 and local_world_size > 1:
        raise ConfigError(
            f"local rank {local_rank} of {local_world_size} on this host sees 1 GPU "
            f"({shown}): one GPU bound to each task (Slurm --gpus-per-task / --gpu-bind) "
            "cannot run TorchRec's plans, which place rank r on cuda:<r % ranks per host>; "
            "give every task all of "
            "its host's GPUs (--gpus-per-node, as hydra/launcher=slurm_gpu does)"
        )
    if local_rank >= visible:
        raise ConfigError(
            f"local rank {local_rank} sees {visible} GPU(s) ({shown}): give every task all of "
            "its host's GPUs"
        )
    return local_rank


def _check_local_env() -> None:
    """A launcher that sets ``RANK`` and ``WORLD_SIZE`` (> 1) must also say where the rank
    sits on its host: without ``LOCAL_RANK`` every rank of a host took GPU 0, and without
    ``LOCAL_WORLD_SIZE`` the planner took the whole job for one host (NVLink between
    hosts, placements ``cuda:r % world size``).

    Raises:
        ConfigError: naming the missing variables.
    """
    if launched_ranks() == 1:
        return
    missing = [k for k in ("LOCAL_RANK", "LOCAL_WORLD_SIZE") if k not in os.environ]
    if missing:
        raise ConfigError(
            f"the launcher set RANK and WORLD_SIZE={os.environ['WORLD_SIZE']} but not "
            f"{' or '.join(missing)}: start the job with torchrun (or TorchX, or "
            "hydra/launcher=slurm_gpu), or export the rank's place on its host too"
        )


def _warn_unlike_config(cfg: HardwareConfig, world_size: int, local: int) -> str | None:
    """Warn (and return the line) when the launcher (torchrun, TorchX) started another job
    than ``hardware.nproc_per_node`` x ``nnodes`` describes: the plan and the run record
    take the launched ranks, but the saved config, ``mode=plan`` of it and a preset's
    bandwidths (its network share per GPU) describe the other job. A process that no launcher
    started (one rank, or a job's in-process reference) is not compared."""
    if (world_size, local) == (cfg.world_size, cfg.nproc_per_node) or (
        world_size == 1 and not launched_by_torchrun()
    ):
        return None
    line = (
        f"the launcher started {world_size} ranks ({local} per host), but hardware."
        f"nproc_per_node={cfg.nproc_per_node} x hardware.nnodes={cfg.nnodes} describes "
        f"{cfg.world_size}: the plan and metrics.json use the launched ranks; add "
        f"hardware.nproc_per_node={local} hardware.nnodes={max(1, world_size // local)} so "
        "that the saved config (and mode=plan of it) describes this job"
    )
    log.warning(line)
    return line


def rank_threads(cfg: HardwareConfig, local_rank: int, local_world_size: int) -> int:
    """Set this rank's intra-op thread count (:func:`threads_of`) and return what torch then
    uses. torch's own default, every core for every rank, makes ranks of one host compete
    for the same cores.

    torchrun sets ``OMP_NUM_THREADS=1`` for its workers when it was not set and more than one
    runs per host; such a rank says once (local rank 0) how many threads its share would be.

    Raises:
        ConfigError: ``OMP_NUM_THREADS`` is set but not a positive integer.
    """
    threads, share = threads_of(cfg, local_world_size), _core_share(local_world_size)
    from_omp = cfg.threads_per_rank is None and "OMP_NUM_THREADS" in os.environ
    if from_omp and threads == 1 < share and launched_by_torchrun() and local_rank == 0:
        log.warning(
            "OMP_NUM_THREADS=1 (torchrun sets it when it is not set): each of the %d "
            "local ranks uses 1 thread, though its share of the cores is %d; set "
            "hardware.threads_per_rank=%d (or OMP_NUM_THREADS) to use them",
            local_world_size,
            share,
            share,
        )
    torch.set_num_threads(threads)
    return torch.get_num_threads()


def threads_of(cfg: HardwareConfig, local_world_size: int) -> int:
    """The intra-op threads a rank of ``local_world_size`` ranks on its host takes:
    ``hardware.threads_per_rank``, else ``OMP_NUM_THREADS`` when set, else the cores this
    process may run on divided by the ranks on this host (at least 1; a Slurm task that
    submitit started, one rank, bound to at most its ``SLURM_CPUS_PER_TASK`` cores, already
    has only its share: all of them).

    Raises:
        ConfigError: ``OMP_NUM_THREADS`` is set but not a positive integer.
    """
    if cfg.threads_per_rank is not None:
        return cfg.threads_per_rank
    omp = os.environ.get("OMP_NUM_THREADS")
    if omp is None:
        return _core_share(local_world_size)
    if not omp.isdigit() or int(omp) < 1:
        raise ConfigError(
            f"OMP_NUM_THREADS={omp!r}: give a positive integer, or unset it (each rank "
            "then takes cores / local ranks), or set hardware.threads_per_rank"
        )
    return int(omp)


def _core_share(local_world_size: int) -> int:
    """This process's cores divided by the ranks on its host (all of them for a bound Slurm
    task), at least 1."""
    cores = len(os.sched_getaffinity(0))
    return cores if _bound_slurm_task(cores) else max(1, cores // max(1, local_world_size))


def _bound_slurm_task(cores: int) -> bool:
    """Whether this process is a submitit task (one rank) that Slurm bound to its own
    ``SLURM_CPUS_PER_TASK`` cores or fewer, rather than one sharing the host's cpuset."""
    per_task = os.environ.get("SLURM_CPUS_PER_TASK", "")
    return in_submitit_task() and per_task.isdigit() and cores <= int(per_task)


#: What a one-process job sets for TorchRec's intra-host groups (:func:`process_group`).
_ONE_RANK_ENV = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"}


@contextmanager
def process_group(cfg: HardwareConfig) -> Iterator[DistContext]:
    """Join (or create) the default process group for the job and tear it down at exit.

    Under torchrun (``RANK``/``WORLD_SIZE``/``MASTER_*`` set) it joins the launched job;
    otherwise it is a single rank with an in-memory store (no port is opened). A process group
    that already exists is reused and left in place.

    Raises:
        ConfigError: CUDA was asked for but is not available; a launcher variable
            (``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ...) is not a number.
    """
    created, set_here = False, []
    _check_local_env()
    # where the rank sits on its host (a launched job of several ranks sets both: checked
    # above; one process is rank 0 of 1)
    local_rank, local_world_size = env_int("LOCAL_RANK", 0), env_int("LOCAL_WORLD_SIZE", 1)
    device = _device(cfg, local_rank, local_world_size)
    if not dist.is_initialized():
        timeout = timedelta(seconds=cfg.collective_timeout_s)
        if launched_by_torchrun():
            dist.init_process_group(backend=cfg.backend.value, timeout=timeout)
        else:
            # TorchRec reads these to size its intra-host groups; set them rather than let it
            # guess, for this job only: left set, with MASTER_ADDR / MASTER_PORT exported (an
            # HPC job script), a later job of a one-process sweep took itself for a launched
            # rank and trained hardware.nproc_per_node=2 as one rank (review)
            set_here = [k for k in _ONE_RANK_ENV if k not in os.environ]
            os.environ.update({k: _ONE_RANK_ENV[k] for k in set_here})
            dist.init_process_group(
                backend=cfg.backend.value,
                store=dist.HashStore(),
                rank=0,
                world_size=1,
                timeout=timeout,
            )
        created = True
    if "LOCAL_WORLD_SIZE" not in os.environ:  # a group made by someone else: one host assumed
        local_world_size = dist.get_world_size()
    try:
        if dist.get_rank() == 0:
            _warn_unlike_config(cfg, dist.get_world_size(), local_world_size)
        yield DistContext(
            rank=dist.get_rank(),
            world_size=dist.get_world_size(),
            local_rank=local_rank,
            local_world_size=local_world_size,
            device=device,
            threads=rank_threads(cfg, local_rank, local_world_size),
            host_allocator=apply_host_memory(cfg.reuse_host_memory),
        )
    finally:
        if created:
            dist.destroy_process_group()
        for key in set_here:
            os.environ.pop(key, None)
