"""Typed config schema: one dataclass per Hydra group, registered in Hydra's ConfigStore.

Each YAML file under ``conf/<group>/`` starts with ``defaults: [base_<group>, _self_]`` so a
misspelt key or a wrong type fails at compose time, naming the full key
(``Key 'embedding_dimm' not in 'ModelConfig' full_key: model.embedding_dimm``).
Choices are Enums whose values are TorchRec's own strings (``ShardingStrategy.row_wise.value
== ShardingType.ROW_WISE.value == "row_wise"``).

Cross-field rules live in ``__post_init__`` and run when the entry point converts the composed
config with ``OmegaConf.to_object``, before any process group exists. They raise
:class:`~dlrm_exp.errors.ConfigError` whose message names the override that fixes it.
"""

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from dlrm_exp.errors import ConfigError

#: Criteo click logs: 13 integer ("dense") and 26 categorical features per row.
CRITEO_NUM_DENSE = 13
CRITEO_NUM_SPARSE = 26


class Mode(Enum):
    """What the entry point does with the composed config: ``train``, ``verify`` (train a
    few steps sharded and unsharded from the same weights and compare, see
    :mod:`dlrm_exp.verify`), ``preprocess`` (Criteo TSV to npy) or ``plan`` (shard for the
    configured hardware without it, see :mod:`dlrm_exp.plan_mode`)."""

    train = "train"
    verify = "verify"
    preprocess = "preprocess"
    plan = "plan"


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
    ``contiguous_preproc_criteo``, see :mod:`dlrm_exp.data.contiguous`)."""

    raw = "raw"
    hash = "hash"
    contiguous = "contiguous"


class OnNonFinite(Enum):
    """What a training step with a NaN or infinite loss does: ``stop`` the run naming the step
    (earlier checkpoints stay), or ``skip`` the batch with exact-zero gradients and count it
    (see :mod:`dlrm_exp.nonfinite`)."""

    stop = "stop"
    skip = "skip"


class InteractionType(Enum):
    """DLRM feature interaction (TorchRec ``DLRM`` / ``DLRM_DCN`` / ``DLRM_Projection``)."""

    original = "original"
    dcn = "dcn"
    projection = "projection"


class ShardingStrategy(Enum):
    """Sharding type for every table; values equal TorchRec's ``ShardingType`` strings.

    ``auto`` lets TorchRec's planner choose per table; ``from_file`` reuses a ``plan.json``
    (``sharding.plan_path``) as it is.
    """

    auto = "auto"
    from_file = "from_file"
    table_wise = "table_wise"
    row_wise = "row_wise"
    column_wise = "column_wise"
    table_row_wise = "table_row_wise"
    table_column_wise = "table_column_wise"
    grid_shard = "grid_shard"
    data_parallel = "data_parallel"


class ComputeKernel(Enum):
    """Embedding compute kernel; values equal TorchRec's ``EmbeddingComputeKernel`` strings.

    ``fused``: FBGEMM table-batched kernel with the optimizer fused into backward; ``dense``:
    plain autograd tables (needed by data_parallel); ``fused_uvm_caching``: tables in host
    memory (CUDA unified memory) with an HBM cache of ``cache_load_factor`` of the rows.
    """

    fused = "fused"
    dense = "dense"
    fused_uvm_caching = "fused_uvm_caching"


class SparseOptimizer(Enum):
    """Optimizer for the embedding tables, fused into backward (``apply_optimizer_in_backward``)."""

    rowwise_adagrad = "rowwise_adagrad"
    adagrad = "adagrad"
    sgd = "sgd"


class DenseOptimizer(Enum):
    """Optimizer for the dense arch, interaction and over arch parameters."""

    adagrad = "adagrad"
    sgd = "sgd"


class CommPrecision(Enum):
    """Precision of the embedding all-to-all; values equal TorchRec's ``CommType`` strings."""

    fp32 = "fp32"
    fp16 = "fp16"
    bf16 = "bf16"
    fp8 = "fp8"
    int8 = "int8"


class ComputeDevice(Enum):
    cpu = "cpu"
    cuda = "cuda"


