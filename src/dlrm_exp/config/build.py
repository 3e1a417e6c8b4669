"""A job's typed :class:`~dlrm_exp.config.root.Config` from the config Hydra composed: what the
entry point runs and what the sweep-start check (:mod:`dlrm_exp.record.sweep_check`) runs
for every job of a sweep before the first starts, so the two cannot differ."""

import copy
from collections.abc import Mapping, Sequence

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from dlrm_exp.config.checks import sweeping
from dlrm_exp.config.keys import check_composed_keys
from dlrm_exp.config.root import Config
from dlrm_exp.errors import ConfigError


class MissingValueError(ConfigError):
    """A mandatory value (``???``) left unset: the message names the key."""


def build_config(raw: DictConfig, sweep: Mapping[str, Sequence[str]] | None = None) -> Config:
    """``raw`` (without its ``hydra`` node; Hydra's config of the job set in
    :class:`HydraConfig`) as a :class:`Config`, every key checked against the schemas and
    every check of the groups run, as a job of a sweep of ``sweep`` (``{key: values as
    typed}``: :func:`~dlrm_exp.config.checks.sweeping`).

    Raises:
        ConfigError: ``hydra.job.chdir=true`` (relative paths were read from the start folder
            by some readers and from the run folder by others: review); a key no schema has;
            any check of the groups.
        MissingValueError: a mandatory value left unset, naming it.
    """
    if HydraConfig.initialized() and HydraConfig.get().job.chdir:  # (Hydra 1.3: false)
        raise ConfigError(
            "hydra.job.chdir=true runs the job inside its run folder, where the relative paths "
            "of data.path, checkpoint=, predict.output, ... would be read from, while dlrm_exp "
            "reads them from where it was started and writes into the run folder itself: leave "
            "hydra.job.chdir false"
        )
    check_composed_keys(raw, Config)
    data = raw.get("data")
    if (
        isinstance(data, DictConfig)
        and "path" in data.keys()
        and OmegaConf.is_missing(data, "path")
    ):
        raw = copy.deepcopy(raw)  # left unset: empty; the Config refuses it where rows of it
        raw.data.path = []  # are read (an export was refused for a path it never read)
    try:  # a key another job of the sweep reads, unread in this one: warned of, not refused
        with sweeping(sweep or {}, _fixed_keys(sweep or {})):
            cfg = OmegaConf.to_object(raw)
    except MissingMandatoryValue as err:
        key = err.full_key
        raise MissingValueError(
            f"{key} is required here: set {key}=... on the command line"
        ) from None
    assert isinstance(cfg, Config)
    return cfg


def _fixed_keys(sweep: Mapping[str, Sequence[str]]) -> list[str]:
    """The keys this job's command-line overrides (Hydra's ``overrides.task``) set that
    ``sweep`` does not sweep: one value in every job of the sweep."""
    if not sweep or not HydraConfig.initialized():
        return []
    keys = [str(o).split("=", 1)[0].lstrip("+~") for o in HydraConfig.get().overrides.task]
    return [key for key in keys if key not in sweep]
