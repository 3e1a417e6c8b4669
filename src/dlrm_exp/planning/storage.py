"""Embedding storage accounting: what the tables need, in bytes, and what cap would fit.

One place for the numbers that the insufficient-memory error reports, so every report of
embedding storage agrees. Sizes are in bytes; GiB = 2**30 bytes.
"""

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from dlrm_exp.config import EmbeddingDataType, SparseOptimizer

GIB = 2**30
MIB = 2**20
#: Sizes (bytes) below this are said in MiB: a small model's plan read 0.00 GiB everywhere
#: (planning review).
IN_MIB_BELOW = GIB / 10
FP32_BYTES = 4


@dataclass(frozen=True)
class EmbeddingStorage:
    """Storage of a set of embedding tables.

    Attributes:
        rows: total rows over all tables.
        weight_bytes: table weights, rows x embedding_dim x bytes per element (4 for fp32
            tables, 2 for fp16 ones).
        optimizer_bytes: sparse optimizer state (RowWiseAdagrad: one fp32 per row; Adagrad:
            one per weight; Adam: two per weight; SGD: none), as FBGEMM's fused kernels
            allocate it.
        gradient_bytes: the data_parallel tables' gradients: the ``dense`` kernel (FBGEMM's
            ``DenseTableBatchedEmbeddingBagsCodegen``, an ``nn.EmbeddingBag(sparse=False)``)
            gives a gradient as large as the table, which DDP all-reduces in its buckets
            (``gradient_as_bucket_view``: one copy); sharded tables are updated in backward
            without one.
    """

    rows: int
    weight_bytes: int
    optimizer_bytes: int
    weight_precision: str = "fp32"
    gradient_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        """Weights, optimizer state and data_parallel gradients, bytes (one copy each)."""
        return self.weight_bytes + self.optimizer_bytes + self.gradient_bytes


def embedding_storage(
    table_sizes: list[int],
    embedding_dim: int,
    optimizer: SparseOptimizer,
    data_types: list[EmbeddingDataType] | None = None,
    replicated: list[bool] | None = None,
) -> EmbeddingStorage:
    """Bytes needed by tables of ``table_sizes`` rows each, ``embedding_dim`` wide, whose
    weights have ``data_types`` (default fp32; optimizer state is fp32 in every case), with a
    gradient as large as the weights for the ``replicated`` (data_parallel) ones (one copy).

    Example: the MLPerf DLRM-DCNv2 tables (204,184,588 rows x 128) need 97.36 GiB of fp32
    weights, 48.68 GiB of fp16 ones.
    """
    data_types = data_types or [EmbeddingDataType.fp32] * len(table_sizes)
    replicated = replicated or [False] * len(table_sizes)
    rows = sum(table_sizes)
    weights = [
        n * embedding_dim * t.element_bytes for n, t in zip(table_sizes, data_types, strict=True)
    ]
    return EmbeddingStorage(
        rows=rows,
        weight_bytes=sum(weights),
        optimizer_bytes=rows * optimizer.state_floats_per_row(embedding_dim) * FP32_BYTES,
        weight_precision="/".join(sorted({t.value for t in data_types}, reverse=True)) or "fp32",
        gradient_bytes=sum(w for w, dp in zip(weights, replicated, strict=True) if dp),
    )


def row_bytes(
    cols: int, data_type: EmbeddingDataType, optimizer: SparseOptimizer, replicated: bool = False
) -> int:
    """Bytes one row of ``cols`` columns takes: its weights in ``data_type``, the fused
    ``optimizer``'s state, fp32 whatever the weights' dtype (FBGEMM's), and for a
    ``replicated`` (data_parallel) table its gradient, as large as its weights."""
    weights = cols * data_type.element_bytes
    state = optimizer.state_floats_per_row(cols) * FP32_BYTES
    return weights + state + (weights if replicated else 0)


