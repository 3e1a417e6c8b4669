"""The planner call: TorchRec's ``EmbeddingShardingPlanner``, run on one rank and broadcast,
with its failures turned into one message each."""

import itertools
import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import torch
from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints
from torchrec.distributed.planner.enumerators import EmbeddingEnumerator
from torchrec.distributed.planner.shard_estimators import (
    EmbeddingPerfEstimator,
    EmbeddingStorageEstimator,
)
from torchrec.distributed.planner.stats import EmbeddingStats
from torchrec.distributed.planner.storage_reservations import FixedPercentageStorageReservation
from torchrec.distributed.planner.types import (
    PlannerError,
    PlannerErrorType,
    ShardingOption,
    Stats,
    Topology,
)
from torchrec.distributed.types import ModuleSharder, ShardingPlan

from dlrm_exp.config import EmbeddingDataType, SparseOptimizer
from dlrm_exp.errors import InsufficientMemoryError, PlanError
from dlrm_exp.planning.fused_state import FusedStateStorage
from dlrm_exp.planning.output_comms import OutputSizedComms
from dlrm_exp.planning.replica_gradients import ReplicaGradientStorage
from dlrm_exp.planning.storage import (
    GIB,
    EmbeddingStorage,
    capped_bytes,
    largest_fitting_cap,
    packs,
    row_bytes,
    whole_shards,
)
from dlrm_exp.planning.topology import MemoryCapacity
from dlrm_exp.util.rank_zero import on_rank_zero

#: Share of each rank's memory the planner keeps free for dense parameters, activations and
#: input batches (TorchRec's ``FixedPercentageStorageReservation``).
STORAGE_RESERVATION = 0.15


def usable_bytes(per_rank: int) -> float:
    """What a rank of ``per_rank`` bytes leaves the tables after the planner's reservation."""
    return per_rank * (1 - STORAGE_RESERVATION)


class HostAndDeviceReservation(FixedPercentageStorageReservation):
    """TorchRec's ``FixedPercentageStorageReservation`` reserves its share of HBM only; this
    one reserves it of DDR too, where tables live on CPU (and the UVM kernels keep theirs):
    there a plan could take every byte of RAM (23.07 of 23.54 GiB planned on this 2-core VM,
    where the refusals said 85 %), and training ran out of memory instead of being refused."""

    def reserve(self, topology: Topology, *args: Any, **kwargs: Any) -> Topology:
        """TorchRec's reservation, then the same share of every rank's DDR (bytes)."""
        reserved = super().reserve(topology, *args, **kwargs)
        for device in reserved.devices:
            device.storage.ddr = int((1 - self._percentage) * device.storage.ddr)
        return reserved


class OrderedEmbeddingEnumerator(EmbeddingEnumerator):
    """TorchRec's ``EmbeddingEnumerator`` whose sharding options follow the order of each
    table's constrained ``sharding_types``.

    TorchRec intersects a table's constrained types with the sharder's as Python sets, so
    their order, and with it the planner's choice between options of equal estimated cost
    (``row_wise`` and ``table_row_wise`` on one host), followed the process's string hash
    seed: ``sharding=auto`` gave ``row_wise`` with ``PYTHONHASHSEED=0`` and
    ``table_row_wise`` with ``2``. Sorted, a tie goes to the type listed first (the
    sharder's order), in every process.
    """

    def __init__(
        self,
        *,
        topology: Topology,
        batch_size: int,
        constraints: dict[str, ParameterConstraints],
        estimator: list,
    ) -> None:
        super().__init__(
            topology=topology, batch_size=batch_size, constraints=constraints, estimator=estimator
        )
        self._type_order = {name: list(c.sharding_types or []) for name, c in constraints.items()}

    def enumerate(
        self, module: torch.nn.Module, sharders: list[ModuleSharder[torch.nn.Module]]
    ) -> list[ShardingOption]:
        options = super().enumerate(module, sharders)
        tables = {option.fqn: i for i, option in reversed(list(enumerate(options)))}

        def position(option: ShardingOption) -> tuple[int, int]:
            order, kind = self._type_order.get(option.name, []), option.sharding_type
            return tables[option.fqn], order.index(kind) if kind in order else len(order)

        return sorted(options, key=position)


