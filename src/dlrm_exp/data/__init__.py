"""Data room: each source turns its own ``data`` config into train / val / test
:class:`ClickData`, and batches are dealt to ranks from them.

Owns: the sources (``synthetic``, ``criteo_tsv``, ``criteo_npy``, ``multi_hot``, ``parquet``
with ``parquet_files``), the feature schema's decoding of raw columns shared by ``parquet`` and
``criteo_tsv`` (``decode``, with the id policies, ``id_policy``), input paths (``paths``),
batches
(``batches``, ``row_span``), the Criteo text format (``criteo_format``) and preprocessing with
the TSV parser (``preprocess/``), the splits and their record (``splits``).

May import: config, util, errors.
"""

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from dlrm_exp.config import (
    CriteoMultiHotDataConfig,
    CriteoNpyDataConfig,
    CriteoTsvDataConfig,
    DataConfig,
    FileSplitsConfig,
    ParquetDataConfig,
    SyntheticDataConfig,
)
from dlrm_exp.config.data import CONVERSION, FILES, IDS
from dlrm_exp.data.batches import ClickData, iter_batches, per_rank_sizes
from dlrm_exp.data.criteo_npy import conversion_records, day_files, load_criteo_npy
from dlrm_exp.data.criteo_tsv import (
    check_skipped_rows,
    criteo_id_kinds,
    inputs_read,
    load_criteo_tsv,
)
from dlrm_exp.data.multi_hot import MultiHot
from dlrm_exp.data.parquet import ParquetSplit, load_parquet
from dlrm_exp.data.parquet_files import resolve_parquet_paths
from dlrm_exp.data.paths import files_digest, resolve_inputs, resolve_paths
from dlrm_exp.data.splits import DataInfo, DataSplits, check_split_rows
from dlrm_exp.data.synthetic import generate
from dlrm_exp.errors import DataError
from dlrm_exp.util.rank_zero import is_rank_zero

__all__ = [
    "ClickData", "DataInfo", "DataSplits", "ParquetSplit", "check_input_paths", "input_digests",
    "is_generated", "iter_batches", "load_splits", "npy_folder", "per_rank_sizes",
]  # fmt: skip

log = logging.getLogger(__name__)


def is_generated(cfg: DataConfig) -> bool:
    """Whether ``cfg``'s rows are generated (synthetic, or multi-hot without a ``path``) rather
    than read from files: generating cannot fail, reading can."""
    if isinstance(cfg, CriteoMultiHotDataConfig):
        return not cfg.path
    return isinstance(cfg, SyntheticDataConfig)


def check_input_paths(cfg: DataConfig, scored: tuple[str, ...] | None = None) -> None:
    """Every input path of ``cfg`` the job reads (``scored``: :meth:`DataConfig.read_inputs`)
    names at least one file, and no file is named twice (before any worker starts): a file
    under ``data.path`` and ``data.val_path`` would have its rows trained on and validated on,
    one listed twice trained on twice.

    Raises:
        DataError: a path names nothing (the config key and the path), or a file is named
            twice (the file and both keys).
    """
    resolve_inputs(cfg.read_inputs(scored), _resolver(cfg))


def npy_folder(cfg: DataConfig) -> Path | None:
    """The folder of npy days ``cfg`` reads (``data=criteo_npy``, ``data=criteo_multihot``
    with a ``path``), ``~`` expanded; None for other sources, or generated multi-hot rows."""
    if isinstance(cfg, (CriteoNpyDataConfig, CriteoMultiHotDataConfig)) and cfg.path:
        return Path(cfg.path).expanduser()
    return None


def _resolver(cfg: DataConfig) -> Callable[[list[str], str], list[Path]]:
    """How ``cfg``'s source turns a key's paths into files (Parquet: globs, ``*.parquet``;
    a folder of npy days: its day files, :func:`~dlrm_exp.data.criteo_npy.day_files`)."""
    if isinstance(cfg, ParquetDataConfig):
        return resolve_parquet_paths
    if isinstance(cfg, (CriteoNpyDataConfig, CriteoMultiHotDataConfig)):
        return _npy_files
    return resolve_paths


def _npy_files(paths: list[str], key: str) -> list[Path]:
    """The day files of each folder in ``paths`` (a file: itself), for ``key``."""
    files: list[Path] = []
    for path in paths:
        folder = Path(path).expanduser()
        files += day_files(folder) if folder.is_dir() else resolve_paths([path], key)
    return files


def input_digests(cfg: DataConfig) -> dict[str, str]:
    """``{"data.path.files": files_digest, ...}``: for each input path of ``cfg``
    (:meth:`DataConfig.input_paths`), the digest of the files it names now
    (:func:`~dlrm_exp.data.paths.files_digest`), which a checkpoint records beside the path:
    a resume whose path reads other files (a day added to the folder, a glob matching more)
    validates on other rows where validation is cut from them. A path that names nothing
    here has none (the job's own read reports it). An npy folder ``mode=preprocess`` wrote
    also has ``data.path.conversion`` and ``data.path.ids``
    (:func:`~dlrm_exp.data.criteo_npy.conversion_records`)."""
    digests = {}
    for key, paths in cfg.input_paths().items():
        try:
            digests[f"{key}{FILES}"] = files_digest(_resolver(cfg)(paths, key))
        except (DataError, OSError):
            continue
    folder = npy_folder(cfg)
    if folder is not None:
        records = conversion_records(folder)
        suffixes = {"conversion": CONVERSION, "ids": IDS}
        digests.update({f"data.path{suffixes[k]}": v for k, v in records.items()})
    return digests


