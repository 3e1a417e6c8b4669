"""A wheel (not an editable install) carries the config tree and runs from anywhere."""

import shutil
import subprocess
import sys

import pytest

from conftest import REPO


@pytest.mark.slow
def test_wheel_installed_elsewhere_runs_the_default_experiment(tmp_path):
    source = tmp_path / "source"
    for name in ("src", "conf"):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    build = [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist")]
    subprocess.run([*build, str(source)], check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("dlrm_exp-*.whl")
    site = tmp_path / "site"
    install = [*pip, "install", "--no-deps", "--target", str(site), str(wheel)]
    subprocess.run(install, check=True, capture_output=True)
    shutil.rmtree(source)  # nothing may be read from a checkout
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    where = subprocess.run(
        [sys.executable, "-c", "import dlrm_exp.config as c; print(c.conf_dir())"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.strip() == str(site / "dlrm_exp" / "conf")
    run = subprocess.run(
        [sys.executable, "-m", "dlrm_exp", "train.max_steps=20", "train.progress_bar=false"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "val  AUROC" in run.stdout
    assert len(list((elsewhere / "outputs").glob("*/*/metrics.json"))) == 1
