"""The set-up every mode that trains shares: data splits and the built experiment on this rank,
and this rank's batches of a split."""

import logging
from collections.abc import Iterator

from torchrec.datasets.utils import Batch
from torchrec.distributed.types import ShardingPlan

from dlrm_exp.build.experiment import Experiment, TrainWrapper, build_experiment
from dlrm_exp.config import Config
from dlrm_exp.data import ClickData, DataSplits, iter_batches, load_splits
from dlrm_exp.distributed.launch import DistContext

log = logging.getLogger(__name__)


def prepare(
    cfg: Config,
    ctx: DistContext,
    plan: ShardingPlan | None = None,
    wrap: TrainWrapper | None = None,
) -> tuple[DataSplits, Experiment]:
    """Load (or generate) the data splits, then build the experiment on this rank (planning it
    unless ``plan`` is given; see :func:`~dlrm_exp.build.experiment.build_experiment`).

    Raises:
        DataError: the data cannot be read.
        InsufficientMemoryError, PlanError, ConfigError: from planning.
    """
    splits = load_splits(cfg.data, cfg.model.table_sizes, cfg.model.num_dense_features, cfg.seed)
    log.info("data rows: %s", splits.info.get("rows"))
    return splits, build_experiment(cfg, ctx, plan, wrap)


def rank_batches(
    cfg: Config, ctx: DistContext, data: ClickData, seed: tuple[int, int] | None = None
) -> Iterator[Batch]:
    """This rank's batches of ``data`` (``train.batch_size`` rows each); ``seed`` (seed, epoch)
    shuffles the order of full batches."""
    return iter_batches(
        data, cfg.train.batch_size, ctx.rank, ctx.world_size, cfg.model.feature_names, seed
    )
