"""The set-up every mode that trains or scores shares: running on this process or on
``hardware.nproc_per_node`` workers, data splits and the built experiment on this rank, and this
rank's batches of a split."""

import logging
import socket
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torchrec.datasets.utils import Batch
from torchrec.distributed.types import ShardingPlan

from dlrm_exp.config import Config, EmbeddingDataType, FileSplitsConfig
from dlrm_exp.config.data import CONVERSION, IDS, input_path_key
from dlrm_exp.config.keys import flat_settings
from dlrm_exp.data import (
    ClickData,
    DataSplits,
    ParquetSplit,
    check_input_paths,
    input_digests,
    is_generated,
    load_splits,
    npy_folder,
    per_rank_sizes,
)
from dlrm_exp.data.criteo_npy import conversion_records
from dlrm_exp.distributed.launch import (
    DistContext,
    check_one_host,
    init_worker,
    launch_workers,
    launched_by_torchrun,
    needs_launch,
)
from dlrm_exp.errors import ConfigError
from dlrm_exp.factories.experiment import Experiment, TrainWrapper, build_experiment, build_module
from dlrm_exp.loop.checkpoint import CheckpointError, SafeFileSystemReader, run_folder_of
from dlrm_exp.loop.run_origin import data_overrides
from dlrm_exp.loop.settings import change_line, setting_changes
from dlrm_exp.modes.job import Job
from dlrm_exp.planning.job import check_ranks_per_host, plan_job
from dlrm_exp.planning.tables import DTYPE_NAMES, is_table_key, table_of_key
from dlrm_exp.util.folder_lock import hold_run_folder
from dlrm_exp.util.rank_zero import on_rank_zero
from dlrm_exp.util.text import first_few

log = logging.getLogger(__name__)

Result = TypeVar("Result")


def preflight(cfg: Config) -> ShardingPlan:
    """What the parent can check before starting workers: data paths and the sharding plan
    (on the meta device, for the whole job, exactly as ``mode=plan`` plans it). Returns the
    plan, which the workers then use."""
    check_input_paths(cfg.data, cfg.read_splits())
    check_ranks_per_host(cfg.hardware, cfg.hardware.nproc_per_node)  # the workers' own
    return plan_job(cfg, build_module(cfg)).plan


def on_one_process(cfg: Config) -> None:
    """Set ``cfg`` (``mode=predict`` or ``mode=export``, which run on one process) to one
    process, saying so where the job asked for more: a training run's
    ``hardware.nproc_per_node`` repeated (a ``dlrm_main`` preset's 8) was refused by predict
    and taken by export without a word (after-training review); ``hardware.local_world_size``
    with it (it must divide the world size: diff review). A checkpoint of any number of
    ranks loads on one. (A submitit launcher's job of several tasks is refused by
    :func:`~dlrm_exp.modes.run_mode`.)"""
    hardware = cfg.hardware
    if hardware.world_size == 1:
        return
    log.warning(
        "mode=%s runs on one process: hardware.nproc_per_node=%d%s is not used here (a "
        "checkpoint of any number of ranks loads on one)",
        cfg.mode.value, hardware.nproc_per_node,
        f" hardware.nnodes={hardware.nnodes}" if hardware.nnodes != 1 else "",
    )  # fmt: skip
    cfg.hardware = replace(hardware, nproc_per_node=1, nnodes=1, local_world_size=None)


def run_on_ranks(worker: Callable[..., Result], cfg: Config, job: Job, *args: Any) -> Result:
    """``worker(cfg, job, *args, plan=None)`` in this process (one rank, or a rank torchrun or
    submitit started), or in ``hardware.nproc_per_node`` workers started by torch's elastic
    launcher after :func:`preflight`, with its plan; returns rank 0's result.

    Raises:
        Refusal: the workers refused the job (a checkpoint or data they cannot use), as one
            process raises it.
        WorkerFailedError: a worker failed otherwise or was killed.
    """
    if not needs_launch(cfg.hardware):
        return worker(cfg, job, *args)
    check_one_host(cfg.hardware)  # before planning the whole job: minutes for a large one
    return launch_workers(_spawned, (worker, cfg, job, args, preflight(cfg)), cfg.hardware)


