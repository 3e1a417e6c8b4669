"""A wheel (not an editable install) carries the config tree and runs from anywhere (the
shared ``default_run`` of tests/conftest.py)."""

import subprocess
import sys

import pytest


@pytest.mark.slow
def test_wheel_installed_elsewhere_runs_the_default_experiment(default_run):
    where = subprocess.run(
        [sys.executable, "-c", "import dlrm_exp.config as c; print(c.conf_dir())"],
        cwd=default_run.cwd,
        env=default_run.env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.strip() == str(default_run.site / "dlrm_exp" / "conf")
    assert default_run.result.returncode == 0, default_run.result.stderr[-3000:]
    assert "val  AUROC" in default_run.result.stdout
    assert len(list((default_run.cwd / "outputs").glob("*/*/metrics.json"))) == 1