def load_splits(
    cfg: DataConfig,
    table_sizes: list[int],
    num_dense: int,
    seed: int,
    scored: tuple[str, ...] | None = None,
) -> DataSplits:
    """Load or generate the splits for tables of ``table_sizes`` rows (``scored``: the only
    splits the job reads, where a source can skip the others' files; None: all).

    Raises:
        DataError: the data cannot be read (see the source's own docs).
        TypeError: ``cfg`` is not a known data config.
    """
    if isinstance(cfg, CriteoMultiHotDataConfig):
        return _multi_hot_splits(cfg, table_sizes, num_dense, seed)
    if isinstance(cfg, SyntheticDataConfig):
        return _synthetic_splits(cfg, table_sizes, num_dense, seed)
    if isinstance(cfg, CriteoTsvDataConfig):
        train, val, test, report = load_criteo_tsv(cfg, scored)
        read = report.as_dict()
        if scored is None and is_rank_zero():  # training: reported and goes on, said once
            _warn_skipped(read, cfg.max_skipped_fraction)
        kinds = criteo_id_kinds(cfg.feature_schema())
        info = DataInfo.of_splits(train, val, test, read=read, id_kinds=kinds)
        return _counted(DataSplits(train, val, test, info), cfg, scored)
    if isinstance(cfg, CriteoNpyDataConfig):
        train, val, test, info = load_criteo_npy(cfg, table_sizes, seed)
        folder = str(Path(cfg.path).expanduser().resolve())
        return DataSplits(train, val, test, replace(info, folder=folder))
    if isinstance(cfg, ParquetDataConfig):
        return _counted(load_parquet(cfg, scored), cfg, scored)
    raise TypeError(f"unknown data config {type(cfg).__name__}")


def _counted(
    splits: DataSplits, cfg: FileSplitsConfig, scored: tuple[str, ...] | None
) -> DataSplits:
    """``splits`` of a file source with the row counts of the splits it read (``scored``:
    :func:`load_splits`'), checked (:func:`check_split_rows`): a job scoring ``scored`` records
    those splits, and the training split where ``data.path`` was read (a split never read had
    "0" rows recorded: review)."""
    if scored is not None:
        read_path = "data.path" in cfg.read_inputs(scored)
        splits.info.rows = {k: n for k, n in splits.info.rows.items()
                            if k in scored or (k == "train" and read_path)}  # fmt: skip
    check_split_rows(splits.info.rows, cfg.cut_fractions(), scored)
    return splits


def _warn_skipped(read: dict, limit: float | None) -> None:
    """Warn (the console's WARNING, not only the summary's counts) when training skips more
    rows than ``data.max_skipped_fraction`` of an input (``data.path``, ``data.val_path``,
    ``data.test_path``, each on its own: a test file of Criteo's unlabeled ``test.txt`` was
    pooled with the training rows and passed, its split scored on 3 rows of 1,000: data
    review), with the reasons and the first bad lines: the limit refuses ``mode=evaluate``,
    ``predict`` and ``preprocess``; training goes on with the valid rows."""
    for key in sorted(read.get("inputs", {"data.path": None})):
        try:
            check_skipped_rows(
                inputs_read(read, {key}),
                limit,
                "read",
                fix="Training goes on with the valid rows",
                source=key,
            )
        except DataError as err:
            log.warning("%s", err)


def _synthetic_splits(
    cfg: SyntheticDataConfig, table_sizes: list[int], num_dense: int, seed: int
) -> DataSplits:
    """The three generated splits (streams 0, 1, 2 of ``seed``) with their Bayes AUROC."""
    sizes = (cfg.num_train_samples, cfg.num_val_samples, cfg.num_test_samples)
    train, val, test = (
        generate(cfg, table_sizes, num_dense, seed, n, stream) for stream, n in enumerate(sizes)
    )
    info = DataInfo.of_splits(
        train.data,
        val.data,
        test.data,
        bayes_auroc={"val": val.bayes_auroc(), "test": test.bayes_auroc()},
    )
    return DataSplits(train.data, val.data, test.data, info)


def _multi_hot_splits(
    cfg: CriteoMultiHotDataConfig, table_sizes: list[int], num_dense: int, seed: int
) -> DataSplits:
    """One-hot splits (from ``cfg.path`` as ``criteo_npy``, else synthetic) whose batches
    expand every id into its MLPerf multi-hot ids."""
    if cfg.path:
        one_hot = load_splits(
            CriteoNpyDataConfig(path=cfg.path, dataset=cfg.dataset, mmap_mode=cfg.mmap_mode),
            table_sizes,
            num_dense,
            seed,
        )
    else:
        one_hot = _synthetic_splits(cfg, table_sizes, num_dense, seed)
    expander = MultiHot(
        table_sizes, cfg.multi_hot_sizes, cfg.multi_hot_distribution, cfg.max_lookup_gib
    )
    info = replace(
        one_hot.info,
        multi_hot_sizes=list(expander.multi_hot_sizes),
        multi_hot_distribution=cfg.multi_hot_distribution.value,
        bayes_auroc=None,  # the planted signal is on the one-hot ids only
    )
    return DataSplits(
        *(
            replace(split, multi_hot=expander)
            for split in (one_hot.train, one_hot.val, one_hot.test)
        ),
        info=info,
    )