#: A run-folder check (it raises the refusal) that a launched rank makes in its worker.
FolderCheck = Callable[[], None]


def check_folder_first(check: FolderCheck, run_dir: Path) -> FolderCheck | None:
    """Run a run folder's ``check`` where its refusal reaches every rank: here, in one process
    or the parent of the workers it starts, before any starts (returns None); in a rank that
    torchrun, TorchX or a submitit job launched, later, in the worker once its peers are
    connected (returned, for :func:`check_folder_in_worker`), after holding ``run_dir``
    (:func:`~dlrm_exp.util.folder_lock.hold_run_folder`: the entry point leaves a launched
    job of several ranks to hold it here). Checked here, a refused rank 0 returned before the
    process group existed, and a submitit job's other tasks waited
    ``hardware.collective_timeout_s`` for it (for a folder in use too: launch review)."""
    if launched_by_torchrun():  # (one launched rank: the entry point holds it; a no-op)
        return partial(_hold_and_check, run_dir, check)
    check()
    return None


def _hold_and_check(run_dir: Path, check: FolderCheck) -> None:
    """Hold ``run_dir`` (a no-op where this process holds it: a single run's entry point),
    then make the folder's ``check``.

    Raises:
        RunFolderInUseError: another run holds the folder.
    """
    hold_run_folder(run_dir)
    check()


def check_folder_in_worker(check: FolderCheck | None) -> None:
    """In a worker whose process group exists: rank 0 makes the ``check`` that
    :func:`check_folder_first` left to it (rank 0's job names the folder: the others are in
    "." until :func:`shared_job`), every rank raising its refusal."""
    if check is not None:
        on_rank_zero(check)


@record
def _spawned(
    worker: Callable[..., Result], cfg: Config, job: Job, args: tuple, plan: ShardingPlan
) -> Result:
    """Entry point of a worker started by :func:`launch_workers` (a fresh interpreter)."""
    init_worker(job.run_dir / "dlrm_exp.log")
    return worker(cfg, job, *args, plan=plan)


def shared_job(job: Job, ctx: DistContext) -> Job:
    """``job`` with rank 0's run folder (and TensorBoard folder) on every rank (a collective).

    Under torchrun or TorchX every rank runs the entry point, and ranks other than 0 are
    told ``hydra.run.dir=.`` so that they make no run folder of their own; but every rank
    writes into the run folder (its checkpoint shards, its profile): without this a rank's
    DCP shard landed in the working directory, and the run's checkpoints could not be loaded.
    On several nodes the folder must be on a shared file system (docs/clusters.md): every rank
    checks that it sees a file rank 0 wrote there. (Workers of :func:`launch_workers` already
    share the parent's job; the broadcast agrees with it.)

    Raises:
        ConfigError: on every rank, when some rank does not see the folder's files
            (:func:`unshared_folder_error`).
    """
    if ctx.world_size == 1:
        return job
    token = None
    if ctx.is_main:  # a file every rank must see, or its checkpoint shards land elsewhere
        token = f".shared-{uuid.uuid4().hex}"
        (job.run_dir / token).touch()
    folders: list[Any] = [job.run_dir, job.tensorboard_dir, token]
    dist.broadcast_object_list(folders, src=0)
    run_dir = folders[0]
    seen: list[Any] = [None] * ctx.world_size
    try:
        dist.all_gather_object(seen, (socket.gethostname(), (run_dir / folders[2]).exists()))
    finally:
        if ctx.is_main:
            (run_dir / folders[2]).unlink(missing_ok=True)
    error = unshared_folder_error(run_dir, seen)
    if error is not None:
        raise error
    return replace(job, run_dir=run_dir, tensorboard_dir=folders[1])


