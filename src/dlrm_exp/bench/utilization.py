"""``make bench`` (part 7): how close training comes to this machine, and what bf16 changes.

Trains, each run ``python -m dlrm_exp`` in a process of its own that probes its own matmul
peak (:func:`dlrm_exp.bench.training.whole_run`: no reading cached by an earlier run, no state
left by one), and prints the utilization of ``metrics.json``
(:mod:`dlrm_exp.perf.utilization`): dense FLOPs per sample, achieved dense GFLOP/s, the fraction
of the measured matmul peak (fp32 or bf16, the run's dense precision) and the embedding
traffic against the copy bandwidth.

1. The default experiment, fp32 and ``train.dense_precision=bf16`` (the whole run, so the
   validation AUROC difference is the bf16 effect at the default recipe).
2. ``model=quickstart train.batch_size=2048``, fp32 and bf16, ``--quickstart-steps`` steps
   (default 100); target: fp32 at >= 40 % of the measured fp32 matmul peak.

    python -m dlrm_exp.bench.utilization [--quickstart-steps N] [--skip-default]
"""

import argparse
import math
import tempfile
from collections.abc import Sequence
from pathlib import Path

from dlrm_exp.bench.targets import Target, at_least, report
from dlrm_exp.bench.training import whole_run
from dlrm_exp.record.run_record import RunMetrics
from dlrm_exp.util.logs import quiet_libraries

QUICKSTART = ["model=quickstart", "train.batch_size=2048"]
#: Target fraction of the measured fp32 matmul peak for the quickstart model (issue 18).
QUICKSTART_TARGET = 0.40


def train(overrides: list[str], run_dir: Path) -> RunMetrics:
    """One single-process run of the default config with ``overrides``, in a process of its
    own (:func:`~dlrm_exp.bench.training.whole_run`).

    Raises:
        RuntimeError: the run failed; the message ends with its last output lines.
    """
    return whole_run([*overrides, "train.progress_bar=false"], run_dir)


def _pct(fraction: float | None) -> str:
    """A fraction of a peak; None is a measurement error (see ``measurement_errors``)."""
    return "  n/a" if fraction is None else f"{fraction:6.1%}"


def utilization_line(name: str, metrics: RunMetrics) -> str:
    """The printed line of one run."""
    u = metrics.utilization
    return (
        f"{name:<28} {metrics.samples_per_sec:>9,.0f} samples/s  val AUROC "
        f"{metrics.val['auroc']:.4f}  {u['dense_flops_per_sample'] / 1e6:6.2f} MFLOP/sample  "
        f"{u['dense_flops_per_sec'] / 1e9:6.1f} GFLOP/s = {_pct(u['fraction_of_matmul_peak'])} "
        f"of {u['peak_matmul_flops_per_sec'] / 1e9:.0f} GFLOP/s {u['peak_dtype']} peak  "
        f"embeddings {u['embedding_bytes_per_sec'] / 1e9:.2f} GB/s = "
        f"{_pct(u['fraction_of_copy_peak'])} of copy"
        + "".join(f"\n  warning: {e}" for e in u.get("measurement_errors", []))
    )


def bf16_effect(fp32: RunMetrics, bf16: RunMetrics) -> str:
    """The printed comparison of a bf16 run with its fp32 twin: one run each, fp32 first, so
    the throughput ratio carries this machine's drift (``dlrm_exp.bench.fast``
    measures the levers in alternating rounds)."""
    return (
        f"  bf16 effect: val AUROC {bf16.val['auroc'] - fp32.val['auroc']:+.4f}, "
        f"throughput x{bf16.samples_per_sec / fp32.samples_per_sec:.2f} (one run each, fp32 "
        "first; alternating rounds: dlrm_exp.bench.fast)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quickstart-steps", type=at_least(1), default=100)
    parser.add_argument("--skip-default", action="store_true", help="only the quickstart model")
    args = parser.parse_args(argv)
    quiet_libraries()
    targets = []
    with tempfile.TemporaryDirectory() as tmp:
        runs = [] if args.skip_default else [("default", [])]
        runs.append(
            ("quickstart b=2048", [*QUICKSTART, f"train.max_steps={args.quickstart_steps}"])
        )
        for name, overrides in runs:
            folder = f"{tmp}/{name.split()[0]}"  # a hydra.run.dir override: no " " or "="
            fp32 = train(overrides, Path(f"{folder}_fp32"))
            bf16 = train([*overrides, "train.dense_precision=bf16"], Path(f"{folder}_bf16"))
            print(utilization_line(f"{name} fp32", fp32))
            print(utilization_line(f"{name} bf16", bf16))
            print(bf16_effect(fp32, bf16))
            if name.startswith("quickstart"):
                fraction = fp32.utilization["fraction_of_matmul_peak"]
                label = "quickstart fp32: fraction of the fp32 matmul peak"
                # None: a measurement error (see measurement_errors); NaN misses the target
                measured = math.nan if fraction is None else fraction
                targets.append(Target("utilization", label, measured, ">=", QUICKSTART_TARGET))
    return report(targets)


if __name__ == "__main__":
    raise SystemExit(main())
