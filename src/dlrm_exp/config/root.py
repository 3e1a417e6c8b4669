"""The root config: the six groups plus ``train``, ``verify`` and ``preprocess``, and the rules
that cross groups (checked in ``Config.__post_init__``)."""

from dataclasses import dataclass, field, replace

from omegaconf import MISSING

from dlrm_exp.config.checks import is_value, require, require_read
from dlrm_exp.config.conf_tree import criteo_num_embeddings, criteo_schema
from dlrm_exp.config.criteo import CRITEO_NUM_DENSE, CRITEO_NUM_SPARSE
from dlrm_exp.config.data import (
    CriteoMultiHotDataConfig,
    CriteoNpyDataConfig,
    CriteoTsvDataConfig,
    DataConfig,
    FileSplitsConfig,
    ParquetDataConfig,
    lookup_refusal,
)
from dlrm_exp.config.hardware import ComputeDevice, HardwareConfig
from dlrm_exp.config.model import EmbeddingDataType, ModelConfig
from dlrm_exp.config.modes import (
    CHECKPOINT_MODES,
    EvalSplit,
    ExportConfig,
    Mode,
    PredictConfig,
    PreprocessConfig,
    PreprocessFormat,
    SchemaScanConfig,
    VerifyConfig,
)
from dlrm_exp.config.optimizer import (
    DenseOptimizer,
    OptimizerConfig,
    SparseOptimizer,
    fbgemm_fuses,
)
from dlrm_exp.config.qcomms import QCommsConfig
from dlrm_exp.config.schema import FeatureSchema
from dlrm_exp.config.sharding import ComputeKernel, ShardingConfig, ShardingStrategy
from dlrm_exp.config.train import (
    CUDA_PIPELINES,
    DensePrecision,
    OnNonFinite,
    ProfileSteps,
    TrainConfig,
)
from dlrm_exp.errors import ConfigError
from dlrm_exp.util.text import closest, first_few

