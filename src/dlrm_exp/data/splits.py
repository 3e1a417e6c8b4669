"""The train / validation / test splits a data source returns, and what it reports about them
(:class:`DataInfo`, written as ``metrics.json``'s ``data``)."""

from dataclasses import asdict, dataclass, field
from datetime import timedelta
from fractions import Fraction
from typing import Any

from dlrm_exp.data.batches import ClickData
from dlrm_exp.errors import DataError

#: How long the other ranks wait for rank 0's scan of a click log's labels (and Parquet
#: footers): a large log on a shared file system may take longer than
#: ``hardware.collective_timeout_s``.
SCAN_WAIT = timedelta(hours=24)


def fraction_rows(rows: int, fraction: float) -> int:
    """The rows ``fraction`` of ``rows`` takes, rounded down, with the fraction as written
    (``0.29`` of 100 is 29: ``int(100 * 0.29)`` is 28, the float product being 28.999...)."""
    return int(Fraction(repr(fraction)) * rows)


@dataclass
class DataInfo:
    """Facts about the loaded data, for ``metrics.json`` (``data``); fields a source does not
    report stay None and are left out of the JSON.

    Attributes:
        rows: rows per split, ``{"train": n, "val": n, "test": n}``.
        read: the read report of ``data=criteo_tsv`` (the files, rows read / valid / padded
            / skipped, bad lines with their line numbers) and ``data=parquet`` (the files,
            rows read, null labels, row groups, nulls).
        bayes_auroc: the Bayes-optimal AUROC per split (synthetic data only; None for a
            split of one class).
        days: ``data=criteo_npy``: the day numbers read.
        folder: ``data=criteo_npy`` / ``criteo_multihot``: the folder read, resolved (a
            ``${oc.env:...}`` path was recorded nowhere in the run folder: review).
        dataset: ``data=criteo_npy``: the split rule (``criteo_1tb`` / ``criteo_kaggle``).
        mmap_mode: ``data=criteo_npy``: whether the days are memory-mapped.
        multi_hot_sizes: ``data=criteo_multihot``: ids per table and sample.
        multi_hot_distribution: ``data=criteo_multihot``: how the extra ids are drawn.
        id_kinds: ``{feature: "integer" | "string"}``, how the data stores the ids of each
            feature whose id policy hashes the two kinds differently (``modulo``,
            ``managed_collision``); a checkpoint records it (None: no schema).
    """

    rows: dict[str, int] = field(default_factory=dict)
    read: dict[str, Any] | None = None
    bayes_auroc: dict[str, float | None] | None = None
    days: list[int] | None = None
    folder: str | None = None
    dataset: str | None = None
    mmap_mode: bool | None = None
    multi_hot_sizes: list[int] | None = None
    multi_hot_distribution: str | None = None
    id_kinds: dict[str, str] | None = None

    @classmethod
    def of_splits(
        cls, train: ClickData, val: ClickData, test: ClickData, **facts: Any
    ) -> "DataInfo":
        """The record of three splits (their row counts) and the source's ``facts``."""
        return cls(rows={"train": len(train), "val": len(val), "test": len(test)}, **facts)

    def to_json(self) -> dict[str, Any]:
        """The reported fields as JSON content (None fields left out)."""
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class DataSplits:
    """Train / validation / test rows plus what the source reported about them."""

    train: ClickData
    val: ClickData
    test: ClickData
    info: DataInfo = field(default_factory=DataInfo)


def check_split_rows(
    rows: dict[str, int], fractions: dict[str, float], scored: tuple[str, ...] | None
) -> None:
    """No split the job reads is empty: the training split, and a validation or test split
    cut from ``data.path`` by a fraction above 0 (``fractions``: ``data.val_fraction`` /
    ``data.test_fraction`` of the splits without a file of their own); with ``scored``
    (``mode=evaluate``), those of the splits it scores (a fraction of 0 asks for none: its
    split is reported as 0 samples). An empty one reported "0 samples" and no metric
    (``data=criteo_npy`` refuses it too).

    Raises:
        DataError: naming the rows of each split and the fractions.
    """
    asked = ("train", *(s for s, f in fractions.items() if f > 0))  # a fraction of 0: none
    wanted = [s for s in scored or asked if s in asked or s not in fractions]
    empty = [s for s in wanted if s in rows and rows[s] == 0]
    if empty:
        split = " and ".join(empty) + (" split is" if len(empty) == 1 else " splits are")
        counts = ", ".join(f"{s} {n:,}" for s, n in rows.items())
        given = ", ".join(f"data.{s}_fraction={f:g}" for s, f in fractions.items())
        raise DataError(
            f"data.path: the rows split into {counts} ({given}): the {split} empty; every "
            "split read needs at least one row: give more rows (or, to train without a "
            "split, set its fraction to 0)"
        )


def read_summary(read: dict[str, Any]) -> str:
    """One line of a source's read report (``DataInfo.read``) for the run summary."""
    if "skipped_null_label" in read:  # data=parquet
        nulls = read["nulls"]
        filled = ", ".join(f"{c} {n:,}" for c, n in nulls.items()) if nulls else "none"
        return (
            f"data {read['rows_read']:,} rows read in {read['row_groups']} row groups, "
            f"{read['skipped_null_label']:,} skipped (null label); nulls read as 0 / empty "
            f"bags: {filled}"
        )
    return (
        f"data {read['rows_read']:,} rows read, {read['rows_valid']:,} valid, "
        f"{read['rows_padded']:,} padded, {read['rows_skipped']:,} skipped"
    )
