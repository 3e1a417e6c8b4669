"""What every mode receives and returns."""

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from dlrm_exp.distributed.env import launched_by_torchrun
from dlrm_exp.distributed.submitit_env import in_submitit_task


@dataclass(frozen=True)
class Job:
    """Where a mode's run writes, and what Hydra chose for it.

    Attributes:
        run_dir: the Hydra run folder (``metrics.json``, plan files, checkpoints, logs).
        choices: each config group's chosen option (``{"sharding": "rowwise", ...}``).
        tensorboard_dir: where TensorBoard events go (None: ``run_dir``); in a sweep, a folder
            named after the swept overrides so TensorBoard names runs by them.
        swept: in a sweep, the swept keys and this job's values as Hydra parsed them
            (``{"sharding": "rowwise", "optimizer.learning_rate": 0.1}``); empty otherwise.
        started: when the job began (``time.time()`` scale, s; :func:`job_start`): a run's
            ``wall_seconds`` counts from here, its worker processes' start included (counted
            from inside the workers it left out most of a short job: review).
        multirun: the job is one of a ``-m`` sweep's (its folder chosen by
            ``hydra.sweep.dir``), decided where Hydra runs it: worker processes have no
            Hydra state (a 2-rank sweep job's refusal named hydra.run.dir: re-read).
    """

    run_dir: Path
    choices: Mapping[str, str | None] = field(default_factory=dict)
    tensorboard_dir: Path | None = None
    swept: Mapping[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=lambda: job_start())
    multirun: bool = False


def job_start() -> float:
    """When this job began: the start of this process where the launcher made it for this job
    alone (a torchrun / TorchX rank, a submitit task: its imports and setup count, as the
    spawned workers' do), else now (a job made in a process that runs several, one after
    another: a sweep's)."""
    if launched_by_torchrun() or in_submitit_task():
        return psutil.Process().create_time()
    return time.time()


@dataclass(frozen=True)
class ModeResult:
    """What a mode hands back to the entry point.

    Attributes:
        summary: the lines to print (None on ranks other than 0).
        value: what the Hydra task returns, for sweepers (train: final val AUROC; verify: the
            largest relative loss deviation; others: None).
    """

    summary: str | None = None
    value: float | None = None