#: The ``preprocess.*`` options of ``preprocess.format=npy`` alone.
_NPY_PREPROCESS = (
    "dense_transform",
    "categorical",
    "frequency_threshold",
    "num_workers",
)


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
    schema_scan: SchemaScanConfig = field(default_factory=SchemaScanConfig)
    checkpoint: str | None = None
    split: EvalSplit = EvalSplit.all
    predict: PredictConfig = field(default_factory=PredictConfig)
    export: ExportConfig = field(default_factory=ExportConfig)

    def __post_init__(self) -> None:
        """The rules that cross groups, in this order (the first broken one raises
        :class:`~dlrm_exp.errors.ConfigError`)."""
        require(
            0 <= self.seed < 2**64,
            f"seed={self.seed}: give a non-negative integer below 2**64 (it seeds torch, numpy "
            "and the data's uint64 stream keys)",
        )
        self._apply_feature_schema()
        self._check_checkpoint_given()
        self._check_managed_collision_mode()
        self._check_predict_data()
        self._check_preprocess_inputs()
        self._check_schema_scan_path()
        self._check_npy_path()
        self._check_data_path()
        self._check_overridden_tables_exist()
        self._check_uvm_caching_on_device()
        self._check_sparse_optimizer_on_cpu()
        self._check_skip_with_adam()
        self._check_dense_precision()
        self._check_rounding_read()
        self._check_pipeline_on_device()
        self._check_profile_mode()
        self._check_multi_hot_sizes()
        self._check_criteo_feature_counts()

    def _apply_feature_schema(self) -> None:
        """Data with a feature schema (``data=parquet``, ``data=criteo_tsv``) decide the model's
        tables and dense input width: ``model.tables`` and ``model.num_dense_features`` are
        taken from ``data.schema``; ``model.num_embeddings_per_feature`` sizes the tables of
        Criteo files (``tables_sized_by_model``) and is unused otherwise;
        ``model.num_embeddings_cap`` caps the schema's ``num_embeddings`` too, so ids are
        hashed (or checked) into the rows the tables have."""
        schema = self.data.feature_schema()
        if schema is None:
            return
        if self.data.tables_sized_by_model():
            require(
                self.model.num_dense_features == schema.num_dense,
                f"data.schema reads {schema.num_dense} dense columns: set "
                f"model.num_dense_features={schema.num_dense}",
            )
            sized = schema.sized(
                self.model.num_embeddings_per_feature, "model.num_embeddings_per_feature"
            )
            _refuse_ignored_sizes(schema, sized)
            schema = sized
        cap = self.model.num_embeddings_cap
        if cap is not None:  # the id policies must map into the capped tables (rules again)
            capped = [min(f.num_embeddings, cap) for f in schema.sparse.values()]
            schema = schema.sized(capped, "model.num_embeddings_cap")
        if schema is not self.data.feature_schema():
            self.data = replace(self.data, schema=schema)  # type: ignore[call-arg]
        self.model = replace(
            self.model,
            tables=schema.tables(),
            num_dense_features=schema.num_dense,
        )

    def _check_managed_collision_mode(self) -> None:
        """``mode=verify`` compares the sharded model with an unsharded reference step by step;
        a managed-collision table maps ids per rank (each rank keeps its own share of the
        ids), so no unsharded model computes the same rows. Periodic checkpoints fall on
        evictions, so each resumes exactly."""
        managed = sorted(self.model.managed_tables)
        require(
            not (managed and self.mode is Mode.verify),
            f"mode=verify cannot check managed-collision tables ({', '.join(managed)}): each "
            "rank maps its own share of the raw ids, which an unsharded reference does not; "
            "verify the layout with id_policy=modulo",
        )
        every = self.train.checkpoint_every_n_steps
        uneven = {
            name: mc.eviction_interval
            for name, mc in self.model.managed_tables.items()
            if every and every % mc.eviction_interval and self.mode is Mode.train
        }
        require(
            not uneven,
            f"train.checkpoint_every_n_steps={every} is not a multiple of the eviction_interval "
            f"of {', '.join(f'{t} ({k})' for t, k in sorted(uneven.items()))}: TorchRec keeps "
            "the ids seen since the last eviction outside the checkpoint, so a run resumed "
            "between evictions would differ; checkpoint every multiple of the interval",
        )

    def _check_checkpoint_given(self) -> None:
        """``mode=evaluate|predict|export`` start from ``checkpoint=<run folder>``; other modes
        would ignore it (training from random weights), so it is refused there."""
        if self.mode not in CHECKPOINT_MODES:
            resume = (
                " (training continues a checkpoint with train.resume=<path>, or starts from its "
                "weights with train.init_from=<path>)"
            )
            require_read(
                self.checkpoint is None,
                f"checkpoint={self.checkpoint} is read by mode=evaluate, predict and export "
                f"only; mode={self.mode.value} would ignore it"
                + (resume if self.mode is Mode.train else ""),
                {"mode": is_value(*(m.value for m in CHECKPOINT_MODES))},
            )
            return
        require(
            bool(self.checkpoint),
            f"mode={self.mode.value} starts from a trained model: add checkpoint=<run "
            "folder, or its checkpoints/step_<n> folder>",
        )

    def _check_predict_data(self) -> None:
        """``mode=predict`` scores the rows of ``data=criteo_tsv`` or ``data=parquet``."""
        if self.mode is not Mode.predict:
            return
        require(
            isinstance(self.data, CriteoTsvDataConfig | ParquetDataConfig),
            "mode=predict scores Criteo TSV or Parquet rows: add data=criteo_tsv "
            "data.path=<file>, or data=parquet data/schema=<schema> data.path=<files>",
        )

    def _check_preprocess_inputs(self) -> None:
        """``mode=preprocess`` reads ``data=criteo_tsv`` files into ``preprocess.output_dir``."""
        if self.mode is not Mode.preprocess:
            return
        require(
            isinstance(self.data, CriteoTsvDataConfig),
            "mode=preprocess converts Criteo TSV files: add data=criteo_tsv data.path=<files>",
        )
        require(
            bool(self.preprocess.output_dir),
            "mode=preprocess needs preprocess.output_dir=<folder for the npy files>",
        )
        require(
            not (self.data.val_path or self.data.test_path),
            "mode=preprocess converts the files of data.path only (each a day_<n>): name the "
            "validation and test files there too and drop data.val_path / data.test_path",
        )
        managed = sorted(self.model.managed_tables)
        require(
            not managed,
            f"mode=preprocess writes table rows, but the rows of {', '.join(managed)} are "
            "mapped by the model (id_policy=managed_collision): train on the TSV files, or "
            "convert with another id_policy",
        )
        self._check_preprocess_options()
        if self.preprocess.format is PreprocessFormat.npy:
            self._check_npy_preprocess_schema()

    def _check_preprocess_options(self) -> None:
        """Each ``preprocess.*`` option applies to one format: the npy transforms and workers
        to ``npy`` (with ``parquet`` the transforms are ``data.schema``'s), ``row_group_size``
        to ``parquet``; one changed for the other format would be silently ignored."""
        chosen = self.preprocess.format
        others = ("row_group_size",) if chosen is PreprocessFormat.npy else _NPY_PREPROCESS
        default = PreprocessConfig()
        changed = [k for k in others if getattr(self.preprocess, k) != getattr(default, k)]
        if not changed:
            return
        npy = chosen is PreprocessFormat.npy
        transforms = (
            ""
            if npy
            else (
                " (here the transforms are data.schema's: log1p per dense column, id_policy per "
                "sparse feature)"
            )
        )
        raise ConfigError(
            f"preprocess.{changed[0]} applies to preprocess.format={'parquet' if npy else 'npy'} "
            f"only, and this conversion is format={chosen.value}{transforms}: drop it"
        )

    def _check_npy_preprocess_schema(self) -> None:
        """``preprocess.format=npy`` writes TorchRec's Criteo layout by its own options
        (``preprocess.dense_transform``, ``preprocess.categorical``): ``data.schema`` must be
        the shipped Criteo schema, or its overrides would be silently ignored."""
        assert isinstance(self.data, CriteoTsvDataConfig)
        schema = self.data.schema
        shipped = criteo_schema()
        if list(schema.sparse) == list(shipped.sparse):
            shipped = shipped.sized([f.num_embeddings for f in schema.sparse.values()], "")
        require(
            schema == shipped,
            "mode=preprocess preprocess.format=npy writes TorchRec's Criteo layout with its own "
            "transforms (preprocess.dense_transform, preprocess.categorical), not data.schema's: "
            "drop the data.schema overrides, or write preprocess.format=parquet",
        )

    def _check_schema_scan_path(self) -> None:
        """``mode=schema`` reads ``schema_scan.path``."""
        require(
            self.mode is not Mode.schema or bool(self.schema_scan.path),
            "mode=schema reads Parquet files: add schema_scan.path=<files, folder or glob> "
            "(and schema_scan.label=<click column> unless it is named label / click / clicked)",
        )

    def _check_npy_path(self) -> None:
        """``data=criteo_npy`` needs its folder, except to plan or export (which read no
        data: a ``dlrm_main_*`` run exported with its own ``experiment=`` was refused)."""
        if not isinstance(self.data, CriteoNpyDataConfig) or not self.reads_data_path():
            return
        require(
            bool(self.data.path),
            "data=criteo_npy needs data.path=<folder of day_<n>_{dense,sparse,labels}.npy> "
            "(mode=preprocess writes them)",
        )

    def scored_splits(self) -> tuple[str, ...]:
        """The splits ``mode=evaluate`` scores (``split=``): ``("val", "test")`` or one."""
        return ("val", "test") if self.split is EvalSplit.all else (self.split.value,)

    def reads_data_path(self) -> bool:
        """Whether this job reads rows of ``data.path``: not to plan or export (they build
        the tables from the data config and read no rows), nor to evaluate splits that each
        have a file of their own (``data.val_path`` / ``data.test_path``)."""
        if self.mode in (Mode.plan, Mode.export):
            return False
        if self.mode is not Mode.evaluate or not isinstance(self.data, FileSplitsConfig):
            return True
        return bool(self._splits_from_path())

    def _splits_from_path(self) -> list[str]:
        """The scored splits (:meth:`scored_splits`) whose rows ``data.path`` holds."""
        assert isinstance(self.data, FileSplitsConfig)
        return [s for s in self.scored_splits() if self.data.split_source(s) == "data.path"]

    def read_splits(self) -> tuple[str, ...] | None:
        """The splits whose inputs this job reads (:meth:`DataConfig.read_inputs`):
        ``mode=evaluate``'s scored ones; None: all."""
        return self.scored_splits() if self.mode is Mode.evaluate else None

    def _check_data_path(self) -> None:
        """``data=criteo_tsv`` and ``data=parquet`` need ``data.path`` where the job reads its
        rows (:meth:`reads_data_path`; left unset elsewhere, it is empty:
        :func:`~dlrm_exp.config.build.build_config`)."""
        if not isinstance(self.data, FileSplitsConfig) or not self.reads_data_path():
            return
        data = self.data
        missing = [f"data.{split}_path" for split in self._splits_from_path()]
        require(
            bool(data.path),
            f"data.path is required: set data.path=<{data.path_holds}>"
            + (  # the keys still missing, not every key (diff review)
                f" (or, to score files of their own, {' and '.join(missing)}=<files>)"
                if self.mode is Mode.evaluate
                else ""
            ),
        )

    def _check_overridden_tables_exist(self) -> None:
        """``sharding.per_table_*`` and ``model.embedding_data_type_per_table`` name only the
        model's tables (after a feature schema named them). The refusal names the exact key,
        the table of a feature named in its place, else the closest table, and every table
        of a short list (``first .. last`` hid a schema's own names: review)."""
        tables = self.model.table_names
        unknown = [
            (key, name)
            for key, named in (
                ("sharding.per_table_sharding_type", self.sharding.per_table_sharding_type),
                ("sharding.per_table_compute_kernel", self.sharding.per_table_compute_kernel),
                ("model.embedding_data_type_per_table", self.model.embedding_data_type_per_table),
            )
            for name in sorted(set(named) - set(tables))
        ]
        if not unknown:  # (the common case: nothing below is built)
            return
        key, name = unknown[0]
        features = zip(tables, self.model.table_features, strict=True)
        table_of = {f: t for t, fs in features for f in fs}
        close = closest(name, tables)
        hint = (
            f"feature {name}'s table is {table_of[name]}"
            if name in table_of
            else f"did you mean {close}?"
            if close
            else "no table is close"
        )
        listed = ", ".join(tables) if len(tables) <= 12 else f"{tables[0]} .. {tables[-1]}"
        raise ConfigError(f"{key}.{name}: no table {name} ({hint}); tables: {listed}")

    def _check_uvm_caching_on_device(self) -> None:
        """``fused_uvm_caching`` (CUDA unified memory) is refused on CPU, for the default
        kernel and every per-table one."""
        if self.hardware.compute_device is not ComputeDevice.cpu:
            return
        for table, (_, kernel) in self.sharding.choices().items():
            key = (
                "sharding.compute_kernel"
                if table is None
                else f"sharding.per_table_compute_kernel.{table}"
            )
            require(
                kernel is not ComputeKernel.fused_uvm_caching,
                f"{key}=fused_uvm_caching keeps tables in CUDA unified memory with an "
                "HBM cache and needs hardware.compute_device=cuda: on CPU use fused; to plan "
                "for GPUs here, choose a GPU preset (mode=plan hardware=a100_80gb_x8, ...)",
            )

    def _check_skip_with_adam(self) -> None:
        """``train.on_nonfinite=skip`` gives a skipped batch exact-zero gradients, which leave
        SGD and (row-wise) Adagrad unchanged (:mod:`dlrm_exp.factories.nonfinite`) but not
        Adam: its moments decay, its step count advances, and it keeps moving every weight with
        momentum, so the batch would not be skipped; nor managed-collision tables, whose id maps
        take in the batch's raw ids in its forward (TorchRec's ``profile``)."""
        opt = self.optimizer
        adam = [
            f"optimizer.{key}=adam"
            for key, chosen in (
                ("sparse_optimizer", opt.sparse_optimizer is SparseOptimizer.adam),
                ("dense_optimizer", opt.dense_optimizer is DenseOptimizer.adam),
            )
            if chosen
        ]
        require(
            self.train.on_nonfinite is not OnNonFinite.skip or not adam,
            f"train.on_nonfinite=skip with {' and '.join(adam)}: a skipped batch gets zero "
            "gradients, which Adam does not ignore (its moments decay and still move the "
            "weights), so the batch would not be skipped; use train.on_nonfinite=stop, or SGD "
            "or Adagrad",
        )
        managed = sorted(self.model.managed_tables)
        require(
            self.train.on_nonfinite is not OnNonFinite.skip or not managed,
            f"train.on_nonfinite=skip with managed-collision tables ({first_few(managed)}): "
            "their id maps take in a batch's raw ids in its forward, before its loss is known, "
            "so a skipped batch still moves ids in and out of rows; use train.on_nonfinite=stop",
        )

    def _check_sparse_optimizer_on_cpu(self) -> None:
        """A sparse optimizer FBGEMM cannot fuse on CPU (Adam) runs only on data_parallel
        tables there (``auto`` then replicates every table, see
        :func:`dlrm_exp.planning.constraints.build_constraints`)."""
        opt = self.optimizer.sparse_optimizer
        if fbgemm_fuses(opt, self.hardware.compute_device is ComputeDevice.cpu):
            return
        replicable = (
            ShardingStrategy.auto,
            ShardingStrategy.data_parallel,
            ShardingStrategy.from_file,
        )  # a plan file's placements are checked when it is read (planning.plan_file)
        sharded = [
            f"{'every table (' if table is None else f'{table} (per_table_'}sharding_type"
            f"{'' if table is None else f'.{table}'}={choice.value})"
            for table in [None, *self.sharding.per_table_sharding_type]
            if (choice := self.sharding.table_choice(table)[0]) not in replicable
        ]
        # replicas stepped by torch.optim must be fp32 (planning.job refuses fp16 ones)
        fp32 = all(t is EmbeddingDataType.fp32 for t in self.model.table_data_types)
        require(
            not sharded,
            f"optimizer.sparse_optimizer={opt.value} on CPU: FBGEMM's CPU kernels cannot fuse "
            f"{opt.value} into backward, so these cannot be sharded: {', '.join(sharded)}; "
            "use sharding=auto or sharding=dataparallel, with no per-table sharding type but "
            "data_parallel (tables replicated and stepped by torch.optim after DDP"
            + ("" if fp32 else ", which needs fp32 tables: model.embedding_data_type=fp32")
            + "), "
            + ("" if fp32 else "a sparse optimizer FBGEMM fuses on CPU (optimizer=rowwise_adagrad, "
               "adagrad or sgd), ")
            + "or train on CUDA (a GPU hardware preset, e.g. hardware=a100_80gb_x8)",
        )  # fmt: skip
        managed = sorted(self.model.managed_tables)
        require(
            not managed,
            f"optimizer.sparse_optimizer={opt.value} on CPU: the managed-collision tables "
            f"{', '.join(managed[:3])} are always row_wise-sharded with the fused kernel "
            "(TorchRec's managed-collision sharder), which FBGEMM's CPU kernels cannot run with "
            f"{opt.value}; use optimizer=rowwise_adagrad or sgd, another id_policy for them, or "
            "train on CUDA (a GPU hardware preset, e.g. hardware=a100_80gb_x8)",
        )

    def _check_dense_precision(self) -> None:
        """fp16 is refused (see :mod:`dlrm_exp.factories.precision`)."""
        require(
            self.train.dense_precision is not DensePrecision.fp16,
            "train.dense_precision=fp16 needs a gradient scaler, and the fused embedding update "
            "applies its gradients inside TorchRec's backward, where they would arrive scaled: "
            "use train.dense_precision=bf16",
        )

    def _check_rounding_read(self) -> None:
        """``optimizer.stochastic_rounding=false`` rounds the fused updates of tables whose
        weights are not fp32: with every table fp32 nothing reads it (it was ignored)."""
        fp32 = all(t is EmbeddingDataType.fp32 for t in self.model.table_data_types)
        require_read(
            self.optimizer.stochastic_rounding or not fp32,
            "optimizer.stochastic_rounding=false is read for fp16 tables only "
            "(model.embedding_data_type=fp16, or model.embedding_data_type_per_table); every "
            "table here is fp32, whose updates are not rounded",
            {  # (a preset's table map may hold an fp16 table: fixing the default is not all)
                "model.embedding_data_type": is_value("fp16"),
                "model.embedding_data_type_per_table": lambda value: "fp16" in value.lower(),
            },
        )

    def _check_pipeline_on_device(self) -> None:
        """Pipelines that need CUDA (:data:`~dlrm_exp.config.train.CUDA_PIPELINES`) are
        refused on CPU."""
        pipeline = self.train.pipeline
        require(
            self.hardware.compute_device is not ComputeDevice.cpu or pipeline not in CUDA_PIPELINES,
            f"train.pipeline={pipeline.value} needs hardware.compute_device=cuda: "
            f"{CUDA_PIPELINES.get(pipeline)}; on CPU use train.pipeline=sparse_dist or base",
        )

    def _check_profile_mode(self) -> None:
        """``train.profile`` is read by ``mode=train`` alone: ``mode=verify`` or ``plan`` with
        it passed and wrote no profile, without a word (presets review); and
        ``train.profile_steps`` by it alone, in that mode (outside it, its refusal said to set
        ``train.profile=true``, refused next: diff review)."""
        mode, train = self.mode.value, self.train
        require_read(
            not train.profile or self.mode is Mode.train,
            f"train.profile is read by mode=train only; mode={mode} would ignore it",
            {"mode": is_value("train")},
        )
        if train.profile_steps == ProfileSteps():
            return
        require_read(
            self.mode is Mode.train,
            f"train.profile_steps is read by train.profile=true in mode=train only; mode={mode} "
            "would ignore it",
            {"mode": is_value("train")},
        )
        require_read(
            train.profile,
            "train.profile_steps is read by train.profile=true only: set it too",
            {"train.profile": is_value("true")},
        )

    def _check_multi_hot_sizes(self) -> None:
        """``data=criteo_multihot`` gives one multi-hot size per table, and its lookup tables
        fit ``data.max_lookup_gib`` (refused here, not once the model is built)."""
        if not isinstance(self.data, CriteoMultiHotDataConfig):
            return
        n_tables = len(self.model.num_embeddings_per_feature)
        require(
            len(self.data.multi_hot_sizes) == n_tables,
            f"data.multi_hot_sizes lists {len(self.data.multi_hot_sizes)} sizes but the "
            f"model has {n_tables} tables: give one size per table",
        )
        sizes = self.model.table_sizes
        refusal = lookup_refusal(sizes, self.data.multi_hot_sizes, self.data.max_lookup_gib)
        require(refusal is None, refusal or "")

    def _check_criteo_feature_counts(self) -> None:
        """A model read from Criteo files has Criteo's 26 tables and 13 dense features."""
        if not self.data.input_paths() or self.data.feature_schema() is not None:
            return
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


def _refuse_ignored_sizes(schema: FeatureSchema, sized: FeatureSchema) -> None:
    """Under data the model group sizes (``data=criteo_tsv``), a feature's ``num_embeddings``
    other than the shipped Criteo schema's and the model's would be silently replaced.

    Raises:
        ConfigError: such a feature, naming its key and the key that sizes it.
    """
    shipped = criteo_num_embeddings()
    ignored = [
        (name, feature.num_embeddings, sized.sparse[name].num_embeddings)
        for name, feature in schema.sparse.items()
        if feature.num_embeddings not in (sized.sparse[name].num_embeddings, shipped.get(name))
    ]
    require(
        not ignored,
        "data=criteo_tsv sizes its tables from model.num_embeddings_per_feature (one per "
        "feature, in order), so "
        + ", ".join(f"data.schema.sparse.{n}.num_embeddings={v}" for n, v, _ in ignored[:3])
        + f" would be ignored (the model gives {', '.join(str(m) for _, _, m in ignored[:3])}"
        + " rows): set model.num_embeddings_per_feature instead",
    )
