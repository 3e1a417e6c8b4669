"""``make bench`` (part 1): does the framework add cost over a plain TorchRec training loop?

Runs the default model (or the one named by overrides) on the same in-memory batches twice:
through the framework (``build_experiment`` + ``Trainer.fit``) and through a plain TorchRec loop
written here (``DLRMTrain`` on meta, ``apply_optimizer_in_backward(RowWiseAdagrad)``,
``DistributedModelParallel`` with the same sharding plan, ``KeyedOptimizerWrapper(Adagrad)``,
``TrainPipelineSparseDist``). Rounds alternate the order of the two; each prints its
steady-state samples/s (warm-up steps excluded), and the ratio framework / plain is
:func:`drift_free_ratio` of the per-round ratios. The framework's loop includes its own
changes to TorchRec's modules (the pooled sparse arch without split and re-concatenation,
:mod:`dlrm_exp.factories.sparse_arch`), so the ratio is the framework against the loop a
TorchRec user writes, not its bookkeeping alone. Target: ratio >= 0.95.

    python -m dlrm_exp.bench.training [--rounds 3] [--steps 300] [override ...]
"""

import argparse
import gc
import itertools
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException
from torch.optim import SGD, Adagrad
from torchrec.datasets.utils import Batch
from torchrec.distributed import TrainPipelineSparseDist
from torchrec.distributed.model_parallel import DistributedModelParallel
from torchrec.distributed.types import ShardingPlan
from torchrec.models.dlrm import DLRM, DLRMTrain
from torchrec.modules.embedding_configs import EmbeddingBagConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper
from torchrec.optim.optimizers import in_backward_optimizer_filter
from torchrec.optim.rowwise_adagrad import RowWiseAdagrad

from dlrm_exp.bench.targets import Target, at_least, report
from dlrm_exp.config import (
    Config,
    DenseOptimizer,
    InteractionType,
    OptimizerConfig,
    SparseOptimizer,
    conf_dir,
    register_configs,
)
from dlrm_exp.config.build import build_config
from dlrm_exp.config.keys import check_override_keys
from dlrm_exp.data import iter_batches, load_splits
from dlrm_exp.data.prefetch import prefetched
from dlrm_exp.distributed.launch import DistContext, process_group
from dlrm_exp.distributed.sharder import build_sharder
from dlrm_exp.errors import UserError
from dlrm_exp.factories.experiment import TrainWrapper, build_experiment
from dlrm_exp.loop.metrics import capped_warmup
from dlrm_exp.loop.trainer import BatchSources, Trainer
from dlrm_exp.record.run_record import RunMetrics
from dlrm_exp.record.tracking import Tracker
from dlrm_exp.util.logs import quiet_libraries

TARGET_RATIO = 0.95


def compose_config(overrides: Sequence[str]) -> Config:
    """The typed config for ``overrides``, composed with Hydra's compose API and built as a
    run's (:func:`~dlrm_exp.config.build.build_config`: every key and check of a run).

    Raises:
        SystemExit: one ``Error:`` line, as ``python -m dlrm_exp`` prints it, for an override
            Hydra or the config refuses (a misspelt key named with the closest one); a bench
            printed the raw traceback (review).
    """
    register_configs()
    try:
        check_override_keys(overrides, Config)
        with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
            raw = compose(config_name="config", overrides=list(overrides))
        return build_config(raw)
    except (UserError, HydraException, OmegaConfBaseException) as err:
        raise SystemExit(f"Error: {err}") from None


def training_batches(cfg: Config) -> list[Batch]:
    """Every training batch of ``cfg``'s data for one process, in memory: the same batches
    for each loop a bench compares."""
    m = cfg.model
    splits = load_splits(cfg.data, m.table_sizes, m.num_dense_features, cfg.seed)
    return list(iter_batches(splits.train, cfg.train.batch_size, 0, 1, m.feature_names))


def framework_run(
    cfg: Config,
    ctx: DistContext,
    batches: list[Batch],
    warmup: int,
    wrap: TrainWrapper | None = None,
) -> tuple:
    """Steady-state samples/s of the framework's training loop, and the plan it used
    (``wrap``: see :func:`~dlrm_exp.factories.experiment.build_experiment`)."""
    torch.manual_seed(cfg.seed)
    experiment = build_experiment(cfg, ctx, wrap=wrap)
    cfg.train.throughput_warmup_steps = warmup
    cfg.train.max_steps = None
    cfg.train.epochs = 1
    # no validation rows by design: nothing validation-driven to run (or warn of)
    cfg.train.early_stopping.patience = None
    cfg.train.keep_best = False
    cfg.train.target_auroc = None
    trainer = Trainer(
        experiment,
        cfg.train,
        samples_per_step=[len(b.labels) for b in batches],
        device=ctx.device,
        tracker=Tracker(run_dir=None, enabled=False),
    )
    # the run's batch pipeline: prefetched (and pinned on CUDA) as modes.train hands them on
    # (the bench handed the list on as it was: train.prefetch_batches changed nothing, and
    # a GPU comparison with and without it compared one loop: performance review)
    pin = ctx.device.type == "cuda"
    depth = cfg.train.prefetch_depth(cuda=pin)
    sources = BatchSources(
        train=lambda epoch, skip: prefetched(iter(batches[skip:]), depth, pin),
        val=lambda: iter(()),
        test=lambda: iter(()),
    )
    return trainer.fit(sources).samples_per_sec, experiment.plan


