"""What the launcher told this process, read from the environment only (no torch import), so
the command line can decide how to log and refuse a bad config before torch is loaded."""

import os

__all__ = ["env_rank", "launched_by_torchrun"]


def env_rank() -> int:
    """This process's global rank as its launcher set it (``RANK``; 0 when not launched)."""
    return int(os.environ.get("RANK", "0"))


def launched_by_torchrun() -> bool:
    """True inside a worker started by torchrun / the elastic agent."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))
