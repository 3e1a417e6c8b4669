"""How a failed worker of :func:`~dlrm_exp.distributed.launch.launch_workers` is described:
its whole recorded error, the signal that killed it, or its exit code."""

import json
import os
from types import SimpleNamespace

from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

from dlrm_exp.distributed.launch import _describe_failures


def _failure(tmp_path, rank: int, exitcode: int, error: str | None) -> ProcessFailure:
    """Torch's own record of a failed worker, from an error file like ``@record`` writes."""
    error_file = tmp_path / f"error_{rank}.json"
    if error is not None:
        payload = {"message": {"message": error, "extraInfo": {"timestamp": "0"}}}
        error_file.write_text(json.dumps(payload))
    return ProcessFailure(local_rank=rank, pid=100 + rank, exitcode=exitcode,
                          error_file=str(error_file))  # fmt: skip


def test_a_failed_worker_is_described_by_its_whole_error_or_its_exit_code(tmp_path):
    needed = "InsufficientMemoryError: Not enough memory\nneeded 48.7 GiB, offered 24.0 GiB"
    err = SimpleNamespace(
        failures={
            0: _failure(tmp_path, 0, 1, needed),
            1: _failure(tmp_path, 1, 3, None),  # SystemExit(3): no error file
            2: _failure(tmp_path, 2, -9, None),
        }
    )
    assert _describe_failures(err).splitlines() == [
        "rank 0 failed: InsufficientMemoryError: Not enough memory",
        "needed 48.7 GiB, offered 24.0 GiB",
        "rank 1 failed: exit code 3",
        "rank 2 failed: killed by signal SIGKILL",
    ]


def test_a_multi_host_job_started_without_torchrun_is_refused_before_planning(cli_here):
    """The parent planned all 16 ranks first (minutes for a large model), or failed on
    memory with advice to add hosts (multi-node review)."""
    result = cli_here(["hardware.nproc_per_node=2", "hardware.nnodes=2", "model=mlperf",
                       "hardware.ddr_cap=1"])  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "hardware.nnodes=2: start multi-host jobs with torchrun" in result.stderr
    assert "Not enough memory" not in result.stderr + result.stdout


def test_a_launched_job_unlike_its_config_is_warned_about(monkeypatch):
    """torchrun --nnodes 2 without hardware.nnodes=2 trained and saved nnodes=1, and a preset
    planned with its per-GPU share of one host's network (multi-node review); torchrun
    --nproc_per_node 1 with hardware.nproc_per_node=2 trained one rank without a word."""
    from conftest import compose_cfg
    from dlrm_exp.distributed.launch import _warn_unlike_config

    hardware = compose_cfg(["hardware.nproc_per_node=2"]).hardware
    assert _warn_unlike_config(hardware, 2, 2) is None  # as configured
    assert _warn_unlike_config(hardware, 1, 1) is None  # one process: nothing to compare
    line = _warn_unlike_config(hardware, 4, 2)
    assert line is not None and line.startswith(
        "the launcher started 4 ranks (2 per host), but hardware.nproc_per_node=2 x "
        "hardware.nnodes=1 describes 2"
    )
    assert "add hardware.nproc_per_node=2 hardware.nnodes=2" in line
    torchrun = {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "h", "MASTER_PORT": "1"}
    for key, value in torchrun.items():
        monkeypatch.setenv(key, value)  # as torchrun starts a one-rank job
    line = _warn_unlike_config(hardware, 1, 1)
    assert line is not None and line.startswith("the launcher started 1 ranks (1 per host)")


def test_a_launcher_that_does_not_say_where_a_rank_sits_on_its_host_is_refused(monkeypatch):
    """Without LOCAL_RANK every rank of a host took GPU 0; without LOCAL_WORLD_SIZE the
    planner took 2 hosts for one (multi-node review)."""
    import pytest

    from dlrm_exp.distributed.launch import _check_local_env
    from dlrm_exp.errors import ConfigError

    for key, value in (("RANK", "1"), ("WORLD_SIZE", "16"), ("MASTER_ADDR", "h0"),
                       ("MASTER_PORT", "29500")):  # fmt: skip
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    with pytest.raises(ConfigError, match="WORLD_SIZE=16 but not LOCAL_RANK or LOCAL_WORLD_SIZE"):
        _check_local_env()
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    _check_local_env()  # torchrun's full set


