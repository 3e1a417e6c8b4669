"""``mode=train``: data -> sharded model -> training loop -> run folder.

Writes, on rank 0, into the Hydra run folder: ``plan.txt`` (TorchRec's table of the sharding
plan), TensorBoard events (scalars + HParams) and ``metrics.json``. ``metrics.json`` is written
last and atomically, so a crash never leaves a partial one.

With ``hardware.nproc_per_node > 1`` the parent process checks what it can before any worker
exists (data paths, the plan on the meta device), then starts the workers with torch's elastic
launcher; under torchrun the process is already a worker and trains directly.
"""

import itertools
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torchrec.distributed.types import ShardingPlan

from dlrm_exp.checkpoint import load_checkpoint, resolve_resume, resume_step, save_checkpoint
from dlrm_exp.comm_stats import CollectiveBytes
from dlrm_exp.config import Config
from dlrm_exp.data import data_paths, iter_batches, load_splits, per_rank_sizes
from dlrm_exp.data.criteo_tsv import resolve_paths
from dlrm_exp.errors import ConfigError
from dlrm_exp.experiment import build_experiment, build_module, plan_model
from dlrm_exp.launch import (
    DistContext,
    check_devices,
    launch_workers,
    needs_launch,
    process_group,
)
from dlrm_exp.logs import configure_worker_logging
from dlrm_exp.metrics import peak_memory_gib, rank_memory_gib, step_time_ms
from dlrm_exp.model import feature_names, table_configs
from dlrm_exp.sharding import plan_record, plan_text
from dlrm_exp.tracking import Scalar, Tracker, write_json_atomic, write_text_atomic
from dlrm_exp.train import fit

log = logging.getLogger(__name__)

GROUPS = ("model", "sharding", "optimizer", "qcomms", "data", "hardware")


def hparams(cfg: Config, choices: Mapping[str, str], world_size: int) -> dict[str, Scalar]:
    """The run's HParams: each group's choice and the key fields, as TensorBoard scalars."""
    q = cfg.qcomms
    return {
        **{group: str(choices.get(group, "?")) for group in GROUPS},
        "embedding_dim": cfg.model.embedding_dim,
        "num_tables": len(cfg.model.table_sizes),
        "num_embeddings_cap": cfg.model.num_embeddings_cap or 0,
        "interaction_type": cfg.model.interaction_type.value,
        "sharding_type": cfg.sharding.sharding_type.value,
        "compute_kernel": cfg.sharding.compute_kernel.value,
        "forward_precision": q.forward_precision.value if q.forward_precision else "fp32",
        "backward_precision": q.backward_precision.value if q.backward_precision else "fp32",
        "sparse_optimizer": cfg.optimizer.sparse_optimizer.value,
        "learning_rate": cfg.optimizer.learning_rate,
        "dense_learning_rate": cfg.optimizer.dense_learning_rate,
        "batch_size": cfg.train.batch_size,
        "world_size": world_size,
        "seed": cfg.seed,
    }


def run_train(
    cfg: Config,
    run_dir: Path,
    choices: Mapping[str, str],
    tensorboard_dir: Path | None = None,
) -> dict[str, Any]:
    """Train as configured and return the ``metrics.json`` content (also written on rank 0).
    TensorBoard events go to ``tensorboard_dir`` (default: ``run_dir``).

    Raises:
        DataError, InsufficientMemoryError, ConfigError: user-fixable problems, before
            training starts.
        WorkerFailedError: a worker process failed or was killed.
    """
    check_devices(cfg.hardware)
    check_writable(run_dir)
    if not needs_launch(cfg.hardware):
        return train_worker(cfg, run_dir, choices, tensorboard_dir=tensorboard_dir)
    plan = preflight(cfg)
    args = (cfg, str(run_dir), dict(choices), plan, tensorboard_dir)
    return launch_workers(_spawned_worker, args, cfg.hardware)