def unshared_folder_error(run_dir: Path, seen: list[tuple[str, bool]]) -> ConfigError | None:
    """The error when ranks (``seen``: each rank's host name and whether it saw rank 0's file
    in ``run_dir``) do not all see the run folder: their checkpoint shards would be written
    to a folder of the same name on their own host, and a checkpoint that resumes nowhere
    would look complete on rank 0's. None when all see it."""
    blind = sorted({host for host, saw in seen if not saw})
    if not blind:
        return None
    return ConfigError(
        f"hydra.run.dir={run_dir} is not shared: the ranks on {first_few(blind)} do not see "
        "the files rank 0 writes there (their checkpoint shards would land on their own "
        "disks); set hydra.run.dir to a folder on a file system every host mounts "
        "(docs/clusters.md)"
    )


def prepare(
    cfg: Config,
    ctx: DistContext,
    plan: ShardingPlan | None = None,
    wrap: TrainWrapper | None = None,
    loads_weights: bool = False,
    scored: tuple[str, ...] | None = None,
) -> tuple[DataSplits, Experiment]:
    """The data splits and the experiment built on this rank (planned unless ``plan`` is
    given; see :func:`~dlrm_exp.factories.experiment.build_experiment`; ``loads_weights``:
    a checkpoint's weights will replace the initial ones, which are then not computed;
    ``scored``: the only splits the job reads, :func:`~dlrm_exp.data.load_splits`).

    Data read from files come first, so a missing or malformed file is refused before any
    table is allocated; generated data come after planning, so a model that cannot fit is
    refused before its rows are generated (a million for ``model=mlperf``).

    Raises:
        DataError: the data cannot be read.
        InsufficientMemoryError, PlanError, ConfigError: from planning.
    """
    generated = is_generated(cfg.data)
    splits = None if generated else _load(cfg, scored)
    experiment = build_experiment(cfg, ctx, plan, wrap, init_weights=not loads_weights)
    if splits is None:
        splits = _load(cfg, scored)
    return splits, experiment


def _load(cfg: Config, scored: tuple[str, ...] | None = None) -> DataSplits:
    model = cfg.model
    splits = load_splits(cfg.data, model.table_sizes, model.num_dense_features, cfg.seed, scored)
    log.info("data rows: %s", splits.info.rows)
    return splits


def rank_batches(
    cfg: Config,
    ctx: DistContext,
    data: ClickData | ParquetSplit,
    seed: tuple[int, int] | None = None,
    slices: int = 1,
    skip: int = 0,
) -> Iterator[Batch]:
    """This rank's batches of ``data`` (``train.batch_size`` rows each); ``seed`` (seed, epoch)
    shuffles the order of full batches; ``slices``: see
    :meth:`~dlrm_exp.data.parquet.ParquetSplit.batches` (``mode=verify``'s reference);
    ``skip``: the first batches left out unread (a resumed run's)."""
    keys = cfg.model.feature_names
    size = cfg.train.batch_size
    return data.batches(size, ctx.rank, ctx.world_size, keys, seed, slices, skip)


def warn_unscored(cfg: Config, splits: DataSplits, names: tuple[str, ...], world_size: int) -> None:
    """Say which rows of the held-out splits ``names`` a job of several ranks does not score:
    every rank scores as many rows as the others (:func:`~dlrm_exp.data.per_rank_sizes`), so
    up to ``world_size - 1`` rows at a split's end are left out, and its numbers can differ
    from those of ``mode=evaluate`` on one process, which scores them all (review: 98 of 99
    validation rows on 2 ranks)."""
    for name in names:
        rows = len(getattr(splits, name))
        left = rows - sum(per_rank_sizes(rows, cfg.train.batch_size, world_size)) * world_size
        if left > 0:
            log.warning(
                "%s: the last %d of its %d rows are not scored on %d ranks (every rank scores "
                "as many rows as the others); mode=evaluate on one process scores every row",
                name,
                left,
                rows,
                world_size,
            )


def trained_dense_precision(saved: dict[str, Any]) -> str | None:
    """``train.dense_precision`` of the run that wrote a checkpoint, from its trainer state
    ``saved`` (None: a checkpoint written before the setting was recorded)."""
    return (saved.get("settings") or {}).get("train.dense_precision")


