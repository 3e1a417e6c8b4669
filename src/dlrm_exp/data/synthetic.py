"""Criteo-shaped synthetic click logs with a planted logistic signal.

Every (feature f, id) pair has a fixed effect drawn from N(0, 1) by hashing (seed, f, id), so
tables of any size need no per-row storage. Ids follow a bounded power law per table (Zipf-like:
P(rank r) ~ r^-a over 1..rows). Dense counts are log-normal integers, given to the model as
log(1 + x) like Criteo's. The click probability of a row is

    p = sigmoid(base_logit + categorical_signal * sum_f e_f(id_f) / sqrt(F)
                + dense_signal * (w . z(dense)) / ||w||)

with ``z`` the standardized dense features and ``w`` a fixed random vector. Labels are
Bernoulli(p). Because p is known, the AUROC of p itself on a split is the Bayes-optimal
AUROC: no model can beat it in expectation.
"""

from dataclasses import dataclass

import numpy as np
import torch
from torchmetrics.functional.classification import binary_auroc

from dlrm_exp.config import SyntheticDataConfig
from dlrm_exp.data.batches import ClickData
from dlrm_exp.util.hashing import splitmix64, stream_key, unit_interval


def id_effects(seed: int, feature: int, ids: np.ndarray) -> np.ndarray:
    """N(0, 1) effect of each id of ``feature``, a pure function of (seed, feature, id)."""
    key = stream_key(seed, feature)
    h1 = splitmix64(ids.astype(np.uint64) ^ key)
    h2 = splitmix64(h1)
    return np.sqrt(-2.0 * np.log(unit_interval(h1))) * np.cos(2.0 * np.pi * unit_interval(h2))


def powerlaw_ids(rng: np.random.Generator, rows: int, n: int, exponent: float) -> np.ndarray:
    """``n`` ids in [0, rows) with P(id = r - 1) ~ r^-exponent (continuous inverse CDF)."""
    u = rng.random(n)
    top = rows + 1.0
    if abs(exponent - 1.0) < 1e-9:
        x = top**u
    else:
        one_minus = 1.0 - exponent
        x = (1.0 + u * (top**one_minus - 1.0)) ** (1.0 / one_minus)
    return np.minimum(np.floor(x).astype(np.int64) - 1, rows - 1)


@dataclass
class SyntheticSplit:
    """One split and the true click probabilities (N,) behind its labels."""

    data: ClickData
    click_probability: np.ndarray

    def bayes_auroc(self) -> float | None:
        """AUROC of the true click probabilities: the best any model can expect here (None
        when the split holds one class, see :func:`oracle_auroc`)."""
        return oracle_auroc(self.click_probability, self.data.labels.numpy())


def oracle_auroc(click_probability: np.ndarray, labels: np.ndarray) -> float | None:
    """The AUROC of the true click probabilities (N,) against the labels (N,) drawn from them:
    the Bayes-optimal AUROC. None when the labels hold one class (or none): AUROC is
    undefined there, as for the model's own (torchmetrics would give 0.0)."""
    positives = int(np.count_nonzero(labels))
    if positives in (0, len(labels)):
        return None
    return float(binary_auroc(torch.from_numpy(click_probability), torch.from_numpy(labels).long()))


def generate(
    cfg: SyntheticDataConfig, table_sizes: list[int], num_dense: int, seed: int, n: int, stream: int
) -> SyntheticSplit:
    """``n`` synthetic rows for tables of ``table_sizes`` rows (F = len(table_sizes)).

    ``stream`` separates splits (0 train, 1 val, 2 test): same seed, independent rows, same
    planted model.
    """
    rng = np.random.default_rng([seed, stream])
    num_features = len(table_sizes)
    sparse = np.empty((n, num_features), dtype=np.int64)
    categorical = np.zeros(n)
    for f, rows in enumerate(table_sizes):
        sparse[:, f] = powerlaw_ids(rng, rows, n, cfg.zipf_exponent)
        categorical += id_effects(seed, f, sparse[:, f])
    counts = np.floor(rng.lognormal(mean=1.0, sigma=1.5, size=(n, num_dense)))
    dense = np.log1p(counts)
    # The planted dense weights and standardization constants depend on the seed only.
    w = np.random.default_rng([seed, 99]).standard_normal(num_dense)
    z = (dense - DENSE_MEAN) / DENSE_STD
    logit = (
        cfg.base_logit
        + cfg.categorical_signal * categorical / np.sqrt(num_features)
        + cfg.dense_signal * (z @ w) / np.linalg.norm(w)
    )
    p = 1.0 / (1.0 + np.exp(-logit))
    labels = (rng.random(n) < p).astype(np.float32)
    return SyntheticSplit(ClickData.from_numpy(dense, sparse, labels), p)


# Moments of log(1 + floor(X)), X ~ LogNormal(1, 1.5), measured over 10^7 draws; used to
# standardize the dense features in the planted model (any fixed constants would do).
DENSE_MEAN = 1.337
DENSE_STD = 1.154
