"""``make bench`` (part 8): dlrm_exp's fast setting against ``dlrm_main.py``'s recipe (issue 27).

TorchRec's quickstart shapes (``model=quickstart``: 26 tables x 100,000 rows x 64, dense arch
512,256,64, over arch 512,512,256,1, dot interaction) at batch 2048 on one process, with
``dlrm_main.py``'s default optimizer (SGD on tables, fused into backward, and on the dense part):

1. **Speed**, on the same in-memory batches, rounds alternating (the reference and
   ``experiment=fast`` first, side by side, then the rest; the order reversed every other
   round), steady-state samples/s (warm-up steps excluded):

   - the reference: the plain TorchRec loop of :mod:`dlrm_exp.bench.training` with
     ``dlrm_main.py``'s recipe (fp32 tables and dense part, ``TrainPipelineSparseDist``);
   - dlrm_exp with the same recipe, then each lever on its own: ``train.dense_precision=bf16``,
     ``model.embedding_data_type=fp16``, ``train.symmetric_interaction=true``,
     ``train.pipeline=base``, ``train.sparse_backward=overlap``, and ``torch.compile`` of the
     dense, interaction and over arch (``nn.Module.compile``; measured here only: the framework
     has no switch for it while it does not help on CPU);
   - ``experiment=fast`` (``conf/experiment/fast.yaml``): the levers that help, together; and
     the same with ``train.sparse_backward=overlap``, which does not pay on fp32 alone (its
     training thread's one-threaded dense backward is then the longer of the two) and moved
     the fast setting within the noise (not in the preset).

   Each line gives the median samples/s and its ratio to the reference: over adjacent rounds
   (one in each order), the median of their per-round ratios' geometric mean, in which a
   steady drift of the machine cancels (:func:`~dlrm_exp.bench.training.drift_free_ratio`).
   Target: ``experiment=fast`` / reference >= 2.0.
2. **Quality**: seeds 0, 1, 2 of whole runs (training, validation) of dlrm_exp's fp32 recipe and
   of ``experiment=fast``, each ``python -m dlrm_exp`` in a process of its own; the paired
   95 % interval of the val AUROC difference (fast - fp32). Target: its upper end >= 0 (fast
   is not worse beyond the noise of 3 seeds; issue 27's test, no equivalence margin: the line
   says the largest loss the interval rules out, about 0.005 AUROC on these runs).
3. **Dense part**: the fast runs' dense FLOP/s as a fraction of the measured matmul peak of
   their dense dtype (bf16; ``metrics.json`` utilization, :mod:`dlrm_exp.perf.utilization`),
   median of the 3 seeds. Target >= 0.5. Printed beside it, what this machine allows at most:
   the tables' lookups alone (FBGEMM's CPU forward and fused SGD backward, one thread, on the
   bench's batches) and the dense FLOPs between a lookup and its update (interaction, over arch
   but its weight gradients) at the full peak form a chain no step can undercut (each lookup
   waits for the previous step's update); the dense FLOPs of a step over that time, as a
   fraction of the same peak, bound the dense part from above (:func:`dense_bound`).

    python -m dlrm_exp.bench.fast [--rounds 3] [--steps 60] [--train-samples 262144]
"""

import argparse
import gc
import math
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from fbgemm_gpu.split_embedding_configs import EmbOptimType
from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation
from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
    ComputeDevice,
    SplitTableBatchedEmbeddingBagsCodegen,
)
from torchrec.models.dlrm import DLRMTrain

from dlrm_exp.bench.targets import Target, at_least, report
from dlrm_exp.bench.training import (
    compose_config,
    drift_free_ratio,
    framework_run,
    plain_torchrec_run,
    training_batches,
    whole_run,
)
from dlrm_exp.config import DensePrecision
from dlrm_exp.distributed.launch import process_group
from dlrm_exp.factories.precision import slow_precision_warning
from dlrm_exp.perf.flops import dense_flops
from dlrm_exp.perf.theoretical_peak import cpu_flags
from dlrm_exp.record.run_record import RunMetrics
from dlrm_exp.record.stats import paired_difference
from dlrm_exp.util.logs import quiet_libraries

