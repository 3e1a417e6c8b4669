"""The suite's xdist grouping (tests/parallel.py): what shares a run goes to one worker."""

import os
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from parallel import GROUPS, check_groups, group_of, make_scheduler


def _item(nodeid, *fixtures):
    return SimpleNamespace(nodeid=nodeid, fixturenames=["tmp_path", *fixtures])


def test_a_test_goes_to_its_shared_fixtures_group_or_its_modules():
    listed = GROUPS["record_sweep"][0]
    assert group_of(f"{listed}::test_x") == "record_sweep"
    assert group_of("tests/new.py::test_x") == "tests/new.py"
    # the GPU checks' one-rank jobs spread test by test (they queued on one worker)
    assert group_of("tests/gpu/test_cuda.py::test_x[a]") == "tests/gpu/test_cuda.py::test_x[a]"


def test_a_module_using_a_shared_fixture_outside_its_group_is_named():
    listed = GROUPS["record_sweep"][0]
    check_groups([_item(f"{listed}::test_x", "record_sweep"), _item("tests/new.py::test_x")])
    check_groups([_item(f"{listed}::test_y")])  # a listed module's test that uses none
    with pytest.raises(pytest.UsageError, match=r"tests/new\.py \(uses record_sweep\)"):
        check_groups([_item("tests/new.py::test_x", "record_sweep")])
    with pytest.raises(pytest.UsageError, match=rf"{listed} \(uses default_run\)"):
        check_groups([_item(f"{listed}::test_x", "record_sweep", "default_run")])


def test_another_dist_mode_asked_for_keeps_xdists_scheduler():
    asked = SimpleNamespace(getvalue=lambda name: {"dist": "worksteal"}[name])
    assert make_scheduler(asked, None) is None


def test_a_worker_keeps_its_own_user_cache():
    """Peaks probed while the workers contend for the cores, and data checks of temporary
    files, stay out of the user's ``~/.cache/dlrm_exp``."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("only xdist workers get their own folder")
    assert Path(os.environ["DLRM_EXP_CACHE_DIR"]).parent == Path(tempfile.gettempdir())
