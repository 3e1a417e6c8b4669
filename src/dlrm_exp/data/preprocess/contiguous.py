"""Contiguous re-indexing of categorical ids with a frequency threshold
(``preprocess.categorical=contiguous``).

The same mapping as TorchRec's ``BinaryCriteoUtils.sparse_to_contiguous`` (the
``contiguous_preproc_criteo`` script), without its per-id Python loop: per feature, over all
days in day order, ids that occur at least ``frequency_threshold`` times get ``2, 3, ...`` in the
order of their first occurrence; rarer ids become ``1`` (with a threshold of 1 or less every id
is kept). Table ``t`` then needs ``num_embeddings_per_feature[t] = 2 + (ids kept)`` rows (row 0
is never used, row 1 holds the rare ids).

Reading: a day's (N, F) id file is row-major, so one feature's column spans every page of it;
reading it feature by feature (as TorchRec's script does) reads each day F (26) times, from
disk once the days outgrow the page cache (910 GB of raw ids at Criteo 1TB scale). Here each
day is read in row blocks into column-major groups of features, as many at once as a quarter
of the available memory holds (a 1TB day's column is about 1.5 GB: three groups with 64 GB
free, one with 170 GB; one feature a group at worst), and then once more to write the new
ids.

Memory: per feature, every distinct id seen so far with its first position and count (24
bytes an id), the group's columns of one day (8 bytes a row and feature) and ``np.unique``'s
sort of one column.
"""

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dlrm_exp.data.preprocess.npy_stream import NpyRowWriter
from dlrm_exp.util.cgroup import available_memory_bytes

RARE_ID = 1
FIRST_ID = 2
_CHUNK_ROWS = 1 << 20


@dataclass
class _SeenIds:
    """One feature's distinct ids so far (sorted), each with its first row (counted over
    the days in order) and its number of occurrences."""

    ids: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    first: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    count: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))

    def add(self, column: np.ndarray, offset: int) -> None:
        """Take in one day's column (N,), whose first row is row ``offset`` of all days."""
        ids, first, count = np.unique(column, return_index=True, return_counts=True)
        at = np.searchsorted(self.ids, ids)
        seen = at < len(self.ids)
        seen[seen] = self.ids[at[seen]] == ids[seen]
        self.count[at[seen]] += count[seen]  # an earlier day's first row stays the first
        new = ~seen
        self.ids = np.insert(self.ids, at[new], ids[new])
        self.first = np.insert(self.first, at[new], first[new] + offset)
        self.count = np.insert(self.count, at[new], count[new])

    def mapping(self, threshold: int) -> np.ndarray:
        """The new id of each id in :attr:`ids` (see the module docstring)."""
        kept = (
            np.flatnonzero(self.count >= threshold) if threshold > 1 else np.arange(len(self.ids))
        )
        new = np.full(len(self.ids), RARE_ID, dtype=np.int64)
        by_first_use = kept[np.argsort(self.first[kept], kind="stable")]
        new[by_first_use] = np.arange(FIRST_ID, FIRST_ID + len(kept))
        return new


def feature_groups(rows: int, features: int, budget_bytes: int) -> list[range]:
    """The features read together, in order: as many int64 columns of ``rows`` rows as
    ``budget_bytes`` holds, at least one."""
    per_group = max(1, min(features, budget_bytes // max(8 * rows, 1)))
    return [range(lo, min(lo + per_group, features)) for lo in range(0, features, per_group)]


def _columns(day: np.ndarray, group: range) -> np.ndarray:
    """``day[:, group].T`` (len(group), N), reading ``day`` once in blocks of whole rows."""
    out = np.empty((len(group), day.shape[0]), dtype=np.int64)
    for lo in range(0, day.shape[0], _CHUNK_ROWS):
        block = np.asarray(day[lo : lo + _CHUNK_ROWS])
        out[:, lo : lo + len(block)] = block[:, group.start : group.stop].T
    return out


def contiguous_ids(
    raw_paths: list[Path], out_paths: list[Path], threshold: int, budget_bytes: int | None = None
) -> list[int]:
    """Re-index the (N, F) id files ``raw_paths`` (day order) into ``out_paths`` (int64).

    Args:
        budget_bytes: bytes of one day's columns held at once (default: a quarter of the
            available memory; see the module docstring).

    Returns:
        ``num_embeddings_per_feature``: rows each table needs for the new ids.
    """
    days = [np.load(path, mmap_mode="r", allow_pickle=False) for path in raw_paths]
    features = days[0].shape[1] if days else 0
    budget = available_memory_bytes() // 4 if budget_bytes is None else budget_bytes
    seen = [_SeenIds() for _ in range(features)]
    offset = 0
    for day in days:
        for group in feature_groups(day.shape[0], features, budget):
            for f, column in zip(group, _columns(day, group), strict=True):
                seen[f].add(column, offset)
        offset += day.shape[0]
    mappings = [(s.ids, s.mapping(threshold)) for s in seen]
    del seen
    for day, out in zip(days, out_paths, strict=True):
        with NpyRowWriter(out, np.int64, features) as writer:
            for lo in range(0, day.shape[0], _CHUNK_ROWS):
                block = np.asarray(day[lo : lo + _CHUNK_ROWS])
                mapped = np.empty(block.shape, dtype=np.int64)
                for f, (ids, new) in enumerate(mappings):
                    mapped[:, f] = new[np.searchsorted(ids, block[:, f])]
                writer.append(mapped)
    return [FIRST_ID + int(np.count_nonzero(new >= FIRST_ID)) for _, new in mappings]
