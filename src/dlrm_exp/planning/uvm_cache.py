"""The HBM a plan with UVM-cached tables needs, and the ``cache_load_factor`` that fits.

``sharding.compute_kernel=fused_uvm_caching`` keeps a table's rows in host memory (CUDA unified
memory) and a cache of ``cache_load_factor`` of them in HBM (TorchRec's estimate:
``hbm = ddr * caching_ratio``, 0.2 by default). When such a plan does not fit, what overflows
may be the HBM (the caches and the tables kept on the device) while the host memory holds the
rows; the memory message must then speak of HBM and the factor, not of DDR.
"""

import math
from dataclasses import dataclass

from dlrm_exp.planning.planner import HEADROOM_FRACTION, usable_bytes
from dlrm_exp.planning.storage import GIB
from dlrm_exp.planning.topology import MemoryCapacity


@dataclass(frozen=True)
class DevicePart:
    """What a plan puts in HBM, all ranks together, in bytes.

    Attributes:
        resident_bytes: tables kept whole on the device (``fused``, ``dense``), with their
            optimizer state (and data_parallel ones once per rank).
        cached_bytes: the UVM-cached tables' rows and state (in host memory).
        load_factor: the share of ``cached_bytes`` cached in HBM.
        largest_whole_bytes: the largest UVM-cached table or column shard placed whole on
            one rank (table_wise, column_wise), whose cache that rank holds alone (0: none).
    """

    resident_bytes: int
    cached_bytes: int
    load_factor: float
    largest_whole_bytes: int = 0

    @property
    def hbm_bytes(self) -> int:
        """HBM the plan needs, all ranks together, bytes: the device tables and the caches."""
        return self.resident_bytes + round(self.cached_bytes * self.load_factor)


def _two_digits(value: float) -> float:
    """``value`` rounded down to two significant digits (0 for none left)."""
    if value <= 0:
        return 0.0
    scale = 10 ** (math.floor(math.log10(value)) - 1)
    return math.floor(value / scale) * scale


def cache_message(part: DevicePart, capacity: MemoryCapacity, world_size: int) -> str | None:
    """The memory message when the HBM overflows (``part.hbm_bytes`` above the usable HBM of
    ``capacity``'s ranks, all together, or the rank holding the largest whole table's cache)
    while the host memory holds the cached rows, naming a ``sharding.cache_load_factor`` that
    fits within the planner's headroom share of the HBM; None without HBM, when the HBM holds
    it, when the host memory overflows too (in all, or on the rank of the largest whole
    table's rows: the DDR message comes first, a factor alone cannot help), or when no table
    is cached."""
    if not capacity.hbm_bytes:
        return None
    hbm_per_rank, usable = capacity.hbm_bytes, usable_bytes(capacity.hbm_bytes)
    ddr_usable = usable_bytes(capacity.ddr_bytes)
    share = part.resident_bytes / world_size  # a rank's part of the device tables
    whole = part.largest_whole_bytes * part.load_factor + share  # the rank holding it
    overflows = part.hbm_bytes > usable * world_size or whole > usable
    # the host memory overflows too: the cached rows in all, or a whole table's on its rank
    ddr_overflows = part.cached_bytes > ddr_usable * world_size
    if not part.cached_bytes or not overflows or ddr_overflows:
        return None
    if part.largest_whole_bytes > ddr_usable:
        return None
    offered = hbm_per_rank * world_size
    rooms = [(offered * HEADROOM_FRACTION - part.resident_bytes) / part.cached_bytes]
    if part.largest_whole_bytes:
        rooms.append((hbm_per_rank * HEADROOM_FRACTION - share) / part.largest_whole_bytes)
    factor = _two_digits(min(rooms))
    fix = (
        f"lower sharding.cache_load_factor to {factor:g} ({factor * part.cached_bytes / GIB:.2f} "
        f"GiB of cache, the caches and device tables at most {HEADROOM_FRACTION:.0%} of the HBM"
        + (", each rank's too)" if part.largest_whole_bytes else ")")
        if factor > 0
        else "the tables kept on the device alone fill the HBM: cache them too, or cap them"
    )
    return "\n".join(
        [
            "Not enough HBM for the embedding tables' caches (sharding.compute_kernel="
            "fused_uvm_caching keeps the rows in host memory and a cache of them on the GPU):",
            f"  needed:  {part.hbm_bytes / GIB:.2f} GiB HBM: a cache of "
            f"sharding.cache_load_factor={part.load_factor:g} of the cached tables' "
            f"{part.cached_bytes / GIB:.2f} GiB, + {part.resident_bytes / GIB:.2f} GiB of tables "
            "kept on the device",
            f"  offered: {offered / GIB:.2f} GiB HBM on {world_size} rank(s) "
            f"({hbm_per_rank / GIB:.2f} GiB each, {usable / GIB:.2f} usable)",
            f"Fix: {fix}; or "
            + (
                "shard the table_wise and column_wise tables row_wise (the cache of a table, "
                "or of its column shard, lies on its one rank)."
                if part.largest_whole_bytes
                else "add ranks (hardware.nnodes=...)."
            ),
        ]
    )
