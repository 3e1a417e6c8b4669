"""What the launcher told this process, read from the environment only (no torch import), so
the command line can decide how to log and refuse a bad config before torch is loaded."""

import os

from dlrm_exp.errors import ConfigError

__all__ = ["check_launcher_env", "env_int", "env_rank", "launched_by_torchrun"]

#: What torchrun, TorchX and submitit set for each rank.
LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


def env_int(name: str, default: int) -> int:
    """The launcher variable ``name`` (``RANK``, ``LOCAL_WORLD_SIZE``, ...) as a number >= 0,
    ``default`` when unset.

    Raises:
        ConfigError: it is set but not such a number (a raw ValueError traceback: review).
    """
    value = os.environ.get(name)
    if value is None:
        return default
    if not value.strip().isdigit():
        raise ConfigError(
            f"{name}={value!r}: a launcher variable must be a number >= 0; unset it (one "
            "process) or start the job with torchrun, which sets it"
        )
    return int(value)


def check_launcher_env() -> None:
    """Each launcher variable that is set (:data:`LAUNCHER_VARIABLES`) is a number.

    Raises:
        ConfigError: naming the first that is not (:func:`env_int`).
    """
    for name in LAUNCHER_VARIABLES:
        env_int(name, 0)


def env_rank() -> int:
    """This process's global rank as its launcher set it (``RANK``; 0 when not launched).

    Raises:
        ConfigError: ``RANK`` is not a number (:func:`env_int`).
    """
    return env_int("RANK", 0)


def launched_by_torchrun() -> bool:
    """True inside a worker started by torchrun / the elastic agent."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def launched_ranks() -> int:
    """The ranks of the job a launcher (torchrun, TorchX, a submitit job's tasks) started
    this process in: its ``WORLD_SIZE``; 1 where no launcher did.

    Raises:
        ConfigError: ``WORLD_SIZE`` is not a number (:func:`env_int`).
    """
    return env_int("WORLD_SIZE", 1) if launched_by_torchrun() else 1