def test_a_torchrun_workers_crash_is_in_the_run_log_and_the_agents_error_file(
    tmp_path, monkeypatch
):
    """A rank's crash under torchrun was Hydra's traceback on that rank's stderr only:
    torchrun's summary said ``error_file: <N/A>`` (Hydra catches the exception before
    ``@record`` sees it) and the run's log did not name it (distributed review)."""
    import logging

    from dlrm_exp import cli

    torchrun = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}
    for key, value in torchrun.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(tmp_path / "error.json"))
    handler = logging.FileHandler(tmp_path / "dlrm_exp.log")
    logging.getLogger().addHandler(handler)
    try:
        raise RuntimeError("injected crash")
    except RuntimeError as err:
        cli._report_crash(err)
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
    logged = (tmp_path / "dlrm_exp.log").read_text()
    assert "the run failed (rank 1):\nTraceback" in logged
    assert logged.rstrip().endswith("RuntimeError: injected crash")
    recorded = json.loads((tmp_path / "error.json").read_text())["message"]
    assert recorded["message"] == "RuntimeError: injected crash"
    assert 'raise RuntimeError("injected crash")' in recorded["extraInfo"]["py_callstack"]


def test_a_one_process_job_leaves_no_rank_variables_to_the_next_job(monkeypatch):
    """A one-process job set RANK, WORLD_SIZE, LOCAL_* and left them: with MASTER_ADDR and
    MASTER_PORT exported (an HPC job script), the next job of a one-process ``-m`` sweep took
    itself for a launched rank, and ``hardware.nproc_per_node=2`` trained as one rank
    (distributed review)."""
    from conftest import compose_cfg
    from dlrm_exp.distributed.env import launched_by_torchrun
    from dlrm_exp.distributed.launch import process_group

    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29577")
    monkeypatch.setenv("LOCAL_RANK", "0")  # set by the user: kept
    with process_group(compose_cfg([]).hardware) as ctx:
        assert (ctx.world_size, os.environ["WORLD_SIZE"]) == (1, "1")
    assert not launched_by_torchrun()
    assert "RANK" not in os.environ and "LOCAL_WORLD_SIZE" not in os.environ
    assert os.environ["LOCAL_RANK"] == "0"


def test_a_torchrun_refusal_is_one_line_and_the_agents_root_cause(tmp_path, monkeypatch, capsys):
    """Under torchrun every rank printed the same Error: line and torchrun's summary said
    ``error_file: <N/A>`` (review): rank 0 alone prints it, every rank records it."""
    from dlrm_exp import cli
    from dlrm_exp.errors import RunFolderInUseError

    torchrun = {"WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}
    for key, value in torchrun.items():
        monkeypatch.setenv(key, value)
    for rank in (1, 0):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(tmp_path / f"error_{rank}.json"))
        cli._report_refusal(RunFolderInUseError("f1 holds the record of an earlier run"))
        recorded = json.loads((tmp_path / f"error_{rank}.json").read_text())["message"]
        assert recorded["message"] == "RunFolderInUseError: f1 holds the record of an earlier run"
    assert capsys.readouterr().err == "Error: f1 holds the record of an earlier run\n"


def test_a_refusal_the_workers_raised_is_raised_as_itself(tmp_path):
    """A checkpoint of another model, resumed on 2 processes, was "rank 0 failed:
    CheckpointError: ..." followed by the hint to rerun once mended, and a sweep recorded it
    as a crash (review); one process raises the refusal itself."""
    from dlrm_exp.config.build import MissingValueError
    from dlrm_exp.distributed.launch import _worker_refusal
    from dlrm_exp.errors import CheckpointError

    def failed(*errors):
        return SimpleNamespace(
            failures={r: _failure(tmp_path, r, 1 if e else -15, e) for r, e in enumerate(errors)}
        )

    refusal = _worker_refusal(failed("CheckpointError: checkpoint x: another model\nuse its", None))
    assert (
        type(refusal) is CheckpointError and str(refusal) == "checkpoint x: another model\nuse its"
    )
    missing = _worker_refusal(failed("MissingValueError: data.path is ???"))
    assert type(missing) is MissingValueError  # a subclass outside dlrm_exp.errors
    assert _worker_refusal(failed("RuntimeError: gloo timed out", None)) is None
    assert _worker_refusal(failed("CheckpointError: a", "RuntimeError: b")) is None
    assert _worker_refusal(failed("CheckpointError: a", "DataError: b")) is None
    assert _worker_refusal(failed(None, None)) is None