def capped_bytes(
    table_sizes: list[int],
    embedding_dim: int,
    optimizer: SparseOptimizer,
    cap: int,
    copies: list[int] | None = None,
    data_types: list[EmbeddingDataType] | None = None,
    replicated: list[bool] | None = None,
) -> int:
    """Bytes of weights (``data_types``, default fp32), fp32 optimizer state and the
    ``replicated`` tables' gradients of the tables capped at ``cap`` rows each (``copies`` as
    in :func:`largest_fitting_cap`)."""
    copies = copies or [1] * len(table_sizes)
    data_types = data_types or [EmbeddingDataType.fp32] * len(table_sizes)
    replicated = replicated or [False] * len(table_sizes)
    return sum(
        min(n, cap) * k * row_bytes(embedding_dim, t, optimizer, dp)
        for n, k, t, dp in zip(table_sizes, copies, data_types, replicated, strict=True)
    )


def largest_fitting_cap(
    table_sizes: list[int],
    embedding_dim: int,
    optimizer: SparseOptimizer,
    budget_bytes: float,
    copies: list[int] | None = None,
    data_types: list[EmbeddingDataType] | None = None,
    replicated: list[bool] | None = None,
    whole: tuple[list[int], float] | None = None,
    ranks: int | None = None,
) -> int | None:
    """The largest ``num_embeddings_cap`` (rounded down to two significant digits) whose tables
    fit in ``budget_bytes``, or None when not even one row per table fits.

    ``copies[i]`` is how many copies of table i the job holds (data_parallel: one per rank;
    default one each); ``data_types`` and ``replicated`` as in :func:`capped_bytes`.
    ``whole``: ``(pieces, rank_bytes)``: for each table the shards it lies on ranks as, each
    whole on one rank (:func:`~dlrm_exp.planning.tables.whole_pieces`; 0 for a table split
    over the ranks; flags read as 1 and 0), each of which must also fit ``rank_bytes`` beside
    the replicated tables every rank holds; with ``ranks``, they must also pack onto that
    many ranks (:func:`packs`, beside an even share of the split tables): two 13 GiB
    tables on 4 ranks of 24 GiB for 5 such tables do not."""
    data_types = data_types or [EmbeddingDataType.fp32] * len(table_sizes)
    replicated = replicated or [False] * len(table_sizes)
    copies = copies or [1] * len(table_sizes)
    flags, rank_bytes = whole or ([], 0.0)
    pieces = [int(f) for f in flags] + [0] * (len(table_sizes) - len(flags))

    per_row = [row_bytes(embedding_dim, t, optimizer, dp)
               for t, dp in zip(data_types, replicated, strict=True)]  # fmt: skip

    def fits(cap: int) -> bool:
        tables = [min(n, cap) * r for n, r in zip(table_sizes, per_row, strict=True)]
        if sum(b * k for b, k in zip(tables, copies, strict=True)) > budget_bytes:
            return False  # (capped_bytes, each table's bytes computed once here)
        on_every_rank = sum(b for b, dp in zip(tables, replicated, strict=True) if dp)
        alone = whole_shards(tables, pieces)
        if ranks is None:  # each whole shard on its own
            return all(b + on_every_rank <= rank_bytes for b in alone)
        each = zip(tables, pieces, replicated, strict=True)
        spread = sum(b for b, k, dp in each if not (k or dp))
        return packs(alone, spread / ranks, ranks, rank_bytes - on_every_rank)

    if not fits(1):
        return None
    lo, hi = 1, max(table_sizes)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    digits = len(str(lo)) - 2
    return lo if digits <= 0 else (lo // 10**digits) * 10**digits


def whole_shards(table_bytes: Sequence[float], pieces: Sequence[int]) -> list[float]:
    """The bytes of each shard that lies whole on one rank: table i, of ``table_bytes[i]``,
    in ``pieces[i]`` equal shards (none for 0: split over the ranks)."""
    return [b / k for b, k in zip(table_bytes, pieces, strict=False) if k for _ in range(k)]


def packs(whole: list[float], share: float, ranks: int, rank_bytes: float) -> bool:
    """Whether tables placed whole (``whole``, bytes each) fit ``ranks`` ranks of ``rank_bytes``
    that each already hold ``share`` bytes: the largest first onto the emptiest rank (greedy,
    as TorchRec's partitioner places shards)."""
    if share > rank_bytes:
        return False
    loads = [share] * ranks  # equal values: already a heap
    for size in sorted(whole, reverse=True):
        emptiest = heapq.heappop(loads)
        if emptiest + size > rank_bytes:
            return False
        heapq.heappush(loads, emptiest + size)
    return True
