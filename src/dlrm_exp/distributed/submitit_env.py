"""Inside a task started by submitit (Hydra's submitit launcher, Slurm or local): the process
group comes from submitit's environment, not from a second launch.

``submitit.helpers.TorchDistributedEnvironment`` exports ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` from the job's
tasks; the job then runs as under torchrun
(:func:`dlrm_exp.distributed.launch.launched_by_torchrun`).
"""

import os

from dlrm_exp.config import HardwareConfig
from dlrm_exp.errors import ConfigError


def in_submitit_task() -> bool:
    """True inside a task submitit started (it sets ``SUBMITIT_EXECUTOR``)."""
    return "SUBMITIT_EXECUTOR" in os.environ


def adopt_submitit_environment(hardware: HardwareConfig) -> None:
    """Export the torch.distributed variables of this submitit task.

    Raises:
        ConfigError: the job's tasks and ``hardware`` disagree (another world size, or another
            number of tasks per node), naming the overrides that match the launcher.
    """
    import submitit
    from submitit.helpers import TorchDistributedEnvironment

    job = submitit.JobEnvironment()
    nodes, per_node = job.num_nodes, job.num_tasks // job.num_nodes
    if (hardware.nnodes, hardware.nproc_per_node) != (nodes, per_node):
        raise ConfigError(
            f"the launcher started {nodes} node(s) x {per_node} task(s) but the job asks for "
            f"hardware.nnodes={hardware.nnodes} x hardware.nproc_per_node="
            f"{hardware.nproc_per_node}: set hardware.nnodes={nodes} "
            f"hardware.nproc_per_node={per_node} (or change hydra.launcher.nodes / "
            "tasks_per_node)"
        )
    # overwrite: an inherited RANK (e.g. from a single-process run in the launching process)
    # must not win over the task's own place in the job. submitit keeps an inherited
    # MASTER_PORT (read before the export): every job of a sweep would then bind the same
    # port on a shared host; without it, the port comes from the job id (the same in every
    # task of one job, another for each job)
    os.environ.pop("MASTER_PORT", None)
    TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
