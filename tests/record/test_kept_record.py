"""A run folder's record, put back when a run refused there wrote no result."""

import os

from dlrm_exp.record.kept_record import KeptRecord


def _run_folder(tmp_path):
    (tmp_path / ".hydra").mkdir(parents=True)
    (tmp_path / ".hydra" / "config.yaml").write_text("seed: 1\n")
    (tmp_path / "metrics.json").write_text("{}")
    return tmp_path


def test_a_run_that_wrote_no_result_gets_the_earlier_record_back(tmp_path):
    run = _run_folder(tmp_path)
    kept = KeptRecord(run)
    (run / ".hydra" / "config.yaml").write_text("seed: 2\n")  # as Hydra writes it
    (run / "plan.json").write_text("{}")  # the refused run's plan
    assert sorted(kept.restore()) == [".hydra/config.yaml", "plan.json"]
    assert (run / ".hydra" / "config.yaml").read_text() == "seed: 1\n"
    assert not (run / "plan.json").exists()


def test_the_records_times_are_put_back_too(tmp_path):
    """The report dates a run by its .hydra/config.yaml (written at each start): a folder
    refused twice, or rewritten with the same text, looked started after its refusal and was
    listed as missing (review)."""
    run = _run_folder(tmp_path)
    config = run / ".hydra" / "config.yaml"
    os.utime(config, ns=(1_000_000_000, 1_000_000_000))
    for text in ("seed: 2\n", "seed: 1\n"):  # another run's settings, then the same text
        kept = KeptRecord(run)
        config.write_text(text)  # as Hydra writes it at the start
        kept.restore()
        assert config.stat().st_mtime_ns == 1_000_000_000 and config.read_text() == "seed: 1\n"


def test_a_run_that_wrote_checkpoints_before_it_failed_keeps_its_own_record(tmp_path):
    """A resumed run with other settings that trained, checkpointed, then failed (a NaN, a
    best-weights load): its checkpoints are described by its own settings."""
    run = _run_folder(tmp_path)
    kept = KeptRecord(run)
    (run / ".hydra" / "config.yaml").write_text("seed: 2\n")
    (run / "checkpoints" / "step_8").mkdir(parents=True)
    assert kept.restore() == []
    assert (run / ".hydra" / "config.yaml").read_text() == "seed: 2\n"


def test_a_folder_without_a_run_has_nothing_to_put_back(tmp_path):
    kept = KeptRecord(tmp_path / "new")
    (tmp_path / "new" / ".hydra").mkdir(parents=True)
    (tmp_path / "new" / ".hydra" / "config.yaml").write_text("seed: 2\n")
    assert kept.restore() == [] and (tmp_path / "new" / ".hydra" / "config.yaml").exists()


def test_the_entry_point_puts_it_back_on_refusals_and_on_failures_that_wrote_no_record(
    tmp_path,
):
    """A typo in data.path (DataError) refuses the run before it trains: put back. A NaN loss
    (or a crash) is a run under way that may have written checkpoints: while the folder's
    earlier record (metrics.json) stays, so do the settings it describes, and the failed
    run's go to .hydra/failed_run (a resumed run's NaN left the completed record of the
    earlier run under the failed run's settings, which the report showed: resume review);
    a run that wrote its own record keeps its settings."""
    from dlrm_exp import cli
    from dlrm_exp.errors import DataError, NonFiniteLossError

    nan = NonFiniteLossError("nan")
    cases = [(DataError("no such file"), False, True), (nan, False, True),
             (RuntimeError("crash"), False, True), (nan, True, False)]  # fmt: skip
    for i, (err, new_record, restored) in enumerate(cases):
        run = _run_folder(tmp_path / str(i))
        cli._kept_record = KeptRecord(run)
        (run / ".hydra" / "config.yaml").write_text("seed: 2\n")
        under_way = not isinstance(err, DataError)
        if under_way:
            (run / "checkpoints" / "best").mkdir(parents=True)  # written before it failed
        if new_record:
            (run / "metrics.json").write_text('{"status": "failed"}')
        try:
            cli._refused(err)
        finally:
            cli._kept_record = None
        assert ((run / ".hydra" / "config.yaml").read_text() == "seed: 1\n") is restored
        failed_run = run / ".hydra" / "failed_run" / "config.yaml"
        assert (failed_run.is_file() and failed_run.read_text() == "seed: 2\n") is (
            restored and under_way
        )


def test_refusals_are_the_errors_raised_before_a_run_starts():
    """The entry point puts back a folder's record for a :class:`Refusal` only: errors of a
    run under way (a NaN, a failed verification, a worker's failure) leave their own."""
    from dlrm_exp import errors
    from dlrm_exp.modes.verify import VerificationFailed

    refusals = [
        errors.ConfigError,
        errors.DataError,
        errors.CheckpointError,
        errors.RunFolderInUseError,
        errors.PlanError,
        errors.InsufficientMemoryError,
    ]
    under_way = [errors.NonFiniteLossError, errors.WorkerFailedError, VerificationFailed]
    assert all(issubclass(e, errors.Refusal) for e in refusals)
    assert not any(issubclass(e, errors.Refusal) for e in under_way)
    assert all(issubclass(e, errors.UserError) for e in refusals + under_way)


def test_an_interrupted_rerun_of_predict_or_export_puts_the_folders_record_back(tmp_path):
    """A predict (or export) run again into its folder and interrupted left .hydra naming its
    checkpoint beside the earlier predictions (crash review): the reports are records too."""
    for report in ("predict_report.json", "export.json"):
        run = tmp_path / report
        (run / ".hydra").mkdir(parents=True)
        (run / ".hydra" / "config.yaml").write_text("checkpoint: step_13\n")
        (run / report).write_text("{}")
        kept = KeptRecord(run)
        (run / ".hydra" / "config.yaml").write_text("checkpoint: step_10\n")  # the rerun's
        assert kept.restore(failed=True) == [".hydra/config.yaml"]
        assert (run / ".hydra" / "config.yaml").read_text() == "checkpoint: step_13\n"
