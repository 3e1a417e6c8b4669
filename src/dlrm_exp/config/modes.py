"""Schemas of the modes other than training: ``mode`` itself, ``verify.*`` and ``preprocess.*``."""

from dataclasses import dataclass
from enum import Enum
from typing import Any

from dlrm_exp.config.checks import require
from dlrm_exp.config.conf_tree import conf_dir


class Mode(Enum):
    """What the entry point does with the composed config: ``train``, ``verify`` (train a
    few steps sharded and unsharded from the same weights and compare, see
    :mod:`dlrm_exp.modes.verify`), ``preprocess`` (Criteo TSV to npy) or ``plan`` (shard for the
    configured hardware without it, see :mod:`dlrm_exp.modes.plan`), or, from a checkpoint
    (``checkpoint=PATH``), ``evaluate`` (AUROC, log loss, NE of the splits), ``predict``
    (click probabilities of an input file, as Parquet) or ``export`` (a TorchScript inference
    model); ``schema`` writes a feature schema for Parquet files (see
    :mod:`dlrm_exp.modes.schema`)."""

    train = "train"
    verify = "verify"
    preprocess = "preprocess"
    plan = "plan"
    evaluate = "evaluate"
    predict = "predict"
    export = "export"
    schema = "schema"


#: The modes that start from a trained checkpoint (``checkpoint=PATH``).
CHECKPOINT_MODES = frozenset({Mode.evaluate, Mode.predict, Mode.export})


class EvalSplit(Enum):
    """Which splits ``mode=evaluate`` scores: ``val``, ``test`` or ``all`` (both)."""

    val = "val"
    test = "test"
    all = "all"


class ExportQuantization(Enum):
    """Embedding table precision of ``mode=export``: ``none`` (fp32), ``fp16`` or ``int8``
    (row-wise, TorchRec's ``quantize_inference_model``)."""

    none = "none"
    fp16 = "fp16"
    int8 = "int8"


class DenseTransform(Enum):
    """How ``mode=preprocess`` turns Criteo counts into floats: ``log1p`` = ``log(1 + max(x, 0))``
    (facebookresearch/dlrm, the same as ``data=criteo_tsv``); ``torchrec`` = ``log(x - min + 2)``
    with ``min`` over the whole file (TorchRec's ``BinaryCriteoUtils.tsv_to_npys``)."""

    log1p = "log1p"
    torchrec = "torchrec"


class CategoricalTransform(Enum):
    """What ``mode=preprocess`` stores for categoricals: ``raw`` 32-bit hashes (TorchRec's
    layout; tables hash them at load time), ``hash`` = ``value % num_embeddings`` of the
    model's tables, or ``contiguous`` ids over all days with rare ids merged (TorchRec's
    ``contiguous_preproc_criteo``, see :mod:`dlrm_exp.data.preprocess.contiguous`)."""

    raw = "raw"
    hash = "hash"
    contiguous = "contiguous"


@dataclass
class VerifyConfig:
    """``mode=verify`` settings.

    Attributes:
        steps: training steps compared against the unsharded reference.
    """

    steps: int = 20

    def __post_init__(self) -> None:
        require(self.steps > 0, f"verify.steps must be positive, got {self.steps}")


class PreprocessFormat(Enum):
    """What ``mode=preprocess`` writes: ``npy`` (TorchRec's binary layout, ``data=criteo_npy``)
    or ``parquet`` (the rows ``data=criteo_tsv`` trains on, with their feature schema, for
    ``data=parquet``)."""

    npy = "npy"
    parquet = "parquet"


