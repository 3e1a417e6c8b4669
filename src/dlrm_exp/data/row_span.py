"""Rows of several memory-mapped day files read as one table, converted slice by slice
(``data=criteo_npy data.mmap_mode=true``).

The days are never concatenated: a slice (one batch) reads only its rows from the page cache,
so a training set of many days needs memory for the batches in flight, not for its rows.
"""

from collections.abc import Callable, Sequence

import numpy as np
import torch


class RowSpan:
    """Rows ``[start, stop)`` of the days ``parts`` ((N_d, C) arrays) laid end to end.

    ``span[a:b]`` is a torch tensor of ``convert(rows)``; ``span.span(a, b)`` a narrower
    :class:`RowSpan` (nothing read). ``shape`` and ``len`` are those of the rows.

    Raises:
        ValueError: a slice with a step.
    """

    def __init__(
        self,
        parts: Sequence[np.ndarray],
        convert: Callable[[np.ndarray], np.ndarray],
        start: int = 0,
        stop: int | None = None,
    ) -> None:
        self.parts = list(parts)
        self.bounds = np.cumsum([0] + [len(p) for p in self.parts])
        self.convert = convert
        self.start = start
        self.stop = int(self.bounds[-1]) if stop is None else stop

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.stop - self.start, *self.parts[0].shape[1:])

    def __len__(self) -> int:
        return self.stop - self.start

    def span(self, lo: int, hi: int) -> "RowSpan":
        """Rows ``[lo, hi)`` of this span, unread."""
        return RowSpan(self.parts, self.convert, self.start + lo, self.start + hi)

    def __getitem__(self, key: slice) -> torch.Tensor:
        lo, hi, step = key.indices(len(self))
        if step != 1:
            raise ValueError("RowSpan slices take no step")
        lo, hi = self.start + lo, self.start + max(hi, lo)
        pieces = []
        day = int(np.searchsorted(self.bounds, lo, side="right")) - 1
        while lo < hi:
            end = min(hi, int(self.bounds[day + 1]))
            base = int(self.bounds[day])
            pieces.append(self.parts[day][lo - base : end - base])
            lo, day = end, day + 1
        if not pieces:
            pieces = [self.parts[0][:0]]
        rows = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
        return torch.from_numpy(np.ascontiguousarray(self.convert(rows)))