class Backend(Enum):
    """torch.distributed backend: gloo (CPU) or nccl (CUDA)."""

    gloo = "gloo"
    nccl = "nccl"


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def _check_layer_sizes(name: str, sizes: list[int]) -> None:
    _require(len(sizes) > 0, f"{name} must list at least one layer: set {name}=[...]")
    _require(all(s > 0 for s in sizes), f"{name} must be positive integers, got {sizes}")


@dataclass
class ModelConfig:
    """DLRM shape (group ``model``). Field names follow TorchRec's ``DLRM`` constructors.

    Attributes:
        embedding_dim: D, the width of every embedding table (floats per row).
        num_embeddings_per_feature: rows of each table; one table per sparse feature, so its
            length is F (26 for Criteo).
        num_embeddings_cap: if set, every table gets ``min(rows, cap)`` rows, so a large shape
            (e.g. MLPerf DLRM-DCNv2, 204M rows) trains on a small machine.
        num_dense_features: width of the dense input (13 for Criteo).
        dense_arch_layer_sizes: MLP over the dense input; the last size must equal D.
        over_arch_layer_sizes: MLP over the interaction output; the last size must be 1.
        interaction_type: ``original`` (pairwise dots), ``dcn`` (low-rank DCN-v2 cross net,
            MLPerf DLRM-DCNv2) or ``projection``.
        dcn_num_layers: cross layers for ``dcn``.
        dcn_low_rank_dim: rank of each cross layer's weight for ``dcn``.
        interaction_branch1_layer_sizes: first projection MLP for ``projection``; the last
            size must be a multiple of D.
        interaction_branch2_layer_sizes: second projection MLP for ``projection``.
    """

    embedding_dim: int = MISSING
    num_embeddings_per_feature: list[int] = MISSING
    num_embeddings_cap: int | None = None
    num_dense_features: int = CRITEO_NUM_DENSE
    dense_arch_layer_sizes: list[int] = MISSING
    over_arch_layer_sizes: list[int] = MISSING
    interaction_type: InteractionType = InteractionType.original
    dcn_num_layers: int = 3
    dcn_low_rank_dim: int = 512
    interaction_branch1_layer_sizes: list[int] = field(default_factory=lambda: [2048, 2048])
    interaction_branch2_layer_sizes: list[int] = field(default_factory=lambda: [2048, 2048])

    def __post_init__(self) -> None:
        d = self.embedding_dim
        _require(d > 0, f"model.embedding_dim must be positive, got {d}")
        up = -(-d // 4) * 4
        _require(
            d % 4 == 0,
            f"model.embedding_dim={d} cannot be sharded: FBGEMM's fused embedding kernels need a "
            f"multiple of 4 columns per shard; set model.embedding_dim={up} and "
            f"model.dense_arch_layer_sizes=[...,{up}]",
        )
        _require(
            len(self.num_embeddings_per_feature) > 0
            and all(n > 0 for n in self.num_embeddings_per_feature),
            "model.num_embeddings_per_feature must list one positive row count per table, "
            f"got {self.num_embeddings_per_feature}",
        )
        _require(
            self.num_embeddings_cap is None or self.num_embeddings_cap > 0,
            f"model.num_embeddings_cap must be positive or null, got {self.num_embeddings_cap}",
        )
        _require(
            self.num_dense_features > 0,
            f"model.num_dense_features must be positive, got {self.num_dense_features}",
        )
        _check_layer_sizes("model.dense_arch_layer_sizes", self.dense_arch_layer_sizes)
        _check_layer_sizes("model.over_arch_layer_sizes", self.over_arch_layer_sizes)
        last_dense = self.dense_arch_layer_sizes[-1]
        _require(
            last_dense == d,
            f"model.dense_arch_layer_sizes[-1] ({last_dense}) must equal model.embedding_dim "
            f"({d}): the dense arch output joins the embeddings in the interaction; "
            f"set model.dense_arch_layer_sizes=[...,{d}]",
        )
        last_over = self.over_arch_layer_sizes[-1]
        _require(
            last_over == 1,
            f"model.over_arch_layer_sizes[-1] ({last_over}) must be 1 (one click logit per "
            "sample): set model.over_arch_layer_sizes=[...,1]",
        )
        if self.interaction_type is InteractionType.dcn:
            _require(
                self.dcn_num_layers > 0 and self.dcn_low_rank_dim > 0,
                "model.dcn_num_layers and model.dcn_low_rank_dim must be positive for "
                f"interaction_type=dcn, got {self.dcn_num_layers} and {self.dcn_low_rank_dim}",
            )
        if self.interaction_type is InteractionType.projection:
            for name in ("interaction_branch1_layer_sizes", "interaction_branch2_layer_sizes"):
                sizes = getattr(self, name)
                _check_layer_sizes(f"model.{name}", sizes)
                _require(
                    sizes[-1] % d == 0,
                    f"model.{name}[-1] ({sizes[-1]}) must be a multiple of model.embedding_dim "
                    f"({d}) for interaction_type=projection",
                )

    @property
    def table_sizes(self) -> list[int]:
        """Rows per table after ``num_embeddings_cap``, one entry per sparse feature."""
        cap = self.num_embeddings_cap
        return [n if cap is None else min(n, cap) for n in self.num_embeddings_per_feature]


@dataclass
class ShardingConfig:
    """How embedding tables are sharded (group ``sharding``).

    Attributes:
        sharding_type: one type for every table (``auto``: TorchRec's planner chooses).
        compute_kernel: ``fused`` (default), ``dense`` (required by ``data_parallel``) or
            ``fused_uvm_caching`` (CUDA only).
        cache_load_factor: share of a table's rows kept in the HBM cache for
            ``fused_uvm_caching`` (TorchRec's ``ParameterConstraints.cache_params``); (0, 1].
        per_table_sharding_type: sharding type by table name (``t_cat_0`` ...), overriding
            ``sharding_type`` for mixed plans:
            ``+sharding.per_table_sharding_type.t_cat_0=data_parallel``.
        per_table_compute_kernel: compute kernel by table name, overriding ``compute_kernel``:
            ``+sharding.per_table_compute_kernel.t_cat_0=dense``.
        plan_path: with ``sharding_type=from_file``, the ``plan.json`` of an earlier run or
            ``mode=plan`` to use exactly (world size, tables and shapes must match).
    """

    sharding_type: ShardingStrategy = ShardingStrategy.auto
    compute_kernel: ComputeKernel = ComputeKernel.fused
    cache_load_factor: float | None = None
    per_table_sharding_type: dict[str, ShardingStrategy] = field(default_factory=dict)
    per_table_compute_kernel: dict[str, ComputeKernel] = field(default_factory=dict)
    plan_path: str | None = None

    def __post_init__(self) -> None:
        if self.sharding_type is ShardingStrategy.from_file:
            _require(
                bool(self.plan_path),
                "sharding=from_file needs the plan to use: "
                "sharding.plan_path=<run folder>/plan.json",
            )
            _require(
                not self.overridden_tables,
                "sharding=from_file takes every table's placement from the plan: drop the "
                "per_table_* overrides",
            )
            return
        _require(
            self.cache_load_factor is None or 0 < self.cache_load_factor <= 1,
            f"sharding.cache_load_factor must be in (0, 1], got {self.cache_load_factor}",
        )
        for table in [None, *self.overridden_tables]:
            kind, kernel = self.table_choice(table)
            fix = (
                "sharding.compute_kernel"
                if table is None
                else f"+sharding.per_table_compute_kernel.{table}"
            )
            where = "sharding" if table is None else f"table {table}"
            if kind is ShardingStrategy.data_parallel:
                _require(
                    kernel is ComputeKernel.dense,
                    f"{where}: data_parallel replicates tables with the dense compute kernel: "
                    f"set {fix}=dense",
                )
            elif kind is not ShardingStrategy.auto:
                _require(
                    kernel is not ComputeKernel.dense,
                    f"{where}: {kind.value} shards need the fused (or fused_uvm_caching) "
                    f"compute kernel; dense goes with data_parallel: set {fix}=fused",
                )

    @property
    def overridden_tables(self) -> list[str]:
        """Table names with a per-table sharding type or compute kernel, sorted."""
        return sorted(set(self.per_table_sharding_type) | set(self.per_table_compute_kernel))

    def table_choice(self, table: str | None) -> tuple[ShardingStrategy, ComputeKernel]:
        """Effective (sharding type, compute kernel) of ``table`` (None: the group default)."""
        if table is None:
            return self.sharding_type, self.compute_kernel
        return (
            self.per_table_sharding_type.get(table, self.sharding_type),
            self.per_table_compute_kernel.get(table, self.compute_kernel),
        )


@dataclass
class OptimizerConfig:
    """Sparse (fused, in backward) and dense optimizers (group ``optimizer``).

    Attributes:
        sparse_optimizer: embedding optimizer, applied inside backward by FBGEMM's fused kernel.
        dense_optimizer: optimizer for every non-embedding parameter.
        learning_rate: sparse learning rate (0.1 in TorchRec's golden training example).
        dense_learning_rate: dense learning rate.
        eps: Adagrad denominator epsilon.
    """

    sparse_optimizer: SparseOptimizer = SparseOptimizer.rowwise_adagrad
    dense_optimizer: DenseOptimizer = DenseOptimizer.adagrad
    learning_rate: float = 0.1
    dense_learning_rate: float = 0.01
    eps: float = 1e-8

    def __post_init__(self) -> None:
        for name in ("learning_rate", "dense_learning_rate"):
            value = getattr(self, name)
            _require(value > 0, f"optimizer.{name} must be positive, got {value}")
        _require(self.eps >= 0, f"optimizer.eps must be >= 0, got {self.eps}")


@dataclass
class QCommsConfig:
    """Quantized communication of the embedding all-to-all (group ``qcomms``).

    Maps to TorchRec's ``QCommsConfig(forward_precision, backward_precision)``. Both null:
    no codecs (plain fp32 collectives). One null: that direction stays fp32.

    Attributes:
        forward_precision: precision of pooled embeddings sent forward.
        backward_precision: precision of embedding gradients sent backward.
        forward_loss_scale: optional loss scale for the forward codec (FP16/BF16 only).
        backward_loss_scale: optional loss scale for the backward codec.
    """

    forward_precision: CommPrecision | None = None
    backward_precision: CommPrecision | None = None
    forward_loss_scale: float | None = None
    backward_loss_scale: float | None = None

    @property
    def enabled(self) -> bool:
        return self.forward_precision is not None or self.backward_precision is not None


@dataclass
class DataConfig:
    """Base of the ``data`` group: every data option extends it."""


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

    num_train_samples: int = 262144
    num_val_samples: int = 32768
    num_test_samples: int = 32768
    zipf_exponent: float = 1.1
    categorical_signal: float = 1.5
    dense_signal: float = 0.5
    base_logit: float = -1.4

    def __post_init__(self) -> None:
        for name in ("num_train_samples", "num_val_samples", "num_test_samples"):
            value = getattr(self, name)
            _require(value > 0, f"data.{name} must be positive, got {value}")
        _require(
            self.zipf_exponent > 0, f"data.zipf_exponent must be > 0, got {self.zipf_exponent}"
        )
        for name in ("categorical_signal", "dense_signal"):
            value = getattr(self, name)
            _require(value >= 0, f"data.{name} must be >= 0, got {value}")


def _as_path_list(key: str, value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ConfigError(f"{key} must be a path or a list of paths, got {value!r}")


@dataclass
class CriteoTsvDataConfig(DataConfig):
    """Criteo Kaggle / Terabyte click-log TSV files (``data=criteo_tsv``).

    Attributes:
        path: a file, a folder (every file in it, sorted) or a list of those.
        val_path / test_path: optional explicit validation / test files; when absent, the last
            ``val_fraction + test_fraction`` of the rows of ``path`` (in file order) are split
            off: validation first, then test.
        val_fraction / test_fraction: row fractions in [0, 1).
        max_reported_bad_lines: how many malformed line numbers are kept in the report.
    """

    path: Any = MISSING
    val_path: Any = None
    test_path: Any = None
    val_fraction: float = 0.1
    test_fraction: float = 0.1
    max_reported_bad_lines: int = 5

    def __post_init__(self) -> None:
        self.path = _as_path_list("data.path", self.path)
        _require(len(self.path) > 0, "data.path is required: set data.path=<tsv file or folder>")
        self.val_path = _as_path_list("data.val_path", self.val_path)
        self.test_path = _as_path_list("data.test_path", self.test_path)
        for name in ("val_fraction", "test_fraction"):
            value = getattr(self, name)
            _require(0 <= value < 1, f"data.{name} must be in [0, 1), got {value}")
        _require(
            self.val_fraction + self.test_fraction < 1,
            "data.val_fraction + data.test_fraction must leave rows to train on, got "
            f"{self.val_fraction} + {self.test_fraction}",
        )


class NpyDataset(Enum):
    """Split rules of ``data=criteo_npy``: ``criteo_1tb`` (TorchRec's DLRM example: every day
    but the last trains; the last, day 23 of the full set, is split in half, validation then
    test) or ``criteo_kaggle`` (facebookresearch/dlrm: the rows of all days in order cut into 7
    near-equal parts; 6 train, the 7th split in half, validation then test)."""

    criteo_1tb = "criteo_1tb"
    criteo_kaggle = "criteo_kaggle"


class MultiHotDistribution(Enum):
    """How ``data=criteo_multihot`` draws the extra ids of a one-hot id (MLPerf DLRM-DCNv2
    reference): ``uniform`` over the table or ``pareto`` (a=0.25, heavy-tailed)."""

    uniform = "uniform"
    pareto = "pareto"


#: Ids per sample of each of the 26 Criteo features in MLPerf DLRM-DCNv2 (MLCommons training
#: reference, ``--multi_hot_sizes``); 214 per sample.
MLPERF_MULTI_HOT_SIZES = [
    *(3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1),
    *(6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1),
]


class OutOfRange(Enum):
    """Categorical ids at or beyond a table's ``num_embeddings``: ``hash`` them (``id % rows``,
    TorchRec's ``hashes``) or stop with an ``error``."""

    hash = "hash"
    error = "error"


@dataclass
class CriteoNpyDataConfig(DataConfig):
    """TorchRec's binary Criteo layout written by ``mode=preprocess`` (``data=criteo_npy``).

    Attributes:
        path: folder holding ``day_<n>_{dense,sparse,labels}.npy``.
        dataset: split rules, see :class:`NpyDataset`.
        mmap_mode: map the files instead of reading them: the splits are views of the days
            (never concatenated) and each batch reads its rows, so memory does not grow with
            the number of days.
        out_of_range: see :class:`OutOfRange`.
        shuffle_training_set: permute the training rows once (seeded by ``seed``).
        shuffle_batches: visit the full training batches in another order every epoch
            (seeded by ``seed`` and the epoch; ranks stay disjoint, resume stays exact).
    """

    path: str = MISSING
    dataset: NpyDataset = NpyDataset.criteo_1tb
    mmap_mode: bool = False
    out_of_range: OutOfRange = OutOfRange.hash
    shuffle_training_set: bool = False
    shuffle_batches: bool = False

    def __post_init__(self) -> None:
        _require(
            not (self.mmap_mode and self.shuffle_training_set),
            "data.shuffle_training_set permutes the rows in memory, which data.mmap_mode=true "
            "avoids: use data.shuffle_batches=true with mmap_mode",
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
    """

    path: str | None = None
    dataset: NpyDataset = NpyDataset.criteo_1tb
    multi_hot_sizes: list[int] = field(default_factory=lambda: list(MLPERF_MULTI_HOT_SIZES))
    multi_hot_distribution: MultiHotDistribution = MultiHotDistribution.uniform
    max_lookup_gib: float = 4.0

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(
            all(m >= 1 for m in self.multi_hot_sizes),
            f"data.multi_hot_sizes must all be >= 1, got {list(self.multi_hot_sizes)}",
        )
        _require(self.max_lookup_gib > 0, "data.max_lookup_gib must be positive")


@dataclass
class HardwareConfig:
    """Where and how the job runs, and the planner's ``Topology`` (group ``hardware``).

    Attributes:
        compute_device: ``cpu`` or ``cuda``.
        backend: torch.distributed backend (``gloo`` for CPU, ``nccl`` for CUDA).
        nproc_per_node: worker processes per host; above 1 (with ``nnodes``) the job starts
            them through torch.distributed's elastic launcher, unless already run by torchrun.
        nnodes: hosts; multi-host jobs are started by torchrun on every host.
        local_world_size: ranks per host as the planner sees it (null: ``nproc_per_node``).
        ddr_cap: host memory per rank for the planner, GiB. Null: measured on this machine
            (total RAM / local world size); TorchRec's own default (128 GiB) would let plans
            through that cannot be allocated here.
        hbm_cap: device memory per rank for the planner, GiB (cuda only). Null: the device's
            own memory when one is present, else TorchRec's default.
        intra_host_bw: bandwidth between ranks of one host, GB/s (null: TorchRec's default).
        inter_host_bw: network bandwidth of one rank to other hosts, GB/s: the host's network
            divided by its ranks, as TorchRec's ``Topology`` counts one NIC share per device
            (null: TorchRec's default, 12.5).
        hbm_mem_bw: device memory bandwidth, GB/s, for the planner's compute estimates
            (null: TorchRec's default, 897).
        collective_timeout_s: seconds a collective may wait for a peer before the job fails
            (torch.distributed's own default is 30 minutes).
    """

    compute_device: ComputeDevice = ComputeDevice.cpu
    backend: Backend = Backend.gloo
    nproc_per_node: int = 1
    nnodes: int = 1
    local_world_size: int | None = None
    ddr_cap: float | None = None
    hbm_cap: float | None = None
    intra_host_bw: float | None = None
    inter_host_bw: float | None = None
    hbm_mem_bw: float | None = None
    collective_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        for name in ("nproc_per_node", "nnodes", "collective_timeout_s"):
            value = getattr(self, name)
            _require(value > 0, f"hardware.{name} must be positive, got {value}")
        for name in (
            "local_world_size",
            "ddr_cap",
            "hbm_cap",
            "intra_host_bw",
            "inter_host_bw",
            "hbm_mem_bw",
        ):
            value = getattr(self, name)
            _require(value is None or value > 0, f"hardware.{name} must be positive, got {value}")
        if self.local_world_size is not None:
            _require(
                self.world_size % self.local_world_size == 0,
                f"hardware.local_world_size ({self.local_world_size}) must divide the world size "
                f"({self.world_size} = nproc_per_node x nnodes): set "
                f"hardware.local_world_size={self.nproc_per_node}",
            )
        if self.compute_device is ComputeDevice.cpu:
            _require(
                self.backend is Backend.gloo,
                "hardware.backend=nccl needs CUDA devices: set hardware.backend=gloo for CPU",
            )

    @property
    def world_size(self) -> int:
        """Ranks in the job: ``nproc_per_node * nnodes``."""
        return self.nproc_per_node * self.nnodes


@dataclass
class TrainConfig:
    """The training loop.

    Attributes:
        batch_size: samples per rank per step.
        epochs: passes over the training split (ignored when ``max_steps`` stops earlier).
        max_steps: stop after this many steps (null: run ``epochs``).
        val_every_n_steps: validate every N steps as well as at the end (null: only at the end).
        log_every_n_steps: TensorBoard scalar interval, steps.
        throughput_warmup_steps: first steps left out of ``samples_per_sec``.
        progress_bar: tqdm bar on rank 0 when stderr is a terminal.
        checkpoint_every_n_steps: save a sharded DCP checkpoint every N steps and at the end
            (null: no checkpoints), under ``<run>/checkpoints/step_<n>/``.
        keep_last_checkpoints: keep only the newest N checkpoints (null: keep all).
        resume: ``auto`` continues the newest complete checkpoint of the run folder
            (``hydra.run.dir=<run>``; starts fresh if there is none), a path continues that
            checkpoint folder, null starts fresh.
        on_nonfinite: see :class:`OnNonFinite`.
    """

    batch_size: int = 512
    epochs: int = 1
    max_steps: int | None = None
    val_every_n_steps: int | None = None
    log_every_n_steps: int = 20
    throughput_warmup_steps: int = 10
    progress_bar: bool = True
    checkpoint_every_n_steps: int | None = None
    keep_last_checkpoints: int | None = None
    resume: str | None = None
    on_nonfinite: OnNonFinite = OnNonFinite.stop

    def __post_init__(self) -> None:
        _require(self.batch_size > 0, f"train.batch_size must be positive, got {self.batch_size}")
        _require(self.epochs > 0, f"train.epochs must be positive, got {self.epochs}")
        for name in (
            "max_steps",
            "val_every_n_steps",
            "checkpoint_every_n_steps",
            "keep_last_checkpoints",
        ):
            value = getattr(self, name)
            _require(value is None or value > 0, f"train.{name} must be positive or null")
        _require(self.log_every_n_steps > 0, "train.log_every_n_steps must be positive")
        _require(self.throughput_warmup_steps >= 0, "train.throughput_warmup_steps must be >= 0")


@dataclass
class VerifyConfig:
    """``mode=verify`` settings.

    Attributes:
        steps: training steps compared against the unsharded reference.
    """

    steps: int = 20

    def __post_init__(self) -> None:
        _require(self.steps > 0, f"verify.steps must be positive, got {self.steps}")


@dataclass
class PreprocessConfig:
    """``mode=preprocess``: Criteo TSV (``data=criteo_tsv data.path=...``) to TorchRec's binary
    layout (``day_<n>_dense.npy`` float32 (N, 13), ``day_<n>_sparse.npy`` int64 (N, 26),
    ``day_<n>_labels.npy`` int32 (N, 1)).

    Attributes:
        output_dir: folder for the npy files and ``preprocess_report.json`` (created).
        dense_transform: see :class:`DenseTransform`.
        categorical: see :class:`CategoricalTransform`.
        frequency_threshold: with ``categorical=contiguous``, ids seen fewer times than this
            (over all days) share id 1 (TorchRec's ``FREQUENCY_THRESHOLD``, 3).
        num_workers: parser processes (blocks of every file are parsed in parallel).
        overwrite: convert days again even when their finished marker matches the input.
    """

    output_dir: str | None = None
    dense_transform: DenseTransform = DenseTransform.log1p
    categorical: CategoricalTransform = CategoricalTransform.raw
    frequency_threshold: int = 3
    num_workers: int = 2
    overwrite: bool = False

    def __post_init__(self) -> None:
        _require(self.num_workers > 0, "preprocess.num_workers must be positive")
        _require(
            self.frequency_threshold >= 0,
            f"preprocess.frequency_threshold must be >= 0, got {self.frequency_threshold}",
        )


@dataclass
class Config:
    """Root config: the six groups plus the training loop."""

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

    def __post_init__(self) -> None:
        if self.mode is Mode.preprocess:
            _require(
                isinstance(self.data, CriteoTsvDataConfig),
                "mode=preprocess converts Criteo TSV files: add data=criteo_tsv data.path=<files>",
            )
            _require(
                bool(self.preprocess.output_dir),
                "mode=preprocess needs preprocess.output_dir=<folder for the npy files>",
            )
        tables = {f"t_cat_{i}" for i in range(len(self.model.num_embeddings_per_feature))}
        unknown = sorted(set(self.sharding.overridden_tables) - tables)
        _require(
            not unknown,
            f"sharding.per_table_* names unknown table(s) {unknown}: tables are t_cat_0 .. "
            f"t_cat_{len(tables) - 1}",
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
        if isinstance(self.data, CriteoMultiHotDataConfig):
            n_tables = len(self.model.num_embeddings_per_feature)
            _require(
                len(self.data.multi_hot_sizes) == n_tables,
                f"data.multi_hot_sizes lists {len(self.data.multi_hot_sizes)} sizes but the "
                f"model has {n_tables} tables: give one size per table",
            )
        criteo_files = (CriteoTsvDataConfig, CriteoNpyDataConfig)
        if isinstance(self.data, criteo_files) or getattr(self.data, "path", None):
            n_sparse = len(self.model.num_embeddings_per_feature)
            _require(
                n_sparse == CRITEO_NUM_SPARSE,
                f"Criteo data has {CRITEO_NUM_SPARSE} categorical features but "
                f"model.num_embeddings_per_feature lists {n_sparse} tables: give one row "
                f"count per feature ({CRITEO_NUM_SPARSE} values)",
            )
            _require(
                self.model.num_dense_features == CRITEO_NUM_DENSE,
                f"Criteo data has {CRITEO_NUM_DENSE} dense features: set "
                f"model.num_dense_features={CRITEO_NUM_DENSE}",
            )


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
