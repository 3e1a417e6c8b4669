"""Sharded checkpoints with ``torch.distributed.checkpoint`` (DCP), written atomically.

A checkpoint is ``<run>/checkpoints/step_<n>/``: DCP's files (every rank writes its own shards
of the tables, of the fused optimizer state and, once, the replicated dense parameters and
their optimizer state; ``.metadata`` last) plus ``trainer_state.json`` (step, samples seen,
validation history, model shape). Every rank writes into ``step_<n>.partial/``; after all of
them finished, rank 0 writes ``trainer_state.json`` and renames the folder to ``step_<n>``. A
crash during a save therefore leaves only a ``.partial`` folder, never a visible half
checkpoint, and the previous ``step_<m>`` stays usable. ``keep_last`` prunes older ones.

Loading goes through DCP, which reads tensors into the model's and optimizer's own (sharded)
tensors and never unpickles objects: only tensors are saved (optimizer hyper-parameters come
from the config). DCP reshards ShardedTensors, so a checkpoint can be loaded under another
sharding type or world size where TorchRec's state dicts allow it; where they do not, the error
names what differs.

The data position is the step: batches are a pure function of (seed, step), so resuming skips
the batches already trained on. Nothing in training draws random numbers after the weights are
initialized (no dropout, no shuffling between epochs), so no RNG state is needed to continue
bitwise.
"""

import json
import re
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from dlrm_exp.errors import UserError
from dlrm_exp.tracking import write_json_atomic

CHECKPOINTS = "checkpoints"
STATE_FILE = "trainer_state.json"
_STEP_DIR = re.compile(r"^step_(\d+)$")


class CheckpointError(UserError):
    """A checkpoint that cannot be used: missing, incomplete, or from another model."""


def checkpoint_path(run_dir: Path, step: int) -> Path:
    """``<run_dir>/checkpoints/step_<step>``."""
    return run_dir / CHECKPOINTS / f"step_{step}"


def complete_checkpoints(run_dir: Path) -> list[Path]:
    """The run's complete checkpoints (``step_<n>`` with DCP metadata and trainer state),
    oldest first."""
    folder = run_dir / CHECKPOINTS
    if not folder.is_dir():
        return []
    found = []
    for path in folder.iterdir():
        match = _STEP_DIR.match(path.name)
        if match and (path / ".metadata").is_file() and (path / STATE_FILE).is_file():
            found.append((int(match.group(1)), path))
    return [path for _, path in sorted(found)]


def _state(model: torch.nn.Module, optim_state: dict[str, Any]) -> dict[str, Any]:
    """What DCP saves and loads: tensors only (optimizer hyper-parameters come from the
    config, so nothing is pickled)."""
    return {"model": model.state_dict(), "optim": optim_state["state"]}


def save_checkpoint(
    run_dir: Path,
    step: int,
    model: torch.nn.Module,
    optimizer: Any,
    trainer_state: dict[str, Any],
    is_main: bool,
    keep_last: int | None = None,
) -> Path:
    """Save the model, the optimizers' state and ``trainer_state`` as checkpoint ``step``
    (a collective: every rank calls it). Returns the checkpoint folder."""
    final = checkpoint_path(run_dir, step)
    partial = final.with_name(final.name + ".partial")
    if is_main:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
    dist.barrier()
    dcp.save(_state(model, optimizer.state_dict()), checkpoint_id=str(partial))
    dist.barrier()
    if is_main:
        write_json_atomic(partial / STATE_FILE, {**trainer_state, "step": step})
        shutil.rmtree(final, ignore_errors=True)
        partial.rename(final)
        if keep_last:
            for old in complete_checkpoints(run_dir)[:-keep_last]:
                shutil.rmtree(old, ignore_errors=True)
    dist.barrier()
    return final


def resolve_resume(resume: str, run_dir: Path) -> Path | None:
    """``auto``: the newest complete checkpoint of ``run_dir`` (None if there is none);
    otherwise the given checkpoint folder.

    Raises:
        CheckpointError: the path is not a complete checkpoint folder.
    """
    if resume == "auto":
        found = complete_checkpoints(run_dir)
        return found[-1] if found else None
    path = Path(resume)
    if not path.is_dir():
        raise CheckpointError(f"train.resume: no checkpoint folder at {path}")
    if not (path / ".metadata").is_file() or not (path / STATE_FILE).is_file():
        raise CheckpointError(
            f"train.resume: {path} is not a complete checkpoint (it needs DCP's .metadata and "
            f"{STATE_FILE}; a .partial folder is a save that did not finish)"
        )
    return path


def load_checkpoint(
    path: Path, model: torch.nn.Module, optimizer: Any, expected: dict[str, Any]
) -> dict[str, Any]:
    """Load checkpoint ``path`` into ``model`` and ``optimizer`` (a collective) and return its
    trainer state.

    ``expected`` holds this job's ``tables`` ({name: [rows, dim]}); a checkpoint of another
    model shape is refused before DCP reads anything.

    Raises:
        CheckpointError: another model shape, or files DCP cannot read (truncated, missing).
    """
    try:
        trainer_state = json.loads((path / STATE_FILE).read_text())
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{path / STATE_FILE} is unreadable: {err}") from None
    saved = trainer_state.get("tables")
    if saved != expected["tables"]:
        diff = sorted(
            f"{name}: checkpoint {saved.get(name) if saved else None}, model {shape}"
            for name, shape in expected["tables"].items()
            if not saved or saved.get(name) != shape
        )
        raise CheckpointError(
            f"checkpoint {path} is from another model shape ({'; '.join(diff[:3])}): resume "
            "with the model it was trained with, or start a new run folder"
        )
    optimizer.init_state()  # materialize every optimizer state tensor for DCP to fill
    optim_state = optimizer.state_dict()
    state = _state(model, optim_state)
    try:
        dcp.load(state, checkpoint_id=str(path))
    except (Exception, CheckpointException) as err:  # CheckpointException is a BaseException
        lines = [line for line in str(err).strip().splitlines() if line.strip()]
        first = lines[-1][:300] if lines else type(err).__name__
        raise CheckpointError(f"checkpoint {path} cannot be read: {first}") from None
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(optim_state)  # its "state" is what DCP just filled in
    return trainer_state
