"""``make bench``'s targets: a missed target, a benchmark that recorded none and an empty
record each end the table with a ``missed`` row and exit status 1; a benchmark's own exit
status follows its targets."""

from types import SimpleNamespace

import pytest

from dlrm_exp.bench import utilization
from dlrm_exp.bench.targets import ENV, Target, main, report


def _rows(out: str) -> dict[str, list[str]]:
    """The table's rows (header included) by target name: [benchmark, measured, bound,
    result]."""
    rows = {}
    for line in out.splitlines():
        cells = [c for c in line.split("  ") if c.strip()]
        if len(cells) == 5 and set(line) != {"-", " "}:
            rows[cells[1].strip()] = [c.strip() for c in (cells[0], *cells[2:])]
    return rows


def test_a_missed_target_fails_the_table_and_names_itself(tmp_path, capsys):
    path = tmp_path / "targets.jsonl"
    assert report([Target("training", "ratio", 0.97, ">=", 0.95)], str(path)) == 0
    assert report([Target("loader", "speed-up", 2.5, ">=", 3.0)], str(path)) == 1
    assert main([str(path), "--expect", "training,loader"]) == 1
    rows = _rows(capsys.readouterr().out)
    assert rows["ratio"] == ["training", "0.97", ">= 0.95", "met"]
    assert rows["speed-up"] == ["loader", "2.5", ">= 3", "missed"]


def test_all_met_passes(tmp_path, capsys):
    path = tmp_path / "targets.jsonl"
    met = [Target("quality", "gap", 0.01, "<=", 0.015), Target("quality", "NE", 0.9, "<", 1)]
    report(met, str(path))
    assert main([str(path), "--expect", "quality"]) == 0
    out = capsys.readouterr().out
    assert [r[3] for r in _rows(out).values()] == ["result", "met", "met"]
    assert "all targets met" in out


@pytest.mark.parametrize(
    ("targets", "expect", "missed_row", "status"),
    [
        ([Target("quality", "NE", float("nan"), "<", 1.0)], "quality", "NE", 1),
        ([Target("inference", "AUROC drop", float("-inf"), "<=", 0.002)], "", "AUROC drop", 1),
        ([Target("training", "ratio", 1.0, ">=", 0.95)], "training,inference", "no target", 0),
        ([Target("quality", "seconds", None, "<=", 30)], "", "seconds", 1),
        ([], "", "no target recorded at all", 1),
    ],
)
def test_what_cannot_be_compared_is_missed(tmp_path, capsys, targets, expect, missed_row, status):
    """A NaN, infinite or absent (None) measurement, a benchmark that recorded nothing (it
    crashed) and an empty record are failures, never passes, for the benchmark's own exit
    status too."""
    path = tmp_path / "targets.jsonl"
    assert report(targets, str(path)) == status  # the benchmark's own (training's target met)
    assert main([str(path), "--expect", expect]) == 1
    rows = _rows(capsys.readouterr().out)
    assert [row[3] for name, row in rows.items() if name.startswith(missed_row)] == ["missed"]


@pytest.mark.parametrize(("fraction", "status"), [(0.45, 0), (0.30, 1), (None, 1)])
def test_the_utilization_benchmark_exits_1_below_its_target(
    monkeypatch, tmp_path, fraction, status
):
    """``python -m dlrm_exp.bench.utilization`` exits with its target's verdict (training
    replaced by a stub run whose fp32 reaches ``fraction`` of the matmul peak) and records it.
    None, a measurement error (a rate above the peak), misses the target."""
    u = {
        "dense_flops_per_sample": 1e6,
        "dense_flops_per_sec": 1e9,
        "fraction_of_matmul_peak": fraction,
        "peak_matmul_flops_per_sec": 1e11,
        "peak_dtype": "float32",
        "embedding_bytes_per_sec": 1e9,
        "fraction_of_copy_peak": 0.1,
    }
    run = SimpleNamespace(samples_per_sec=1000.0, val={"auroc": 0.7}, utilization=u)
    monkeypatch.setattr(utilization, "train", lambda overrides, run_dir: run)
    monkeypatch.setenv(ENV, str(tmp_path / "targets.jsonl"))
    assert utilization.main(["--skip-default", "--quickstart-steps", "1"]) == status
    assert main([str(tmp_path / "targets.jsonl"), "--expect", "utilization"]) == status