#: dlrm_main.py's recipe on TorchRec's quickstart shapes at batch 2048 (issue 27).
RECIPE = ["model=quickstart", "optimizer=sgd", "train.batch_size=2048"]
FAST = ["experiment=fast"]
#: Each lever on its own, on top of RECIPE (name, overrides, compiled).
LEVERS = (
    ("train.dense_precision=bf16", ["train.dense_precision=bf16"], False),
    ("model.embedding_data_type=fp16", ["model.embedding_data_type=fp16"], False),
    ("train.symmetric_interaction=true", ["train.symmetric_interaction=true"], False),
    ("train.pipeline=base", ["train.pipeline=base"], False),
    ("train.sparse_backward=overlap", ["train.sparse_backward=overlap"], False),
    ("torch.compile dense/inter/over arch", [], True),
)
#: The fast setting plus the lever whose gain, if any, shows only once bf16 made the dense
#: part fast (measured within the noise: not in the preset).
FAST_OVERLAP = [*FAST, "train.sparse_backward=overlap"]
TARGET_SPEEDUP = 2.0
TARGET_PEAK_FRACTION = 0.5
SEEDS = (0, 1, 2)


def compiled(module: DLRMTrain) -> DLRMTrain:
    """``module`` with its dense, interaction and over arch compiled in place
    (``nn.Module.compile``: parameter names and checkpoints unchanged)."""
    for arch in (module.model.dense_arch, module.model.inter_arch, module.model.over_arch):
        arch.compile()
    return module


def speed(rounds: int, steps: int, warmup: int) -> dict[str, list[float]]:
    """Samples/s per configuration and round: ``reference``, ``fp32``, each lever, ``fast``."""
    configs: dict[str, tuple[list[str], bool]] = {"fp32": ([], False)}
    configs.update({name: (overrides, c) for name, overrides, c in LEVERS})
    configs["fast"] = (FAST, False)
    configs["fast_overlap"] = (FAST_OVERLAP, False)
    reference_cfg = compose_config(RECIPE)
    reference_cfg.data.num_train_samples = steps * reference_cfg.train.batch_size  # type: ignore[attr-defined]
    results: dict[str, list[float]] = {"reference": [], **{name: [] for name in configs}}
    with process_group(reference_cfg.hardware) as ctx:
        batches = training_batches(reference_cfg)
        threads = ctx.threads or torch.get_num_threads()
        print(
            f"speed: {len(batches)} steps of {reference_cfg.train.batch_size} per round "
            f"(warm-up {warmup} excluded), {rounds} rounds, {threads}"
            " threads (hardware.threads_per_rank defaults to cores / local ranks: on one process "
            "that is torch's own default, so threads are no lever here)"
        )
        _, plan = framework_run(reference_cfg, ctx, batches[: warmup + 2], warmup)
        reference = (reference_cfg, plan, batches, warmup, ctx.device)
        runs: dict[str, Callable[[], float]] = {"reference": lambda: plain_torchrec_run(*reference)}
        for name, (overrides, c) in configs.items():
            cfg = compose_config([*RECIPE, *overrides])
            wrap = compiled if c else None
            runs[name] = lambda cfg=cfg, wrap=wrap: framework_run(cfg, ctx, batches, warmup, wrap)[
                0
            ]
        runs[LEVERS[-1][0]]()  # untimed: the first compilation fills inductor's caches
        # the target's two side by side in every round, then the rest (reversed every other
        # round, for drift_free_ratio)
        order = ["reference", "fast", *(name for name in runs if name not in ("reference", "fast"))]
        for i in range(rounds):
            for name in order if i % 2 == 0 else reversed(order):
                gc.collect()
                results[name].append(runs[name]())
    return results


