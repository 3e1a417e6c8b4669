"""The root config: the six groups plus ``train``, ``verify`` and ``preprocess``, and the rules
that cross groups (checked in ``Config.__post_init__``)."""

from dataclasses import dataclass, field

from omegaconf import MISSING

from dlrm_exp.config.checks import require
from dlrm_exp.config.criteo import CRITEO_NUM_DENSE, CRITEO_NUM_SPARSE
from dlrm_exp.config.data import (
    CriteoMultiHotDataConfig,
    CriteoNpyDataConfig,
    CriteoTsvDataConfig,
    DataConfig,
)
from dlrm_exp.config.hardware import ComputeDevice, HardwareConfig
from dlrm_exp.config.model import ModelConfig
from dlrm_exp.config.modes import (
    CHECKPOINT_MODES,
    EvalSplit,
    ExportConfig,
    Mode,
    PredictConfig,
    PreprocessConfig,
    VerifyConfig,
)
from dlrm_exp.config.optimizer import CPU_FUSED, OptimizerConfig
from dlrm_exp.config.qcomms import QCommsConfig
from dlrm_exp.config.sharding import ComputeKernel, ShardingConfig, ShardingStrategy
from dlrm_exp.config.train import CUDA_PIPELINES, DensePrecision, TrainConfig
from dlrm_exp.errors import ConfigError


@dataclass
class Config:
    """Root config: the six groups, the training loop and the settings of the other modes.

    Attributes:
        checkpoint: the trained model of ``mode=evaluate|predict|export``: a run folder (its
            newest complete checkpoint) or a ``checkpoints/step_<n>`` folder.
        split: the splits ``mode=evaluate`` scores.
    """

    mode: Mode = Mode.train
    seed: int = 0
    model: ModelConfig = MISSING
    sharding: ShardingConfig = MISSING
    optimizer: OptimizerConfig = MISSING
    qcomms: QCommsConfig = MISSING
    data: DataConfig = MISSING
    hardware: HardwareConfig = MISSING
    train: TrainConfig = field(default_factory=TrainConfig)
    verify: VerifyConfig = field(default_factory=VerifyConfig)
    preprocess: PreprocessConfig = field(default_factory=PreprocessConfig)
    checkpoint: str | None = None
    split: EvalSplit = EvalSplit.all
    predict: PredictConfig = field(default_factory=PredictConfig)
    export: ExportConfig = field(default_factory=ExportConfig)

    def __post_init__(self) -> None:
        if self.mode in CHECKPOINT_MODES:
            require(
                bool(self.checkpoint),
                f"mode={self.mode.value} starts from a trained model: add checkpoint=<run "
                "folder, or its checkpoints/step_<n> folder>",
            )
        if self.mode is Mode.predict:
            require(
                isinstance(self.data, CriteoTsvDataConfig),
                "mode=predict scores Criteo TSV rows: add data=criteo_tsv data.path=<file>",
            )
        if self.mode is Mode.preprocess:
            require(
                isinstance(self.data, CriteoTsvDataConfig),
                "mode=preprocess converts Criteo TSV files: add data=criteo_tsv data.path=<files>",
            )
            require(
                bool(self.preprocess.output_dir),
                "mode=preprocess needs preprocess.output_dir=<folder for the npy files>",
            )
        if isinstance(self.data, CriteoNpyDataConfig) and self.mode is not Mode.plan:
            require(
                bool(self.data.path),
                "data=criteo_npy needs data.path=<folder of day_<n>_{dense,sparse,labels}.npy> "
                "(mode=preprocess writes them)",
            )
        tables = self.model.table_names
        unknown = sorted(set(self.sharding.overridden_tables) - set(tables))
        require(
            not unknown,
            f"sharding.per_table_* names unknown table(s) {unknown}: tables are {tables[0]} .. "
            f"{tables[-1]}",
        )
        if self.hardware.compute_device is ComputeDevice.cpu:
            for table in [None, *self.sharding.overridden_tables]:
                if self.sharding.table_choice(table)[1] is ComputeKernel.fused_uvm_caching:
                    key = (
                        "sharding.compute_kernel"
                        if table is None
                        else f"sharding.per_table_compute_kernel.{table}"
                    )
                    raise ConfigError(
                        f"{key}=fused_uvm_caching keeps tables in CUDA unified memory with an "
                        "HBM cache and needs hardware.compute_device=cuda: on CPU use fused"
                    )
        self._check_sparse_optimizer_on_cpu()
        self._check_pipeline_and_precision()
        if isinstance(self.data, CriteoMultiHotDataConfig):
            n_tables = len(self.model.num_embeddings_per_feature)
            require(
                len(self.data.multi_hot_sizes) == n_tables,
                f"data.multi_hot_sizes lists {len(self.data.multi_hot_sizes)} sizes but the "
                f"model has {n_tables} tables: give one size per table",
            )
        if self.data.input_paths():
            n_sparse = len(self.model.num_embeddings_per_feature)
            require(
                n_sparse == CRITEO_NUM_SPARSE,
                f"Criteo data has {CRITEO_NUM_SPARSE} categorical features but "
                f"model.num_embeddings_per_feature lists {n_sparse} tables: give one row "
                f"count per feature ({CRITEO_NUM_SPARSE} values)",
            )
            require(
                self.model.num_dense_features == CRITEO_NUM_DENSE,
                f"Criteo data has {CRITEO_NUM_DENSE} dense features: set "
                f"model.num_dense_features={CRITEO_NUM_DENSE}",
            )

    def _check_pipeline_and_precision(self) -> None:
        """fp16 is refused (see :mod:`dlrm_exp.build.precision`); pipelines that need CUDA
        are refused on CPU."""
        require(
            self.train.dense_precision is not DensePrecision.fp16,
            "train.dense_precision=fp16 needs a gradient scaler, and the fused embedding update "
            "applies its gradients inside TorchRec's backward, where they would arrive scaled: "
            "use train.dense_precision=bf16",
        )
        pipeline = self.train.pipeline
        require(
            self.hardware.compute_device is not ComputeDevice.cpu or pipeline not in CUDA_PIPELINES,
            f"train.pipeline={pipeline.value} needs hardware.compute_device=cuda: "
            f"{CUDA_PIPELINES.get(pipeline)}; on CPU use train.pipeline=sparse_dist or base",
        )

    def _check_sparse_optimizer_on_cpu(self) -> None:
        """A sparse optimizer FBGEMM cannot fuse on CPU (Adam) runs only on data_parallel
        tables there (``auto`` then replicates every table, see
        :func:`dlrm_exp.planning.constraints.build_constraints`)."""
        opt = self.optimizer.sparse_optimizer
        if self.hardware.compute_device is not ComputeDevice.cpu or opt in CPU_FUSED:
            return
        sharded = [
            table or "every table"
            for table in [None, *self.sharding.overridden_tables]
            if self.sharding.table_choice(table)[0]
            not in (ShardingStrategy.auto, ShardingStrategy.data_parallel)
        ]
        require(
            not sharded,
            f"optimizer.sparse_optimizer={opt.value} on CPU: FBGEMM's CPU kernels cannot fuse "
            f"{opt.value} into backward, so {', '.join(sharded)} cannot be "
            f"{self.sharding.sharding_type.value}-sharded; use sharding=auto or "
            "sharding=dataparallel (tables replicated and stepped by torch.optim after DDP), "
            "or train on CUDA (hardware=gpu)",
        )
