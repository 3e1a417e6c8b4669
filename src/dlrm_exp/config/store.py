"""Where the YAML tree is and how the schemas reach Hydra's ConfigStore."""

from pathlib import Path

from hydra.core.config_store import ConfigStore

from dlrm_exp.config.data import (
    CriteoMultiHotDataConfig,
    CriteoNpyDataConfig,
    CriteoTsvDataConfig,
    SyntheticDataConfig,
)
from dlrm_exp.config.hardware import HardwareConfig
from dlrm_exp.config.model import ModelConfig
from dlrm_exp.config.optimizer import OptimizerConfig
from dlrm_exp.config.qcomms import QCommsConfig
from dlrm_exp.config.root import Config
from dlrm_exp.config.sharding import ShardingConfig


def register_configs() -> None:
    """Store the schemas in Hydra's ConfigStore as ``base_config`` and ``<group>/base_<...>``."""
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    cs.store(group="model", name="base_model", node=ModelConfig)
    cs.store(group="sharding", name="base_sharding", node=ShardingConfig)
    cs.store(group="optimizer", name="base_optimizer", node=OptimizerConfig)
    cs.store(group="qcomms", name="base_qcomms", node=QCommsConfig)
    cs.store(group="data", name="base_synthetic", node=SyntheticDataConfig)
    cs.store(group="data", name="base_criteo_tsv", node=CriteoTsvDataConfig)
    cs.store(group="data", name="base_criteo_npy", node=CriteoNpyDataConfig)
    cs.store(group="data", name="base_criteo_multihot", node=CriteoMultiHotDataConfig)
    cs.store(group="hardware", name="base_hardware", node=HardwareConfig)


def conf_dir() -> Path:
    """The ``conf/`` tree Hydra composes from.

    In a source checkout (and an editable install) it is the repository's top-level ``conf/``;
    a wheel carries the same files as the package data ``dlrm_exp/conf/`` (``pyproject.toml``
    maps ``dlrm_exp.conf`` to ``conf/``), so ``python -m dlrm_exp`` finds its config wherever
    the package is installed.

    Raises:
        FileNotFoundError: neither place holds ``config.yaml`` (a broken install).
    """
    package = Path(__file__).resolve().parents[1]
    for candidate in (package / "conf", package.parents[1] / "conf"):
        if (candidate / "config.yaml").is_file():
            return candidate
    raise FileNotFoundError(f"no conf/config.yaml next to {package} or in its source checkout")
