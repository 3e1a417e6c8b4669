"""One rank's built training run: what the training mode's steps and the resume share."""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlrm_exp.config import Config
from dlrm_exp.data import DataSplits
from dlrm_exp.distributed.launch import DistContext
from dlrm_exp.factories.experiment import Experiment
from dlrm_exp.modes.job import Job
from dlrm_exp.planning.plan_record import PlanRecord


@dataclass(frozen=True)
class TrainRun:
    """One rank's built training run (``modes.train.train_worker``): its config, folder,
    process group, data splits, built experiment and plan, and the checkpoint it resumes
    from (:mod:`dlrm_exp.modes.resume`)."""

    cfg: Config
    job: Job
    ctx: DistContext
    splits: DataSplits
    experiment: Experiment
    plan_data: PlanRecord
    resume_path: Path | None = None  # the checkpoint train.resume loads (None: fresh)
    init_path: Path | None = None  # the checkpoint train.init_from loads weights from, fresh
    initialized_from: str | None = None  # init_path's, or the resumed checkpoint's record of it
    replaces: bool = False  # it replaces an abandoned attempt (loop.run_folder.replaces_attempt)
    resumed: dict[str, Any] = field(default_factory=dict)  # metrics.json's, filled on resume