def saved_table_data_types(path: Path) -> dict[str, EmbeddingDataType]:
    """``{table: dtype}`` of the table weights checkpoint ``path`` holds, read from DCP's
    metadata (with :class:`~dlrm_exp.loop.checkpoint.SafeFileSystemReader`): what trained,
    whatever ``model.embedding_data_type`` says now.

    Raises:
        CheckpointError: unreadable metadata, or a table dtype this framework does not train.
    """
    try:
        metadata = SafeFileSystemReader(str(path)).read_metadata().state_dict_metadata
    except OSError as err:  # the reader's own refusals are CheckpointErrors already
        raise CheckpointError(f"checkpoint {path} metadata cannot be read: {err}") from None
    found = {}
    for key, item in metadata.items():
        dtype = getattr(getattr(item, "properties", None), "dtype", None)
        if key.startswith("model.") and is_table_key(key) and key.endswith(".weight") and dtype:
            name = DTYPE_NAMES.get(dtype)
            if name is None or name not in {e.value for e in EmbeddingDataType}:
                raise CheckpointError(f"checkpoint {path}: table weights {key} are {dtype}")
            found[table_of_key(key)] = EmbeddingDataType(name)
    return found


def warn_dtype_change(path: Path, job_dtypes: Mapping[str, str], doing: str) -> None:
    """One warning line when this job's table dtypes (``{table: "fp16"}``) differ from those
    checkpoint ``path`` holds (``doing``: "resuming", "scoring"): DCP casts the saved weights
    on load (fp16 -> fp32 exactly, fp32 -> fp16 rounded), so a resume trains on otherwise and
    rounded weights score otherwise. Scoring fp16 weights as fp32 gives the run's scores (the
    kernels sum in fp32 either way): that is logged at INFO, not warned (review)."""
    saved = {table: dtype.value for table, dtype in saved_table_data_types(path).items()}
    changed = sorted(
        f"{table} {saved[table]} -> {dtype}"
        for table, dtype in job_dtypes.items()
        if table in saved and saved[table] != dtype
    )
    if doing == "scoring" and all(c.endswith(" fp16 -> fp32") for c in changed):
        if changed:
            log.info("scoring the %d fp16 table(s) of %s as fp32: exact", len(changed), path)
        return
    warn_list(
        f"{doing} {{n}} table(s) in another dtype than checkpoint {path} holds",
        changed,
        "the saved weights are cast on load (model.embedding_data_type)",
        shown=3,
    )


def warn_list(lead: str, changed: list[str], tail: str, shown: int = 4) -> None:
    """One warning ``lead (first shown items, ...): tail`` when ``changed`` is not empty;
    ``{n}`` in ``lead`` becomes the count."""
    if changed:
        listed = first_few(changed, shown)
        log.warning("%s (%s): %s", lead.replace("{n}", str(len(changed))), listed, tail)


def warn_unlike_training(
    saved: dict[str, Any], cfg: Config, world_size: int, checkpoint: Path
) -> None:
    """A warning line for each way this job scores ``checkpoint`` unlike the run that trained
    it (trainer state ``saved``), so that its numbers differ from that run's: another
    ``train.dense_precision`` (:func:`warn_other_dense_precision`), managed-collision tables
    on another number of ranks (:func:`warn_managed_collision_ranks`), another data source
    (:func:`warn_other_data_source`), other table dtypes (:func:`warn_dtype_change`)."""
    warn_other_dense_precision(saved, cfg)
    warn_managed_collision_ranks(saved, cfg, world_size)
    warn_other_data_source(saved, cfg, run_data_overrides(checkpoint))
    dtypes = {name: t.value for name, t in cfg.model.table_data_type_of.items()}
    warn_dtype_change(checkpoint, dtypes, "scoring")


def run_data_overrides(checkpoint: Path) -> list[str] | None:
    """The data overrides of the run that wrote ``checkpoint`` (``<run>/checkpoints/<name>``;
    :func:`~dlrm_exp.loop.run_origin.data_overrides`); None where its folder has none."""
    return data_overrides(run_folder_of(checkpoint))


