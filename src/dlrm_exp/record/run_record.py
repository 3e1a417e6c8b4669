"""The typed record behind ``metrics.json``: written by training, read by sweeps and the report.

A completed run holds every field; a failed job of a sweep holds only ``status: failed``,
``error`` and ``error_type``. JSON keys equal the field names, in this order.
"""

import functools
import json
import math
import types
import typing
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from dlrm_exp.util.files import read_json_object, write_json_atomic
from dlrm_exp.util.substitution import collectives_ran
from dlrm_exp.util.text import step_text

COMPLETED = "completed"
_TARGET_KEYS = ("target_auroc", "reached_target", "target_step", "target_epoch")
FAILED = "failed"
#: A job folder without ``metrics.json`` (killed before it could write one).
MISSING = "missing"
#: A job of a sweep that Ctrl-C or SIGTERM ended while it ran.
INTERRUPTED = "interrupted"


#: The statuses of a run that did not finish: an attempt a later job may replace or continue.
UNFINISHED = frozenset({FAILED, INTERRUPTED})


def record_status(path: Path) -> str | None:
    """The ``status`` of the run record ``path`` (a ``metrics.json``): None where there is
    none; ``completed`` where it cannot be read or says none (kept as a finished run's)."""
    if not path.exists():
        return None
    return (read_json_object(path) or {}).get("status", COMPLETED)


def finished_record(path: Path) -> bool:
    """Whether ``path`` (a ``metrics.json``) is the record of a run that finished (completed,
    or unreadable: kept as a finished run's), not none or an :data:`UNFINISHED` one's."""
    status = record_status(path)
    return status is not None and status not in UNFINISHED


def json_fits(tp: Any, value: Any) -> bool:
    """Whether the JSON ``value`` has the shape of the field type ``tp``: an object for a
    ``dict``, a list (of items that fit) for a ``list``, a number (not a bool) for ``float``
    and ``int``, a string for ``str``, a bool for ``bool``; null where ``tp`` allows None. An
    object's entries are checked where they are numbers (``dict[str, float]``: a number or
    null, as NaN is written), which tables format (an edited ``"auroc": "0.7"`` or ``[1]``
    crashed the report: review); others not (readers take them with ``.get``)."""
    if tp is Any:
        return True
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        return any(json_fits(arg, value) for arg in args)
    if tp is type(None):
        return value is None
    base = origin or tp
    if base is bool or isinstance(value, bool):
        return base is bool and isinstance(value, bool)
    if base is list:
        item = args[0] if args else Any
        return isinstance(value, list) and all(json_fits(item, v) for v in value)
    if base is dict and len(args) == 2 and args[1] in (float, int, float | None):
        return isinstance(value, dict) and all(
            v is None or json_fits(float, v) for v in value.values()
        )
    # a number for int too: a step rescaled to another world size may be a fraction
    kinds = {float: (int, float), int: (int, float), str: (str,), dict: (dict,)}
    return isinstance(value, kinds.get(base, (object,)))


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    """``cls``'s field types (``typing.get_type_hints``: constant per class, read per record)."""
    return typing.get_type_hints(cls)


def _type_name(tp: Any) -> str:
    return tp.__name__ if isinstance(tp, type) else str(tp).replace("typing.", "")


