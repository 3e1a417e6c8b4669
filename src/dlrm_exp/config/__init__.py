"""Config room: the typed schema of every Hydra group, the root's cross-group rules, and their
registration in Hydra's ConfigStore.

Owns: one schema module per ``conf/`` group (``model``, ``sharding``, ``optimizer``,
``qcomms``, ``data``, ``hardware``), the loop's and the other modes' settings (``train``,
``modes``), the feature schema (``schema``), the root :class:`Config` (``root``),
:func:`register_configs` (``store``), :func:`conf_dir` and the shipped Criteo schema
:func:`criteo_schema` (``conf_tree``).

May import: util, errors.

Each YAML file under ``conf/<group>/`` starts with ``defaults: [/schema/<group>@_here_,
_self_]`` (the schemas are stored under ``schema/``, not offered as options of the groups), so
a misspelt key or a wrong type fails at compose time, naming the full key
(``Key 'embedding_dimm' not in 'ModelConfig' full_key: model.embedding_dimm``).
Choices are Enums whose values are TorchRec's own strings (``ShardingStrategy.row_wise.value
== ShardingType.ROW_WISE.value == "row_wise"``).

Cross-field rules live in ``__post_init__`` and run when the entry point converts the composed
config with ``OmegaConf.to_object``, before any process group exists. They raise
:class:`~dlrm_exp.errors.ConfigError` whose message names the override that fixes it.
"""

from dlrm_exp.config.conf_tree import conf_dir, criteo_schema
from dlrm_exp.config.criteo import (
    CRITEO_COLUMNS,
    CRITEO_DENSE_COLUMNS,
    CRITEO_LABEL,
    CRITEO_NUM_DENSE,
    CRITEO_NUM_SPARSE,
    CRITEO_SPARSE_COLUMNS,
    MLPERF_MULTI_HOT_SIZES,
)
from dlrm_exp.config.data import (
    CriteoMultiHotDataConfig,
    CriteoNpyDataConfig,
    CriteoTsvDataConfig,
    DataConfig,
    FileSplitsConfig,
    MultiHotDistribution,
    NpyDataset,
    OutOfRange,
    ParquetDataConfig,
    SyntheticDataConfig,
)
from dlrm_exp.config.hardware import Backend, ComputeDevice, HardwareConfig
from dlrm_exp.config.model import (
    EmbeddingDataType,
    EmbeddingTable,
    EvictionPolicy,
    InteractionType,
    ManagedCollision,
    ModelConfig,
    feature_names,
    table_name,
)
from dlrm_exp.config.modes import (
    CHECKPOINT_MODES,
    CategoricalTransform,
    DenseTransform,
    EvalSplit,
    ExportConfig,
    ExportQuantization,
    Mode,
    PredictConfig,
    PreprocessConfig,
    PreprocessFormat,
    SchemaScanConfig,
    VerifyConfig,
)
from dlrm_exp.config.optimizer import DenseOptimizer, OptimizerConfig, SparseOptimizer
from dlrm_exp.config.qcomms import CommPrecision, QCommsConfig
from dlrm_exp.config.root import Config
from dlrm_exp.config.schema import (
    DenseColumn,
    FeatureSchema,
    IdPolicy,
    SparseFeature,
    load_schema_file,
    parse_schema,
)
from dlrm_exp.config.sharding import ComputeKernel, ShardingConfig, ShardingStrategy
from dlrm_exp.config.store import register_configs
from dlrm_exp.config.train import (
    DensePrecision,
    EarlyStopping,
    Monitor,
    OnNonFinite,
    Pipeline,
    ProfileSteps,
    SparseBackward,
    TrainConfig,
)

__all__ = [
    "DensePrecision",
    "EarlyStopping",
    "Monitor",
    "Pipeline",
    "ProfileSteps",
    "SparseBackward",
    "CHECKPOINT_MODES",
    "EvalSplit",
    "ExportConfig",
    "ExportQuantization",
    "PredictConfig",
    "CRITEO_COLUMNS",
    "CRITEO_DENSE_COLUMNS",
    "CRITEO_LABEL",
    "CRITEO_NUM_DENSE",
    "CRITEO_NUM_SPARSE",
    "CRITEO_SPARSE_COLUMNS",
    "MLPERF_MULTI_HOT_SIZES",
    "Backend",
    "CategoricalTransform",
    "CommPrecision",
    "ComputeDevice",
    "ComputeKernel",
    "Config",
    "CriteoMultiHotDataConfig",
    "CriteoNpyDataConfig",
    "CriteoTsvDataConfig",
    "DataConfig",
    "FileSplitsConfig",
    "DenseOptimizer",
    "DenseTransform",
    "HardwareConfig",
    "EmbeddingDataType",
    "EmbeddingTable",
    "EvictionPolicy",
    "ManagedCollision",
    "DenseColumn",
    "FeatureSchema",
    "IdPolicy",
    "SparseFeature",
    "load_schema_file",
    "parse_schema",
    "ParquetDataConfig",
    "InteractionType",
    "Mode",
    "ModelConfig",
    "MultiHotDistribution",
    "NpyDataset",
    "OnNonFinite",
    "OptimizerConfig",
    "OutOfRange",
    "PreprocessConfig",
    "PreprocessFormat",
    "SchemaScanConfig",
    "QCommsConfig",
    "ShardingConfig",
    "ShardingStrategy",
    "SparseOptimizer",
    "SyntheticDataConfig",
    "TrainConfig",
    "VerifyConfig",
    "conf_dir",
    "criteo_schema",
    "feature_names",
    "register_configs",
    "table_name",
]