def build_planner(
    topology: Topology,
    constraints: dict[str, ParameterConstraints],
    batch_size: int,
    stats: list[Stats] | None = None,
    *,
    optimizer: SparseOptimizer,
    codecs: bool = False,
) -> EmbeddingShardingPlanner:
    """TorchRec's ``EmbeddingShardingPlanner`` with a fixed storage reservation and TorchRec's
    perf and storage estimators, the latter corrected for the fused ``optimizer``'s fp32 state
    on narrower tables (:class:`~dlrm_exp.planning.fused_state.FusedStateStorage`) and for the
    data_parallel tables' gradients
    (:class:`~dlrm_exp.planning.replica_gradients.ReplicaGradientStorage`), and the perf
    estimator's collectives of narrower tables sized for their fp32 outputs where no qcomms
    codec sets their width (``codecs``: the job's qcomms build codecs;
    :class:`~dlrm_exp.planning.output_comms.OutputSizedComms`); ``stats`` reporters are added
    to TorchRec's own ``EmbeddingStats``."""
    estimators = [
        EmbeddingPerfEstimator(topology=topology, constraints=constraints),
        OutputSizedComms(codecs),
        EmbeddingStorageEstimator(topology=topology, constraints=constraints),
        FusedStateStorage(topology, optimizer),
        ReplicaGradientStorage(topology),
    ]
    return EmbeddingShardingPlanner(
        topology=topology,
        batch_size=batch_size,
        enumerator=OrderedEmbeddingEnumerator(
            topology=topology, batch_size=batch_size, constraints=constraints, estimator=estimators
        ),
        constraints=constraints,
        storage_reservation=HostAndDeviceReservation(STORAGE_RESERVATION),
        stats=[EmbeddingStats(), *(stats or [])],
    )


#: The suggested cap keeps the tables within this fraction of the offered memory.
HEADROOM_FRACTION = 0.6
#: The quick-try cap keeps the tables within this many bytes.
QUICK_TRY_BYTES = 2**30


def insufficient_memory_message(
    storage: EmbeddingStorage,
    optimizer: SparseOptimizer,
    table_sizes: list[int],
    embedding_dim: int,
    capacity: MemoryCapacity,
    world_size: int,
    replicated: EmbeddingStorage | None = None,
    copies: list[int] | None = None,
    data_types: list[EmbeddingDataType] | None = None,
    on_hbm: bool = True,
    replicated_tables: list[bool] | None = None,
    whole_tables: list[int] | None = None,
    batch_size: int | None = None,
    ranks_per_node: int | None = None,
    pinned_dtypes: bool = False,
    note: str = "",
    global_batch: int | None = None,
) -> str:
    """One message with what the tables need, what the hardware offers, and two caps to try;
    when the tables alone fit, the batch-sized buffers beside them (``batch_size``: per rank)
    instead of a cap. ``on_hbm``: the tables live in device memory (false for the UVM
    kernels, whose rows live in host memory: the DDR is then what they need).

    The suggested ``model.num_embeddings_cap`` values, each with the GiB it needs: the largest
    whose tables (weights and optimizer state) take at most 60 % of the offered memory (each
    rank's HBM where ``capacity`` knows it, else its DDR), leaving headroom for the dense
    part, activations, data and the process; and a quick-try cap of at most 1 GiB.
    ``whole_tables``: each table's shards that lie whole on one rank (``whole_pieces`` of
    :mod:`.tables`): both caps keep each within 60 % of a rank, and more ranks are not
    offered when one exceeds a rank. ``ranks_per_node``: the job's, to say how many nodes
    the ranks asked for are. On a GPU (tables in HBM) it also names the two ways that keep
    every row (:func:`_gpu_ways`; fp16 tables only where no table's dtype is set on its own,
    ``pinned_dtypes``: the default would not change those). ``note``: a line said under the
    first (which tables are counted, where not all). ``global_batch``: what more ranks keep
    (``train.global_batch_size``; else ``batch_size`` x ``world_size``)."""
    per_rank, device_kind, source = capacity.for_tables(on_hbm)
    offered, shape = per_rank * world_size, (table_sizes, embedding_dim, optimizer)
    layout = (copies, data_types, replicated_tables)
    whole = (whole_tables or [], per_rank * HEADROOM_FRACTION)  # each within one rank
    lines = _needed_lines(storage, optimizer, len(table_sizes), embedding_dim, replicated,
                          world_size)  # fmt: skip
    lines[1:1] = [f"  {note}"] if note else []
    lines.append(_offered_line(per_rank, world_size, device_kind, source))
    types = data_types or [EmbeddingDataType.fp32] * len(table_sizes)
    each = [n * row_bytes(embedding_dim, t, optimizer)
            for n, t in zip(table_sizes, types, strict=True)]  # fmt: skip
    pieces = whole_tables or []
    hosts = _hosts(ranks_per_node, global_batch, (batch_size or 0) * world_size)
    held, more = _room(storage, replicated, (each, pieces), (per_rank, world_size), hosts)
    counted = " in those tables" if note else ""  # (the UVM ones: 2 GiB in all; review)
    fix = (  # the two caps' searches only where they are offered
        _batch_advice(held, offered, batch_size)
        if held is not None
        else _cap_advice(shape, layout, whole, (offered, world_size), more, counted)
    )
    gpu = device_kind == "HBM" and not (replicated and replicated.total_bytes)
    rules = (pinned_dtypes, partial(_shares_fit, pieces=pieces, world_size=world_size))
    ways = _gpu_ways(storage, (shape, types, each), capacity, world_size, rules) if gpu else ""
    return "\n".join([*lines, fix, *([ways] if ways else [])])


