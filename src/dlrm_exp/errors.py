"""User-facing errors: the entry point prints their message without a traceback.

Set ``HYDRA_FULL_ERROR=1`` to see the full traceback instead.
"""


class UserError(Exception):
    """A mistake the user can fix (config, data, hardware); the message says how."""


class Refusal(UserError):
    """A user error that refuses a run before it starts (a bad value, unreadable data, a plan,
    memory or checkpoint refusal, a folder in use), unlike one of a run under way (a NaN, a
    failed verification, a worker's failure), whose logs, events and reports are its own: the
    entry point puts back the record a refused single run found in its folder
    (:mod:`dlrm_exp.record.kept_record`)."""


class ConfigError(Refusal, ValueError):
    """A config value or a combination of values that cannot work; names the override."""


class DataError(Refusal):
    """Input data that cannot be read: missing path, no valid row, unreadable file."""


class CheckpointError(Refusal):
    """A checkpoint that cannot be used: missing, incomplete, or from another model."""


class RunFolderInUseError(Refusal):
    """The run folder holds another run's results (its checkpoints), which this run would mix
    with its own; nothing is written to it (its record stays that run's: a single run's entry
    point puts back the ``.hydra/`` files Hydra wrote, :mod:`dlrm_exp.record.kept_record`)."""


class FinishedRunKeptError(RunFolderInUseError):
    """The run folder holds a finished run's record, which is kept: a sweep rerun into its
    folder (to run its jobs that did not finish) says so of each such job, not as an error."""


class OutputFolderInUseError(Refusal):
    """Another run writes into the output folder asked for (``preprocess.output_dir``,
    ``export.output_dir``) or the output file (``predict.output``), whose writers use fixed
    temporary names; unlike
    :class:`RunFolderInUseError` the job's own run folder is its own (its record is written)."""


class PlanError(Refusal):
    """TorchRec's planner cannot place the tables under the requested constraints."""


class InsufficientMemoryError(Refusal):
    """The sharding planner found no plan that fits the embedding tables in memory."""


class WorkerFailedError(UserError):
    """A worker process of a multi-process job failed; the message names the rank and cause."""


class DiskFullError(UserError):
    """A write failed for want of disk space; the message names where, the space left and
    what stays (earlier checkpoints, converted days)."""


class NonFiniteLossError(UserError):
    """A training step produced a NaN or infinite loss; the message names the step and the
    settings that fix it (learning rates, ``train.on_nonfinite=skip``)."""


class Terminated(BaseException):
    """The job was told to stop by a signal (SIGTERM from a scheduler or ``kill``; SIGINT is
    ``KeyboardInterrupt``) while its workers ran. Like ``KeyboardInterrupt`` it is not an
    ``Exception``: a sweep stops rather than record it as one job's failure.

    Attributes:
        signum: the signal's number (the entry point exits with 128 + signum).
    """

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum
