"""Schemas of the ``data`` group: one dataclass per data option, all extending
:class:`DataConfig`, whose methods answer what other rooms need to know about any of them."""

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar

from omegaconf import MISSING

from dlrm_exp.config.checks import field_defaults, require, require_positive, require_read
from dlrm_exp.config.criteo import (
    CRITEO_COLUMNS,
    CRITEO_LABEL,
    CRITEO_NUM_DENSE,
    CRITEO_NUM_SPARSE,
    MLPERF_MULTI_HOT_SIZES,
)
from dlrm_exp.config.schema import FeatureSchema
from dlrm_exp.errors import ConfigError

#: The data keys that decide one split's rows alone, or the training rows' order (of the
#: options without a split file of their own: :class:`FileSplitsConfig` decides its own).
#: Each generated split is its own stream of the seed, so its size moves no other split.
_ONE_SPLIT = {
    "data.num_train_samples": "train",
    "data.num_val_samples": "val",
    "data.num_test_samples": "test",
    "data.shuffle_training_set": "train",
    "data.shuffle_batches": "train",
}
#: The suffix of the setting that records the files an input path names
#: (``data.path.files``: :func:`dlrm_exp.data.input_digests`); no key of the config.
FILES = ".files"
#: The suffix of the setting that records how ``mode=preprocess`` converted an npy folder
#: (``data.path.conversion``: its days' markers, the contiguous re-index); no key either.
CONVERSION = ".conversion"
#: The suffix of the setting that records how an npy folder's ids map to table rows
#: (``data.path.ids``: raw, hashed for tables of some sizes, a contiguous re-index).
IDS = ".ids"


def input_path_key(key: str) -> str:
    """The input path setting a files, conversion or id-mapping record belongs to
    (``data.path.files``, ``data.path.conversion``, ``data.path.ids`` -> ``data.path``); any
    other key as it is."""
    return key.removesuffix(FILES).removesuffix(CONVERSION).removesuffix(IDS)


#: The schema keys of a feature that do not change how its ids are read.
_NOT_DECODING = (".pooling_factor", ".eviction_policy", ".eviction_interval", ".table")


@dataclass
class DataConfig:
    """Base of the ``data`` group: every data option extends it.

    Its methods answer, for any option, what the rest of the framework needs to know, so no
    caller probes for fields with ``getattr``.
    """

    def input_paths(self) -> dict[str, list[str]]:
        """The input paths by config key (e.g. ``{"data.path": [...]}``); empty for generated
        data."""
        return {}

    def read_inputs(self, scored: tuple[str, ...] | None = None) -> dict[str, list[str]]:
        """The :meth:`input_paths` a job reads that scores only the splits ``scored``
        (``mode=evaluate``; None: every input, as training reads them)."""
        return self.input_paths()

    def pooling_factors(self) -> list[float] | None:
        """Ids per sample of each feature, in the model's feature order, for the planner's
        cost model (None: one-hot)."""
        return None

    def shuffles_batches(self) -> bool:
        """Whether the training batches are visited in a new seeded order every epoch."""
        return False

    def order_depends_on_world_size(self) -> bool:
        """Whether the rows a training step reads depend on the number of ranks, beyond the
        samples trained: each rank reads a block of its own (Parquet), or the batches of
        ``ranks x train.batch_size`` rows are shuffled. A resume on another world size then
        trains some rows of the epoch twice and others not at all."""
        return self.shuffles_batches()

    def feature_schema(self) -> FeatureSchema | None:
        """The feature schema the model's tables and dense input come from (None: Criteo-shaped
        arrays, whose tables come from ``model.num_embeddings_per_feature``)."""
        return None

    def id_policies(self) -> dict[str, str] | None:
        """``{feature: id policy}`` of the feature schema: how raw ids become rows, which a
        checkpoint records and its users must share (None: no schema, ids are rows)."""
        schema = self.feature_schema()
        if schema is None:
            return None
        return {name: f.id_policy.value for name, f in schema.sparse.items()}

    @classmethod
    def tables_sized_by_model(cls) -> bool:
        """Whether ``model.num_embeddings_per_feature`` (one per schema feature, in order)
        replaces the schema's ``num_embeddings``: Criteo files, whose table sizes are the
        model presets' (tiny, MLPerf), not the data's."""
        return False

    def rows_differ(self, key: str, was: Any, now: Any, splits: tuple[str, ...]) -> bool:
        """Whether setting ``key`` changed from ``was`` to ``now`` gives other rows of
        ``splits`` (:meth:`decides_rows`; the values matter to a source with split files)."""
        return self.decides_rows(key, splits)

    def decides_rows(self, key: str, splits: tuple[str, ...]) -> bool:
        """Whether the setting ``key`` (``seed`` or a flat ``data.*`` key, as a checkpoint
        records them) decides which rows of ``splits`` (``"train"``, ``"val"``, ``"test"``)
        this data gives, or how they are decoded: a resume that changes one of validation's
        validates on other rows than its checkpoint's run
        (:func:`~dlrm_exp.loop.settings.validation_changes`), and ``mode=evaluate`` warns of
        one of the splits it scores (``modes.setup.warn_other_data_values``). Here every data
        key but those of other splits alone (:data:`_ONE_SPLIT`), and not ``seed``."""
        return key.startswith("data.") and _ONE_SPLIT.get(key, splits[0]) in splits


@dataclass
class SyntheticDataConfig(DataConfig):
    """Criteo-shaped synthetic click logs with a planted logistic signal (``data=synthetic``).

    Ids follow a bounded power law (Zipf-like, P(rank r) ~ r^-zipf_exponent) per table; the
    click logit is ``base_logit + categorical part + dense part``, where each (feature, id) has a
    fixed random effect. The true click probabilities give the Bayes-optimal AUROC.

    Attributes:
        num_train_samples / num_val_samples / num_test_samples: rows per split.
        zipf_exponent: power-law exponent of id frequencies (> 0; larger is more skewed).
        categorical_signal: standard deviation of the summed categorical logit part.
        dense_signal: standard deviation of the dense logit part.
        base_logit: logit intercept; -1.4 gives a click-through rate near 25 %.
    """

    num_train_samples: int = 1048576
    num_val_samples: int = 32768
    num_test_samples: int = 32768
    zipf_exponent: float = 1.1
    categorical_signal: float = 1.5
    dense_signal: float = 0.5
    base_logit: float = -1.4

    def decides_rows(self, key: str, splits: tuple[str, ...]) -> bool:
        """Generated rows: ``seed`` draws them, unless read from files (a path)."""
        if key == "seed":
            return not self.input_paths()
        return super().decides_rows(key, splits)

    def __post_init__(self) -> None:
        require_positive(
            {
                "data.num_train_samples": self.num_train_samples,
                "data.num_val_samples": self.num_val_samples,
                "data.num_test_samples": self.num_test_samples,
            }
        )
        require(self.zipf_exponent > 0, f"data.zipf_exponent must be > 0, got {self.zipf_exponent}")
        for name in ("categorical_signal", "dense_signal"):
            value = getattr(self, name)
            require(value >= 0, f"data.{name} must be >= 0, got {value}")
        require(
            math.isfinite(self.base_logit),
            f"data.base_logit must be a finite number, got {self.base_logit}",
        )


def _as_path_list(key: str, value: Any) -> list[str]:
    """``key``'s paths as a list (None: none).

    Raises:
        ConfigError: not a path or a list of paths, or an empty path (``data.path=``), which
            would read the current folder.
    """
    if value is None:
        return []
    paths = [value] if isinstance(value, str) else value
    if not isinstance(paths, (list, tuple)) or not all(isinstance(v, str) for v in paths):
        raise ConfigError(f"{key} must be a path or a list of paths, got {value!r}")
    if not all(p.strip() for p in paths):
        clear = "" if key == "data.path" else f"; {key}=null clears it"
        raise ConfigError(f"{key} holds an empty path, which names the current folder{clear}")
    return list(paths)


@dataclass
class FileSplitsConfig(DataConfig):
    """Data read from files, split into train / val / test by explicit files or by fractions
    (the base of ``data=criteo_tsv`` and ``data=parquet``).

    Attributes:
        path: the training files (a file, a folder, or a list of those; Parquet also takes
            globs).
        val_path / test_path: optional explicit validation / test files; when absent, the last
            ``val_fraction + test_fraction`` of the rows of ``path`` (in file order) are split
            off: validation first, then test.
        val_fraction / test_fraction: row fractions in [0, 1).
    """

    path: Any = MISSING
    val_path: Any = None
    test_path: Any = None
    val_fraction: float = 0.1
    test_fraction: float = 0.1

    def input_paths(self) -> dict[str, list[str]]:
        keys = {
            "data.path": self.path,
            "data.val_path": self.val_path,
            "data.test_path": self.test_path,
        }
        return {k: v for k, v in keys.items() if v}

    def split_source(self, split: str) -> str | None:
        """The input the rows of ``split`` (``train``, ``val``, ``test``) come from:
        ``data.<split>_path`` where it has files of its own, else ``data.path`` (the
        training rows; a validation or test split as a fraction of its rows), None for a
        validation or test split whose fraction is 0 (it has no rows)."""
        own = {"val": self.val_path, "test": self.test_path}.get(split)
        if own:
            return f"data.{split}_path"
        fraction = {"val": self.val_fraction, "test": self.test_fraction}.get(split)
        return None if fraction == 0 else "data.path"

    def cut_fractions(self) -> dict[str, float]:
        """``{split: fraction}`` of the validation and test splits cut from ``data.path``'s
        rows (a split read from a file of its own has none)."""
        return {
            split: fraction
            for split, fraction, own in (
                ("val", self.val_fraction, self.val_path),
                ("test", self.test_fraction, self.test_path),
            )
            if not own
        }

    def decides_rows(self, key: str, splits: tuple[str, ...]) -> bool:
        """A split's own file, or where it is cut from ``data.path`` the path and the cut:
        rows are train, then validation, then test, so validation's rows move with the test
        cut too, test's with its own alone (the training rows: any data key); and the schema
        keys that decode the rows (not the planner's ``pooling_factor``, the ``eviction_*``
        of managed tables or the ``table`` a feature shares)."""
        if key.startswith("data.schema."):
            return not key.endswith(_NOT_DECODING)
        key = input_path_key(key)  # the files a path names (modes.train.job_settings)
        if "train" in splits:
            return key.startswith("data.")
        return any(key in self._decided_by(split) for split in splits)

    def _decided_by(self, split: str) -> set[str]:
        if split == "val" and self.val_path or split == "test" and self.test_path:
            return {f"data.{split}_path"}
        keys = {"data.path", f"data.{split}_fraction", f"data.{split}_path"}
        if split == "val":  # the test rows are cut after it, unless read from a file
            keys |= {"data.test_path"} | (set() if self.test_path else {"data.test_fraction"})
        return keys

    def rows_differ(self, key: str, was: Any, now: Any, splits: tuple[str, ...]) -> bool:
        """Another split's own file for another (``data.test_path`` of one day, then of the
        next) moves no row of ``splits``: only whether that split is cut from ``data.path``
        does (a resume with another test file forgot its validations: review)."""
        other = {f"data.{s}_path" for s in ("val", "test")} - {f"data.{s}_path" for s in splits}
        if input_path_key(key) in other and was and now:
            return False
        return self.decides_rows(key, splits)

    def read_inputs(self, scored: tuple[str, ...] | None = None) -> dict[str, list[str]]:
        inputs = self.input_paths()
        if scored is None:
            return inputs
        sources = {self.split_source(split) for split in scored}
        return {key: paths for key, paths in inputs.items() if key in sources}

    #: What ``data.path`` names, for the refusal of a job that reads it without it.
    path_holds: ClassVar[str] = "files"

    def _check_files(self) -> None:
        """Paths as lists, the fractions in range. (``data.path`` may be empty where the job
        reads none of its rows: ``Config._check_data_path``.)"""
        self.path = _as_path_list("data.path", self.path)
        self.val_path = _as_path_list("data.val_path", self.val_path)
        self.test_path = _as_path_list("data.test_path", self.test_path)
        _check_fractions(self.val_fraction, self.test_fraction)


@dataclass
class CriteoTsvDataConfig(FileSplitsConfig):
    """Criteo Kaggle / Terabyte click-log TSV files (``data=criteo_tsv``), read through a
    feature schema as ``data=parquet`` reads its files.

    Attributes (besides :class:`FileSplitsConfig`'s; ``path``: a file, a folder, every file in
    it sorted, or a list of those):
        max_reported_bad_lines: how many malformed line numbers are kept in the report.
        max_skipped_fraction: ``mode=evaluate`` and ``mode=predict`` fail (exit 1, with the
            counts) when more than this fraction of the rows read are skipped, and
            ``mode=preprocess`` (npy) writes no day over it; null: never. Training reports
            skipped rows and goes on.
        schema: the feature schema over the line's columns ``label, I1..I13, C1..C26``
            (default ``data/schema=criteo``: TorchRec's id rule, facebookresearch/dlrm's
            dense transform); its ``num_embeddings`` are replaced by
            ``model.num_embeddings_per_feature``.

    Raises:
        ConfigError: (at compose time) the schema names a column a Criteo line does not have,
            or a list-valued (``multi_hot``) feature.
    """

    path_holds: ClassVar[str] = "tsv file or folder"
    max_reported_bad_lines: int = 5
    max_skipped_fraction: float | None = 0.01
    schema: FeatureSchema = MISSING

    def feature_schema(self) -> FeatureSchema | None:
        return self.schema

    @classmethod
    def tables_sized_by_model(cls) -> bool:
        return True

    def __post_init__(self) -> None:
        self._check_files()
        limit = self.max_skipped_fraction
        require(
            limit is None or 0 <= limit <= 1,
            f"data.max_skipped_fraction must be in [0, 1] (or null: never fail), got {limit}",
        )
        unknown = [c for c in (self.schema.label, *self.schema.feature_columns)
                   if c not in CRITEO_COLUMNS]  # fmt: skip
        require(
            not unknown,
            f"data=criteo_tsv reads the columns {CRITEO_LABEL}, I1..I{CRITEO_NUM_DENSE}, "
            f"C1..C{CRITEO_NUM_SPARSE} of a Criteo line, but data.schema names {unknown}: "
            "other columns are read with data=parquet",
        )
        listed = [name for name, f in self.schema.sparse.items() if f.multi_hot]
        require(
            not listed,
            f"data=criteo_tsv holds one id per field, but data.schema.sparse makes {listed} "
            "multi_hot: set multi_hot=false (multi-hot Criteo inputs are data=criteo_multihot)",
        )


def _check_fractions(val_fraction: float, test_fraction: float) -> None:
    """``data.val_fraction`` and ``data.test_fraction`` in [0, 1), leaving rows to train on."""
    for name, value in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        require(0 <= value < 1, f"data.{name} must be in [0, 1), got {value}")
    require(
        val_fraction + test_fraction < 1,
        "data.val_fraction + data.test_fraction must leave rows to train on, got "
        f"{val_fraction} + {test_fraction}",
    )


class NpyDataset(Enum):
    """Split rules of ``data=criteo_npy``: ``criteo_1tb`` (TorchRec's DLRM example: every day
    but the last trains; the last, day 23 of the full set, is split in half, validation then
    test) or ``criteo_kaggle`` (facebookresearch/dlrm: the rows of all days in order cut into 7
    near-equal parts; 6 train, the 7th split in half, test then validation)."""

    criteo_1tb = "criteo_1tb"
    criteo_kaggle = "criteo_kaggle"


class MultiHotDistribution(Enum):
    """How ``data=criteo_multihot`` draws the extra ids of a one-hot id (MLPerf DLRM-DCNv2
    reference): ``uniform`` over the table or ``pareto`` (a=0.25, heavy-tailed)."""

    uniform = "uniform"
    pareto = "pareto"


class OutOfRange(Enum):
    """Categorical ids at or beyond a table's ``num_embeddings``: ``hash`` them (``id % rows``,
    TorchRec's ``hashes``) or stop with an ``error``."""

    hash = "hash"
    error = "error"