@dataclass
class PreprocessConfig:
    """``mode=preprocess``: Criteo TSV (``data=criteo_tsv data.path=...``) to TorchRec's binary
    layout (``day_<n>_dense.npy`` float32 (N, 13), ``day_<n>_sparse.npy`` int64 (N, 26),
    ``day_<n>_labels.npy`` int32 (N, 1)).

    Attributes:
        output_dir: folder for the npy (or Parquet) files and ``preprocess_report.json``
            (created).
        format: see :class:`PreprocessFormat`; with ``parquet`` the transforms are
            ``data=criteo_tsv``'s and the options below do not apply.
        row_group_size: rows per Parquet row group (``format=parquet``).
        dense_transform: see :class:`DenseTransform`.
        categorical: see :class:`CategoricalTransform`.
        frequency_threshold: with ``categorical=contiguous``, ids seen fewer times than this
            (over all days) share id 1 (TorchRec's ``FREQUENCY_THRESHOLD``, 3).
        num_workers: parser processes (blocks of every file are parsed in parallel).
        overwrite: convert days again even when their finished marker matches the input
            (``format=npy``), and replace output files converted from other inputs (both
            formats; refused without it).
    """

    output_dir: str | None = None
    format: PreprocessFormat = PreprocessFormat.npy
    row_group_size: int = 65536
    dense_transform: DenseTransform = DenseTransform.log1p
    categorical: CategoricalTransform = CategoricalTransform.raw
    frequency_threshold: int = 3
    num_workers: int = 2
    overwrite: bool = False

    def __post_init__(self) -> None:
        require(self.num_workers > 0, "preprocess.num_workers must be positive")
        require(self.row_group_size > 0, "preprocess.row_group_size must be positive")
        require(
            self.frequency_threshold >= 0,
            f"preprocess.frequency_threshold must be >= 0, got {self.frequency_threshold}",
        )
        contiguous = self.categorical is CategoricalTransform.contiguous
        require(  # (it was ignored without a word: npy review)
            contiguous or self.frequency_threshold == PreprocessConfig.frequency_threshold,
            f"preprocess.frequency_threshold={self.frequency_threshold} applies to "
            "preprocess.categorical=contiguous only (raw and hashed ids keep every id): add "
            "preprocess.categorical=contiguous or drop it",
        )


@dataclass
class PredictConfig:
    """``mode=predict``: click probabilities of every valid row of ``data.path``.

    Attributes:
        output: the Parquet file to write (null: ``predictions.parquet`` in the run folder).
        batch_size: rows scored at a time.
        has_label: whether the rows start with a label (Criteo ``train.txt``: 40 fields) or
            not (``test.txt``: 13 integer and 26 categorical fields); null: detected per file
            from its widest line among the first ones (40 fields or 39; a narrower one is
            refused as ambiguous).
    """

    output: str | None = None
    batch_size: int = 4096
    has_label: bool | None = None

    def __post_init__(self) -> None:
        require(self.batch_size > 0, f"predict.batch_size must be positive, got {self.batch_size}")


@dataclass
class ExportConfig:
    """``mode=export``: the checkpoint as one unsharded TorchScript inference model.

    Attributes:
        quantization: see :class:`ExportQuantization`.
        output_dir: where ``model.pt`` and ``export.json`` go (null: the run folder).
    """

    quantization: ExportQuantization = ExportQuantization.none
    output_dir: str | None = None


@dataclass
class SchemaScanConfig:
    """``mode=schema``: read a sample of Parquet files and write a feature schema to edit.

    Attributes:
        path: Parquet files, a folder or a glob (as ``data.path`` of ``data=parquet``).
        label: the click column (null: the one column named ``label``, ``click``,
            ``clicked``, ``is_click`` or ``y``).
        name: the schema's name: ``data/schema=<name>`` (and its file name); not one that
            ships with dlrm_exp (``criteo``), which Hydra would find first.
        sample_rows: rows read (the files' first, in batches) for the statistics.
        max_num_embeddings: the largest table suggested; features with more distinct ids are
            hashed into it.
    """

    path: Any = None
    label: str | None = None
    name: str = "my_schema"
    sample_rows: int = 1_000_000
    max_num_embeddings: int = 10_000_000

    def __post_init__(self) -> None:
        require(
            self.sample_rows > 0 and self.max_num_embeddings > 0,
            "schema_scan.sample_rows and schema_scan.max_num_embeddings must be positive",
        )
        require(
            bool(self.name) and self.name.replace("_", "").replace("-", "").isalnum(),
            f"schema_scan.name must be letters, digits, _ or -, got {self.name!r}",
        )
        shipped = sorted(p.stem for p in (conf_dir() / "data" / "schema").glob("*.yaml"))
        require(
            self.name not in shipped,
            f"schema_scan.name={self.name} is a schema dlrm_exp ships (data/schema: "
            f"{', '.join(shipped)}), which would win over the file written: choose another name",
        )