def _room(
    storage: EmbeddingStorage,
    replicated: EmbeddingStorage | None,
    tables: tuple[list[float], list[int]],
    ranks: tuple[int, int],
    hosts: tuple[int | None, int, str],
) -> tuple[float | None, str]:
    """What :func:`_tables_fit` holds of the tables (``tables``: each one's bytes and its
    shards lying whole on a rank) on ``ranks`` (bytes each, how many), and the
    :func:`_more_ranks` that would hold them (``hosts``: the job's ranks per node, the
    global batch to keep and whose it is)."""
    (each, pieces), (per_rank, world_size) = tables, ranks
    alone = whole_shards(each, pieces)
    more = _more_ranks(storage, replicated, per_rank, alone, hosts)
    biggest = (_largest_piece(each, pieces, world_size, alone), alone)
    whole = replicated.total_bytes if replicated is not None else 0
    return _tables_fit(storage.total_bytes, whole, world_size, per_rank, biggest), more


def _shares_fit(
    table_bytes: list[float], per_rank: float, pieces: list[int], world_size: int
) -> bool:
    """Whether tables of ``table_bytes`` each (none data_parallel) fit ``world_size`` ranks of
    ``per_rank`` bytes as :func:`_tables_fit` places them, ``pieces``: each table's shards
    lying whole on one rank (0: split over the ranks)."""
    alone = whole_shards(table_bytes, pieces)
    largest = _largest_piece(table_bytes, pieces, world_size, alone)
    pieces_held = (largest, alone)
    return _tables_fit(sum(table_bytes), 0, world_size, per_rank, pieces_held) is not None


def _gpu_ways(
    storage: EmbeddingStorage,
    tables: tuple[tuple, list[EmbeddingDataType], list[float]],
    capacity: MemoryCapacity,
    world_size: int,
    rules: tuple[bool, Callable[[list[float], int], bool]],
) -> str:
    """The ways on a GPU to keep every row of tables that overflow the HBM (GPU review: only
    caps and more ranks were offered): their rows in host memory (``fused_uvm_caching``)
    where the ranks' DDR holds them, and fp16 weights where the halved tables fit the HBM;
    each only where the tables are also placed so (``rules``: whether a table's dtype is set
    on its own, which the default would not change, and whether tables of these bytes each
    fit ranks of those bytes, :func:`_shares_fit`): a table_wise table larger than a rank
    was offered both, each refused when taken (review). ``tables``: (rows, embedding_dim,
    optimizer), the tables' dtypes and each one's bytes at them; ``""`` when neither fits."""
    (sizes, dim, optimizer), types, each = tables
    pinned_dtypes, placed = rules
    ways = []
    ddr = usable_bytes(capacity.ddr_bytes) * world_size
    if storage.total_bytes <= ddr and placed(each, capacity.ddr_bytes):
        ways.append(
            "keep the rows in host memory, cached in HBM: sharding.compute_kernel="
            f"fused_uvm_caching ({storage.total_bytes / GIB:.2f} GiB of the "
            f"{ddr / GIB:.2f} GiB of DDR the ranks give tables)"
        )
    fp16 = EmbeddingDataType.fp16
    halved = [t if t.element_bytes <= fp16.element_bytes else fp16 for t in types]
    each16 = [n * row_bytes(dim, t, optimizer) for n, t in zip(sizes, halved, strict=True)]
    saved = sum(each) - sum(each16)
    hbm = capacity.hbm_bytes or 0
    fits = storage.total_bytes - saved <= usable_bytes(hbm) * world_size and placed(each16, hbm)
    if saved and not pinned_dtypes and fits:
        ways.append(
            f"train fp16 tables: model.embedding_data_type=fp16 "
            f"({(storage.total_bytes - saved) / GIB:.2f} GiB of "
            f"{usable_bytes(hbm) * world_size / GIB:.2f})"
        )
    return f"Or, keeping every row: {'; or '.join(ways)}." if ways else ""