def _dlrm_main_optimizers(
    opt: OptimizerConfig,
) -> tuple[type, dict, Callable[[list], torch.optim.Optimizer]]:
    """``dlrm_main.py``'s two recipes, written out: RowWiseAdagrad on tables and Adagrad on the
    dense part (``--adagrad``), or SGD on both. Returns the sparse optimizer class and its
    arguments (for ``apply_optimizer_in_backward``) and the dense optimizer factory."""
    sparse_class = {SparseOptimizer.rowwise_adagrad: RowWiseAdagrad, SparseOptimizer.sgd: SGD}
    dense_class = {DenseOptimizer.adagrad: Adagrad, DenseOptimizer.sgd: SGD}
    assert opt.sparse_optimizer in sparse_class and opt.dense_optimizer in dense_class
    with_eps = {RowWiseAdagrad: {"eps": opt.eps}, Adagrad: {"eps": opt.eps}}
    sparse = sparse_class[opt.sparse_optimizer]
    dense = dense_class[opt.dense_optimizer]
    dense_kwargs = {"lr": opt.dense_learning_rate, **with_eps.get(dense, {})}
    return (
        sparse,
        {"lr": opt.learning_rate, **with_eps.get(sparse, {})},
        lambda params: dense(params, **dense_kwargs),
    )


def plain_torchrec_run(
    cfg: Config, plan: ShardingPlan, batches: list[Batch], warmup: int, device: torch.device
) -> float:
    """Steady-state samples/s of a plain TorchRec loop (TorchRec golden-example style) with
    ``dlrm_main.py``'s optimizers: RowWiseAdagrad fused into backward and Adagrad on the dense
    part, or SGD for both (its default), on ``device`` (the pipeline copies each batch there;
    on CUDA the clock starts and stops with no kernel queued, as the framework's loop starts
    its timed steps after reading a loss)."""
    m = cfg.model
    assert m.interaction_type is InteractionType.original, "the plain loop builds DLRM"
    sparse, sparse_kwargs, dense_optimizer = _dlrm_main_optimizers(cfg.optimizer)
    torch.manual_seed(cfg.seed)
    tables = [  # written out as a TorchRec user would, not with the framework's helpers
        EmbeddingBagConfig(
            name=f"t_cat_{i}",
            embedding_dim=m.embedding_dim,
            num_embeddings=n,
            feature_names=[f"cat_{i}"],
        )
        for i, n in enumerate(m.table_sizes)
    ]
    meta = torch.device("meta")
    module = DLRMTrain(
        DLRM(
            embedding_bag_collection=EmbeddingBagCollection(tables=tables, device=meta),
            dense_in_features=m.num_dense_features,
            dense_arch_layer_sizes=list(m.dense_arch_layer_sizes),
            over_arch_layer_sizes=list(m.over_arch_layer_sizes),
            dense_device=meta,
        )
    )
    apply_optimizer_in_backward(sparse, module.model.sparse_arch.parameters(), sparse_kwargs)
    model = DistributedModelParallel(
        module=module, device=device, plan=plan, sharders=[build_sharder(None)]
    )
    dense = KeyedOptimizerWrapper(
        dict(in_backward_optimizer_filter(model.named_parameters())),
        dense_optimizer,
    )
    pipeline = TrainPipelineSparseDist(
        model, CombinedOptimizer([model.fused_optimizer, dense]), device
    )
    warmup = capped_warmup(warmup, len(batches))  # as the framework's loop caps it
    it = iter(batches)
    step, samples, start = 0, 0, time.perf_counter()
    while True:
        try:
            pipeline.progress(it)
        except StopIteration:
            break
        step += 1
        if step == warmup:
            _settle(device)  # the warm-up's queued kernels are not the timed steps'
            start = time.perf_counter()
        elif step > warmup:
            samples += len(batches[step - 1].labels)
    _settle(device)
    return samples / (time.perf_counter() - start)


