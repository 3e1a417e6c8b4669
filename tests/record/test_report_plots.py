"""The report's plots on hand-written run folders (no training): a 9-job sweep without seeds
gets no paired-difference plot and no n=1 error bars, a failed job is labelled, and identical
validation curves are named together."""

import json

import matplotlib.pyplot as plt
import pytest

from conftest import write_job
from dlrm_exp.record import report
from dlrm_exp.record.runs import load_runs


def _completed(sharding, qcomms, speed, seed=0):
    history = [{"step": 8.0, "auroc": 0.6 + speed / 1e6}, {"step": 16.0, "auroc": 0.7}]
    return {
        "status": "completed",
        "val": {"auroc": 0.7, "ne": 0.9, "logloss": 0.5, "calibration": 1.0},
        "test": {"auroc": 0.7, "ne": 0.9},
        "samples_per_sec": speed,
        "comm_bytes_per_step": {"forward": 1000.0, "backward": 2000.0},
        "choices": {"sharding": sharding, "qcomms": qcomms},
        "val_history": history,
    }


@pytest.fixture
def nine_jobs(tmp_path):
    """sharding x qcomms, 3 x 3, one process each; rowwise + bf16 failed."""
    folder = tmp_path / "sweep"
    number = 0
    for sharding in ("tablewise", "rowwise", "columnwise"):
        for qcomms in ("none", "fp16", "bf16"):
            overrides = [f"sharding={sharding}", f"qcomms={qcomms}"]
            if (sharding, qcomms) == ("rowwise", "bf16"):
                metrics = {"status": "failed", "error": "boom", "error_type": "RuntimeError"}
            else:
                metrics = _completed(sharding, qcomms, 1000.0 * (number + 1))
            write_job(folder, number, overrides, metrics)
            number += 1
    return folder