def _cap_advice(
    shape: tuple,
    layout: tuple,
    whole: tuple[list[int], float],
    ranks: tuple[int, int],
    more: str,
    counted: str,
) -> str:
    """The fix of :func:`insufficient_memory_message` when the tables themselves do not fit:
    two ``model.num_embeddings_cap`` values (``shape``: table sizes, embedding_dim,
    optimizer; ``layout``: copies, data types, replicated flags; as
    :func:`largest_fitting_cap` takes them; ``ranks``: the bytes offered in all and the
    world size), or ``more`` ranks / memory alone when no cap fits. ``counted``: said after
    each cap's GiB where the message counts some tables only (the cap applies to all)."""
    offered, world_size = ranks
    budget = offered * HEADROOM_FRACTION
    cap = largest_fitting_cap(*shape, budget, *layout, whole, world_size)
    quick = largest_fitting_cap(*shape, min(QUICK_TRY_BYTES, budget), *layout, whole, world_size)
    if cap is None or quick is None:
        return f"Fix: add ranks or memory: {more}; no table cap makes this fit."
    gib = {c: capped_bytes(*shape, c, *layout) / GIB for c in (cap, quick)}
    return (
        f"Fix: cap the tables with model.num_embeddings_cap={cap} ({gib[cap]:.2f} GiB"
        f"{counted}, at most {HEADROOM_FRACTION:.0%} of the offered memory), or try model."
        f"num_embeddings_cap={quick} first ({gib[quick]:.2f} GiB{counted}, quick to train); "
        "or add ranks / memory: "
        f"{more}."
    )


def _offered_line(per_rank: int, world_size: int, device_kind: str, source: str) -> str:
    """The message's line of what the hardware offers the tables."""
    offered = per_rank * world_size
    return (
        f"  offered: {offered / GIB:.2f} GiB {device_kind} on {world_size} rank(s) "
        f"({per_rank / GIB:.2f} GiB each, {source}); TorchRec's planner gives the tables "
        f"{1 - STORAGE_RESERVATION:.0%} of it ({usable_bytes(offered) / GIB:.2f} "
        f"GiB), keeping {STORAGE_RESERVATION:.0%} for dense parameters and activations"
    )


def _batch_advice(held: int, offered: int, batch_size: int | None) -> str:
    """The fix when the tables alone fit (``held`` of ``offered`` bytes): the batch."""
    batch = f"train.batch_size={batch_size}" if batch_size else "train.batch_size"
    return (
        f"The tables alone fit ({held / GIB:.2f} of "
        f"{usable_bytes(offered) / GIB:.2f} GiB): what does not is, most likely, "
        "what TorchRec places beside each shard and grows with the batch (its input and output "
        f"buffers, at {batch} per rank), or how the shards divide among the ranks. Fix: lower "
        "train.batch_size; or add ranks or memory."
    )


def _largest_piece(
    table_bytes: list[float], pieces: list[int], world_size: int, alone: list[float]
) -> float:
    """The largest part of one table that a rank holds: a piece lying whole on one rank
    (``alone``: their bytes, :func:`~dlrm_exp.planning.storage.whole_shards` of ``pieces``),
    or a split table's even share of ``world_size`` ranks."""
    split = [
        b / world_size for b, k in itertools.zip_longest(table_bytes, pieces, fillvalue=0) if not k
    ]
    return max([*alone, *split, 0])