@dataclass
class CriteoNpyDataConfig(DataConfig):
    """TorchRec's binary Criteo layout written by ``mode=preprocess`` (``data=criteo_npy``).

    Attributes:
        path: folder holding ``day_<n>_{dense,sparse,labels}.npy``; required by every mode
            that reads data (``mode=plan`` does not).
        dataset: split rules, see :class:`NpyDataset`.
        mmap_mode: map the files instead of reading them: the splits are views of the days
            (never concatenated) and each batch reads its rows, so memory does not grow with
            the number of days.
        out_of_range: see :class:`OutOfRange`.
        shuffle_training_set: permute the training rows once (seeded by ``seed``).
        shuffle_batches: visit the full training batches in another order every epoch
            (seeded by ``seed`` and the epoch; ranks stay disjoint, resume stays exact).
    """

    path: str | None = None
    dataset: NpyDataset = NpyDataset.criteo_1tb
    mmap_mode: bool = False
    out_of_range: OutOfRange = OutOfRange.hash
    shuffle_training_set: bool = False
    shuffle_batches: bool = False

    def input_paths(self) -> dict[str, list[str]]:
        return {"data.path": [self.path]} if self.path else {}

    def shuffles_batches(self) -> bool:
        return self.shuffle_batches

    def __post_init__(self) -> None:
        require(
            not (self.mmap_mode and self.shuffle_training_set),
            "data.shuffle_training_set permutes the rows in memory, which data.mmap_mode=true "
            "avoids: use data.shuffle_batches=true with mmap_mode",
        )


#: Bytes of one id of a multi-hot lookup table (int32, as the reference's).
LOOKUP_ITEMSIZE = 4


def lookup_bytes(table_sizes: Sequence[int], multi_hot_sizes: Sequence[int]) -> int:
    """Bytes of the multi-hot lookup tables: ``4 * sum(N_t * m_t)``."""
    return LOOKUP_ITEMSIZE * sum(n * m for n, m in zip(table_sizes, multi_hot_sizes, strict=True))


def largest_lookup_cap(
    table_sizes: Sequence[int], multi_hot_sizes: Sequence[int], max_bytes: int
) -> int:
    """The largest ``model.num_embeddings_cap`` whose lookup tables fit ``max_bytes``."""
    low, high = 1, max(table_sizes)
    while low < high:
        mid = (low + high + 1) // 2
        capped = [min(n, mid) for n in table_sizes]
        if lookup_bytes(capped, multi_hot_sizes) <= max_bytes:
            low = mid
        else:
            high = mid - 1
    return low


def lookup_refusal(
    table_sizes: Sequence[int], multi_hot_sizes: Sequence[int], max_gib: float
) -> str | None:
    """Why lookup tables of ``table_sizes`` x ``multi_hot_sizes`` exceed ``max_gib``
    (``data.max_lookup_gib``), naming a ``model.num_embeddings_cap`` that fits; None when
    they fit."""
    needed = lookup_bytes(table_sizes, multi_hot_sizes)
    limit = int(max_gib * 2**30)
    if needed <= limit:
        return None
    cap = largest_lookup_cap(table_sizes, multi_hot_sizes, limit)
    return (
        f"the multi-hot lookup tables need {needed / 2**30:.1f} GiB (4 bytes x rows x "
        f"multi-hot size, summed over tables), above data.max_lookup_gib={max_gib:g}: set "
        f"model.num_embeddings_cap={cap} or raise data.max_lookup_gib"
    )


