"""The memory a process may use inside a container: its cgroup's limit.

psutil reads the node's RAM and free memory; a Kubernetes pod (``resources.limits.memory``)
or a Slurm job confined by a cgroup may use less, and is killed by the kernel beyond it.
"""

from pathlib import Path

import psutil

#: Where the limit is read: cgroup v2, then v1 (a v1 "no limit" is a huge number, a v2 one
#: the word ``max``).
CGROUP_MEMORY_LIMITS = (
    Path("/sys/fs/cgroup/memory.max"),
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)


def memory_limit_bytes() -> int | None:
    """This process's cgroup memory limit, bytes; None where there is none or it cannot be
    read."""
    for path in CGROUP_MEMORY_LIMITS:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        return int(text) if text.isdigit() else None
    return None


def total_memory_bytes() -> int:
    """The RAM this process may use, bytes: the machine's (psutil), or its cgroup's limit
    when lower."""
    total = int(psutil.virtual_memory().total)
    limit = memory_limit_bytes()
    return total if limit is None else min(total, limit)


def available_memory_bytes(held: int = 0) -> int:
    """Memory free for this process now, bytes: psutil's available memory, or, when lower,
    its cgroup's limit less ``held`` (bytes the cgroup already holds: psutil reads the
    node's free memory)."""
    available = int(psutil.virtual_memory().available)
    limit = memory_limit_bytes()
    return available if limit is None else min(available, limit - held)
