"""``make bench`` (part 8): does the Parquet loader keep up with training, and does a streamed
epoch's memory stay flat as the file grows?

1. Rows/s of ``data=parquet`` with the shipped Criteo schema (``data/schema=criteo``: 13
   counts with ``log1p``, 26 hexadecimal string ids read by ``hex_modulo``, TorchRec's rule),
   from a Parquet copy of a generated Criteo TSV, against the training samples/s of the default
   experiment (``model=tiny``) on the same machine. Target (issue 28): at least 2x.
2. Peak RSS of a process that scans and streams one epoch of a file of 24 row groups and of
   one of 48 (both at least 20x a row group), each in a fresh interpreter. Target: the larger
   file's peak within 10 % of the smaller one's (memory does not grow with the file).

    python -m dlrm_exp.bench.parquet [--batches 300]
"""

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from dlrm_exp.bench.loader import batches_per_sec, training_samples_per_sec
from dlrm_exp.bench.targets import Target, report
from dlrm_exp.bench.training import compose_config
from dlrm_exp.config import CRITEO_COLUMNS, CRITEO_DENSE_COLUMNS, CRITEO_SPARSE_COLUMNS, conf_dir
from dlrm_exp.data.criteo_format import write_criteo_tsv
from dlrm_exp.util.logs import quiet_libraries

TARGET_RATIO = 2.0
TARGET_MEMORY_GROWTH = 1.10
ROW_GROUP = 16384

_STREAM_EPOCH = """
import json, sys
from dlrm_exp.config import ParquetDataConfig, load_schema_file
from dlrm_exp.data import load_splits
cfg = ParquetDataConfig(path=sys.argv[1], schema=load_schema_file(sys.argv[2]),
                        val_fraction=0.0, test_fraction=0.0)
split = load_splits(cfg, [], 13, 0).train
rows = sum(len(b.labels) for b in split.batches(2048, 0, 1, cfg.schema.feature_names))
# VmHWM: this interpreter's peak (ru_maxrss would keep the forking parent's across exec)
hwm = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:")).split()[1]
print(json.dumps({"rows": rows, "peak_kib": int(hwm)}))
"""


def criteo_parquet(tsv: Path, out: Path, row_group_size: int, empty_ids_null: bool = True) -> Path:
    """The raw Criteo columns of ``tsv`` (label, I1..I13 nullable int64, C1..C26 hex strings:
    an empty one null, an empty bag, or with ``empty_ids_null=False`` the empty string, id 0
    as in TorchRec's reader) as Parquet, read with pyarrow's CSV reader."""
    table = pacsv.read_csv(
        tsv,
        read_options=pacsv.ReadOptions(column_names=CRITEO_COLUMNS),
        parse_options=pacsv.ParseOptions(delimiter="\t"),
        convert_options=pacsv.ConvertOptions(
            column_types={**{c: pa.int64() for c in CRITEO_DENSE_COLUMNS},
                          **{c: pa.string() for c in CRITEO_SPARSE_COLUMNS}},
            strings_can_be_null=empty_ids_null,
        ),
    )  # fmt: skip
    pq.write_table(table, out, row_group_size=row_group_size)
    return out


def stream_peak_gib(path: Path, schema: Path) -> tuple[int, float]:
    """Rows streamed and peak RSS (GiB) of a fresh interpreter that streams ``path``."""
    out = subprocess.run(
        [sys.executable, "-c", _STREAM_EPOCH, str(path), str(schema)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return result["rows"], result["peak_kib"] / 2**20


def main(argv: Sequence[str] | None = None) -> int:
    """Run both measurements, print them and report the targets (exit 1 if one is missed)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=300)
    args = parser.parse_args(argv)
    quiet_libraries()
    base = compose_config([])
    base.data.num_train_samples = 300 * base.train.batch_size  # type: ignore[attr-defined]
    train_rate = training_samples_per_sec(base)
    print(f"Parquet benchmark: batch_size {base.train.batch_size}, row groups of {ROW_GROUP:,}")
    print(f"  training (default experiment, model=tiny): {train_rate:,.0f} samples/s")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rows = args.batches * base.train.batch_size
        tsv = write_criteo_tsv(folder / "day_0.tsv", rows * 2, seed=0, strip_trailing_rate=0.0)
        small = criteo_parquet(tsv, folder / "small.parquet", ROW_GROUP // 2)
        cfg = compose_config(["data=parquet", "data/schema=criteo", f"data.path={small}"])
        rate = batches_per_sec(cfg, args.batches) * cfg.train.batch_size
        print(f"  data=parquet data/schema=criteo (hex strings, hex_modulo): {rate:,.0f} rows/s "
              f"= {rate / train_rate:.1f}x training")  # fmt: skip
        schema = conf_dir() / "data" / "schema" / "criteo.yaml"
        sizes = {}
        for groups in (24, 48):
            big = write_criteo_tsv(folder / f"big_{groups}.tsv", groups * ROW_GROUP, seed=groups)
            path = criteo_parquet(big, folder / f"big_{groups}.parquet", ROW_GROUP)
            big.unlink()
            sizes[groups] = stream_peak_gib(path, schema)
            print(f"  streamed epoch of {sizes[groups][0]:,} rows ({groups} row groups, "
                  f"{path.stat().st_size / 2**20:.0f} MiB on disk): peak RSS "
                  f"{sizes[groups][1]:.2f} GiB")  # fmt: skip
    growth = sizes[48][1] / sizes[24][1]
    print(f"  peak RSS at 2x the file: x{growth:.3f}")
    return report(
        [
            Target("parquet", "Parquet loader rows/s / training samples/s", rate / train_rate,
                   ">=", TARGET_RATIO),
            Target("parquet", "peak RSS, 48 / 24 row groups streamed", growth, "<=",
                   TARGET_MEMORY_GROWTH),
        ]
    )  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