@dataclass
class CriteoMultiHotDataConfig(SyntheticDataConfig):
    """MLPerf DLRM-DCNv2's synthetic multi-hot inputs (``data=criteo_multihot``): every one-hot
    id is expanded into ``multi_hot_sizes[t]`` ids by the reference's fixed lookup tables (see
    :mod:`dlrm_exp.data.multi_hot`).

    The one-hot rows come from ``path`` (TorchRec's binary layout, split as ``criteo_npy`` by
    ``dataset``) or, when it is null, from the synthetic generator (its fields as in
    :class:`SyntheticDataConfig`).

    Attributes:
        path: folder of ``day_<n>_*.npy`` files, or null for synthetic one-hot rows.
        dataset: split rules for ``path`` (see :class:`NpyDataset`).
        multi_hot_sizes: ids per sample of each feature (default: MLPerf's 26 sizes).
        multi_hot_distribution: see :class:`MultiHotDistribution`.
        max_lookup_gib: refuse lookup tables (4 bytes x rows x size) above this, GiB.
        mmap_mode: with ``path``, map the day files (as ``criteo_npy``'s ``mmap_mode``; the
            reference runs with ``--mmap_mode``): each rank reads its batches' rows instead of
            every day into its memory.
        shuffle_batches: visit the full training batches in another order every epoch, as
            ``criteo_npy``'s (TorchRec's ``--shuffle_batches``; works with ``mmap_mode``).
    """

    num_train_samples: int = 262144  # (conf/data/criteo_multihot.yaml's)
    path: str | None = None
    dataset: NpyDataset = NpyDataset.criteo_1tb
    mmap_mode: bool = True
    shuffle_batches: bool = False
    multi_hot_sizes: list[int] = field(default_factory=lambda: list(MLPERF_MULTI_HOT_SIZES))
    multi_hot_distribution: MultiHotDistribution = MultiHotDistribution.uniform
    max_lookup_gib: float = 4.0

    def input_paths(self) -> dict[str, list[str]]:
        return {"data.path": [self.path]} if self.path else {}

    def pooling_factors(self) -> list[float] | None:
        return [float(m) for m in self.multi_hot_sizes]

    def shuffles_batches(self) -> bool:
        return self.shuffle_batches

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            all(m >= 1 for m in self.multi_hot_sizes),
            f"data.multi_hot_sizes must all be >= 1, got {list(self.multi_hot_sizes)}",
        )
        require_positive({"data.max_lookup_gib": self.max_lookup_gib})
        # with a path the generator's keys are unread, without one the files' keys
        unread = _GENERATOR_KEYS if self.path else ("dataset", "mmap_mode")
        defaults = field_defaults(CriteoMultiHotDataConfig)
        changed = [k for k in unread if getattr(self, k) != defaults[k]]
        require_read(
            not changed,
            f"data={'criteo_multihot data.path=...' if self.path else 'criteo_multihot'} reads "
            f"its one-hot rows from {'the files' if self.path else 'the generator'}, so "
            f"{', '.join(f'data.{k}' for k in changed)} would be ignored: drop "
            f"{'it' if len(changed) == 1 else 'them'}"
            + ("" if self.path else ", or give data.path"),
            {"data.path": lambda _: True},
        )


#: The synthetic generator's keys, which ``data=criteo_multihot`` reads only without a path.
_GENERATOR_KEYS = ("num_train_samples", "num_val_samples", "num_test_samples", "zipf_exponent",
                   "categorical_signal", "dense_signal", "base_logit")  # fmt: skip


@dataclass
class ParquetDataConfig(FileSplitsConfig):
    """A user's click log in Parquet files, described by a feature schema (``data=parquet``).

    Row groups are streamed with pyarrow (memory holds one row group per split at a time, not
    the file); the model's tables and dense input are built from ``schema``.

    Attributes (besides :class:`FileSplitsConfig`'s; ``path``: a file, a folder, its
    ``*.parquet`` files sorted, a glob, or a list of those):
        shuffle_row_groups: visit the training row groups in another order every epoch
            (seeded by ``seed`` and the epoch, the same on every rank).
        schema: the feature schema (``data/schema=<name>``; see
            :class:`~dlrm_exp.config.schema.FeatureSchema`).
    """

    path_holds: ClassVar[str] = "parquet files"
    shuffle_row_groups: bool = True
    schema: FeatureSchema = MISSING

    def feature_schema(self) -> FeatureSchema | None:
        return self.schema

    def pooling_factors(self) -> list[float] | None:
        return [self.schema.sparse[f].pooling for f in self.schema.feature_names]

    def shuffles_batches(self) -> bool:
        return self.shuffle_row_groups

    def order_depends_on_world_size(self) -> bool:
        return True  # each rank streams its own contiguous block of the rows

    def __post_init__(self) -> None:
        self._check_files()
