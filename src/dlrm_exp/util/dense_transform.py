"""The dense transform of click-log counts, shared by every reader (numpy only: the TSV
parser's worker processes import it)."""

import numpy as np


def log1p_clipped(dense: np.ndarray) -> np.ndarray:
    """facebookresearch/dlrm's dense transform ``log(1 + max(x, 0))`` as float32, any shape.

    Computed as ``np.log`` of ``1 + x`` in float32 (exact for counts below 2**24), numpy's
    vectorized float32 log: 7x faster here than ``np.log1p``, and within one ulp of it.
    """
    out = dense.astype(np.float32)
    np.maximum(out, 0, out=out)
    out += 1
    return np.log(out, out=out)