def lookup_seconds(steps: int = 20, warmup: int = 5) -> float:
    """Median wall seconds of one step's table lookups alone on the bench's batches: FBGEMM's
    CPU forward and fused SGD backward of one table-batched kernel holding every quickstart
    table (fp32, as the fast setting's), its output gradient precomputed. A step of any
    schedule takes at least this long: the lookup of step i+1 reads step i's update."""
    cfg = compose_config(RECIPE)
    m = cfg.model
    cfg.data.num_train_samples = (steps + warmup) * cfg.train.batch_size  # type: ignore[attr-defined]
    batches = training_batches(cfg)
    host = (EmbeddingLocation.HOST, ComputeDevice.CPU)
    kernel = SplitTableBatchedEmbeddingBagsCodegen(
        [(rows, m.embedding_dim, *host) for rows in m.table_sizes],
        optimizer=EmbOptimType.EXACT_SGD,
        learning_rate=cfg.optimizer.learning_rate,
    )
    grad, seconds = None, []
    for i, batch in enumerate(batches):
        ids = batch.sparse_features
        start = time.perf_counter()
        out = kernel(ids.values(), ids.offsets())
        grad = torch.ones_like(out) if grad is None else grad
        out.backward(grad)
        if i >= warmup:
            seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def dense_bound(
    fast: Sequence[RunMetrics], lookup: float, batch_size: int, chained: int
) -> tuple[float, str]:
    """The most the dense part could reach of the fast runs' median peak, and the printed line.

    A step is a chain: its lookup (``lookup`` seconds with its update, measured alone) waits
    for the previous step's update, the interaction and over arch wait for the lookup, and the
    update waits for the gradient of the pooled embeddings (``chained`` dense FLOPs a sample:
    :func:`chained_flops`). No schedule makes a step shorter than the lookup plus those FLOPs
    at the full peak, whatever runs beside them.
    """
    flops = fast[0].utilization.get("dense_flops_per_sample")
    peaks = [m.utilization.get("peak_matmul_flops_per_sec") for m in fast]
    if flops is None or None in peaks:
        return math.nan, "dense part's bound here: n/a (a fast run measured no peak)"
    peak = statistics.median(peaks)
    step = lookup + chained * batch_size / peak
    bound = flops * batch_size / step / peak
    return bound, (
        f"table lookups alone (FBGEMM's CPU forward + fused SGD backward, one thread, the "
        f"bench's batches): {lookup * 1e3:.1f} ms a step; with the dense FLOPs they chain with "
        f"({chained / flops:.0%}: interaction, over arch but its weight gradients) at the full "
        "peak, no step "
        f"is under {step * 1e3:.1f} ms, so the dense part can reach at most {bound:.1%} of the "
        "median peak here"
    )


def chained_flops() -> int:
    """The fast setting's dense FLOPs a training sample that lie on the lookups' chain
    (:func:`~dlrm_exp.perf.flops.dense_flops`): the interaction's forward and backward, and
    the over arch's forward and input gradients. Not the dense arch's, which can run beside the
    lookup, nor the over arch's weight gradients, which the table update does not wait for."""
    cfg = compose_config([*RECIPE, *FAST])
    flops = dense_flops(cfg.model, cfg.train.symmetric_interaction)
    return 2 * flops.over_arch + (1 + flops.interaction_backward) * flops.interaction


def speed_table(results: dict[str, list[float]]) -> tuple[str, float]:
    """The printed per-lever table and the fast setting's speed-up over the reference
    (:func:`~dlrm_exp.bench.training.drift_free_ratio` of its per-round ratios)."""
    reference = results["reference"]
    labels = {"reference": "plain TorchRec loop, dlrm_main.py recipe (fp32, SGD, sparse_dist)"}
    labels["fp32"] = "dlrm_exp, same recipe"
    labels.update({name: f"dlrm_exp + {name} alone" for name, _, _ in LEVERS})
    labels["fast"] = "dlrm_exp experiment=fast"
    labels["fast_overlap"] = "dlrm_exp experiment=fast + train.sparse_backward=overlap"
    lines, speedup = [], float("nan")
    for name, values in results.items():
        ratios = [v / r for v, r in zip(values, reference, strict=True)]
        ratio = drift_free_ratio(ratios)
        if name == "fast":
            speedup = ratio
        rounds = ", ".join(f"{v:,.0f}" for v in values)
        lines.append(
            f"{labels[name]:<66} {statistics.median(values):>8,.0f} samples/s  "
            f"x{ratio:.2f}  (rounds: {rounds})"
        )
    return "\n".join(lines), speedup