def _settle(device: torch.device) -> None:
    """Wait for the kernels queued on ``device`` (CUDA; nothing to wait for on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def unlike_the_plain_loop(cfg: Config) -> str:
    """The settings of ``cfg`` that :func:`plain_torchrec_run` does not apply (it builds fp32
    tables, TorchRec's interaction, an fp32 dense part and ``TrainPipelineSparseDist``, on the
    run's device), ``", "``-joined; ``""`` when the two loops do the same work."""
    train = cfg.train
    unlike = {
        f"train.dense_precision={train.dense_precision.value}": train.dense_precision.value
        != "fp32",
        "model.embedding_data_type (not fp32)": any(
            t.value != "fp32" for t in cfg.model.table_data_types
        ),
        "train.symmetric_interaction=true": train.symmetric_interaction,
        f"train.sparse_backward={train.sparse_backward.value}": (
            train.sparse_backward.value != "serial"
        ),
        f"train.pipeline={train.pipeline.value}": train.pipeline.value != "sparse_dist",
    }
    return ", ".join(name for name, differs in unlike.items() if differs)


def drift_free_ratio(ratios: Sequence[float]) -> float:
    """The ratio of two sides from their per-round ratios, rounds run in alternating order
    (AB, BA, AB, ...): the median over adjacent rounds of their geometric mean. Each such
    pair runs both sides in both orders, so a steady drift of the machine's speed cancels
    within it; a plain median of 3 rounds picks an AB one (review: 1 % slower per run
    read x1.01 for equal sides). One round: its ratio.

    Raises:
        ValueError: no rounds.
    """
    if len(ratios) == 1:
        return ratios[0]
    pairs = [math.sqrt(a * b) for a, b in itertools.pairwise(ratios)]
    return statistics.median(pairs)


def _median_line(name: str, values: list[float]) -> str:
    rounds = ", ".join(f"{v:,.0f}" for v in values)
    return f"{name:<22} {statistics.median(values):>10,.0f} samples/s   (rounds: {rounds})"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=at_least(1), default=3, help="alternating rounds per loop")
    parser.add_argument("--steps", type=at_least(1), default=300, help="training steps per round")
    parser.add_argument("--warmup", type=at_least(0), default=20, help="untimed steps")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. train.batch_size=1024")
    args = parser.parse_args(argv)
    quiet_libraries()
    cfg = compose_config(args.overrides)
    unlike = unlike_the_plain_loop(cfg)
    if unlike:
        print(f"Error: the plain TorchRec loop would not run {unlike}: compare it at its defaults")
        return 2
    ranks = cfg.hardware.world_size
    if ranks > 1:  # (it ran one and printed a ratio as of several: performance review)
        print(
            f"Error: the training bench runs both loops in this one process, not {ranks} ranks "
            "(hardware.nproc_per_node / nnodes): compare them on one, or train the run itself "
            "on several (python -m dlrm_exp ...)"
        )
        return 2
    cfg.data.num_train_samples = args.steps * cfg.train.batch_size  # type: ignore[attr-defined]
    with process_group(cfg.hardware) as ctx:
        batches = training_batches(cfg)
        print(
            f"bench: batch_size {cfg.train.batch_size}, {len(batches)} steps per round "
            f"(warm-up {args.warmup} excluded), {args.rounds} alternating rounds, "
            f"{torch.get_num_threads()} threads, on {ctx.device}"
        )
        _, plan = framework_run(
            cfg, ctx, batches[: args.warmup + 2], args.warmup
        )  # plan + warm caches
        fw: list[float] = []
        plain: list[float] = []
        for i in range(args.rounds):
            # alternating order, for drift_free_ratio; gc frees the previous model
            order = ("fw", "plain") if i % 2 == 0 else ("plain", "fw")
            for which in order:
                gc.collect()
                if which == "fw":
                    fw.append(framework_run(cfg, ctx, batches, args.warmup)[0])
                else:
                    plain.append(plain_torchrec_run(cfg, plan, batches, args.warmup, ctx.device))
    ratios = [a / b for a, b in zip(fw, plain, strict=False)]
    ratio = drift_free_ratio(ratios)
    print(_median_line("framework", fw))
    print(_median_line("plain TorchRec loop", plain))
    print(
        f"ratio framework / plain: {ratio:.3f} (drift-free, of per-round ratios "
        f"{', '.join(f'{r:.3f}' for r in ratios)})"
    )
    target = Target("training", "framework / plain TorchRec samples/s", ratio, ">=", TARGET_RATIO)
    return report([target])


def whole_run(overrides: Sequence[str], run_dir: Path) -> RunMetrics:
    """One whole run as a user starts it, ``python -m dlrm_exp <overrides>``, in a process of its
    own, and its ``metrics.json``: a fresh process measures the setting, not what this bench's
    process ran before (its speed rounds, the other runs' threads and allocations;
    docs/results.md, "The fast setting", runs 4 and 5). The run probes its matmul peak anew
    (no cached reading). Used by the fast and utilization benches.

    Raises:
        RuntimeError: the run failed; the message ends with its last output lines.
    """
    # a cache of its own: each run probes the matmul peak it is measured against, in its
    # process (a cached peak is reused after a spot check of one size within 20 %)
    env = {**os.environ, "DLRM_EXP_CACHE_DIR": str(run_dir.with_name(f"{run_dir.name}.cache"))}
    done = subprocess.run(
        [sys.executable, "-m", "dlrm_exp", *overrides, f"hydra.run.dir={run_dir}"],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise RuntimeError(f"python -m dlrm_exp {' '.join(overrides)} failed:\n{tail}")
    return RunMetrics.read(run_dir / "metrics.json")


if __name__ == "__main__":
    raise SystemExit(main())
