"""summary.md's heading: what varied between the runs reported, what they shared."""

from conftest import write_job
from dlrm_exp.record.runs import load_runs
from dlrm_exp.record.sweep_heading import heading_lines

METRICS = {"status": "completed", "val": {"auroc": 0.7}, "seed": 0}


def test_single_runs_list_what_varied_and_what_they_shared(tmp_path):
    """Single runs reported together listed every shared override as swept, then "no other
    override" (diff review)."""
    for name, batch, seed in (("a", 32, 0), ("b", 64, 0), ("c", 64, 1)):
        overrides = ["model=tiny", f"train.batch_size={batch}", f"seed={seed}", "data.path=*.pq"]
        write_job(tmp_path / "runs", name, overrides, {**METRICS, "seed": seed})
    lines = heading_lines(load_runs(sorted((tmp_path / "runs").iterdir())))
    assert lines == [
        "# Summary of runs",
        "",
        f"- 3 run(s) of 2 configuration(s), seed(s) 0, 1, in `{(tmp_path / 'runs').resolve()}`.",
        "- Varied: `train.batch_size` = `32`, `64`.",  # each value as code: `*` is no emphasis
        "- The same in every run: `model=tiny data.path=*.pq`.",
    ]


def test_a_key_swept_in_one_sweep_and_fixed_in_another_varies(tmp_path):
    """Two sweeps reported together: the batch size fixed in each, at other values, varies;
    a key one sweep left unset is said so."""
    for number, qcomms in enumerate(("none", "fp16")):
        write_job(tmp_path / "one", number, ["train.batch_size=64", f"qcomms={qcomms}"], METRICS)
    write_job(tmp_path / "two", 0, ["train.batch_size=16"], METRICS)
    lines = heading_lines(load_runs([tmp_path / "one", tmp_path / "two"]))
    varied = "- Varied: `train.batch_size` = `64`, `16`; `qcomms` = `none`, `fp16`, `(unset)`."
    assert varied in lines and lines[-1] == "- No other override."


def test_single_runs_reported_together_are_named_by_what_differs(tmp_path):
    """Three single runs were named by all their overrides: 250-character rows and legends
    repeating what "the same in every run" lists (review); their identity stays whole."""
    from dlrm_exp.record.runs import named_by_difference

    shared = ["data=criteo_tsv", "data.path=day.tsv", "train.batch_size=64"]
    for name, extra in (("a", ["sharding=rowwise"]), ("b", ["sharding=tablewise"])):
        write_job(tmp_path, name, [*shared, *extra], {"status": "completed"})
    runs = named_by_difference(load_runs([tmp_path / "a", tmp_path / "b"]))
    assert [(r.name, r.config) for r in runs] == [
        ("sharding=rowwise", "sharding=rowwise"),
        ("sharding=tablewise", "sharding=tablewise"),
    ]
    assert "data.path=day.tsv" in runs[0].config_id  # what the statistics and the gate match
    # beside a sweep's jobs, a single run is not named like a job of another configuration
    # (it was: diff review)
    import yaml

    sweep = tmp_path / "sweep"
    for number, sharding in enumerate(("rowwise", "tablewise")):
        job = [*shared, f"sharding={sharding}", "train.max_steps=4"]
        write_job(sweep, number, job, {"status": "completed"})
    task = ["sharding=rowwise,tablewise", "train.max_steps=4", *shared]
    (sweep / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {"overrides": {"task": task}}}))
    mixed = named_by_difference(load_runs([sweep, tmp_path / "a", tmp_path / "b"]))
    assert len({r.config for r in mixed}) == 4
    import csv

    from dlrm_exp.record import report

    out = tmp_path / "out"
    assert report.main([str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)]) == 0
    with open(out / "summary.csv") as f:
        names = [row["run"] for row in csv.DictReader(f)]
    assert names == ["sharding=rowwise", "sharding=tablewise"]