def quality(run_root: Path, train_samples: int) -> tuple[list[RunMetrics], list[RunMetrics]]:
    """Whole runs (train, validate) of the fp32 recipe and of ``experiment=fast``, one per seed,
    each in its own process (:func:`whole_run`)."""
    common = [
        *RECIPE,
        f"data.num_train_samples={train_samples}",
        "data.num_val_samples=65536",
        "data.num_test_samples=2048",
        "train.progress_bar=false",
    ]
    fp32, fast = [], []
    for seed in SEEDS:
        for name, extra, out in (("fp32", [], fp32), ("fast", FAST, fast)):
            out.append(whole_run([*common, *extra, f"seed={seed}"], run_root / f"{name}_{seed}"))
    return fp32, fast


def dense_part(fast: Sequence[RunMetrics]) -> tuple[float, str]:
    """The fast runs' dense-part fraction of their matmul peak (``metrics.json``
    ``utilization.fraction_of_matmul_peak``): the median over every run, NaN (a missed target)
    when one run measured none; and the printed line."""
    fractions = [m.utilization.get("fraction_of_matmul_peak") for m in fast]
    measured = [f for f in fractions if f is not None]
    complete = bool(measured) and len(measured) == len(fast)
    # the median of every seed's run, or none: one run's reading is not the target's median
    fraction = statistics.median(measured) if complete else math.nan
    peaks = [m.utilization.get("peak_matmul_flops_per_sec") for m in fast]
    line = (
        f"dense part of the fast runs: {', '.join(f'{f:.1%}' for f in measured) or 'n/a'} of the "
        f"{fast[0].utilization.get('peak_dtype')} matmul peak each probed in its run "
        f"({', '.join('n/a' if p is None else f'{p / 1e9:.0f}' for p in peaks)} GFLOP/s)"
        + (
            " (a run measured none, so the target is missed: see its metrics.json)"
            if not complete
            else ""
        )
    )
    return fraction, line


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=at_least(1), default=3)
    parser.add_argument("--steps", type=at_least(1), default=60, help="timed steps per round")
    parser.add_argument("--warmup", type=at_least(0), default=15, help="untimed steps")
    parser.add_argument("--train-samples", type=at_least(1), default=262144, help="per quality run")
    args = parser.parse_args(argv)
    quiet_libraries()
    slow = slow_precision_warning(DensePrecision.bf16, "cpu", cpu_flags())
    if slow:  # the fast setting is bf16 dense: its targets need bf16 matmul instructions
        print(f"note: {slow}; the speed and dense-part targets assume such a CPU (or a GPU)")
    table, speedup = speed_table(speed(args.rounds, args.steps + args.warmup, args.warmup))
    print(table)
    with tempfile.TemporaryDirectory() as tmp:
        fp32, fast = quality(Path(tmp), args.train_samples)
    diff = paired_difference([m.val["auroc"] for m in fast], [m.val["auroc"] for m in fp32])
    print(
        "quality: val AUROC fp32 "
        + ", ".join(f"{m.val['auroc']:.4f}" for m in fp32)
        + "; fast "
        + ", ".join(f"{m.val['auroc']:.4f}" for m in fast)
        + f" (seeds {', '.join(map(str, SEEDS))}); fast - fp32 {diff.mean:+.5f} "
        f"[{diff.ci_low:+.5f}, {diff.ci_high:+.5f}] (paired 95 %, p {diff.p_value:.3g}); "
        f"the target is no loss beyond the noise of {len(SEEDS)} seeds: these runs rule out a "
        f"loss above {max(0.0, -diff.ci_low):.5f} only, smaller losses would pass unseen"
    )
    fraction, line = dense_part(fast)
    print(line)
    batch_size = compose_config(RECIPE).train.batch_size
    print(dense_bound(fast, lookup_seconds(), batch_size, chained_flops())[1])
    return report(
        [
            Target(
                "fast",
                "experiment=fast / dlrm_main.py recipe samples/s",
                speedup,
                ">=",
                TARGET_SPEEDUP,
            ),  # fmt: skip
            Target(
                "fast",
                "val AUROC fast - fp32, upper end of the paired 95 % CI",
                diff.ci_high,
                ">=",
                0.0,
            ),  # fmt: skip
            Target(
                "fast",
                "fast dense part: fraction of the bf16 matmul peak",
                fraction,
                ">=",
                TARGET_PEAK_FRACTION,
            ),  # fmt: skip
        ]
    )


if __name__ == "__main__":
    raise SystemExit(main())