def _tables_fit(
    total: float,
    whole: float,
    world_size: int,
    per_rank: int,
    pieces: tuple[float, list[float]],
) -> float | None:
    """The bytes tables of ``total`` bytes take over all ranks (the data_parallel ones,
    ``whole`` bytes, once per rank) when they fit what the planner gives tables: in all, on
    each rank its data_parallel tables beside the largest piece one rank holds (``pieces``:
    that piece's bytes, a table_wise table, a column_wise shard or a split table's even
    share; and the bytes of each shard lying whole on one rank), and those whole shards
    packed onto the ranks beside an even share of the split tables
    (:func:`~dlrm_exp.planning.storage.packs`: five 19 GiB tables and a 1.5 GiB one on 5
    ranks of 20 GiB fit in all, but not as placed); else None."""
    largest, alone = pieces
    held = total + whole * (world_size - 1)
    usable = usable_bytes(per_rank)
    fits_all = held <= usable_bytes(per_rank * world_size) and whole + largest <= usable
    spread = total - whole - sum(alone)  # the tables split over the ranks
    placed = packs(alone, spread / world_size, world_size, usable - whole)
    return held if fits_all and placed else None


def _needed_lines(
    storage: EmbeddingStorage,
    optimizer: SparseOptimizer,
    tables: int,
    embedding_dim: int,
    replicated: EmbeddingStorage | None,
    world_size: int,
) -> list[str]:
    """The message's first lines: what the tables need, one copy each, then what the ranks
    hold in all with the data_parallel ones (``replicated``) held whole by each."""
    gradients = (
        f"{storage.gradient_bytes / GIB:.2f} GiB data_parallel gradients + "
        if storage.gradient_bytes
        else ""
    )
    lines = [
        f"Not enough memory for the embedding tables ({tables} tables, "
        f"{storage.rows:,} rows x embedding_dim {embedding_dim}):",
        f"  needed:  {storage.weight_bytes / GIB:.2f} GiB {storage.weight_precision} weights + "
        f"{gradients}{storage.optimizer_bytes / GIB:.2f} GiB {optimizer.value} state = "
        f"{storage.total_bytes / GIB:.2f} GiB",
    ]
    if replicated is not None and replicated.rows and world_size > 1:
        lines.append(
            f"           of which {replicated.total_bytes / GIB:.2f} GiB are data_parallel "
            f"tables, held whole by each of the {world_size} ranks: "
            f"{(storage.total_bytes + replicated.total_bytes * (world_size - 1)) / GIB:.2f} GiB "
            "in all"
        )
    return lines


def _hosts(ranks_per_node: int | None, recipe: int | None, job: int) -> tuple[int | None, int, str]:
    """:func:`_more_ranks`' ``hosts``: the job's ranks per node, the global batch more ranks
    keep (the ``recipe``'s, ``train.global_batch_size``, where set: the advice kept the
    ``job``'s under the recipe's warning, review) and whose it is."""
    if recipe:
        return ranks_per_node, recipe, "the recipe's (train.global_batch_size)"
    return ranks_per_node, job, "this job's"


