"""The memory a process may use inside a container: its cgroup's limit.

psutil reads the node's RAM and free memory; a Kubernetes pod (``resources.limits.memory``)
or a Slurm job confined by a cgroup may use less, and is killed by the kernel beyond it.
"""

from pathlib import Path

import psutil

#: The cgroup file system, and this process's cgroups (``<id>:<controllers>:<path>`` lines).
CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def _own_paths() -> list[tuple[str, str]]:
    """``(version, path)`` of this process's memory cgroups from :data:`PROC_CGROUP`:
    ``("v2", path)`` from the ``0::`` line, ``("v1", path)`` from the ``memory`` one."""
    try:
        lines = PROC_CGROUP.read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            found.append(("v2", parts[2]))
        elif "memory" in parts[1].split(","):
            found.append(("v1", parts[2]))
    return found


def limit_files() -> list[Path]:
    """The files that may hold this process's memory limit: its own cgroup's and every
    parent's up to the mount (cgroup v2 ``memory.max``, v1 ``memory/memory.limit_in_bytes``).
    A Slurm job's limit is in its own cgroup (``.../job_<id>/memory.max``), which only a cgroup
    namespace (a container) shows at the mount's root."""
    files = {
        "v2": (CGROUP_ROOT, "memory.max"),
        "v1": (CGROUP_ROOT / "memory", "memory.limit_in_bytes"),
    }
    candidates = [root / name for root, name in files.values()]
    for version, path in _own_paths():
        root, name = files[version]
        folder = root / path.strip("/")
        while folder != root and root in folder.parents:
            candidates.append(folder / name)
            folder = folder.parent
    return list(dict.fromkeys(candidates))


def memory_limit_bytes() -> int | None:
    """This process's cgroup memory limit, bytes: the lowest over :func:`limit_files` (a v2
    "no limit" is the word ``max``, a v1 one a number beyond any RAM); None where there is
    none or none can be read."""
    limits = []
    for path in limit_files():
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            limits.append(int(text))
    return min(limits) if limits else None


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
