"""How the schemas reach Hydra's ConfigStore (the YAML tree itself: :mod:`.conf_tree`)."""

from hydra.core.config_store import ConfigStore

from dlrm_exp.config.data import (
    CriteoMultiHotDataConfig,
    CriteoNpyDataConfig,
    CriteoTsvDataConfig,
    ParquetDataConfig,
    SyntheticDataConfig,
)
from dlrm_exp.config.hardware import HardwareConfig
from dlrm_exp.config.model import ModelConfig
from dlrm_exp.config.optimizer import OptimizerConfig
from dlrm_exp.config.qcomms import QCommsConfig
from dlrm_exp.config.root import Config
from dlrm_exp.config.sharding import ShardingConfig

#: The ``data`` group's options (``conf/data/<option>.yaml``) and the schema each extends.
DATA_OPTIONS: dict[str, type] = {
    "synthetic": SyntheticDataConfig,
    "criteo_tsv": CriteoTsvDataConfig,
    "criteo_npy": CriteoNpyDataConfig,
    "criteo_multihot": CriteoMultiHotDataConfig,
    "parquet": ParquetDataConfig,
}


def register_configs() -> None:
    """Store the schemas in Hydra's ConfigStore: the root as ``base_config`` and each group's
    as ``schema/<group>`` (``schema/data_<option>`` for the data options), which the group's
    YAML files extend with ``defaults: [/schema/<group>@_here_, _self_]``. Kept out of the
    groups themselves, so ``model=...`` offers only real options."""
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    for name, node in (
        ("model", ModelConfig),
        ("sharding", ShardingConfig),
        ("optimizer", OptimizerConfig),
        ("qcomms", QCommsConfig),
        ("hardware", HardwareConfig),
        *((f"data_{option}", node) for option, node in DATA_OPTIONS.items()),
    ):
        cs.store(group="schema", name=name, node=node)
