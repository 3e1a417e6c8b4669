"""A feature schema applied to a table of raw columns: the one decoding of every file format
(``data=parquet``'s row groups, ``data=criteo_tsv``'s parsed blocks) into table rows and dense
inputs, and the :class:`Rows` that make TorchRec ``Batch``es.
"""

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from torchrec.datasets.utils import Batch
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from dlrm_exp.config import FeatureSchema
from dlrm_exp.data.id_policy import to_rows
from dlrm_exp.errors import DataError
from dlrm_exp.util.dense_transform import log1p_clipped


@dataclass
class Rows:
    """Decoded rows: dense (n, num_dense) float32, labels (n,) float32 and, per sparse feature,
    its ids as table rows (values (sum of lengths,) int64, lengths (n,) int32)."""

    dense: np.ndarray
    labels: np.ndarray
    values: list[np.ndarray]
    lengths: list[np.ndarray]

    def __len__(self) -> int:
        return len(self.labels)

    @staticmethod
    def concat(parts: list["Rows"]) -> "Rows":
        """The rows of ``parts`` one after the other (``parts[0]`` itself when alone)."""
        if len(parts) == 1:
            return parts[0]
        features = range(len(parts[0].values))
        return Rows(
            np.concatenate([p.dense for p in parts]),
            np.concatenate([p.labels for p in parts]),
            [np.concatenate([p.values[f] for p in parts]) for f in features],
            [np.concatenate([p.lengths[f] for p in parts]) for f in features],
        )

    def slice(self, start: int, stop: int) -> "Rows":
        """Rows ``[start, stop)`` (``stop`` past the end: to the end), views of the arrays;
        each feature's values cut at the summed lengths before ``start`` and ``stop``."""
        values = []
        for v, lengths in zip(self.values, self.lengths, strict=True):
            lo = int(lengths[:start].sum())
            hi = len(v) if stop >= len(self) else lo + int(lengths[start:stop].sum())
            values.append(v[lo:hi])
        return Rows(
            self.dense[start:stop],
            self.labels[start:stop],
            values,
            [lengths[start:stop] for lengths in self.lengths],
        )

    def batch(self, keys: list[str]) -> Batch:
        """These rows as one TorchRec ``Batch`` (KJT values key-major, as TorchRec's)."""
        kjt = KeyedJaggedTensor(
            keys=keys,
            values=torch.from_numpy(np.concatenate(self.values)),
            lengths=torch.from_numpy(np.concatenate(self.lengths)),
            stride=len(self),
        )
        return Batch(
            dense_features=torch.from_numpy(self.dense),
            sparse_features=kjt,
            labels=torch.from_numpy(self.labels),
        )


def decode(table: pa.Table, schema: FeatureSchema, where: str) -> Rows:
    """The rows of ``table`` (the schema's columns of a row group or a parsed block, label
    nulls already dropped).

    Null (and NaN, infinite, or beyond float32's range) dense values read as 0, null sparse
    entries (and null ids inside a list) as empty bags, columns typed ``null`` (nulls only)
    alike; ``log1p`` dense columns become ``log(1 + max(x, 0))`` (:func:`_dense_values`).

    Raises:
        DataError: a label other than 0 / 1; ids the feature's id policy refuses (see
            :func:`~dlrm_exp.data.id_policy.to_rows`).
    """
    n = table.num_rows
    labels = _numbers(table.column(schema.label)).astype(np.float32)
    refuse_non_clicks(labels, where, schema.label)
    dense = np.zeros((n, schema.num_dense), dtype=np.float32)
    for j, spec in enumerate(schema.dense):
        dense[:, j] = _dense_values(_numbers(table.column(spec.column)), spec.log1p)
    values, lengths = [], []
    for name in schema.feature_names:  # the batch's key order (tables grouped)
        feature = schema.sparse[name]
        column = table.column(feature.column).combine_chunks()
        if pa.types.is_null(column.type):  # nulls only (pandas types an all-None list so)
            column = column.cast(pa.list_(pa.int64()) if feature.multi_hot else pa.int64())
        if feature.multi_hot:
            counts = pc.list_value_length(column).fill_null(0)
            flat = pc.list_flatten(column)
            keep = flat.is_valid()
            if flat.null_count:  # drop null ids inside lists from their bags
                owner = np.repeat(np.arange(n), counts.to_numpy(zero_copy_only=False))
                counts = pa.array(
                    np.bincount(owner[keep.to_numpy(zero_copy_only=False)], minlength=n)
                )
                flat = flat.filter(keep)
        else:
            counts = column.is_valid().cast(pa.int32())
            flat = column.drop_null()
        if pa.types.is_null(flat.type):  # a column (or lists) of nulls only: no id
            flat = pa.array([], pa.int64())
        where_column = f"{where}: column {feature.column!r} (sparse feature {name})"
        values.append(to_rows(flat, feature.id_policy, feature.num_embeddings, where_column))
        lengths.append(counts.to_numpy(zero_copy_only=False).astype(np.int32))
    return Rows(dense, labels, values, lengths)


def refuse_non_clicks(labels: np.ndarray, where: str, column: str) -> None:
    """Refuse click labels (N,) other than 0 / 1.

    Raises:
        DataError: ``where`` (file and row group or lines), the count, the first bad value
            and ``column``.
    """
    bad = (labels != 0) & (labels != 1)
    if bad.any():
        raise DataError(
            f"{where}: {int(bad.sum())} of {len(labels)} labels are not 0 or 1 (first: "
            f"{labels[bad][0]:g}) in column {column!r}: a click label is 0 / 1 or boolean"
        )


def is_label_type(kind: pa.DataType) -> bool:
    """Whether a column of ``kind`` can hold click labels: integers, floats or booleans."""
    return pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)


def is_dense_type(kind: pa.DataType) -> bool:
    """Whether a column of ``kind`` reads as a dense feature (:func:`_numbers`): a label's
    types, decimals (as float64: a SQL or Spark export's prices), or nulls only. The one
    rule of training, the Parquet files' check and ``mode=schema`` (each had its own, and
    decimals were added to each: re-read)."""
    return is_label_type(kind) or pa.types.is_decimal(kind) or pa.types.is_null(kind)


def _numbers(column: pa.ChunkedArray) -> np.ndarray:
    """A numeric, decimal or boolean column (or one of nulls only) as float64, nulls, NaN and
    infinities as 0."""
    if pa.types.is_boolean(column.type) or pa.types.is_null(column.type):
        column = column.cast(pa.int8())
    elif pa.types.is_decimal(column.type):  # (a SQL or Spark export's prices: review)
        column = column.cast(pa.float64())
    values = column.fill_null(0).to_numpy().astype(np.float64, copy=False)
    return np.nan_to_num(values, nan=0.0, posinf=0.0, neginf=0.0)


#: The largest float32: a dense value beyond it would be inf in the batch.
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _dense_values(x: np.ndarray, log1p: bool) -> np.ndarray:
    """One dense column (N,) float64, finite, as the batch holds it, float32: with ``log1p``
    ``log(1 + max(x, 0))`` (:func:`log1p_clipped`; in float64 where a value lies beyond
    float32's range, so 1e300 reads as 690.8, not inf), else the value, one beyond float32's
    range read as 0, as an infinity is (it would be inf in the batch: a NaN loss)."""
    beyond = np.abs(x) > _FLOAT32_MAX
    if not beyond.any():
        return log1p_clipped(x) if log1p else x
    if log1p:
        return np.log1p(np.maximum(x, 0)).astype(np.float32)
    return np.where(beyond, 0.0, x)


__all__ = ["Rows", "decode", "refuse_non_clicks"]