def preflight(cfg: Config) -> ShardingPlan:
    """What the parent can check before starting workers: data paths and the sharding plan
    (on the meta device, for the whole job). Returns the plan, which workers then use."""
    for key, paths in data_paths(cfg.data).items():
        resolve_paths(paths, key)
    world = cfg.hardware.world_size
    ctx = DistContext(
        rank=0,
        world_size=world,
        local_rank=0,
        local_world_size=cfg.hardware.nproc_per_node,
        device=torch.device("meta"),
    )
    return plan_model(cfg, ctx, build_module(cfg, torch.device("meta")))


@record
def _spawned_worker(
    cfg: Config,
    run_dir: str,
    choices: dict[str, str],
    plan: ShardingPlan,
    tensorboard_dir: Path | None,
) -> dict[str, Any]:
    """Entry point of a worker started by :func:`launch_workers` (a fresh interpreter)."""
    rank = int(os.environ.get("RANK", "0"))
    configure_worker_logging(Path(run_dir) / "dlrm_exp.log" if rank == 0 else None)
    return train_worker(cfg, Path(run_dir), choices, plan, tensorboard_dir)


def _job_measurements(comm: CollectiveBytes, steps: int, device: torch.device) -> dict[str, Any]:
    """Collective bytes per training step summed over ranks, and every rank's peak memory
    (a collective: every rank calls it)."""
    per_step = comm.per_step(steps)
    totals = torch.tensor([per_step[k] for k in ("forward", "backward", "input_dist")])
    memory: list[Any] = [None] * dist.get_world_size()
    dist.all_reduce(totals)
    dist.all_gather_object(memory, rank_memory_gib(device))
    return {
        "comm_bytes_per_step": dict(
            zip(("forward", "backward", "input_dist"), totals.tolist(), strict=True)
        ),
        "peak_memory_gib_per_rank": memory,
    }


def _resume(
    cfg: Config,
    run_dir: Path,
    experiment: Any,
    layout: dict[str, Any],
    samples_per_step: list[int],
    world_size: int,
) -> dict[str, Any] | None:
    """Load the checkpoint ``train.resume`` names into the experiment; its trainer state (with
    this job's ``step`` at the checkpoint's data position), or None to start fresh. ``layout``
    is what :func:`~dlrm_exp.checkpoint.load_checkpoint` checks (table shapes, data-parallel
    tables)."""
    if not cfg.train.resume:
        return None
    path = resolve_resume(cfg.train.resume, run_dir)
    if path is None:
        log.info("train.resume=auto: no complete checkpoint in %s, starting fresh", run_dir)
        return None
    state = load_checkpoint(path, experiment.model, experiment.optimizer, layout)
    state["step"] = resume_step(state, samples_per_step, world_size)
    log.info("resumed from %s at step %d", path, state["step"])
    return state


def check_writable(run_dir: Path) -> None:
    """Fail at start, not after training, when the run folder cannot be written.

    Raises:
        ConfigError: the folder cannot be created or written (permissions, full disk).
    """
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".write_test"
        probe.write_bytes(b"0" * 4096)
        probe.unlink()
    except OSError as err:
        raise ConfigError(
            f"cannot write the run folder {run_dir}: {err.strerror or err} (choose another "
            "with hydra.run.dir=..., or free space)"
        ) from None


