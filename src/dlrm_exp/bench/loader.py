"""``make bench`` (part 3): does the input path keep up with training?

Batches/s of each data option (``synthetic``, ``criteo_tsv``, ``criteo_npy``,
``criteo_multihot``) at the default
batch size, from splits already loaded (what the training loop iterates), against the
training steps/s of the default ``model=tiny`` on the same machine. Target (the
Criteo-at-scale issue): every loader at least 3x the training steps/s.

    python -m dlrm_exp.bench.loader [--batches 400]
"""

import argparse
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from dlrm_exp.bench.targets import Target, at_least, report
from dlrm_exp.bench.training import compose_config, framework_run, training_batches
from dlrm_exp.config import Config
from dlrm_exp.data import load_splits
from dlrm_exp.data.criteo_format import write_criteo_tsv
from dlrm_exp.data.preprocess.convert import preprocess_files
from dlrm_exp.distributed.launch import process_group
from dlrm_exp.util.logs import quiet_libraries

TARGET_RATIO = 3.0


def batches_per_sec(cfg: Config, max_batches: int) -> float:
    """Training batches/s of ``cfg``'s data option on one rank, at most ``max_batches`` of
    them, from splits already loaded (in memory or, for Parquet, streamed)."""
    splits = load_splits(cfg.data, cfg.model.table_sizes, cfg.model.num_dense_features, cfg.seed)
    keys = cfg.model.feature_names
    start = time.perf_counter()
    count = 0
    for _ in splits.train.batches(cfg.train.batch_size, 0, 1, keys):
        count += 1
        if count == max_batches:
            break
    return count / (time.perf_counter() - start)


def training_samples_per_sec(cfg: Config, steps: int = 300) -> float:
    """Steady-state training samples/s of the framework's loop with ``cfg`` on one process,
    over its first ``steps`` batches (20 of them warm-up)."""
    with process_group(cfg.hardware) as ctx:
        return framework_run(cfg, ctx, training_batches(cfg)[:steps], 20)[0]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=at_least(1), default=400)
    args = parser.parse_args(argv)
    quiet_libraries()
    base = compose_config([])
    rows = args.batches * base.train.batch_size
    base.data.num_train_samples = rows  # type: ignore[attr-defined]
    train_steps = training_samples_per_sec(base) / base.train.batch_size
    print(f"loader benchmark: batch_size {base.train.batch_size}")
    print(f"  training model=tiny: {train_steps:,.0f} steps/s")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        tsv = write_criteo_tsv(folder / "tsv" / "day_0", rows, seed=0)
        write_criteo_tsv(folder / "tsv" / "day_1", 2000, seed=1)
        cfg = compose_config(
            ["data=criteo_npy", "preprocess.output_dir=unused"] + [f"data.path={folder / 'npy'}"]
        )
        preprocess_files(
            [tsv, folder / "tsv" / "day_1"],
            folder / "npy",
            cfg.preprocess,
            cfg.model.table_sizes,
            progress=False,
        )
        options = {
            "synthetic": base,
            "criteo_tsv": compose_config(["data=criteo_tsv", f"data.path={tsv}"]),
            "criteo_npy": cfg,
            "criteo_multihot": compose_config(
                ["data=criteo_multihot", f"data.num_train_samples={rows}"]
            ),
        }
        worst = float("inf")
        for name, option_cfg in options.items():
            rate = batches_per_sec(option_cfg, args.batches)
            worst = min(worst, rate / train_steps)
            print(f"  data={name}: {rate:,.0f} batches/s = {rate / train_steps:.1f}x training")
    return report(
        [Target("loader", "slowest loader batches/s / training steps/s", worst, ">=", TARGET_RATIO)]
    )


if __name__ == "__main__":
    raise SystemExit(main())