def test_a_sweep_without_repeats_has_no_difference_plot(nine_jobs, tmp_path, capsys):
    out = tmp_path / "report"
    (out).mkdir()
    (out / "auroc_diff.png").write_bytes(b"stale")
    assert report.main([str(nine_jobs), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert not (out / "auroc_diff.png").exists()
    assert "no auroc_diff.png: no configuration has repeats" in printed
    assert (out / "throughput.png").stat().st_size > 10_000


def test_bars_have_no_error_bar_for_one_run_and_a_failed_pair_is_labelled(nine_jobs):
    runs = load_runs([nine_jobs])
    fig, ax = plt.subplots()
    report._grouped_bars(ax, runs, "sharding", "qcomms", lambda m: m.samples_per_sec)
    assert len(ax.collections) == 0  # errorbar lines would be LineCollections
    assert [t.get_text() for t in ax.texts] == ["failed"]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["tablewise", "rowwise", "columnwise"] and ax.get_xlabel() == "sharding"
    plt.close(fig)
    fig, ax = plt.subplots()  # a completed pair without the value is not "failed"

    def speed(m):
        return None if m.samples_per_sec == 1000.0 else m.samples_per_sec

    report._grouped_bars(ax, runs, "sharding", "qcomms", speed)
    assert [t.get_text() for t in ax.texts] == ["n/a", "failed"]
    plt.close(fig)
    repeated = runs + runs  # every pair twice: now each has n=2 and an interval
    fig, ax = plt.subplots()
    report._grouped_bars(ax, repeated, "sharding", "qcomms", lambda m: m.samples_per_sec)
    assert len(ax.collections) == 8
    plt.close(fig)


def test_identical_validation_curves_share_a_labelled_line(tmp_path):
    folder = tmp_path / "sweep"
    for number, qcomms in enumerate(("none", "fp16")):
        metrics = _completed("tablewise", qcomms, 5000.0)
        write_job(folder, number, [f"qcomms={qcomms}"], metrics)
    write_job(folder, 2, ["qcomms=bf16"], _completed("tablewise", "bf16", 9000.0))
    runs = load_runs([folder])
    assert sorted(report.val_auroc_curves(runs).values()) == [
        ["qcomms=bf16"],
        ["qcomms=none", "qcomms=fp16"],
    ]
    report.plot_val_auroc(runs, tmp_path / "v.png")
    assert (tmp_path / "v.png").stat().st_size > 10_000


def test_repeats_are_drawn_as_one_mean_line_per_configuration(tmp_path, monkeypatch):
    """16 runs of a precision sweep were 16 lines whose colours repeated and whose seed
    spread hid the levers (review): with seeds, one line per configuration, the mean at the
    steps all its runs validated, named by its values under the keys."""
    folder = tmp_path / "sweep"
    jobs = [("none", 0, 5000.0), ("none", 1, 7000.0), ("fp16", 0, 9000.0), ("fp16", 1, 9000.0)]
    for number, (qcomms, seed, speed) in enumerate(jobs):
        write_job(folder, number, [f"qcomms={qcomms}", f"seed={seed}"],
                  {**_completed("tablewise", qcomms, speed), "seed": seed})  # fmt: skip
    drawn = {}
    monkeypatch.setattr(report, "save_figure", lambda fig, path: drawn.update(fig=fig))
    report.plot_val_auroc(load_runs([folder]), tmp_path / "v.png")
    ax = drawn["fig"].axes[0]
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["none (mean of 2)", "fp16 (mean of 2)"]
    assert legend.get_title().get_text() == "qcomms"
    (none, _) = ax.get_lines()
    assert list(none.get_xdata()) == [8.0, 16.0]
    assert none.get_ydata()[0] == pytest.approx(0.606)  # (0.605 + 0.607) / 2
    plt.close(drawn["fig"])
    # a seed stopped early: the mean goes on over the others, and says so; two configurations
    # with one curve both stay (one overwrote the other: diff review)
    stopped = json.loads((folder / "1" / "metrics.json").read_text())
    stopped["val_history"] = stopped["val_history"][:1]
    (folder / "1" / "metrics.json").write_text(json.dumps(stopped))
    for job in (2, 3):  # fp16 now draws none's first curve, bitwise
        path = folder / str(job) / "metrics.json"
        same = json.loads(path.read_text())
        same["val_history"] = json.loads((folder / "0" / "metrics.json").read_text())["val_history"]
        path.write_text(json.dumps(same))
    report.plot_val_auroc(load_runs([folder]), tmp_path / "v.png")
    texts = [t.get_text() for t in drawn["fig"].axes[0].get_legend().get_texts()]
    assert texts == ["none (mean of 2; fewer at step(s) 16)", "fp16 (mean of 2)"]
    plt.close(drawn["fig"])
    # one configuration (a sweep of seeds alone): each run's own line, as before
    runs = [r for r in load_runs([folder]) if "qcomms=none" in r.overrides]
    report.plot_val_auroc(runs, tmp_path / "v.png")
    assert len(drawn["fig"].axes[0].get_lines()) == 2
    plt.close(drawn["fig"])


def test_many_identical_curves_get_a_short_legend_entry():
    assert report._curve_label(["a"]) == "a"
    assert report._curve_label(["a", "b"]) == "a = b (identical)"
    assert report._curve_label(["a", "b", "c"]) == "a and 2 more runs (identical)"


def test_a_difference_on_one_paired_seed_is_drawn_without_an_interval(tmp_path, monkeypatch):
    """It was an error bar of width 0, which reads as an exact difference (review)."""
    from dlrm_exp.record.compare import ConfigStats
    from dlrm_exp.record.stats import Difference

    one = Difference(n=1, mean=-0.004, ci_low=None, ci_high=None, p_value=None, method="paired")
    three = Difference(n=3, mean=0.001, ci_low=-0.002, ci_high=0.004, p_value=0.4, method="paired")
    stats = [ConfigStats("qcomms=none", [0, 1, 2])]
    stats += [ConfigStats(c, [0], vs_baseline={"val_auroc": d}) for c, d in
              (("qcomms=fp16", one), ("qcomms=bf16", three))]  # fmt: skip
    drawn = {}
    monkeypatch.setattr(report, "save_figure", lambda fig, path: drawn.update(fig=fig))
    report.plot_auroc_diff(stats, tmp_path / "auroc_diff.png")
    ax = drawn["fig"].axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    # the values, the keys in the axis label: the whole names were cut off (review)
    assert labels == ["fp16 (n=1, no interval)", "bf16"] and ax.get_ylabel() == "qcomms"
    assert "baseline (none)" in ax.get_xlabel()
    assert len(ax.collections) == 1  # one error bar: bf16's
    plt.close(drawn["fig"])


def test_the_legend_says_what_ran_when_it_is_not_what_was_asked(tmp_path, monkeypatch):
    """One process: ``qcomms=fp16`` ran no embedding collective, which summary.md said and
    the throughput legend did not (docs review)."""
    folder = tmp_path / "sweep"
    ran = {"setting": "qcomms", "asked": "fp16", "ran": "no embedding collective", "reason": "1"}
    for number, (sharding, qcomms) in enumerate(
        [("tablewise", "none"), ("tablewise", "fp16"), ("rowwise", "none"), ("rowwise", "fp16")]
    ):
        metrics = _completed(sharding, qcomms, 1000.0 + number)
        if qcomms == "fp16":
            metrics["substitutions"] = [ran]
        write_job(folder, number, [f"sharding={sharding}", f"qcomms={qcomms}"], metrics)
    fig, ax = plt.subplots()
    report._grouped_bars(ax, load_runs([folder]), "sharding", "qcomms", lambda m: 1.0)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["qcomms=none", "qcomms=fp16 (ran: no embedding collective)"]
    plt.close(fig)
    # qcomms not swept: its one option is every run's, not one side of a comparison (review)
    for number, sharding in enumerate(("tablewise", "rowwise")):
        metrics = _completed(sharding, "none", 1.0)
        write_job(tmp_path / "s2", number, [f"sharding={sharding}"], metrics)
    fig, ax = plt.subplots()
    report._grouped_bars(ax, load_runs([tmp_path / "s2"]), "sharding", "qcomms", lambda m: 1.0)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["qcomms=none (every run)"]
    plt.close(fig)
    # single runs reported together, each with qcomms=fp16 typed: no comparison of qcomms,
    # in the legend or the title (every override of a single run counted as swept: re-read)
    done = lambda sharding: _completed(sharding, "fp16", 1.0)  # noqa: E731
    singles = [
        write_job(tmp_path / f"one{n}", "run", [f"sharding={s}", "qcomms=fp16"], done(s))
        for n, s in enumerate(("tablewise", "rowwise"))
    ]
    drawn = {}
    monkeypatch.setattr(report, "save_figure", lambda fig, path: drawn.update(fig=fig))
    report.plot_throughput(load_runs(singles), tmp_path / "t.png")
    ax = drawn["fig"].axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["qcomms=fp16 (every run)"]
    assert ax.get_title() == "Throughput by sharding"
    plt.close(drawn["fig"])
    (singles[1] / "metrics.json").unlink()  # killed before its record: its qcomms unknown
    (singles[1] / ".hydra" / "overrides.yaml").write_text('["sharding=rowwise"]')
    report.plot_throughput(load_runs(singles), tmp_path / "t.png")
    assert drawn["fig"].axes[0].get_title() == "Throughput by sharding"  # (not compared)
    plt.close(drawn["fig"])


def test_a_bar_pools_one_configuration_typed_in_two_orders(tmp_path):
    """Two sweeps of the same configurations, keys typed in other orders (and ``0.1`` as
    ``0.10``): the statistics pooled their 4 seeds, the bars split them into two groups of 2."""
    jobs = []
    for seed, typed in enumerate(
        [["sharding=rowwise", "optimizer.learning_rate=0.1"]] * 2
        + [["optimizer.learning_rate=0.10", "sharding=rowwise"]] * 2
    ):
        for q in ("none", "fp16"):
            metrics = _completed("rowwise", q, 1000.0 + seed)
            jobs.append(write_job(tmp_path, f"{seed}{q}", [*typed, f"qcomms={q}", f"seed={seed}"],
                                  metrics))  # fmt: skip
    pairs = report.bar_pairs(load_runs(jobs), "sharding", "qcomms")
    assert {key: len(runs) for key, runs in pairs.items()} == {
        ("sharding=rowwise,optimizer.learning_rate=0.1", "none"): 4,  # as first typed
        ("sharding=rowwise,optimizer.learning_rate=0.1", "fp16"): 4,
    }


def test_runs_of_other_global_batches_are_drawn_against_samples(tmp_path, monkeypatch):
    """A 2-process run's curve ended at step 7 and the same run's on 1 process at step 13:
    the 2-process run looked twice as fast (review). Other global batches: samples."""
    folder = tmp_path / "sweep"
    for number, (nproc, steps) in enumerate(((1, 16), (2, 8))):
        metrics = {**_completed("tablewise", "none", 5000.0), "steps": steps,
                   "train_samples": 1024 * 16, "world_size": nproc}  # fmt: skip
        metrics["val_history"] = [{"step": steps / 2, "auroc": 0.6}, {"step": steps, "auroc": 0.7}]
        write_job(folder, number, [f"hardware.nproc_per_node={nproc}"], metrics)
    drawn = {}
    monkeypatch.setattr(report, "save_figure", lambda fig, path: drawn.update(fig=fig))
    report.plot_val_auroc(load_runs([folder]), tmp_path / "v.png")
    ax = drawn["fig"].axes[0]
    assert ax.get_xlabel() == "training samples (all ranks)"
    assert [list(line.get_xdata()) for line in ax.get_lines()] == [[8192.0, 16384.0]]  # one
    plt.close(drawn["fig"])
