"""Data sources: each turns its own ``data`` config into train / val / test :class:`ClickData`."""

from dataclasses import dataclass, field
from typing import Any

from dlrm_exp.config import (
    CriteoNpyDataConfig,
    CriteoTsvDataConfig,
    DataConfig,
    SyntheticDataConfig,
)
from dlrm_exp.data.batches import ClickData, iter_batches, per_rank_sizes
from dlrm_exp.data.criteo_npy import load_criteo_npy
from dlrm_exp.data.criteo_tsv import load_criteo_tsv
from dlrm_exp.data.synthetic import generate

__all__ = ["ClickData", "DataSplits", "data_paths", "iter_batches", "load_splits", "per_rank_sizes"]


def data_paths(cfg: DataConfig) -> dict[str, list[str]]:
    """The input paths of a data config by config key (empty for generated data)."""
    if isinstance(cfg, CriteoTsvDataConfig):
        keys = {
            "data.path": cfg.path,
            "data.val_path": cfg.val_path,
            "data.test_path": cfg.test_path,
        }
        return {k: v for k, v in keys.items() if v}
    if isinstance(cfg, CriteoNpyDataConfig):
        return {"data.path": [cfg.path]}
    return {}


@dataclass
class DataSplits:
    """Train / validation / test rows plus facts about them for ``metrics.json``
    (row counts, skipped rows, and for synthetic data the Bayes-optimal AUROC per split)."""

    train: ClickData
    val: ClickData
    test: ClickData
    info: dict[str, Any] = field(default_factory=dict)


def load_splits(cfg: DataConfig, table_sizes: list[int], num_dense: int, seed: int) -> DataSplits:
    """Load or generate the splits for tables of ``table_sizes`` rows.

    Raises:
        DataError: the data cannot be read (see the source's own docs).
        TypeError: ``cfg`` is not a known data config.
    """
    if isinstance(cfg, SyntheticDataConfig):
        sizes = (cfg.num_train_samples, cfg.num_val_samples, cfg.num_test_samples)
        train, val, test = (
            generate(cfg, table_sizes, num_dense, seed, n, stream) for stream, n in enumerate(sizes)
        )
        info = {
            "rows": {"train": len(train.data), "val": len(val.data), "test": len(test.data)},
            "bayes_auroc": {"val": val.bayes_auroc(), "test": test.bayes_auroc()},
        }
        return DataSplits(train.data, val.data, test.data, info)
    if isinstance(cfg, CriteoTsvDataConfig):
        train, val, test, report = load_criteo_tsv(cfg, table_sizes)
        info = {
            "rows": {"train": len(train), "val": len(val), "test": len(test)},
            "read": report.as_dict(),
        }
        return DataSplits(train, val, test, info)
    if isinstance(cfg, CriteoNpyDataConfig):
        train, val, test, info = load_criteo_npy(cfg, table_sizes, seed)
        return DataSplits(train, val, test, info)
    raise TypeError(f"unknown data config {type(cfg).__name__}")
