"""``make bench``'s targets: each benchmark declares what it must reach; the last step prints
them all in one table and fails when one is missed.

A benchmark ends with ``return report(targets)``: :func:`report` prints one line per
:class:`Target`, appends them as JSON lines to the file named by the environment variable
``DLRM_EXP_BENCH_TARGETS`` (when set) and returns the exit status, 1 when a target is missed.
``make bench`` runs every benchmark (on, past a failed one), then

    python -m dlrm_exp.bench.targets FILE [--expect training,preprocess,...]

prints the table (benchmark, target, measured, bound, met or missed) and exits 1 when a target
is missed, a benchmark named in ``--expect`` recorded none (it crashed before reporting), or
the file holds no target at all: a gate that cannot compare fails.
"""

import argparse
import json
import math
import operator
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

#: The environment variable naming the JSON-lines file that benchmarks append targets to.
ENV = "DLRM_EXP_BENCH_TARGETS"
#: How a measured value is compared with its bound.
OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}
HEADERS = ("benchmark", "target", "measured", "bound", "result")


@dataclass(frozen=True)
class Target:
    """One target of a benchmark: ``measured <op> bound``, e.g. the framework / plain TorchRec
    samples/s ratio ``>= 0.95``. A measured value that is NaN or infinite misses every target.

    Args:
        bench: the benchmark module's short name (``training``, ``quality``, ...).
        name: what is measured, with its unit where it has one.
        measured: the measured value (a bool counts as 1 or 0; None: nothing was measured,
            kept as NaN, which misses).
        op: one of ``>=``, ``>``, ``<=``, ``<`` (:data:`OPS`).
        bound: the target's bound, in the unit of ``measured``.
    """

    bench: str
    name: str
    measured: float  # None given: NaN (__post_init__)
    op: str
    bound: float

    def __post_init__(self) -> None:
        if self.measured is None:
            object.__setattr__(self, "measured", math.nan)

    @property
    def met(self) -> bool:
        return math.isfinite(self.measured) and OPS[self.op](self.measured, self.bound)

    def row(self) -> tuple[str, str, str, str, str]:
        """The table's cells: benchmark, target, measured, bound, met / missed."""
        met = "met" if self.met else "missed"
        return (self.bench, self.name, f"{self.measured:.4g}", f"{self.op} {self.bound:g}", met)


def report(targets: Sequence[Target], path: str | None = None) -> int:
    """Print ``targets``, append them to ``path`` (default: ``$DLRM_EXP_BENCH_TARGETS``, if
    set) and return the benchmark's exit status: 0 when every target is met, else 1 (also for
    no target at all: a benchmark that compared nothing did not pass)."""
    if not targets:
        print("  no target recorded")
    for target in targets:
        _, name, measured, bound, _ = target.row()
        print(f"  target {name}: {measured} ({bound}): {'met' if target.met else 'MISSED'}")
    path = path or os.environ.get(ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.writelines(json.dumps(asdict(t)) + "\n" for t in targets)
    return 0 if targets and all(t.met for t in targets) else 1


def read_targets(path: Path) -> list[Target]:
    """The targets appended to ``path``; none when it does not exist."""
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [Target(**json.loads(line)) for line in lines if line]


def target_table(targets: Sequence[Target], expect: Sequence[str] = ()) -> tuple[str, bool]:
    """The table of ``targets`` (plus a missed row per benchmark of ``expect`` that recorded
    none) and whether every target is met. No target at all is a failure, not a pass."""
    rows = [t.row() for t in targets]
    reported = {t.bench for t in targets}
    silent = [bench for bench in expect if bench not in reported]
    rows += [(bench, "no target recorded (did it crash?)", "-", "-", "missed") for bench in silent]
    if not rows:
        rows.append(("-", "no target recorded at all", "-", "-", "missed"))
    widths = [max(len(r[i]) for r in [HEADERS, *rows]) for i in range(len(HEADERS))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in [HEADERS, *rows]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines), all(r[4] == "met" for r in rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path, help="the JSON-lines file the benchmarks appended to")
    parser.add_argument("--expect", default="", help="comma-separated benchmarks that must report")
    args = parser.parse_args(argv)
    table, ok = target_table(read_targets(args.file), [b for b in args.expect.split(",") if b])
    print(f"\nbenchmark targets ({args.file}):\n{table}")
    missed = sum(line.endswith("missed") for line in table.splitlines())
    print("all targets met" if ok else f"{missed} target(s) missed")
    return 0 if ok else 1


def at_least(low: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer >= ``low`` (``--rounds 0`` ran the setup, then
    crashed on an empty median: review)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is below {low}")
        return value

    return parse


if __name__ == "__main__":
    raise SystemExit(main())