def _more_ranks(
    storage: EmbeddingStorage,
    replicated: EmbeddingStorage | None,
    per_rank: int,
    alone: Sequence[float],
    hosts: tuple[int | None, int, str],
) -> str:
    """How many ranks of ``per_rank`` bytes would hold the tables (and, given the job's
    ranks per node, on how many nodes; given its global batch, the ``train.batch_size``, per
    rank, that keeps it: ``hosts``): each holds the
    data_parallel ones (``replicated``) whole and its share of the others, the shards placed
    whole on one rank (table_wise tables, column_wise column shards; ``alone``: bytes each)
    packed among them (:func:`~dlrm_exp.planning.storage.packs`); none when the
    data_parallel ones alone, or the largest whole shard, exceed a rank."""
    largest_whole = max(alone, default=0)
    usable = usable_bytes(per_rank)
    whole = replicated.total_bytes if replicated is not None else 0
    spread = storage.total_bytes - whole - sum(alone)  # the tables split over the ranks
    room = usable - whole - largest_whole  # beside the largest whole table on its rank
    if largest_whole and (room < 0 or (room == 0 and spread > 0)):
        beside = f" beside {whole / GIB:.2f} GiB of data_parallel tables" if whole else ""
        return (
            "more memory per rank (the largest piece a rank holds whole: a table_wise table, "
            "a column_wise shard, or a table_row_wise / grid table's share of its host's "
            f"ranks, {largest_whole / GIB:.2f} GiB{beside}, exceeds a rank's "
            f"{usable / GIB:.2f} GiB, so more ranks cannot help (more ranks per host can, "
            "for table_row_wise / grid); or shard it row_wise)"
        )
    if whole >= usable:
        return (
            f"more memory per rank (the data_parallel tables alone, {whole / GIB:.2f} GiB, "
            f"exceed a rank's {usable / GIB:.2f} GiB, and every rank holds them whole, so more "
            "ranks cannot help)"
        )
    ranks_needed = math.ceil((storage.total_bytes - whole) / (usable - whole))
    # ends: with a rank per whole table and the split share within ``room``, all fit
    while not packs(alone, spread / ranks_needed, ranks_needed, usable - whole):
        ranks_needed += 1
    ranks_per_node, global_batch, whose = hosts
    nodes = (
        f"hardware.nnodes={math.ceil(ranks_needed / ranks_per_node)} of {ranks_per_node} rank(s)"
        if ranks_per_node
        else "hardware.nnodes=..."
    )
    # the batch is per rank: more ranks, a larger global batch; the preset's own 65536 per
    # rank then overflowed the suggested ranks' memory (planning review)
    batch = ""
    if global_batch:
        per = max(global_batch // ranks_needed, 1)
        keeps = (
            f"keeps {whose} global batch of {global_batch}"
            if per * ranks_needed == global_batch
            else f"gives a global batch of {per * ranks_needed}, near {whose} {global_batch}"
        )
        batch = f"; train.batch_size={per} per rank {keeps}"
    return f"at least {ranks_needed} ranks of {per_rank / GIB:.2f} GiB ({nodes}{batch})"


#: TorchRec's partitioner's reasons for a shard (or a host's group of shards) that no rank
#: (host) has room for: memory, whatever the error type says.
_PACKING_REASONS = (
    "Couldn't find a rank for shard",
    "can't find a host for sharding option group",
    "can't find hosts for sharding option group",
)


def plan_or_explain(
    planner: EmbeddingShardingPlanner,
    module: torch.nn.Module,
    sharders: list[ModuleSharder],
    explain_memory: Callable[[], str],
    constraints_summary: str = "",
) -> ShardingPlan:
    """Plan on rank 0 and broadcast the plan, or the planner's error, to every rank.

    Its ties are ordered (:class:`OrderedEmbeddingEnumerator`), but nothing in TorchRec
    promises the same plan in every process, so one rank decides. Broadcasting the error too
    means a plan that fails raises on every rank instead of leaving peers waiting for a plan.
    Without a process group (the parent's pre-flight, ``mode=plan``) it simply plans.

    Raises:
        InsufficientMemoryError: no placement fits; the message is ``explain_memory()``.
        PlanError: any other planner failure, with the planner's last reason and
            ``constraints_summary``.
    """

    def plan() -> ShardingPlan:
        try:
            return planner.plan(module, sharders)
        except PlannerError as err:
            # TorchRec says INSUFFICIENT_STORAGE when the total exceeds the ranks' memory; a
            # shard that fits no single rank (a whole table_wise table) comes back as another
            # error type, with its partitioner's "Couldn't find a rank for shard", and a
            # table_row_wise / grid table that fits no host's ranks with "can't find a host"
            packing = any(reason in str(err) for reason in _PACKING_REASONS)
            if err.error_type is PlannerErrorType.INSUFFICIENT_STORAGE or packing:
                raise InsufficientMemoryError(explain_memory()) from None
            reason = [line.strip() for line in str(err).splitlines() if line.strip()][-1]
            raise PlanError(
                f"TorchRec's planner found no placement ({err.error_type.value}) for "
                f"{constraints_summary}: {reason[:300]}"
            ) from None

    return on_rank_zero(plan)