def _other_files(key: str, here: Any, scored: tuple[str, ...]) -> bool:
    """Whether ``key`` names the files this job scores, other than the run's: what evaluate
    is for (``data.val_path=<new files> split=val``, as documented, was warned of: review).
    That is ``data.path`` (another day, or none read here) and the file of a scored split
    given here; a scored split whose file the run read and this job leaves out is cut from
    ``data.path`` instead (the run's validation rows scored as test: review)."""
    if key == "data.path":
        return True
    return {"data.val_path": "val", "data.test_path": "test"}.get(key) in scored and bool(here)


def _scored_with_rows(cfg: Config) -> tuple[str, ...]:
    """The splits this job scores that have rows here (a fraction of 0 and no file: none)."""
    splits = cfg.scored_splits()
    if not isinstance(cfg.data, FileSplitsConfig):
        return splits
    return tuple(s for s in splits if cfg.data.split_source(s) is not None)


def warn_other_data_values(saved: dict[str, Any], cfg: Config) -> None:
    """``mode=evaluate``: one warning when this job reads the checkpoint's data source with
    other values that decide which rows of the splits it scores are scored, or how they are
    decoded (:meth:`~dlrm_exp.config.data.DataConfig.decides_rows`, as a resume decides its
    validation's): another ``data.val_fraction`` moves rows the run trained on into
    validation, and on generated data (synthetic, multi-hot) another ``seed`` plants another
    click model, scored near 0.5 AUROC; a split file the run read and this job does not (or
    the other way) moves the cut of ``data.path``. A split read from a file of its own takes
    no fraction, test's rows none of validation's, and the planner's schema keys decode
    nothing (each an untrue warning: diff review, re-read). Values compare as a resume's do
    (:func:`~dlrm_exp.loop.settings.setting_changes`: inf, recorded as null, is no change)."""
    recorded = saved.get("settings") or {}
    here = {"seed": cfg.seed, **flat_settings("data", cfg.data)}
    splits = _scored_with_rows(cfg)
    if not splits:  # (nothing scored: refused elsewhere)
        return
    differ = [
        f"{k}={was} (here {now})"
        for k, was, now in setting_changes(recorded, here)
        if not _other_files(k, now, splits) and cfg.data.rows_differ(k, was, now, splits)
    ]
    if differ:
        log.warning(
            "the checkpoint's run read its data with %s: this job scores other rows than the "
            "run did; add those overrides to score what it was scored on",
            first_few(differ),
        )


def warn_other_ids(saved: dict[str, Any], cfg: Config) -> bool:
    """``mode=evaluate`` (predict reads no npy days): one warning when the checkpoint's run
    read npy days whose ids map to table rows otherwise than this job's ``data.path``
    (``data.path.ids``, :func:`~dlrm_exp.data.criteo_npy.conversion_records`: hashed for
    other tables, contiguous where the run's were hashed, another re-index): whatever the
    folder, its ids look up other rows than training's (a hashed-id checkpoint scored a
    contiguous folder without a word: npy review). Returns whether it warned."""
    was = (saved.get("settings") or {}).get(f"data.path{IDS}")
    folder = npy_folder(cfg.data) if was else None
    now = conversion_records(folder).get("ids") if folder is not None else None
    other = bool(was and now and was != now)
    if other:
        log.warning(
            "the checkpoint's run read npy days whose ids mode=preprocess mapped to rows as "
            "%s; data.path=%s holds ids mapped as %s: they look up other rows than training "
            "did; score a folder converted as the run's was (each folder's day_<n>.json names "
            "how its days were converted)",
            was, getattr(cfg.data, "path", None), now,
        )  # fmt: skip
    return other


