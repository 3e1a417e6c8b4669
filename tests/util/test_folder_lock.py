"""``dlrm_exp.util.folder_lock``: one run at a time in a run folder."""

import os

import pytest

from conftest import run_cli
from dlrm_exp.errors import RunFolderInUseError
from dlrm_exp.util.folder_lock import held_run_folder


def test_a_held_folder_is_refused_to_a_second_holder_until_released(tmp_path):
    with held_run_folder(tmp_path):
        with pytest.raises(RunFolderInUseError, match=f"process {os.getpid()} on "):
            with held_run_folder(tmp_path):
                pass
    with held_run_folder(tmp_path):  # released with the block
        pass


def test_a_run_started_in_a_folder_in_use_is_refused_and_leaves_its_record(tmp_path):
    """Two runs started within one second share Hydra's default folder and wrote over each
    other's logs, events, checkpoints and metrics.json; the second is now refused, and the
    .hydra record Hydra rewrote is put back (the first run's)."""
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("mode: plan\nseed: 5\n")
    with held_run_folder(run):  # the first run, still running
        result = run_cli(["mode=plan", f"hydra.run.dir={run}"])
    assert result.returncode == 1 and "in use by another run" in result.stderr
    assert "Traceback" not in result.stderr
    assert (run / ".hydra" / "config.yaml").read_text() == "mode: plan\nseed: 5\n"
    assert not (run / "plan.json").exists()
