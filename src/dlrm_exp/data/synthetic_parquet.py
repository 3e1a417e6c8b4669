"""Synthetic click logs in Parquet for any feature schema, with a planted logistic signal, so a
layout can be tried (and tested) before real data exists.

As :mod:`dlrm_exp.data.synthetic`: every (feature, raw id) has a fixed N(0, 1) effect
(:func:`~dlrm_exp.data.synthetic.id_effects`), raw ids follow a bounded power law over
``num_embeddings`` values (or a smaller vocabulary), a list feature contributes the sum of its
ids' effects over sqrt(mean list length) (what a sum-pooled bag can represent), dense columns
are log-normal counts, and

    p = sigmoid(base_logit + categorical_signal * sum_f e_f / sqrt(F)
                + dense_signal * (w . z(log(1 + dense))) / ||w||)

Labels are Bernoulli(p); the AUROC of p is the Bayes-optimal AUROC of the rows written.
"""

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from dlrm_exp.config import FeatureSchema
from dlrm_exp.data.parquet_files import write_parquet_atomic
from dlrm_exp.data.synthetic import DENSE_MEAN, DENSE_STD, id_effects, oracle_auroc, powerlaw_ids


@dataclass
class SyntheticLayout:
    """How the raw columns look.

    Attributes:
        string_features: features whose ids are written as strings (``"id_<n>"``), the others
            as int64.
        vocabulary: ``{feature: distinct raw ids}`` (default: the feature's ``num_embeddings``;
            fewer than the table's rows leaves fewer hash collisions under ``modulo``).
        mean_list_length: mean ids per row of a list feature (1 + Poisson(mean - 1)).
        zipf_exponent: power-law exponent of id frequencies.
        categorical_signal / dense_signal / base_logit: the planted model (see the module).
    """

    string_features: list[str] = field(default_factory=list)
    vocabulary: dict[str, int] = field(default_factory=dict)
    mean_list_length: float = 4.0
    zipf_exponent: float = 1.1
    categorical_signal: float = 1.5
    dense_signal: float = 0.5
    base_logit: float = -1.4


def write_synthetic_parquet(
    schema: FeatureSchema,
    path: Path,
    num_rows: int,
    seed: int = 0,
    row_group_size: int = 65536,
    layout: SyntheticLayout | None = None,
    stream: int = 0,
) -> float | None:
    """Write ``num_rows`` rows with ``schema``'s columns to ``path`` (atomically: a temporary
    file renamed into place) and return their Bayes-optimal AUROC (None for one class,
    :func:`~dlrm_exp.data.synthetic.oracle_auroc`).

    The planted model (effects, dense weights) depends on ``seed`` only; ``stream`` draws other
    rows from it, so train / val / test files are streams 0, 1, 2 of one seed (used with
    ``data.val_path`` / ``data.test_path``, each file's Bayes AUROC is that split's).
    """
    layout = layout or SyntheticLayout()
    rng = np.random.default_rng([seed, 7, stream])
    columns: dict[str, pa.Array] = {}
    categorical = np.zeros(num_rows)
    for f, (name, feature) in enumerate(schema.sparse.items()):
        as_string = name in layout.string_features
        vocabulary = layout.vocabulary.get(name, feature.num_embeddings)
        if feature.multi_hot:
            lengths = 1 + rng.poisson(max(layout.mean_list_length - 1, 0), num_rows)
            ids = powerlaw_ids(rng, vocabulary, int(lengths.sum()), layout.zipf_exponent)
            offsets = np.concatenate([[0], np.cumsum(lengths)])
            sums = np.add.reduceat(id_effects(seed, f, ids), offsets[:-1])
            effects = sums / np.sqrt(layout.mean_list_length)
            columns[feature.column] = pa.ListArray.from_arrays(
                pa.array(offsets, pa.int32()), _id_array(ids, as_string)
            )
        else:
            ids = powerlaw_ids(rng, vocabulary, num_rows, layout.zipf_exponent)
            effects = id_effects(seed, f, ids)
            columns[feature.column] = _id_array(ids, as_string)
        categorical += effects
    counts = np.floor(rng.lognormal(mean=1.0, sigma=1.5, size=(num_rows, schema.num_dense)))
    z = (np.log1p(counts) - DENSE_MEAN) / DENSE_STD
    w = np.random.default_rng([seed, 99]).standard_normal(schema.num_dense)
    logit = (
        layout.base_logit
        + layout.categorical_signal * categorical / np.sqrt(len(schema.sparse))
        + layout.dense_signal * (z @ w) / np.linalg.norm(w)
    )
    p = 1.0 / (1.0 + np.exp(-logit))
    labels = (rng.random(num_rows) < p).astype(np.int8)
    for j, dense in enumerate(schema.dense):
        columns[dense.column] = pa.array(counts[:, j] if dense.log1p else np.log1p(counts[:, j]))
    table = pa.table({schema.label: pa.array(labels), **columns})
    write_parquet_atomic(table, path, row_group_size)
    return oracle_auroc(p, labels)


def _id_array(ids: np.ndarray, as_string: bool) -> pa.Array:
    if as_string:
        return pa.array([f"id_{i}" for i in ids.tolist()], pa.string())
    return pa.array(ids, pa.int64())