def warn_changed_inputs(saved: dict[str, Any], cfg: Config, ids_warned: bool = False) -> None:
    """``mode=evaluate``: one warning when an input path this job reads is the one the
    checkpoint's run read but names other files now, or files converted otherwise (their
    digests, :func:`~dlrm_exp.data.input_digests`): an npy folder that gained a day scores
    another held-out day under the same ``data.path``, said by nothing (npy review). Another
    path is other files on purpose: not warned. The id mapping is :func:`warn_other_ids`'
    (whatever the path), and with it warned (``ids_warned``) so is the days' conversion: a
    folder converted again in place was warned of twice (re-read)."""
    said = (IDS, CONVERSION) if ids_warned else (IDS,)
    recorded, splits = saved.get("settings") or {}, _scored_with_rows(cfg)
    if not splits:  # (nothing scored: refused elsewhere; no file listed for it)
        return
    other_paths = {  # (another path: other files on purpose)
        input_path_key(k) for k, _, _ in setting_changes(recorded, flat_settings("data", cfg.data))
    }
    moved = [  # the same path, and it decides rows this job scores (a training file that
        # grew beside val and test files of their own was warned of: diff review)
        change_line(change)
        for change in setting_changes(recorded, input_digests(cfg.data))
        if input_path_key(change[0]) not in other_paths
        and not change[0].endswith(said)
        and cfg.data.rows_differ(*change, splits)
    ]
    if moved:
        log.warning(
            "the input path the checkpoint's run read names other files now, or files "
            "converted otherwise (%s): this job scores other rows than the run did",
            first_few(moved),
        )


def warn_other_data_source(
    saved: dict[str, Any], cfg: Config, run_overrides: list[str] | None = None
) -> None:
    """One warning when the checkpoint's run read another data source than this job (its
    recorded ``data.*`` settings are another option's: ``data=criteo_tsv`` trained, the
    default synthetic data scored), whose scores then say nothing about the run; it names the
    run's own data overrides (``run_overrides``, :func:`run_data_overrides`) where known.
    Other files of one source (another day) are not warned about: scoring them is what
    evaluate is for."""
    recorded = {  # (data.path.files: the files' digest, no key of the config)
        k for k in saved.get("settings") or {} if k.startswith("data.") and input_path_key(k) == k
    }
    here = set(flat_settings("data", cfg.data))
    if not recorded or not recorded - here:
        return
    if run_overrides is None:
        fix = "add the run's data=... and data.path=..."
    elif run_overrides:
        fix = f"add the run's data overrides, {' '.join(run_overrides)},"
    else:
        fix = "leave out this job's data overrides (the run read the default data)"
    log.warning(
        "the checkpoint was trained on other data than this job reads (its run set %s, which "
        "this job's data has not): %s to score what it was trained on",
        first_few(sorted(recorded - here)),
        fix,
    )


def warn_other_dense_precision(saved: dict[str, Any], cfg: Config) -> None:
    """One warning when the checkpoint's run trained the dense part in another
    ``train.dense_precision`` than this job computes it in (rounding-level differences)."""
    trained, here = trained_dense_precision(saved), cfg.train.dense_precision.value
    if trained is not None and trained != here:
        log.warning(
            "the checkpoint was trained with train.dense_precision=%s; this job computes the "
            "dense part in %s, so its scores differ from the run's at rounding level (add "
            "train.dense_precision=%s to reproduce them)",
            trained,
            here,
            trained,
        )


def warn_managed_collision_ranks(saved: dict[str, Any], cfg: Config, world_size: int) -> None:
    """One warning when managed-collision tables are scored on another number of ranks than
    they were trained on: each training rank sent the ids it holds no row for to its own last
    row, ``world_size`` ranks send them to theirs, so unseen or evicted ids score differently
    (TorchRec's ``_mch_remap``; measured: a 2-rank run's val AUROC 0.7045 evaluated on one
    process as 0.7062, docs/results.md)."""
    ranks, managed = saved.get("world_size"), sorted(cfg.model.managed_tables)
    if managed and ranks is not None and ranks != world_size:
        log.warning(
            "%s: managed_collision, trained on %d rank(s), each sending the ids it holds no "
            "row for to its own last row; here %d rank(s) send them to theirs, so unseen or "
            "evicted ids score differently from the run (mode=evaluate with "
            "hardware.nproc_per_node=%d reproduces its numbers)",
            ", ".join(managed),
            ranks,
            world_size,
            ranks,
        )
