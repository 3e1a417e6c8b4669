"""Modes room: one module per ``mode=`` value, each a short list of build -> loop -> record
calls with a ``run(cfg, job) -> ModeResult`` function (``job``: :class:`~dlrm_exp.modes.job.Job`).

Owns: ``train`` (with its resume from a checkpoint, ``resume``, and the built run both share,
``train_run``), ``verify``, ``plan``, ``preprocess``, ``evaluate``, ``predict``, ``export``,
``schema``, what they share (``setup``, ``job``), and the registry below that the entry point
dispatches through.

May import: factories, planning, loop, perf, distributed, data, record, config, util, errors.
Not the entry point (:mod:`dlrm_exp.cli`) or :mod:`dlrm_exp.bench`.
"""

import importlib
import importlib.metadata

from dlrm_exp.config import Config, Mode
from dlrm_exp.distributed.env import launched_ranks
from dlrm_exp.distributed.submitit_env import in_submitit_task
from dlrm_exp.errors import ConfigError
from dlrm_exp.modes.job import Job, ModeResult

#: The module that runs each mode, imported only when its mode is asked for (a mistyped config
#: then fails before TorchRec is loaded).
MODES: dict[Mode, str] = {
    Mode.train: "dlrm_exp.modes.train",
    Mode.verify: "dlrm_exp.modes.verify",
    Mode.plan: "dlrm_exp.modes.plan",
    Mode.preprocess: "dlrm_exp.modes.preprocess",
    Mode.evaluate: "dlrm_exp.modes.evaluate",
    Mode.predict: "dlrm_exp.modes.predict",
    Mode.export: "dlrm_exp.modes.export",
    Mode.schema: "dlrm_exp.modes.schema",
}


#: The modes that run in the one process they are started in: started as several ranks
#: (torchrun), every rank would run them and write the same files (ranks other than 0 into
#: their working directory).
ONE_PROCESS = (Mode.plan, Mode.preprocess, Mode.predict, Mode.export, Mode.schema)


def run_mode(cfg: Config, job: Job) -> ModeResult:
    """Run ``cfg.mode`` through its module's ``run(cfg, job)``.

    Raises:
        ConfigError: a :data:`ONE_PROCESS` mode started as several ranks (torchrun, a
            submitit job of several tasks; ``mode=verify`` refuses torchrun itself: it starts
            its own processes).
    """
    ranks = launched_ranks()
    if cfg.mode in ONE_PROCESS and ranks > 1:
        how = (  # (the sweep's launcher: python -m dlrm_exp alone was no way out there)
            "a launcher job of one task (hydra.launcher.nodes=1 hydra.launcher.tasks_per_node=1"
            " hardware.nnodes=1 hardware.nproc_per_node=1: a task checks them against its job's)"
            if in_submitit_task()
            else "python -m dlrm_exp, not torchrun"
        )
        raise ConfigError(
            f"mode={cfg.mode.value} runs in one process, but this job was started as {ranks} "
            f"ranks: start it as one, {how}"
        )
    try:
        module = importlib.import_module(MODES[cfg.mode])
    except OSError as err:  # a native library that does not load against this torch
        raise ConfigError(_stack_mismatch(err)) from None
    return module.run(cfg, job)


def _stack_mismatch(err: OSError) -> str:
    """Why FBGEMM or TorchRec did not load: the CUDA ``fbgemm-gpu`` beside a CPU torch died
    in a 13-frame traceback ending "OSError: libtorch_cuda.so: cannot open shared object
    file" (install review); the versions installed and the way to a matching set."""
    import torch

    def version(name: str) -> str | None:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    names = ("fbgemm-gpu", "fbgemm-gpu-cpu", "torchrec")
    found = [f"{n} {version(n)}" for n in names if version(n)]
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU build"
    return (
        f"FBGEMM / TorchRec do not load against this torch ({torch.__version__}, {build}): "
        f"{str(err).splitlines()[0]}; installed: {', '.join(found) or 'neither'}: install the "
        "set that goes with this torch (fbgemm-gpu needs a CUDA torch, fbgemm-gpu-cpu a CPU "
        "one, both of its release: docs/install.md)"
    )


__all__ = ["MODES", "ONE_PROCESS", "Job", "ModeResult", "run_mode"]
