"""Running the suite on pytest-xdist workers (``make test``: ``pytest -n 2``).

A session fixture that trains (:data:`SHARED`) runs once in every worker that asks for it, so the
modules using one run on one worker (:data:`GROUPS`, checked against what the tests use at every
collection); every other module stays whole on one worker for its module-scoped fixtures.
The grouping is this suite's own xdist scheduler: xdist's ``--dist loadgroup`` marks its groups
in ``item._nodeid``, which pytest 9.2 no longer reads. Each worker has its own temp dir: a test
that looks for what a launch left there (elastic log folders) sees only its own worker's.
"""

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import pytest

#: The session fixtures that train or sweep (tests/conftest.py), with the modules that use
#: each of them, directly or through another fixture.
GROUPS = {
    "two_process_runs": (
        "tests/distributed/test_multiprocess.py",
        "tests/loop/test_checkpoint.py",
        "tests/loop/test_early_stopping.py",
        "tests/modes/test_after_training.py",
        "tests/modes/test_parquet_e2e.py",
        "tests/modes/test_plan_mode.py",
    ),
    "default_run": ("tests/modes/test_e2e.py", "tests/test_install.py"),
    "record_sweep": ("tests/record/test_compare.py", "tests/record/test_sweep.py"),
}
SHARED = tuple(GROUPS)
_GROUP_OF = {module: group for group, modules in GROUPS.items() for module in modules}
#: Folders whose tests each run one self-contained job (no module fixture): spread test by
#: test, so ``make gpu-check``'s one-rank CUDA jobs share the GPU instead of queueing on one
#: worker (19 tests took 165-480 s there in a row).
PER_TEST = ("tests/gpu/",)


def group_of(nodeid: str) -> str:
    """The worker group of a test (its ``nodeid``): its shared fixture's, itself under
    :data:`PER_TEST`, or its module."""
    module = nodeid.split("::")[0]
    if module.startswith(PER_TEST) and module not in _GROUP_OF:
        return nodeid
    return _GROUP_OF.get(module, module)


def check_groups(items: Iterable) -> None:
    """Raise ``pytest.UsageError`` naming each test module that uses a :data:`SHARED` fixture
    (directly or through another fixture) outside that fixture's :data:`GROUPS` entry; read of
    the pytest ``items``: ``nodeid`` and ``fixturenames``. (A listed module whose tests use
    none only makes the grouping coarser, and a run of one of its tests uses none.) A fixture
    asked for at run time (``request.getfixturevalue``) is not seen: name it as an argument."""
    wrong = sorted(
        {
            f"{item.nodeid.split('::')[0]} (uses {shared})"
            for item in items
            for shared in SHARED
            if shared in item.fixturenames and group_of(item.nodeid) != shared
        }
    )
    if wrong:
        raise pytest.UsageError(f"tests/parallel.py GROUPS is out of date: {', '.join(wrong)}")


def make_scheduler(config: pytest.Config, log):
    """xdist's scope scheduling with :func:`group_of` as the scope for ``-n N`` (xdist's
    default ``--dist load``); None (xdist's own) for another ``--dist`` asked for. xdist is
    imported here: a plain ``pytest`` run needs none."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedRunScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return SharedRunScheduling(config, log)


def set_up_worker(worker: str) -> Path:
    """Set up the xdist ``worker`` (``gw0``, ...) process: ``TMPDIR`` (here and in what it
    starts), :mod:`tempfile` and the user cache (``DLRM_EXP_CACHE_DIR``, unless set) point at
    a new folder, returned; and one OpenMP thread unless
    ``OMP_NUM_THREADS`` says otherwise, so the workers' runs share the cores instead of each
    taking all of them (spinning OpenMP threads of two runs on the same cores take several
    times as long)."""
    folder = Path(tempfile.mkdtemp(prefix=f"dlrm_exp_tests_{worker}_"))
    os.environ["TMPDIR"] = str(folder)
    tempfile.tempdir = str(folder)
    # the user's cache (peaks probed while the workers contend, data checks of temporary
    # files) is left alone: each worker keeps its own for the session
    os.environ.setdefault("DLRM_EXP_CACHE_DIR", str(folder / "cache"))
    if "OMP_NUM_THREADS" not in os.environ:
        import torch  # the worker's own (conftest imports this module in the controller too)

        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)
    return folder