def train_worker(
    cfg: Config,
    run_dir: Path,
    choices: Mapping[str, str],
    plan: ShardingPlan | None = None,
    tensorboard_dir: Path | None = None,
) -> dict[str, Any]:
    """Train on this rank (joining or creating the process group); rank 0 writes the run
    folder and returns the metrics, other ranks return theirs without writing. TensorBoard
    events go to ``tensorboard_dir`` (default: the run folder)."""
    started = time.perf_counter()
    with process_group(cfg.hardware) as ctx:
        keys = feature_names(len(cfg.model.table_sizes))
        splits = load_splits(
            cfg.data, cfg.model.table_sizes, cfg.model.num_dense_features, cfg.seed
        )
        log.info("data rows: %s", splits.info.get("rows"))
        experiment = build_experiment(cfg, ctx, plan)
        plan_data = plan_record(experiment.plan, table_configs(cfg.model), ctx.world_size)
        if ctx.is_main:
            write_text_atomic(run_dir / "plan.txt", plan_text(experiment.plan) + "\n")
            write_json_atomic(run_dir / "plan.json", plan_data)

        epochs = itertools.count()
        shuffle = bool(getattr(cfg.data, "shuffle_batches", False))

        def batches(split_name: str):
            data = getattr(splits, split_name)

            def one_pass():  # train: called once per epoch, in order (also when resuming)
                seed = (cfg.seed, next(epochs)) if shuffle and split_name == "train" else None
                return iter_batches(
                    data, cfg.train.batch_size, ctx.rank, ctx.world_size, keys, seed
                )

            return one_pass

        shapes = {t.name: [t.num_embeddings, t.embedding_dim] for t in table_configs(cfg.model)}
        replicated = sorted(
            name
            for name, table in plan_data["tables"].items()  # type: ignore[union-attr]
            if table["sharding_type"] == "data_parallel"
        )
        layout = {"tables": shapes, "data_parallel_tables": replicated}
        sizes = per_rank_sizes(len(splits.train), cfg.train.batch_size, ctx.world_size)
        samples_per_step = [s * ctx.world_size for s in sizes]
        start = _resume(cfg, run_dir, experiment, layout, samples_per_step, ctx.world_size)

        def checkpoint(step: int, state: dict[str, Any]) -> None:
            trainer_state = {**state, **layout, "world_size": ctx.world_size}
            path = save_checkpoint(
                run_dir,
                step,
                experiment.model,
                experiment.optimizer,
                trainer_state,
                ctx.is_main,
                cfg.train.keep_last_checkpoints,
            )
            log.info("checkpoint: %s", path)

        tracker = Tracker(tensorboard_dir or run_dir, enabled=ctx.is_main)
        comm = CollectiveBytes()
        try:
            with comm.installed():
                result = fit(
                    experiment.pipeline,
                    batches("train"),
                    batches("val"),
                    batches("test"),
                    samples_per_step=samples_per_step,
                    cfg=cfg.train,
                    device=ctx.device,
                    tracker=tracker,
                    show_progress=ctx.is_main and cfg.train.progress_bar,
                    learning_rate=cfg.optimizer.dense_learning_rate,
                    comm=comm,
                    start=start,
                    checkpoint=checkpoint,
                )
            measured = _job_measurements(comm, result.steps, ctx.device)
            metrics: dict[str, Any] = {
                "status": "completed",
                "val": result.val,
                "test": result.test,
                "samples_per_sec": result.samples_per_sec,
                "steps": result.steps,
                "train_samples": result.train_samples,
                "train_seconds": result.train_seconds,
                "wall_seconds": time.perf_counter() - started,
                "peak_memory_gib": peak_memory_gib(),
                **measured,
                "step_time_ms": step_time_ms(result.step_seconds),
                "final_train_loss": result.final_train_loss,
                "skipped_steps": result.skipped_steps,
                "world_size": ctx.world_size,
                "embedding_bytes_per_rank": plan_data["embedding_bytes_per_rank"],
                "bayes_auroc": splits.info.get("bayes_auroc"),
                "data": splits.info,
                "val_history": result.val_history,
                "choices": dict(choices),
            }
            final = {
                **{f"val/{k}": result.val[k] for k in ("auroc", "logloss", "ne")},
                **{f"test/{k}": result.test[k] for k in ("auroc", "logloss", "ne")},
                "summary/samples_per_sec": result.samples_per_sec,
                "summary/forward_comm_bytes_per_step": measured["comm_bytes_per_step"]["forward"],
                "summary/backward_comm_bytes_per_step": measured["comm_bytes_per_step"]["backward"],
                "summary/peak_memory_gib_max_rank": max(
                    m["rss"] for m in measured["peak_memory_gib_per_rank"]
                ),
            }
            tracker.hparams(hparams(cfg, choices, ctx.world_size), final, result.steps)
        finally:
            tracker.close()
        if ctx.is_main:
            write_json_atomic(run_dir / "metrics.json", metrics)
    return metrics
