"""``make bench`` (part 4): does the Parquet loader keep up with training, and does a streamed
epoch's memory stay flat as the file grows?

1. Rows/s of ``data=parquet`` with the shipped Criteo schema (``data/schema=criteo``: 13
   counts with ``log1p``, 26 hexadecimal string ids read by ``hex_modulo``, TorchRec's rule),
   from a Parquet copy of a generated Criteo TSV, against the training samples/s of the default
   experiment (``model=tiny``) on the same machine. Target (issue 28): at least 2x.
2. Peak RSS of a process that scans and streams one epoch of a file of 12 row groups and of
   one of 96, each in a fresh interpreter, less its resident set once its imports are done
   (about 0.4 GiB of torch and TorchRec that no data moves). Target: the larger file adds at
   most a tenth of a decoded Criteo row (264 bytes) per extra row streamed (a loader that kept
   its rows would add all of them). Until 2026-11-26 the target was the ratio of the two whole
   peaks (24 and 48 row groups) within 10 %, which the imports diluted: the data's own peak
   moved by 11-19 % there, within its noise (12 -> 96 row groups: +11 %).

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
from dlrm_exp.bench.targets import Target, at_least, report
from dlrm_exp.bench.training import compose_config
from dlrm_exp.config import CRITEO_COLUMNS, CRITEO_DENSE_COLUMNS, CRITEO_SPARSE_COLUMNS, conf_dir
from dlrm_exp.data.criteo_format import write_criteo_tsv
from dlrm_exp.util.logs import quiet_libraries

TARGET_RATIO = 2.0
#: Bytes of peak RSS per extra streamed row: a tenth of a decoded Criteo row (13 float32 dense
#: values, 26 int64 ids, the label: 264 bytes, docs/data.md).
TARGET_BYTES_PER_ROW = 26.4
ROW_GROUP = 16384

_STREAM_EPOCH = """
import json, sys
from dlrm_exp.config import ParquetDataConfig, load_schema_file
from dlrm_exp.data import load_splits
def status(key):
    return int(next(l for l in open("/proc/self/status") if l.startswith(key)).split()[1])
base = status("VmRSS:")  # the imports' resident set, before any data
cfg = ParquetDataConfig(path=sys.argv[1], schema=load_schema_file(sys.argv[2]),
                        val_fraction=0.0, test_fraction=0.0)
split = load_splits(cfg, [], 13, 0).train
rows = sum(len(b.labels) for b in split.batches(2048, 0, 1, cfg.schema.feature_names))
# VmHWM: this interpreter's peak (ru_maxrss would keep the forking parent's across exec)
print(json.dumps({"rows": rows, "peak_kib": status("VmHWM:"), "base_kib": base}))
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


def stream_peak_gib(path: Path, schema: Path) -> tuple[int, float, float]:
    """Rows streamed, peak RSS and the resident set after its imports (GiB) of a fresh
    interpreter that streams ``path``."""
    out = subprocess.run(
        [sys.executable, "-c", _STREAM_EPOCH, str(path), str(schema)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return result["rows"], result["peak_kib"] / 2**20, result["base_kib"] / 2**20


def main(argv: Sequence[str] | None = None) -> int:
    """Run both measurements, print them and report the targets (exit 1 if one is missed)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=at_least(1), default=300)
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
        for groups in (12, 96):
            big = write_criteo_tsv(folder / f"big_{groups}.tsv", groups * ROW_GROUP, seed=groups)
            path = criteo_parquet(big, folder / f"big_{groups}.parquet", ROW_GROUP)
            big.unlink()
            sizes[groups] = stream_peak_gib(path, schema)
            rows, peak, imports = sizes[groups]
            print(f"  streamed epoch of {rows:,} rows ({groups} row groups, "
                  f"{path.stat().st_size / 2**20:.0f} MiB on disk): peak RSS "
                  f"{peak:.2f} GiB, {imports:.2f} GiB after the imports")  # fmt: skip
    grown = {g: sizes[g][1] - sizes[g][2] for g in sizes}
    per_row = (grown[96] - grown[12]) * 2**30 / (sizes[96][0] - sizes[12][0])
    print(
        f"  peak RSS above the imports: {grown[12]:.3f} -> {grown[96]:.3f} GiB at 8x the file: "
        f"{per_row:+.1f} bytes per extra row (whole peaks x{sizes[96][1] / sizes[12][1]:.3f})"
    )
    return report(
        [
            Target("parquet", "Parquet loader rows/s / training samples/s", rate / train_rate,
                   ">=", TARGET_RATIO),
            Target("parquet", "peak RSS bytes per extra row streamed (96 vs 12 row groups)",
                   per_row, "<=", TARGET_BYTES_PER_ROW),
        ]
    )  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
