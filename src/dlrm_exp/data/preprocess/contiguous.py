"""Contiguous re-indexing of categorical ids with a frequency threshold
(``preprocess.categorical=contiguous``).

The same mapping as TorchRec's ``BinaryCriteoUtils.sparse_to_contiguous`` (the
``contiguous_preproc_criteo`` script), without its per-id Python loop: per feature, over all
days in day order, ids that occur at least ``frequency_threshold`` times get ``2, 3, ...`` in the
order of their first occurrence; rarer ids become ``1`` (with a threshold of 1 or less every id
is kept). Table ``t`` then needs ``num_embeddings_per_feature[t] = 2 + (ids kept)`` rows (row 0
is never used, row 1 holds the rare ids).

Memory: per feature, the distinct ids of every day with their first position and count (not
the rows); the days are read memory-mapped and written in blocks of rows.
"""

from pathlib import Path

import numpy as np

from dlrm_exp.data.preprocess.npy_stream import NpyRowWriter

RARE_ID = 1
FIRST_ID = 2
_CHUNK_ROWS = 1 << 20


def _feature_mapping(
    days: list[np.ndarray], feature: int, threshold: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(ids sorted, new id of each)`` for one feature over ``days`` ((N_d, F) arrays)."""
    uniques, firsts, counts = [], [], []
    offset = 0
    for day in days:
        column = np.ascontiguousarray(day[:, feature])
        ids, first, count = np.unique(column, return_index=True, return_counts=True)
        uniques.append(ids)
        firsts.append(first + offset)
        counts.append(count)
        offset += len(column)
    ids = np.concatenate(uniques)
    del uniques  # each list freed once concatenated, before the permuted copy is made
    order = np.argsort(ids, kind="stable")
    ids = ids[order]
    first = np.concatenate(firsts)
    del firsts
    first = first[order]
    count = np.concatenate(counts)
    del counts
    count = count[order]
    del order
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]]) if len(ids) else np.array([], int)
    ids = ids[starts]
    first = np.minimum.reduceat(first, starts) if len(starts) else first
    total = np.add.reduceat(count, starts) if len(starts) else count
    kept = np.flatnonzero(total >= threshold) if threshold > 1 else np.arange(len(ids))
    new = np.full(len(ids), RARE_ID, dtype=np.int64)
    by_first_use = kept[np.argsort(first[kept], kind="stable")]
    new[by_first_use] = np.arange(FIRST_ID, FIRST_ID + len(kept))
    return ids, new


def contiguous_ids(raw_paths: list[Path], out_paths: list[Path], threshold: int) -> list[int]:
    """Re-index the (N, F) id files ``raw_paths`` (day order) into ``out_paths`` (int64).

    Returns:
        ``num_embeddings_per_feature``: rows each table needs for the new ids.
    """
    days = [np.load(path, mmap_mode="r", allow_pickle=False) for path in raw_paths]
    features = days[0].shape[1] if days else 0
    mappings = [_feature_mapping(days, f, threshold) for f in range(features)]
    for day, out in zip(days, out_paths, strict=True):
        with NpyRowWriter(out, np.int64, features) as writer:
            for lo in range(0, day.shape[0], _CHUNK_ROWS):
                block = np.asarray(day[lo : lo + _CHUNK_ROWS])
                mapped = np.empty(block.shape, dtype=np.int64)
                for f, (ids, new) in enumerate(mappings):
                    mapped[:, f] = new[np.searchsorted(ids, block[:, f])]
                writer.append(mapped)
    return [FIRST_ID + int(np.count_nonzero(new >= FIRST_ID)) for _, new in mappings]