@dataclass
class RunMetrics:
    """Final numbers of one run (``metrics.json``).

    Attributes:
        status: ``completed``, ``failed`` or ``interrupted`` (``missing`` when read from a
            folder without one).
        val / test: ``auroc``, ``logloss`` (nats), ``ne`` and ``samples`` of the split, for the
            weights the run keeps (see ``weights``).
        samples_per_sec: steady-state global training throughput, samples/s (warm-up and
            evaluation excluded; the loop's own logging included, as the run pays it: the
            training window's scoring every ``log_every_n_steps``, about 9 ms for 50 batches
            of 2,048 on the 2-core VM of docs/results.md run 12, 2 % of the fast setting's
            steps); None if no step followed the warm-up.
        steps: optimizer steps taken.
        train_samples: samples trained on, all ranks.
        train_seconds: wall seconds inside counted training steps.
        wall_seconds: wall seconds of the whole job, from its start
            (:func:`dlrm_exp.modes.job.job_start`: its processes' start, data, build, train,
            evaluate) to its record.
        peak_memory_gib: rank 0's peak resident set, GiB.
        comm_bytes_per_step: collective bytes per training step, all ranks summed, by
            ``forward`` / ``backward`` (the pooled embeddings) / ``input_dist`` (the sparse
            input) / ``allreduce`` (DDP's gradients of what TorchRec does not shard; absent in
            records before it was counted), over the steps this job trained (after a resume,
            those after the checkpoint); empty when it trained none.
        peak_memory_gib_per_rank: per rank ``rss`` (and on CUDA ``cuda_allocated`` /
            ``cuda_reserved``), GiB.
        step_time_ms: ``p50`` / ``p90`` / ``mean`` of per-step wall times after warm-up, ms.
        final_train_loss: mean BCE of the last logged step on rank 0.
        skipped_steps: steps skipped for a non-finite loss (``train.on_nonfinite=skip``).
        world_size: ranks in the job.
        threads_per_rank: intra-op CPU threads of each rank (rank 0's; ``hardware.threads_per_rank``
            or its default, the host's cores divided by its ranks).
        host_allocator: what rank 0's host allocator ran with (``hardware.reuse_host_memory``:
            glibc's thresholds set, its defaults, or why it was left alone).
        prefetch_batches: batches built ahead by the background thread, as run
            (``train.prefetch_batches``, null resolved: 2 on CUDA, 0 on CPU).
        loss_read_lag: steps queued before a step's loss was read (1 on CUDA with
            ``on_nonfinite=stop``, else 0; :func:`dlrm_exp.loop.trainer.loss_read_lag`).
        embedding_bytes_per_rank: table bytes each rank holds under the plan (each table in its
            own dtype: fp16 tables at 2 bytes an element).
        bayes_auroc: the Bayes-optimal AUROC per split (synthetic data only).
        data: what the data source reported (row counts, skipped rows, ...).
        val_history: every validation's metrics with its ``step``.
        choices: each config group's chosen option.
        seed: the run's ``seed``, as resolved (what a report pairs repeats by; an override
            such as ``seed=${oc.env:SLURM_ARRAY_TASK_ID}`` is not a number); None in a record
            from before the field or of a job that failed.
        resumed: after ``train.resume``, the ``checkpoint`` it continued, this job's ``step``
            there and the ``changed_settings`` (``key old -> new``) against the run that wrote
            it; from the run's own checkpoint, ``started_from``: the same of the resume from
            another run's checkpoint its training began with; empty for a run trained from
            the start.
        initialized_from: the checkpoint whose model weights ``train.init_from`` started
            this run from (its step 0); None: none.
        target_auroc: ``train.target_auroc`` (the target keys appear only when it is set).
        reached_target: whether a validation reached it.
        target_step / target_epoch: the step, and the epochs trained (a fraction), of the
            first validation that reached it.
        stop_reason: why training ended: ``end`` (its steps ran out), ``target_auroc`` or
            ``early_stopping``.
        monitor: the validation metric of the best validation and early stopping (``auroc``,
            ``logloss``, ``ne``).
        best_step / best_epoch / best_value: the best validation's step, epochs trained then
            (a fraction) and monitored value.
        weights: whose numbers ``val`` and ``test`` are: ``best`` (``train.keep_best`` restored
            the best validation's weights) or ``final``.
        final_weights: with ``weights: best``, the final weights' ``val`` and ``test`` (the
            cost of training past the best validation); empty otherwise.
        train_windows: the training window's ``logloss`` / ``auroc`` (the last
            ``train.train_window_batches`` batches of rank 0) at each validation's ``step``.
        utilization: dense FLOPs and embedding bytes per sample, their achieved rates per
            rank, the measured peaks they are compared with (FLOP/s, copy bytes/s, dtype, when
            measured, probed or cached), the theoretical matmul bound and the fractions of
            each; a fraction above 1 is None and listed in ``measurement_errors``
            (:class:`dlrm_exp.perf.utilization.Utilization`; rank 0's, at its
            ``threads_per_rank``).
        profile: the files ``train.profile`` wrote, relative to the run folder (traces per
            rank, RSS timelines, CUDA memory snapshots); empty without profiling.
        effective_qcomms: the precision each embedding collective the plan uses ran in,
            ``{collective: {"forward": "FP16", "backward": "BF16"}}`` (``pooled_all_to_all``,
            ``reduce_scatter``, ``sequence_all_to_all``), read back from rank 0's sharded
            model (:func:`dlrm_exp.distributed.qcomms.effective_qcomms`); empty without codecs
            (every collective FP32); None in a record without it (``mode=evaluate``'s, which
            trains nothing, or one written before the field existed: its ``qcomms_ran`` is
            then blank, not FP32).
        table_data_types: each table's weight dtype as allocated (``{table: "fp16"}``), read
            back from rank 0's sharded model (``model.embedding_data_type``).
        dense_precision: what the dense arch, interaction and over arch computed in
            (``fp32``, or ``bf16`` under autocast: ``train.dense_precision``).
        sparse_backward: where the sparse arch's backward ran, ``overlap`` (a helper thread)
            or ``serial`` (``train.sparse_backward``; blank in a record from before the field).
        table_sharding_types: each table's sharding type as planned and run
            (``{table: "row_wise"}``, TorchRec's ``ShardingType`` strings; the planner's choice
            with ``sharding=auto``; a column-splitting type of one column shard per table keeps
            its name, its code ran: that it amounts to ``table_wise``'s layout is a
            substitution).
        table_compute_kernels: each table's compute kernel as planned and run
            (``{table: "fused"}``, TorchRec's ``EmbeddingComputeKernel`` strings: ``dense`` for
            the data_parallel tables of ``optimizer=adam``, whatever ``sharding.compute_kernel``
            asked).
        table_rows: each table's rows (``{table: num_embeddings}``, after the cap).
        managed_rows_held: for each managed-collision table (``id_policy=managed_collision``),
            the rows holding a raw id of their own at the end of training, all ranks.
        substitutions: each setting that ran other than asked, ``{"setting", "asked", "ran",
            "reason"}`` (:class:`dlrm_exp.util.substitution.Substitution`), e.g. TorchRec's
            FP16/BF16 reduce-scatter for ``qcomms=fp8``.
        error / error_type: the failure of a failed job.
    """

    status: str = COMPLETED
    val: dict[str, float] = field(default_factory=dict)
    test: dict[str, float] = field(default_factory=dict)
    samples_per_sec: float | None = None
    steps: int = 0
    train_samples: int = 0
    train_seconds: float = 0.0
    wall_seconds: float = 0.0
    peak_memory_gib: float = 0.0
    comm_bytes_per_step: dict[str, float] = field(default_factory=dict)
    peak_memory_gib_per_rank: list[dict[str, float]] = field(default_factory=list)
    step_time_ms: dict[str, float | None] = field(default_factory=dict)
    final_train_loss: float | None = None
    skipped_steps: list[int] = field(default_factory=list)
    world_size: int = 1
    threads_per_rank: int | None = None
    host_allocator: str = ""
    prefetch_batches: int | None = None
    loss_read_lag: int | None = None
    embedding_bytes_per_rank: list[int] = field(default_factory=list)
    bayes_auroc: dict[str, float | None] | None = None
    data: dict[str, Any] = field(default_factory=dict)
    val_history: list[dict[str, float]] = field(default_factory=list)
    choices: dict[str, str] = field(default_factory=dict)
    seed: int | None = None
    resumed: dict[str, Any] = field(default_factory=dict)
    initialized_from: str | None = None
    target_auroc: float | None = None
    reached_target: bool = False
    target_step: int | None = None
    target_epoch: float | None = None
    stop_reason: str = "end"
    monitor: str | None = None
    best_step: int | None = None
    best_epoch: float | None = None
    best_value: float | None = None
    weights: str = "final"
    final_weights: dict[str, dict[str, float]] = field(default_factory=dict)
    train_windows: list[dict[str, float]] = field(default_factory=list)
    utilization: dict[str, Any] = field(default_factory=dict)
    profile: list[str] = field(default_factory=list)
    effective_qcomms: dict[str, dict[str, str]] | None = None
    table_data_types: dict[str, str] = field(default_factory=dict)
    dense_precision: str = ""
    sparse_backward: str = ""
    table_sharding_types: dict[str, str] = field(default_factory=dict)
    table_compute_kernels: dict[str, str] = field(default_factory=dict)
    table_rows: dict[str, int] = field(default_factory=dict)
    managed_rows_held: dict[str, int] = field(default_factory=dict)
    substitutions: list[dict[str, str]] = field(default_factory=list)
    error: str | None = None
    error_type: str | None = None

    @classmethod
    def failed(
        cls, error: str, error_type: str, choices: Mapping[str, str | None] | None = None
    ) -> "RunMetrics":
        """The record of a job that failed with ``error`` (an exception of ``error_type``),
        with its config groups' ``choices`` (a report places its bar by them)."""
        return cls(status=FAILED, error=error, error_type=error_type, choices=dict(choices or {}))

    @classmethod
    def interrupted(cls, signal_name: str, error_type: str) -> "RunMetrics":
        """The record of a sweep job that the signal ``signal_name`` (``SIGINT``: Ctrl-C)
        ended while it ran (``error_type``: ``KeyboardInterrupt`` or ``Terminated``)."""
        return cls(status=INTERRUPTED, error=f"interrupted by {signal_name}", error_type=error_type)

    @property
    def weights_from(self) -> str:
        """Where the reported (best) weights come from when they were trained before this run
        resumed, by the checkpoint's run under its world size and sharding: ``before the
        resume at step 20 (best at step 15)``; else empty (the summaries and HParams labelled
        them by the resumed run's settings alone: review)."""
        start, best = self.resumed.get("step"), self.best_step
        if self.weights != "best" or start is None or best is None or best > start:
            return ""
        return f"before the resume at step {start} (best at step {step_text(best)})"

    @property
    def qcomms_ran(self) -> str:
        """The effective precisions in one cell: ``reduce_scatter FP16/BF16`` (forward /
        backward; collectives comma-separated), ``FP32`` without codecs, ``none`` where no
        embedding collective ran (one rank, or every table data_parallel: it said ``FP32``;
        review), ``""`` for a record without them (``mode=evaluate``)."""
        if self.effective_qcomms is None:
            return ""
        sharding = self.table_sharding_types.values()
        return collectives_ran(self.effective_qcomms, self.world_size, sharding)

    @property
    def tables_ran(self) -> str:
        """The table weight dtypes in one cell: ``fp16``, or ``fp16 x 25, fp32 x 1`` when they
        differ; ``""`` for a record without them."""
        return _counted(self.table_data_types.values())

    @property
    def sharding_ran(self) -> str:
        """The tables' sharding types in one cell: ``row_wise``, or ``table_column_wise x 25,
        table_wise x 1`` when they differ; ``""`` for a record without them."""
        return _counted(self.table_sharding_types.values())

    @property
    def kernels_ran(self) -> str:
        """The tables' compute kernels in one cell, as :attr:`sharding_ran` counts them."""
        return _counted(self.table_compute_kernels.values())

    @property
    def ran(self) -> dict[str, str]:
        """What ran that a configuration's name does not say, for the gate to compare
        between two sets (the threads, the planner's choice of sharding, the kernels, the
        tables' dtypes, the collectives' precision, the dense precision: a change of any of
        them passed the gate unsaid; what-ran review); the fields this record has."""
        threads = "" if self.threads_per_rank is None else str(self.threads_per_rank)
        values = {
            "threads_per_rank": threads,
            "sharding": self.sharding_ran,
            "compute_kernel": self.kernels_ran,
            "embedding_data_type": self.tables_ran,
            "qcomms": self.qcomms_ran,
            "dense_precision": self.dense_precision,
        }
        return {key: value for key, value in values.items() if value}

    @property
    def substituted(self) -> str:
        """What ran instead of what was asked, in one cell (``""`` when everything ran as
        asked): ``qcomms: reduce_scatter FP16/BF16``, ``; ``-separated."""
        return "; ".join(f"{s['setting']}: {s['ran']}" for s in self.substitutions)

    def generalization_gap(self, step: int | None) -> float | None:
        """Validation log loss minus the training window's at validation ``step`` (nats; None
        without both as finite numbers: an empty or diverged validation has NaN, or null once
        read back)."""
        val = [h.get("logloss") for h in self.val_history if h.get("step") == step]
        train = [w.get("logloss") for w in self.train_windows if w.get("step") == step]
        if step is None or not val or not train:
            return None
        both = (val[0], train[0])
        if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in both):
            return None
        return both[0] - both[1]

    @property
    def peak_rss_gib_max_rank(self) -> float | None:
        """The largest peak resident set over the ranks, GiB (host memory)."""
        return max((r["rss"] for r in self.peak_memory_gib_per_rank if "rss" in r), default=None)

    @property
    def peak_gpu_gib_max_rank(self) -> float | None:
        """The largest peak of GPU memory reserved by torch's allocator over the ranks, GiB
        (what a rank held of its HBM; None on CPU)."""
        held = [r["cuda_reserved"] for r in self.peak_memory_gib_per_rank if "cuda_reserved" in r]
        return max(held, default=None)

    def to_json(self) -> dict[str, Any]:
        """The ``metrics.json`` content: every field of a completed run; ``status``, ``error``,
        ``error_type`` and, where known, ``choices`` of a failed or interrupted one."""
        if self.status in UNFINISHED:
            failure = {"status": self.status, "error": self.error, "error_type": self.error_type}
            return {**failure, "choices": self.choices} if self.choices else failure
        content = asdict(self)
        del content["error"], content["error_type"]
        if self.target_auroc is None:
            for key in _TARGET_KEYS:
                del content[key]
        return content

    @classmethod
    def from_json(cls, content: dict[str, Any]) -> "RunMetrics":
        """The record of a ``metrics.json`` content; absent keys keep their defaults, unknown
        keys (from newer versions) are ignored."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in content.items() if k in known})

    @classmethod
    def read(cls, path: Path) -> "RunMetrics":
        """The record in the ``metrics.json`` at ``path`` (:meth:`from_json`).

        Raises:
            OSError: it cannot be read.
            ValueError: it is not JSON, or not a dlrm_exp record (not an object, no
                ``status``, or a known key whose value is not of its field's kind: an object,
                a list, a number, a string; an edited file); the message names the file and
                the key.
        """
        try:
            content = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as err:
            raise ValueError(f"{path}: not JSON ({err})") from None
        if not (isinstance(content, dict) and isinstance(content.get("status"), str)):
            raise ValueError(f"{path}: not a dlrm_exp metrics.json (an object with a status)")
        hints = _field_types(cls)
        for key, value in content.items():
            if key in hints and not json_fits(hints[key], value):
                raise ValueError(
                    f"{path}: not a dlrm_exp metrics.json: {key} is {json.dumps(value)[:60]}, "
                    f"not of the kind {_type_name(hints[key])}"
                )
        return cls.from_json(content)

    def write(self, path: Path) -> None:
        """Write ``metrics.json`` atomically (a crash never leaves a partial file)."""
        write_json_atomic(path, self.to_json())


@dataclass
class EvalMetrics:
    """What ``mode=evaluate`` measured (its ``metrics.json``).

    Attributes:
        status: ``completed``.
        mode: ``evaluate``.
        checkpoint: the checkpoint folder that was scored.
        step: the training step the checkpoint was written at.
        val / test: ``auroc``, ``logloss`` (nats), ``ne`` and ``samples`` of each scored split
            (empty when the split was not asked for).
        world_size: ranks that evaluated.
        data: what the data source reported (row counts, skipped rows, ...).
        wall_seconds: wall seconds of the whole job, its workers' start included.
        effective_qcomms: the embedding collectives' precisions that scored, as a training
            record's (:class:`RunMetrics`); empty when none was quantized.
        substitutions: what scored instead of what was asked (a qcomms precision, a sharding
            type), as a training record's; the optimizer's, which scoring does not run, left
            out.
    """

    checkpoint: str
    step: int
    val: dict[str, float] = field(default_factory=dict)
    test: dict[str, float] = field(default_factory=dict)
    world_size: int = 1
    data: dict[str, Any] = field(default_factory=dict)
    wall_seconds: float = 0.0
    effective_qcomms: dict[str, dict[str, str]] = field(default_factory=dict)
    substitutions: list[dict[str, str]] = field(default_factory=list)
    status: str = COMPLETED
    mode: str = "evaluate"

    def write(self, path: Path) -> None:
        """Write ``metrics.json`` atomically."""
        write_json_atomic(path, asdict(self))


def _counted(values: Iterable[str]) -> str:
    """``a`` when every value is ``a``; else ``a x 25, b x 1`` (most frequent first, ties in
    name order); ``""`` for none."""
    counts = sorted(Counter(values).items(), key=lambda kv: (-kv[1], kv[0]))
    if len(counts) == 1:
        return counts[0][0]
    return ", ".join(f"{value} x {n}" for value, n in counts)
