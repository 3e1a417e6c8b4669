"""MLPerf DLRM-DCNv2 synthetic multi-hot inputs from one-hot rows (``data=criteo_multihot``).

Follows the reference generator of MLPerf training's DLRM-DCNv2 (``torchrec_dlrm/multi_hot.py``
in the MLCommons training repository, used by ``materialize_synthetic_multihot_dataset.py``):
for table ``t`` with ``N_t`` rows and multi-hot size ``m_t``, a lookup table ``L_t`` of shape
(N_t, m_t) maps the one-hot id ``i`` to the ids ``L_t[i] = [i, x_1 .. x_{m_t - 1}]``. The extra
ids are drawn once for all tables in order, from numpy's legacy generator seeded with 0 (so
every rank, and the reference script, draws the same ones):

* ``uniform``: ``randint(0, N_t, size=(N_t, m_t - 1))``;
* ``pareto``: ``pareto(a=0.25, size=(N_t, m_t - 1)).astype(int32) % N_t`` (heavy-tailed: most
  extra ids are small).

A batch then has ``m_t`` ids per sample for feature ``t``: a ``KeyedJaggedTensor`` whose
lengths differ between features (MLPerf's sizes below sum to 214 ids per sample).
"""

from collections.abc import Sequence

import numpy as np
import torch

from dlrm_exp.config import MLPERF_MULTI_HOT_SIZES, MultiHotDistribution
from dlrm_exp.config.data import LOOKUP_ITEMSIZE, lookup_bytes, lookup_refusal
from dlrm_exp.errors import DataError

__all__ = ["MLPERF_MULTI_HOT_SIZES", "MultiHot", "lookup_bytes"]

_PARETO_A = 0.25
_LOOKUP_DTYPE = np.int32  # as the reference's lookup tables
assert np.dtype(_LOOKUP_DTYPE).itemsize == LOOKUP_ITEMSIZE
#: Extra ids drawn at a time while a lookup table is built (64 MiB of int64 / float64 draws):
#: drawn whole, a table's draws, their int64 concatenation and its int32 copy took about 5x
#: the table (a 1,000,000 x 100 table of 381 MiB grew the peak by 1,907 MiB).
_CHUNK_ELEMENTS = 1 << 23


class MultiHot:
    """The per-table one-hot -> multi-hot lookup tables, and batch expansion.

    Args:
        table_sizes: rows ``N_t`` of each table.
        multi_hot_sizes: ids per sample ``m_t`` of each feature (>= 1).
        distribution: how the extra ids are drawn.
        max_gib: refuse lookup tables larger than this, GiB.

    Raises:
        DataError: the sizes disagree with the tables, or the lookup tables would exceed
            ``max_gib`` (the message names a ``model.num_embeddings_cap`` that fits).
    """

    def __init__(
        self,
        table_sizes: Sequence[int],
        multi_hot_sizes: Sequence[int],
        distribution: MultiHotDistribution,
        max_gib: float,
    ) -> None:
        if len(multi_hot_sizes) != len(table_sizes):
            raise DataError(
                f"data.multi_hot_sizes lists {len(multi_hot_sizes)} sizes for "
                f"{len(table_sizes)} tables: give one per table"
            )
        refusal = lookup_refusal(table_sizes, multi_hot_sizes, max_gib)
        if refusal is not None:  # (a config is refused at compose time: Config's check)
            raise DataError(refusal)
        self.multi_hot_sizes = tuple(int(m) for m in multi_hot_sizes)
        self.tables = _lookup_tables(table_sizes, self.multi_hot_sizes, distribution)

    def expand(self, sparse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """KJT ``(values, lengths)`` in key-major order for one-hot ids ``sparse`` (B, F):
        values int64 of length ``B * sum(m_t)``, lengths int32 (F * B,) with ``m_t`` for every
        sample of feature ``t``."""
        batch = sparse.shape[0]
        values = [table[sparse[:, t]].reshape(-1) for t, table in enumerate(self.tables)]
        lengths = torch.tensor(self.multi_hot_sizes, dtype=torch.int32).repeat_interleave(batch)
        return torch.cat(values).long(), lengths


def _lookup_tables(
    table_sizes: Sequence[int], multi_hot_sizes: Sequence[int], distribution: MultiHotDistribution
) -> list[torch.Tensor]:
    """The reference's ``__make_multi_hot_indices_tables``: one (N_t, m_t) table per feature,
    the same values, its extra ids drawn a block of rows at a time into the int32 table (the
    generator's stream is the same in blocks as whole), so building takes little more memory
    than the tables (:func:`lookup_bytes`, which the guard counts)."""
    rng = np.random.RandomState(0)  # the reference's np.random.seed(0) + global draws
    tables = []
    for rows, size in zip(table_sizes, multi_hot_sizes, strict=True):
        table = np.empty((rows, size), dtype=_LOOKUP_DTYPE)
        table[:, 0] = np.arange(rows)
        block = max(1, _CHUNK_ELEMENTS // max(size - 1, 1))
        for start in range(0, rows, block):
            n = min(block, rows - start)
            if distribution is MultiHotDistribution.uniform:
                extra = rng.randint(0, rows, size=(n, size - 1))
            else:
                with np.errstate(invalid="ignore"):  # huge draws cast to INT32_MIN, as there
                    extra = rng.pareto(a=_PARETO_A, size=(n, size - 1)).astype(np.int32) % rows
            table[start : start + n, 1:] = extra
        tables.append(torch.from_numpy(table))
    return tables
