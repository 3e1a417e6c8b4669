"""Synthetic click logs: deterministic, Criteo-shaped, skewed ids, a real planted signal."""

import numpy as np
import torch

from dlrm_exp.config import SyntheticDataConfig
from dlrm_exp.data import load_splits
from dlrm_exp.data.synthetic import generate, id_effects, powerlaw_ids

SIZES = [1000, 3, 500] + [50] * 23


def test_deterministic_per_seed_and_streams_differ():
    cfg = SyntheticDataConfig(num_train_samples=2000, num_val_samples=500, num_test_samples=500)
    a = load_splits(cfg, SIZES, 13, seed=7)
    b = load_splits(cfg, SIZES, 13, seed=7)
    c = load_splits(cfg, SIZES, 13, seed=8)
    assert np.array_equal(a.train.sparse.numpy(), b.train.sparse.numpy())
    assert np.array_equal(a.val.labels.numpy(), b.val.labels.numpy())
    assert not np.array_equal(a.train.sparse.numpy(), c.train.sparse.numpy())
    assert not np.array_equal(a.train.sparse[:500].numpy(), a.val.sparse.numpy())
    assert a.info.rows == {"train": 2000, "val": 500, "test": 500}


def test_shapes_ranges_and_dtypes():
    cfg = SyntheticDataConfig(num_train_samples=3000)
    split = generate(cfg, SIZES, 13, seed=0, n=3000, stream=0)
    d = split.data
    assert (
        d.dense.shape == (3000, 13) and d.sparse.shape == (3000, 26) and d.labels.shape == (3000,)
    )
    assert (d.sparse.min(0).values >= 0).all()
    assert (d.sparse.max(0).values < torch.tensor(SIZES)).all()
    assert set(d.labels.unique().tolist()) == {0.0, 1.0}
    assert (d.dense >= 0).all()  # log(1 + count)


def test_ids_follow_a_power_law():
    ids = powerlaw_ids(np.random.default_rng(0), 1000, 200_000, 1.1)
    counts = np.bincount(ids, minlength=1000)
    assert counts[0] > 20 * counts[500]  # P(1)/P(501) = 501**1.1 ~ 930 in theory
    assert counts[0] / len(ids) > 0.05


def test_effects_are_standard_normal_and_fixed():
    e = id_effects(0, 3, np.arange(100_000))
    assert abs(e.mean()) < 0.02 and abs(e.std() - 1) < 0.02
    assert np.array_equal(id_effects(0, 3, np.array([5, 9])), e[[5, 9]])
    assert not np.allclose(id_effects(1, 3, np.arange(10)), e[:10])


def test_bayes_auroc_reflects_signal_strength():
    strong = SyntheticDataConfig(categorical_signal=2.0, dense_signal=0.5)
    none = SyntheticDataConfig(categorical_signal=0.0, dense_signal=0.0)
    s = generate(strong, SIZES, 13, seed=0, n=20_000, stream=1).bayes_auroc()
    n = generate(none, SIZES, 13, seed=0, n=20_000, stream=1).bayes_auroc()
    assert s > 0.75
    assert n == 0.5  # constant probabilities: every ranking ties


def test_bayes_auroc_of_a_split_with_one_class_is_undefined():
    """It read 0.0 (torchmetrics' value for one class); like the model's AUROC it is n/a."""
    cfg = SyntheticDataConfig(base_logit=-30.0)  # no click in a few rows
    assert generate(cfg, SIZES, 13, seed=0, n=3, stream=1).bayes_auroc() is None
    assert generate(cfg, SIZES, 13, seed=0, n=1, stream=2).bayes_auroc() is None
