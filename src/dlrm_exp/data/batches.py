"""In-memory click data and its per-rank batches as TorchRec ``Batch`` objects."""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torchrec.datasets.utils import Batch
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

if TYPE_CHECKING:
    from dlrm_exp.data.multi_hot import MultiHot


@dataclass
class ClickData:
    """Rows of a click log, ready for training.

    Attributes:
        dense: (N, num_dense) float32, already transformed (e.g. log(1 + x) of counts).
        sparse: (N, F) int64 one-hot ids, each within its table's rows.
        labels: (N,) float32 in {0, 1}.
        (Each column is a tensor, or for memory-mapped days a
        :class:`~dlrm_exp.data.row_span.RowSpan` whose slices are tensors.)
        multi_hot: if set, batches expand every one-hot id into its multi-hot ids
            (``data=criteo_multihot``).
    """

    dense: torch.Tensor
    sparse: torch.Tensor
    labels: torch.Tensor
    multi_hot: "MultiHot | None" = None

    @classmethod
    def from_numpy(cls, dense: np.ndarray, sparse: np.ndarray, labels: np.ndarray) -> "ClickData":
        return cls(
            dense=torch.from_numpy(np.ascontiguousarray(dense, dtype=np.float32)),
            sparse=torch.from_numpy(np.ascontiguousarray(sparse, dtype=np.int64)),
            labels=torch.from_numpy(np.ascontiguousarray(labels, dtype=np.float32)),
        )

    @classmethod
    def concat(cls, parts: list["ClickData"]) -> "ClickData":
        """The rows of in-memory ``parts`` one after the other (``parts[0]`` when alone)."""
        if len(parts) == 1:
            return parts[0]
        return cls(
            dense=torch.cat([p.dense for p in parts]),
            sparse=torch.cat([p.sparse for p in parts]),
            labels=torch.cat([p.labels for p in parts]),
        )

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def batches(
        self,
        batch_size: int,
        rank: int,
        world_size: int,
        keys: list[str],
        shuffle_seed: tuple[int, ...] | None = None,
        slices: int = 1,
        skip: int = 0,
    ) -> Iterator[Batch]:
        """This rank's batches (:func:`iter_batches`). The interface every split has
        (:class:`~dlrm_exp.data.parquet.ParquetSplit` too)."""
        return iter_batches(self, batch_size, rank, world_size, keys, shuffle_seed, skip, slices)

    def rows(self, start: int, stop: int) -> "ClickData":
        """Rows ``[start, stop)`` as a view (of the tensors, or of memory-mapped days)."""

        def view(column: Any) -> Any:
            return column.span(start, stop) if hasattr(column, "span") else column[start:stop]

        return ClickData(view(self.dense), view(self.sparse), view(self.labels), self.multi_hot)


def per_rank_sizes(num_rows: int, batch_size: int, world_size: int) -> list[int]:
    """Per-rank batch size of each global step over ``num_rows`` rows.

    Full steps take ``batch_size`` rows per rank; the remainder is split evenly across ranks
    (dropping fewer than ``world_size`` rows) so every rank runs the same number of steps with
    the same batch size, as the collectives require.
    """
    global_batch = batch_size * world_size
    sizes = [batch_size] * (num_rows // global_batch)
    rest = (num_rows % global_batch) // world_size
    return sizes + ([rest] if rest > 0 else [])


def make_batch(data: ClickData, start: int, stop: int, keys: list[str]) -> Batch:
    """One TorchRec ``Batch`` of rows ``[start, stop)``: dense (B, 13), a
    ``KeyedJaggedTensor`` over ``keys`` (values in key-major order; one id per sample and
    feature, or ``m_t`` with ``data.multi_hot``) and labels (B,)."""
    sparse = data.sparse[start:stop]
    size = int(sparse.shape[0])
    if data.multi_hot is not None:
        values, lengths = data.multi_hot.expand(sparse)
    else:
        values = sparse.t().reshape(-1)
        lengths = torch.ones(size * len(keys), dtype=torch.int32)
    kjt = KeyedJaggedTensor(keys=keys, values=values, lengths=lengths, stride=size)
    return Batch(
        dense_features=data.dense[start:stop], sparse_features=kjt, labels=data.labels[start:stop]
    )


def iter_batches(
    data: ClickData,
    batch_size: int,
    rank: int,
    world_size: int,
    keys: list[str],
    shuffle_seed: tuple[int, ...] | None = None,
    skip: int = 0,
    slices: int = 1,
) -> Iterator[Batch]:
    """This rank's batches over ``data``: global step ``i`` covers rows
    ``[i * G, (i + 1) * G)`` (``G = world_size * size_i``) and rank ``r`` takes the ``r``-th
    slice of them, so ranks never overlap.

    Steps come in row order, or with ``shuffle_seed`` (e.g. ``(seed, epoch)``) the full global
    batches in a permuted order (numpy ``default_rng(shuffle_seed)``, the same on every rank);
    a smaller remainder step stays last. ``skip`` leaves out the first ``skip`` steps of that
    order without building their batches (a resumed run's trained steps). ``slices > 1``
    deals each step to ``world_size * slices`` parts of ``batch_size / slices`` rows and gives
    this rank its ``slices`` parts, one after the other: with ``world_size=1, slices=W`` one
    process sees every step, the remainder step too, as W ranks do (``mode=verify``).
    """
    part = batch_size // slices
    sizes = per_rank_sizes(len(data), part, world_size * slices)
    order = np.arange(len(sizes))
    if shuffle_seed is not None:
        full = sum(1 for size in sizes if size == part)
        order[:full] = np.random.default_rng(list(shuffle_seed)).permutation(full)
    for step in order[skip:]:
        size = sizes[step]
        lo = int(step) * part * world_size * slices + rank * slices * size
        yield make_batch(data, lo, lo + slices * size, keys)
