"""A run folder's record, put back when a run refused there wrote no result."""

from dlrm_exp.record.kept_record import KeptRecord


def _run_folder(tmp_path):
    (tmp_path / ".hydra").mkdir()
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
