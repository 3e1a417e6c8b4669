"""Sharded checkpoints with ``torch.distributed.checkpoint`` (DCP), written atomically.

A checkpoint is ``<run>/checkpoints/step_<n>/``: DCP's files (every rank writes its own shards
of the tables, of the fused optimizer state and, once, the replicated dense parameters and
their optimizer state; ``.metadata`` last) plus ``trainer_state.json`` (step, samples seen,
validation history, model shape). Every rank writes into ``step_<n>.partial/``; after all of
them finished, rank 0 writes ``trainer_state.json`` and renames the folder to ``step_<n>``. A
crash during a save therefore leaves only a ``.partial`` folder, never a visible half
checkpoint, and the previous ``step_<m>`` stays usable. ``keep_last`` prunes older ones
(each renamed to ``.partial`` before its files go, so a crash mid-deletion leaves no
half checkpoint either).
``train.keep_best`` keeps the best validation's weights as one more checkpoint,
``<run>/checkpoints/best/`` (written the same way, replaced at each better validation, the
old one renamed aside until the new one is in place; never pruned, never picked by
``train.resume=auto``). When the best validation and a periodic checkpoint fall on one step,
the second save hard-links the first's DCP files (``same_as``) instead of writing them again.

Loading goes through DCP, which reads tensors into the model's and optimizer's own (sharded)
tensors with ``torch.load(weights_only=True)``: only tensors are saved (optimizer
hyper-parameters come from the config). DCP's own ``.metadata`` file is a pickle; it is read
here by :class:`SafeFileSystemReader`, whose unpickler admits only DCP's metadata classes,
``torch.Size``, dtypes and layouts, so a crafted checkpoint cannot run code.

DCP reshards ShardedTensors, so a checkpoint loads under another sharding type (table-, row-,
column-wise, grid, ...) or world size; a table cannot move into or out of ``data_parallel``
(its optimizer state is a per-replica tensor under other keys), which is refused before
loading (:func:`load_checkpoint`).

The data position is the step: batches are a pure function of (seed, step), so resuming skips
the batches already trained on (with another world size or batch size: the step at the same
sample count, :func:`resume_step`). Training draws no random numbers after the weights are
initialized (no dropout; row groups are shuffled by a seeded generator of their own) except when a
managed-collision table evicts ids: TorchRec re-initializes the evicted rows with the table's
``init_fn``, from torch's CPU generator, whose state each rank therefore saves
(``rng_rank<r>.pt``) and restores on a resume with the same world size. fp16 tables on CUDA
update with FBGEMM's stochastic rounding, drawn from torch's CUDA generator: its state is saved
and restored too (``cudarng_rank<r>.pt``; on CPU FBGEMM rounds to nearest). FBGEMM's kernels
count their forwards in a buffer no state dict holds, which fused Adam's bias correction
reads: the training mode saves and restores it with the trainer state. Each rank's training
window (the last batches' logits and labels, :mod:`dlrm_exp.loop.train_window`) is saved as
``state_rank<r>.pt`` and restored on a resume with the same world size, so a resumed run's
training-window metrics are the uninterrupted run's.
"""

import json
import logging
import pickle
import re
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.distributed.checkpoint.metadata as dcp_metadata
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta, TensorStorageMetadata

from dlrm_exp.distributed.preemption import save_signals_held
from dlrm_exp.errors import (
    CheckpointError,
    DiskFullError,
    Terminated,
)
from dlrm_exp.loop.run_origin import data_command, model_command
from dlrm_exp.record.run_record import (
    FAILED,
    INTERRUPTED,
    UNFINISHED,
    EvalMetrics,
    record_status,
)
from dlrm_exp.record.runs import recorded_checkpoint, recorded_mode
from dlrm_exp.util.files import (
    absolute_path,
    out_of_space,
    read_json_object,
    sync_file,
    sync_folder,
    write_json_atomic,
)
from dlrm_exp.util.rank_zero import is_rank_zero, on_rank_zero
from dlrm_exp.util.text import first_few

if TYPE_CHECKING:
    from dlrm_exp.loop.early_stopping import BestValidation

log = logging.getLogger(__name__)

CHECKPOINTS = "checkpoints"
STATE_FILE = "trainer_state.json"
#: The folder of the best validation's checkpoint under ``checkpoints/``.
BEST = "best"
_STEP_DIR = re.compile(r"^step_(\d+)$")
#: A step checkpoint or one :func:`keep_other_branch` set aside (``step_<n>.samples_<m>``):
#: what :func:`prune_checkpoints` counts.
_STEP_OR_ASIDE_DIR = re.compile(r"^step_(\d+)(\.samples_\d+)?$")


_DCP_METADATA_MODULE = "torch.distributed.checkpoint.metadata"
_SAFE_GLOBALS = {
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("pathlib", "PosixPath"),
    ("pathlib", "PurePosixPath"),
    ("collections", "OrderedDict"),
}


class _MetadataUnpickler(pickle.Unpickler):
    """Admits DCP's metadata dataclasses, ``torch.Size``, dtypes and layouts; nothing else.
    A class of DCP's metadata module must be defined there, by a plain name: pickle resolves
    dotted names, and ``os.system`` in that module (which imports ``os``) was admitted."""

    def find_class(self, module: str, name: str) -> Any:
        if module == _DCP_METADATA_MODULE and "." not in name:
            found = getattr(dcp_metadata, name, None)
            if isinstance(found, type) and found.__module__ == _DCP_METADATA_MODULE:
                return found
        if (module, name) in _SAFE_GLOBALS:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not DCP checkpoint metadata")


class SafeFileSystemReader(FileSystemReader):
    """DCP's ``FileSystemReader`` reading ``.metadata`` with a restricted unpickler.

    Raises (from ``read_metadata``):
        CheckpointError: the metadata names any other class or function, or holds a
            non-tensor entry (which DCP would load with a full unpickler).
    """

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        path = self._get_metadata_path(kwargs.get("rank"))
        with self.fs.create_stream(path, "rb") as stream:
            try:
                metadata = _MetadataUnpickler(stream).load()
            except (pickle.UnpicklingError, AttributeError, EOFError, ValueError) as err:
                raise CheckpointError(f"{path} is not plain DCP metadata ({err})") from None
        if not isinstance(metadata, Metadata):
            raise CheckpointError(f"{path} is not DCP metadata")
        others = [
            key
            for key, entry in metadata.state_dict_metadata.items()
            if not isinstance(entry, TensorStorageMetadata)
        ]
        if others:
            raise CheckpointError(f"{path} holds non-tensor entries ({others[0]}, ...)")
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


@dataclass(frozen=True)
class CheckpointLayout:
    """The model layout a checkpoint records, and a resume must match.

    Attributes:
        tables: ``{table name: [num_embeddings, embedding_dim]}``.
        data_parallel_tables: names of the tables replicated on every rank (sorted).
        world_size: ranks of the job that writes (or resumes) the checkpoint.
        id_policies: ``{feature: data.schema id policy}``, how raw ids became the tables'
            rows (None: data without a schema, whose ids are rows already).
        id_kinds: ``{feature: "integer" | "string"}``, how the training data stored the ids
            of the features whose policy hashes the two differently
            (:class:`~dlrm_exp.data.splits.DataInfo`'s ``id_kinds``).
        settings: ``{key: value}`` of the settings that decide the data stream and the update
            (``seed``, ``train.batch_size``, ``train.dense_precision``, every ``data.*`` and
            ``optimizer.*`` key), which a resume compares
            (:func:`~dlrm_exp.loop.settings.setting_changes`) and evaluate / predict / export
            read the dense precision from; None in older checkpoints.
        inputs: what the model reads by position, ``{"sparse": [{"feature", "column"}],
            "dense": [{"column", "log1p"}]}`` (``model_inputs`` of the planning tables),
            which every later job must give in the same order; None without a feature
            schema, and in older checkpoints.
        sweep_job: the swept keys and values of the sweep's job that saved it (``{}``
            outside a sweep; :func:`~dlrm_exp.loop.settings.sweep_job`), by which a rerun of
            the sweep knows its job's own attempt
            (:func:`~dlrm_exp.loop.run_folder.continued_resume`); None in older checkpoints.
    """

    tables: dict[str, list[int]]
    data_parallel_tables: list[str]
    world_size: int
    id_policies: dict[str, str] | None = None
    id_kinds: dict[str, str] | None = None
    settings: dict[str, Any] | None = None
    inputs: dict[str, list[dict[str, Any]]] | None = None
    sweep_job: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        """The entries of ``trainer_state.json`` that describe the layout."""
        return {
            "tables": self.tables,
            "data_parallel_tables": self.data_parallel_tables,
            "world_size": self.world_size,
            "id_policies": self.id_policies,
            "id_kinds": self.id_kinds,
            "settings": self.settings,
            "inputs": self.inputs,
            "sweep_job": self.sweep_job,
        }


def checkpoint_path(run_dir: Path, step: int) -> Path:
    """``<run_dir>/checkpoints/step_<step>``."""
    return run_dir / CHECKPOINTS / f"step_{step}"


def run_folder_of(checkpoint: Path) -> Path:
    """The run folder of checkpoint ``<run>/checkpoints/<name>`` (a checkpoint elsewhere: its
    parent)."""
    return checkpoint.parent.parent if checkpoint.parent.name == CHECKPOINTS else checkpoint.parent


def _is_complete(path: Path) -> bool:
    """A committed save: DCP's ``.metadata`` and the trainer state are both there."""
    return (path / ".metadata").is_file() and (path / STATE_FILE).is_file()


def best_checkpoint(run_dir: Path) -> Path | None:
    """``<run_dir>/checkpoints/best`` if it is a complete checkpoint (or, after a crash while
    a better one replaced it, the earlier one set aside as ``best.replaced``), else None."""
    path = run_dir / CHECKPOINTS / BEST
    for candidate in (path, _replaced(path)):
        if _is_complete(candidate):
            return candidate
    return None


def complete_checkpoints(run_dir: Path) -> list[Path]:
    """The run's complete checkpoints (``step_<n>`` with DCP metadata and trainer state),
    oldest first: by the samples trained (their data position), then the step. After a resume
    with another world size the folder names count other global batches, so a newer
    ``step_250`` (4 ranks) is after an older ``step_300`` (2 ranks)."""
    return [path for _, path in _positioned(run_dir)]


def _positioned(run_dir: Path, names: re.Pattern = _STEP_DIR) -> list[tuple[tuple[int, int], Path]]:
    """``((samples, step), checkpoint)`` of the run's complete checkpoints, oldest first
    (:func:`complete_checkpoints`; each trainer state read once); ``names``: the folder names
    taken (``step_<n>``)."""
    folder = run_dir / CHECKPOINTS
    if not folder.is_dir():
        return []
    found = []
    for path in folder.iterdir():
        match = names.match(path.name)
        if match and _is_complete(path):
            found.append(((_samples(path), int(match.group(1))), path))
    return sorted(found)


def prune_checkpoints(run_dir: Path, keep_last: int) -> None:
    """Remove all but the newest ``keep_last`` complete checkpoints of ``run_dir`` (by samples
    trained), those :func:`keep_other_branch` set aside included: each change of world size
    or batch size left up to ``keep_last`` more, never removed (checkpoints review)."""
    for (samples, _), old in _positioned(run_dir, _STEP_OR_ASIDE_DIR)[:-keep_last]:
        _remove_folder(old)
        if not _STEP_DIR.match(old.name):  # (a warning had said it was kept: diff review)
            log.warning(
                "%s, set aside at %d samples, removed: older than the newest %d this run keeps "
                "(train.keep_last_checkpoints)", old, samples, keep_last,
            )  # fmt: skip


def ended_how(run_dir: Path) -> str:
    """How the run of the folder's ``metrics.json`` ended, for a message: ``failed``, ``was
    interrupted`` or ``finished`` (also where it cannot be read)."""
    status = record_status(run_dir / "metrics.json")
    return {FAILED: "failed", INTERRUPTED: "was interrupted"}.get(status or "", "finished")


def later_checkpoints(run_dir: Path, path: Path) -> list[Path]:
    """The complete checkpoints of ``run_dir`` after checkpoint ``path`` (more samples
    trained, or as many and a later step), oldest first; none when ``path`` is another run's.
    ``path`` may be this run's ``checkpoints/best``, placed by its trainer state."""
    found = _positioned(run_dir)
    resolved, target = [p.resolve() for _, p in found], path.resolve()
    if target in resolved:
        return [p for _, p in found[resolved.index(target) + 1 :]]
    if not in_run_folder(path, run_dir):
        return []  # another run's checkpoint
    state = read_trainer_state(path)
    position = (int(state.get("samples", -1)), int(state.get("step", -1)))
    return [p for at, p in found if at > position]


def in_run_folder(checkpoint: Path, run_dir: Path) -> bool:
    """Whether ``checkpoint`` is one of ``run_dir``'s (in its ``checkpoints/``)."""
    return checkpoint.expanduser().resolve().parent == (run_dir / CHECKPOINTS).resolve()


def _samples(path: Path) -> int:
    """The samples checkpoint ``path`` had trained on (-1 when its state cannot tell)."""
    try:
        return int(read_trainer_state(path).get("samples", -1))
    except (CheckpointError, ValueError, TypeError):
        return -1


def read_trainer_state(path: Path) -> dict[str, Any]:
    """Checkpoint ``path``'s ``trainer_state.json``.

    Raises:
        CheckpointError: it cannot be read or is not a JSON object.
    """
    try:
        state = json.loads((path / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{path / STATE_FILE} is unreadable: {err}") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path / STATE_FILE} is unreadable: not a JSON object")
    return state


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
    name: str | None = None,
    same_as: Path | None = None,
    rank_state: dict[str, Any] | None = None,
) -> Path:
    """Save the model, the optimizers' state, ``trainer_state`` and each rank's own
    ``rank_state`` (:func:`read_rank_state`) as checkpoint ``step``
    (a collective: every rank calls it), in ``checkpoints/step_<step>`` or, if given,
    ``checkpoints/<name>`` (which replaces an earlier one of that name). Returns the folder.

    ``same_as``: a complete checkpoint that this run saved from these same weights and
    optimizer state (the best validation's and a periodic checkpoint falling on one step). Its
    DCP files are hard-linked rather than written again (copied where the file system cannot
    link; rank 0 links them, so every rank's files must be visible to it, as a resume needs);
    the RNG files and ``trainer_state`` are written as in any save.

    A preemption signal, Ctrl-C or SIGTERM arriving meanwhile is handled after the save is
    committed (:func:`dlrm_exp.distributed.preemption.save_signals_held`)."""
    final = checkpoint_path(run_dir, step) if name is None else run_dir / CHECKPOINTS / name
    partial = _partial(final)
    try:
        with save_signals_held():
            _save(final, partial, step, (model, optimizer), trainer_state, is_main, keep_last,
                  name, same_as, rank_state)  # fmt: skip
    except (OSError, RuntimeError, CheckpointException) as err:
        stop = _interruption(err)  # a second Ctrl-C / SIGTERM, raised inside DCP's save
        if stop is not None:
            raise stop from None
        full = _full_disk(err, final)
        if full is None:
            raise
        raise full from None
    return final


def _save(
    final: Path,
    partial: Path,
    step: int,
    parts: tuple[torch.nn.Module, Any],
    trainer_state: dict[str, Any],
    is_main: bool,
    keep_last: int | None,
    name: str | None,
    same_as: Path | None,
    rank_state: dict[str, Any] | None,
) -> None:
    """:func:`save_checkpoint`'s writing, in ``partial`` then renamed to ``final``."""
    model, optimizer = parts
    run_dir = final.parent.parent
    if is_main:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        if same_as is not None:
            _link_dcp_files(same_as, partial)
    dist.barrier()
    if same_as is None:
        dcp.save(_state(model, optimizer.state_dict()), checkpoint_id=str(partial))
    save_rng(partial, dist.get_rank())
    if rank_state is not None:
        save_rank_state(partial, dist.get_rank(), rank_state)
    dist.barrier()
    if is_main:
        write_json_atomic(partial / STATE_FILE, {**trainer_state, "step": step})
        aside = keep_other_branch(final, trainer_state.get("samples")) if name is None else None
        _replace_folder(partial, final)
        if keep_last:
            prune_checkpoints(run_dir, keep_last)
        if aside is not None:  # (said after pruning: it said "kept" of one pruned: diff review)
            _say_aside(final, aside, keep_last)
    dist.barrier()


#: Free bytes under which torch.save's "unexpected pos" is put down to a full disk: it fails
#: so there, no ENOSPC in sight (crash review, a 12 MB tmpfs).
_NEARLY_FULL = 64 * 2**20


def _full_disk(err: BaseException, final: Path) -> DiskFullError | None:
    """A one-line refusal for a save that failed for want of space (``ENOSPC`` or ``EDQUOT``
    anywhere in it, on any rank; or torch.save's "unexpected pos" with less than
    :data:`_NEARLY_FULL` left where it was written), saying the earlier checkpoints are
    intact; None for any other failure (raised as it is: a peer rank's death on a nearly
    full disk is no full disk; diff review)."""
    errors = [err, *_failures(err)]
    try:
        free = shutil.disk_usage(final.parent).free
    except OSError:
        free = None
    no_space = any(out_of_space(e) for e in errors)
    cut = any("unexpected pos" in str(e) for e in errors)
    if not (no_space or (cut and free is not None and free < _NEARLY_FULL)):
        return None
    left = "" if free is None else f" ({free / 2**20:.1f} MiB free here)"
    return DiskFullError(
        f"cannot save checkpoint {final}: no space left for it{left}; the earlier checkpoints "
        "are intact: free some space, then the same command with train.resume=auto continues "
        "from the newest"
    )


def _link_dcp_files(source: Path, target: Path) -> None:
    """Hard-link (else copy) what DCP wrote into checkpoint ``source`` (its ``.metadata`` and
    every rank's ``*.distcp`` files, FileSystemWriter's names) into the folder ``target``."""
    for path in [source / ".metadata", *source.glob("*.distcp")]:
        _link_or_copy(path, target / path.name)


def adopt_best(
    source: Path | None, run_dir: Path, is_main: bool, best: "BestValidation", trains: bool = True
) -> Path | None:
    """Make the best validation's checkpoint ``source`` this run's ``checkpoints/best`` (a
    collective: every rank calls it). A run resumed from another run's checkpoint keeps that
    run's best weights in that run's folder; linked (else copied) here, this folder holds the
    weights its record reports, and ``checkpoint=<this run>`` (evaluate, predict, export)
    takes them. Returns this run's ``best``; ``source`` unchanged when it is already this
    run's, or not a complete checkpoint (the end of training then reports the final weights,
    with a warning); None when ``source`` now holds another validation's weights than the
    resumed ``best``: that run trained on past the checkpoint, or this one's later save was
    lost with a crash. Such a ``best`` of this folder is removed (evaluate would take it), and
    so is one when the resumed state saved none (``source`` None: a save after the
    checkpoint), unless ``trains`` is false: a resume that trains no step beside the folder's
    completed record of that step keeps that record, and its ``best`` stays as it is
    (``source`` returned)."""
    final = run_dir / CHECKPOINTS / BEST
    own = {final.resolve(), _replaced(final).resolve()}
    # rank 0 decides for all: hosts may see a shared folder differently (NFS caching)
    action = on_rank_zero(lambda: _adoption(source, best, own))
    if action == _KEEP or (action == _DROP and not trains):
        return source
    if action == _DROP:
        stale = best_checkpoint(run_dir) if source is None else source  # this folder's: removed
        if is_main and stale is not None and stale.resolve() in own:
            _remove_folder(stale)  # through .partial: a crash mid-delete leaves no half best
        dist.barrier()
        return None
    assert source is not None  # adopted
    if is_main:
        partial = _partial(final)
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        for path in source.iterdir():
            if path.is_file():
                _link_or_copy(path, partial / path.name)
        _replace_folder(partial, final)
    dist.barrier()
    return final


_KEEP, _DROP, _ADOPT = "keep", "drop", "adopt"


def holds_best(path: Path, best: "BestValidation") -> bool:
    """Whether the checkpoint ``path`` holds the weights of the validation ``best`` names:
    the best its trainer state recorded when saved has the same value, or, recorded under
    another ``early_stopping.monitor``, names a validation (its step in the saved history)
    whose value of ``best.monitor`` is ``best.value`` (a resume with another monitor whose
    best is the same validation keeps those weights).

    Raises:
        CheckpointError: its trainer state cannot be read (:func:`read_trainer_state`).
    """
    state = read_trainer_state(path)
    saved = state.get("best") or {}
    if saved.get("monitor") in (None, best.monitor):
        return saved.get("value") == best.value
    if best.value is None:  # no value to tell validations by (every one NaN: null)
        return False
    at = [h for h in state.get("val_history") or [] if h.get("step") == saved.get("step")]
    return len(at) == 1 and at[0].get(best.monitor) == best.value


def _adoption(source: Path | None, best: "BestValidation", own: set[Path]) -> str:
    """What :func:`adopt_best` does with ``source``: keep it as it is (not complete, or
    already this run's), drop it (none, or another validation's than ``best``), or adopt
    it."""
    if source is not None and not _is_complete(source):
        return _KEEP
    if source is None or not holds_best(source, best):
        return _DROP
    return _KEEP if source.resolve() in own else _ADOPT


def _link_or_copy(path: Path, target: Path) -> None:
    try:
        target.hardlink_to(path)
    except OSError:  # another file system, or one without hard links
        shutil.copy2(path, target)
        sync_file(target)


def drop_stale_best(run_dir: Path) -> None:
    """Remove the ``best`` of an earlier attempt in ``run_dir`` that saved no step checkpoint,
    or whose step checkpoints are gone (``train.resume=auto`` starting fresh, or an abandoned
    attempt replaced: ``modes.resume.replace_attempt``): the fresh run replaces it only at a
    validation
    better than its own earlier ones, and one that validates once, at its end, never did, so
    ``checkpoint=<run>`` (evaluate, predict, export) took the earlier attempt's weights."""
    stale = best_checkpoint(run_dir)
    if stale is not None:
        log.warning(
            "removing %s, the best weights of an earlier attempt in this folder that saved "
            "no step checkpoint (or whose step checkpoints are gone): this run replaces it",
            stale,
        )  # fmt: skip
        _remove_folder(stale)


def _remove_folder(path: Path) -> None:
    """Delete the checkpoint folder ``path``, first renamed to ``<name>.partial``: a crash
    while its files are deleted leaves a folder no listing takes for complete (a
    ``step_<n>`` with its metadata and trainer state but some shards gone was)."""
    doomed = _partial(path)
    shutil.rmtree(doomed, ignore_errors=True)
    path.rename(doomed)
    sync_folder(path.parent)
    shutil.rmtree(doomed, ignore_errors=True)


def _partial(path: Path) -> Path:
    """Where a checkpoint folder is written before it is named complete, and renamed before
    it is deleted: ``<name>.partial``, which no listing takes for complete."""
    return path.with_name(path.name + ".partial")


def _replaced(path: Path) -> Path:
    """Where :func:`_replace_folder` keeps the folder it replaces until the new one is in place."""
    return path.with_name(path.name + ".replaced")


def keep_other_branch(final: Path, samples: int | None) -> Path | None:
    """Set aside the complete checkpoint ``final`` (``step_<n>``) when it holds another sample
    count than the save about to take its name (``samples``): a resume on another world size
    or batch size counts other steps, and its ``step_16`` wrote over the earlier run's
    ``step_16``, the very checkpoint it may have resumed from. It is renamed
    ``step_<n>.samples_<its samples>`` (no listing takes it; ``train.resume=<it>`` does);
    returns that folder (None: nothing set aside), which :func:`_say_aside` announces once
    the save's pruning is done."""
    held = _samples(final) if samples is not None and _is_complete(final) else -1
    if held in (-1, samples):
        return None
    aside = final.with_name(f"{final.name}.samples_{held}")
    shutil.rmtree(aside, ignore_errors=True)
    final.rename(aside)
    return aside


def _say_aside(final: Path, aside: Path, keep_last: int | None) -> None:
    """The warning of a checkpoint :func:`keep_other_branch` set aside, where the save's
    pruning kept it (:func:`prune_checkpoints` says so of one it removes, then or later)."""
    if aside.exists():
        until = f" until {keep_last} newer ones exist" * bool(keep_last)
        log.warning(
            "%s held a checkpoint at %s samples (written with another world size or batch "
            "size); kept as %s rather than written over%s (train.resume=%s continues it)",
            final, aside.name.rsplit("_", 1)[-1], aside.name, until, aside,
        )  # fmt: skip


def _replace_folder(new: Path, final: Path) -> None:
    """Put the complete folder ``new`` at ``final``, replacing an earlier ``final`` (``best``).

    The earlier folder is renamed aside before ``new`` takes its place and deleted only after,
    so a crash at any point leaves a complete checkpoint: ``final``, or, between the two
    renames, ``final.replaced`` (which :func:`best_checkpoint` falls back to)."""
    aside = _replaced(final)
    if final.exists():  # else an earlier crash left only ``aside``: keep it until ``new`` is in
        shutil.rmtree(aside, ignore_errors=True)
        final.rename(aside)
    new.rename(final)
    sync_folder(final.parent)  # the new name on the disk before the earlier folder goes
    shutil.rmtree(aside, ignore_errors=True)


def _rng_file(path: Path, rank: int, device: str = "") -> Path:
    """Where rank ``rank`` keeps torch's CPU generator state in checkpoint ``path`` (with
    ``device="cuda"``: the generator of its current CUDA device)."""
    return path / f"{device}rng_rank{rank}.pt"


def save_rng(path: Path, rank: int) -> None:
    """Save rank ``rank``'s torch CPU generator into checkpoint ``path``, and its CUDA
    device's where CUDA is in use (FBGEMM draws the stochastic rounding of fp16 tables' updates
    from it)."""
    torch.save(torch.get_rng_state(), _rng_file(path, rank))
    sync_file(_rng_file(path, rank))  # on the disk before the folder is named complete
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.save(torch.cuda.get_rng_state(), _rng_file(path, rank, "cuda"))
        sync_file(_rng_file(path, rank, "cuda"))


def save_rank_state(path: Path, rank: int, state: dict[str, Any]) -> None:
    """Save rank ``rank``'s own ``state`` (its training window) into checkpoint ``path``."""
    torch.save(state, _rank_state_file(path, rank))
    sync_file(_rank_state_file(path, rank))


def read_rank_state(path: Path, rank: int) -> dict[str, Any] | None:
    """Rank ``rank``'s state that :func:`save_rank_state` saved in checkpoint ``path``; None
    where it saved none (a rank the saving job did not have, an earlier version).

    Raises:
        CheckpointError: the file cannot be read (truncated by a crash).
    """
    return _load_rank_file(path, _rank_state_file(path, rank), f"rank {rank}'s state")


def _rank_state_file(path: Path, rank: int) -> Path:
    return path / f"state_rank{rank}.pt"


def restore_rng(path: Path, rank: int) -> None:
    """Restore rank ``rank``'s generators that :func:`save_rng` saved in ``path`` (the CUDA
    one where this job uses CUDA too).

    Raises:
        CheckpointError: a generator file cannot be read (truncated by a crash: a traceback
            on every retry of ``train.resume=auto``, which takes this newest checkpoint).
    """
    what = "its random generator state"
    saved = _load_rank_file(path, _rng_file(path, rank), what)
    if saved is not None:
        torch.set_rng_state(saved)
    if torch.cuda.is_available():
        on_device = _load_rank_file(path, _rng_file(path, rank, "cuda"), what)
        if on_device is not None:
            torch.cuda.set_rng_state(on_device)


def _load_rank_file(path: Path, file: Path, what: str) -> Any:
    """``file`` of checkpoint ``path`` as ``torch.save`` wrote it (tensors only), None where
    it is absent.

    Raises:
        CheckpointError: it cannot be read (truncated by a crash: a traceback on every retry of
            ``train.resume=auto``, which takes this newest checkpoint), naming ``what``.
    """
    try:
        return torch.load(file, weights_only=True) if file.exists() else None
    except (OSError, EOFError, RuntimeError, KeyError, pickle.UnpicklingError) as err:
        # torch's own text of a damaged file advises weights_only=False ("arbitrary code
        # execution"): not the way out here (review); an empty file's EOFError has no text
        # and a text file's a KeyError of a byte (diff review)
        lines = str(err).strip().splitlines()
        why = (
            "damaged: not a file torch.save wrote"
            if isinstance(err, pickle.UnpicklingError | KeyError) or not lines
            else lines[0][:120]
        )
        raise CheckpointError(
            f"{path}: {what} {file.name} cannot be read ({why}): resume from an earlier "
            "checkpoint (train.resume=<its folder>), or remove this one"
        ) from None


def resolve_resume(resume: str, run_dir: Path) -> Path | None:
    """``auto``: the newest complete checkpoint of ``run_dir`` (None if there is none);
    otherwise the given checkpoint folder, as an absolute path.

    Raises:
        CheckpointError: the path is not a complete checkpoint folder.
    """
    if resume == "auto":
        found = complete_checkpoints(run_dir)
        newest = found[-1] if found else None
        warn_damaged(run_dir, newest)
        return newest
    # absolute, as its record and the checkpoints it writes name it (review)
    return _complete_checkpoint(absolute_path(resume), "train.resume")


def warn_damaged(run_dir: Path, taken: Path | None) -> None:
    """One warning naming the ``step_<n>`` folders of ``run_dir`` past the one ``taken``
    whose trainer state is missing or unreadable (a crash after the save, a damaged disk):
    they were passed over without a word, and a resumed run writes over them."""
    folder, newest = run_dir / CHECKPOINTS, _step_of(taken) if taken else -1
    damaged = sorted(
        (int(m.group(1)), path.name)
        for path in (folder.iterdir() if folder.is_dir() else [])
        if (m := _STEP_DIR.match(path.name)) and int(m.group(1)) > newest and path.is_dir()
        and not (_is_complete(path) and _readable_state(path))
    )  # fmt: skip
    if damaged:
        log.warning(
            "%s: %s passed over (no DCP .metadata or no readable %s: damaged after the save); "
            "taking %s", folder, first_few([name for _, name in damaged]), STATE_FILE,
            taken.name if taken else "none",
        )  # fmt: skip


def _readable_state(path: Path) -> bool:
    """Whether checkpoint ``path``'s trainer state reads as a JSON object."""
    try:
        read_trainer_state(path)
    except CheckpointError:
        return False
    return True


def _step_of(path: Path) -> int:
    """The step of a ``step_<n>`` folder (-1 for ``best`` or another name)."""
    match = _STEP_DIR.match(path.name)
    return int(match.group(1)) if match else -1


def _complete_checkpoint(path: Path, key: str) -> Path:
    """``path``, if it is a complete checkpoint folder; ``key`` names the setting that gave it.

    Raises:
        CheckpointError: no such folder, or one without DCP's metadata or the trainer state.
    """
    if not path.is_dir():
        what = "a file, not a checkpoint folder" if path.is_file() else "no such folder"
        raise CheckpointError(f"{key}: no checkpoint folder at {path} ({what})")
    if not _is_complete(path):
        # a run folder (never complete itself): its checkpoints are inside (review)
        if key == "train.resume" and (held := complete_checkpoints(path)):
            raise CheckpointError(
                f"{key}={path} is a run folder, not a checkpoint: give one of its checkpoints "
                f"({key}={held[-1]}, its newest), or continue the run in its own folder with "
                f"hydra.run.dir={path} {key}=auto"
            )
        raise CheckpointError(
            f"{key}: {path} is not a complete checkpoint (it needs DCP's .metadata and "
            f"{STATE_FILE}; a .partial folder is a save, or a pruning of an older step, that "
            "did not finish)"
        )
    return path


def resume_step(trainer_state: dict[str, Any], samples_per_step: list[int], world_size: int) -> int:
    """This job's step at the checkpoint's data position: the step after which this job has
    trained on exactly the checkpoint's ``samples``. With the checkpoint's world size and
    batch size that is its step; with another world size or ``train.batch_size`` the global
    batch differs, and so does the step.

    Raises:
        CheckpointError: no step of this job ends at the checkpoint's sample count (e.g. 3 steps
            of 2 ranks resumed on 4 ranks): the data position cannot be continued.
    """
    samples, step, seen = int(trainer_state["samples"]), 0, 0
    while seen < samples:
        seen += samples_per_step[step % len(samples_per_step)]
        step += 1
    if seen != samples:
        before = seen - samples_per_step[(step - 1) % len(samples_per_step)]
        ends = (before, seen)
        raise CheckpointError(_no_step_at(trainer_state, samples_per_step, world_size, ends))
    return step


def _no_step_at(
    trainer_state: dict[str, Any], samples_per_step: list[int], world_size: int, ends: tuple
) -> str:
    """:func:`resume_step`'s refusal: why no step of this job ends at the checkpoint's sample
    count (``ends``: the two step ends around it, in samples), and the checkpoints that do
    resume: one of this job's first epoch at a multiple of its global batch (it said "of its
    first epoch", the checkpoint's run's, and "a multiple of the new global batch" where the
    count was one: checkpoints review)."""
    samples, batch = int(trainer_state["samples"]), samples_per_step[0]
    ranks = int(trainer_state.get("world_size", world_size))
    saved_batch = (trainer_state.get("settings") or {}).get("train.batch_size")
    saved_global = int(saved_batch) * ranks if saved_batch is not None else None
    full = batch * sum(1 for s in samples_per_step if s == batch)  # (this job's first epoch)
    if saved_global == batch:  # the same global batch: the epochs end elsewhere
        why = (
            "its training split has another number of rows than the checkpoint's run (its "
            "epochs' short last batches fall elsewhere: a day added to or removed from "
            "data.path, another file, or another split)"
        )
        keep = "resume with that run's data"
    else:
        stepped = f"{saved_global} samples ({ranks} rank(s))" if saved_global else "other batches"
        why = f"the checkpoint's run stepped {stepped}, this job {batch} ({world_size} rank(s))"
        why += f", and this job's epochs of {sum(samples_per_step)} samples end elsewhere" * (
            samples > sum(samples_per_step)
        )
        keep = "keep the world size and train.batch_size"
    return (
        f"the checkpoint was written after {samples} samples, between the ends of this job's "
        f"steps at {ends[0]} and {ends[1]} samples: {why}; {keep}, or resume a checkpoint that "
        f"lands on a step of this job (within its first epoch, a multiple of {batch} samples "
        f"up to {full})"
    )


def load_checkpoint(
    path: Path, model: torch.nn.Module, optimizer: Any, expected: CheckpointLayout
) -> dict[str, Any]:
    """Load checkpoint ``path`` into ``model`` and ``optimizer`` (a collective) and return its
    trainer state.

    ``expected`` is this job's layout; a checkpoint of another model shape, or one whose
    data-parallel tables differ, is refused before DCP reads anything. Any other change of
    sharding type or world size loads: DCP reshards the tables' and the fused optimizer's
    ShardedTensors. A data-parallel table's optimizer state is a plain per-replica tensor under
    other keys, which DCP cannot map onto a sharded table's.

    Raises:
        CheckpointError: another model shape, other id policies or id kinds, other
            data-parallel tables, managed-collision tables on a world size that does not
            divide the saved one, or files DCP cannot read (truncated, missing).
    """
    trainer_state = _trainer_state_matching(
        path, expected.tables, expected.id_policies, expected.id_kinds, expected.inputs
    )
    saved_dp = trainer_state.get("data_parallel_tables")
    wanted_dp = expected.data_parallel_tables
    if saved_dp is not None and saved_dp != wanted_dp:
        moved = sorted(set(saved_dp) ^ set(wanted_dp))
        raise CheckpointError(
            f"checkpoint {path} has data_parallel tables {saved_dp or 'none'}, this job "
            f"{wanted_dp or 'none'}: a table cannot move between data_parallel and a sharded "
            f"type on resume ({', '.join(moved[:3])}); keep those tables data_parallel or not, "
            "e.g. with +sharding.per_table_sharding_type.<table>=... (sharding=auto makes "
            "every table data_parallel under a sparse optimizer FBGEMM does not fuse on this "
            "device, e.g. optimizer=adam on CPU: keep the checkpoint's optimizer)"
        )
    check_managed_ranks(
        path, trainer_state.get("world_size"), expected.id_policies, expected.world_size
    )
    optimizer.init_state()  # materialize every optimizer state tensor for DCP to fill
    optim_state = optimizer.state_dict()
    state = _state(model, optim_state)
    _dcp_load(path, state)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(optim_state)  # its "state" is what DCP just filled in
    if trainer_state.get("world_size") == dist.get_world_size():  # the generators of as
        restore_rng(path, dist.get_rank())  # many ranks as run now (none in older versions)
    return trainer_state


def check_managed_ranks(
    path: Path, saved_ranks: int | None, id_policies: dict[str, str] | None, world_size: int
) -> None:
    """Managed-collision tables load (resume, evaluate) only on a number of ranks that divides
    the saved one: TorchRec rebuilds each rank's id map from the saved ranks' row blocks in a
    ``load_state_dict`` hook, and a block boundary the checkpoint lacks fails inside it
    (``AssertionError: shard within range [0, 128] cannot be built out of segments``,
    reproduced 1 -> 2 ranks).

    Raises:
        CheckpointError: naming the features and the world sizes that can load it.
    """
    managed = sorted(f for f, p in (id_policies or {}).items() if p == "managed_collision")
    if not managed or not saved_ranks or saved_ranks % world_size == 0:
        return
    sizes = [n for n in range(1, saved_ranks + 1) if saved_ranks % n == 0]
    raise CheckpointError(
        f"checkpoint {path} was saved by {saved_ranks} rank(s); its managed-collision features "
        f"({first_few(managed)}) load only on a number of ranks that divides it "
        f"(TorchRec rebuilds each rank's id map from the saved rank blocks): "
        f"{', '.join(map(str, sizes))}, not {world_size}"
    )


def _trainer_state_matching(
    path: Path,
    tables: dict[str, list[int]],
    id_policies: dict[str, str] | None = None,
    id_kinds: dict[str, str] | None = None,
    inputs: dict[str, list[dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    """The checkpoint's ``trainer_state.json``, after checking that it holds ``tables``
    ({name: [rows, dim]}) and, where both the checkpoint (written since they are recorded)
    and this job name them, that its features took their rows by ``id_policies`` from ids
    stored as ``id_kinds``, and that it read ``inputs`` in this order
    (:attr:`CheckpointLayout.inputs`).

    Raises:
        CheckpointError: unreadable state, another model shape (naming the tables), a
            feature whose id policy differs (naming its ``data.schema`` key) or whose ids
            this job's data stores as the other kind (naming the feature and both kinds),
            sparse features or dense columns in another order or form (naming both).
    """
    trainer_state = read_trainer_state(path)
    saved = trainer_state.get("tables")
    if saved != tables:
        diff = sorted(
            f"{name}: checkpoint {saved.get(name) if saved else None}, model {shape}"
            for name, shape in tables.items()
            if not saved or saved.get(name) != shape
        )
        command = data_command(run_folder_of(path))
        run = f" (its run's: {command})" if command else ""
        if saved and set(saved) != set(tables):  # other table names: another schema
            raise CheckpointError(
                f"checkpoint {path} names its tables {first_few(sorted(saved))}, this job "
                f"{first_few(sorted(tables))}: it was trained with another feature schema "
                "(data=... / data/schema=..., whose features name the tables): use the data "
                f"config it was trained with{run}"
            )
        rows = (  # a schema's tables take their rows from it (own-data review)
            "; with a feature schema, its data.schema.sparse.<feature>.num_embeddings, "
            f"and the data config it was trained with{run}"
            if id_policies is not None
            else ""
        )
        # (the data command names the run's config sources where it is said: once)
        model = model_command(run_folder_of(path), sources=not (rows and command))
        model = f"its run's: {model}" if model else "model=..., model.num_embeddings_cap=..."
        raise CheckpointError(
            f"checkpoint {path} is from another model shape ({'; '.join(diff[:3])}): "
            f"{_shape_keys(saved or {}, tables)}use the model config it was trained with "
            f"({model}{rows})"
        )
    if id_policies is None:
        _check_managed_ids_given(path, trainer_state.get("id_policies") or {})
    _check_id_records(path, trainer_state, {"id_policies": id_policies, "id_kinds": id_kinds})
    _check_inputs(path, trainer_state.get("inputs"), inputs)
    return trainer_state


def _shape_keys(saved: dict[str, list[int]], tables: dict[str, list[int]]) -> str:
    """The model keys behind two table shapes' difference, for the refusal: the width
    (``model.embedding_dim``) and the rows (``model.num_embeddings_per_feature`` /
    ``num_embeddings_cap``); it named only the run's model option, the one the job was
    already on (checkpoints review). Empty where the tables are not comparable."""
    pairs = [(saved[n], shape) for n, shape in tables.items() if n in saved]
    said = ""
    widths = ({old[1] for old, _ in pairs}, {new[1] for _, new in pairs})
    if widths[0] != widths[1] and all(len(w) == 1 for w in widths):
        said += f"its model.embedding_dim is {widths[0].pop()}, this job's {widths[1].pop()}; "
    if any(old[0] != new[0] for old, new in pairs):
        said += "its tables have other rows (model.num_embeddings_per_feature / _cap); "
    return said


def _check_managed_ids_given(path: Path, saved: dict[str, str]) -> None:
    """Refuse a job without a feature schema (no id policies: the default data, an export
    without ``data=``) for a checkpoint whose model maps some features' raw ids itself
    (``id_policy=managed_collision``, in ``saved``): its tables load into no module of this
    job's model (DCP's "Missing key in checkpoint state_dict": diff review).

    Raises:
        CheckpointError: naming those features and the run's data overrides.
    """
    managed = sorted(f for f, policy in saved.items() if policy == "managed_collision")
    if managed:
        command = data_command(run_folder_of(path))
        run = f" (its run's: {command})" if command else ""
        raise CheckpointError(
            f"checkpoint {path} maps the raw ids of {first_few(managed)} to rows itself "
            "(id_policy=managed_collision), which this job's data config does not say: use "
            f"the data config it was trained with{run}"
        )


def _check_inputs(path: Path, saved: dict | None, wanted: dict | None) -> None:
    """Refuse a job that gives the checkpoint's model its inputs in another order or form
    (:attr:`CheckpointLayout.inputs`; not checked where either side has no record or an
    earlier form of it): the sparse features in another order, a dense column count or
    ``log1p`` that differs at a position, or a column the run read at one position given at
    another (swapped). A column the run never read is warned of, not refused: a file whose
    columns were only renamed is scored as before (diff review).

    Raises:
        CheckpointError: naming what differs, both ways.
    """
    trained, given = _input_lists(saved), _input_lists(wanted)
    if trained is None or given is None or trained == given:
        return
    (t_sparse, t_dense), (g_sparse, g_dense) = trained, given
    by_position = "the model reads its inputs by position and would score other ones"
    reorder = (
        "use the data/schema it was trained with (a schema made again from a file that stores "
        "its columns in another order lists them in that order: reorder it)"
    )
    if [f["feature"] for f in t_sparse] != [f["feature"] for f in g_sparse]:
        raise CheckpointError(
            f"checkpoint {path} was trained on its sparse features in this order: "
            f"{_features(t_sparse)}; this job's feature schema gives {_features(g_sparse)}: "
            f"{by_position}; {reorder}"
        )
    if len(t_dense) != len(g_dense) or any(
        a["log1p"] != b["log1p"] for a, b in zip(t_dense, g_dense, strict=True)
    ):
        raise CheckpointError(
            f"checkpoint {path} was trained on its dense columns {_columns(t_dense)}; this job "
            f"gives {_columns(g_dense)}: {by_position}; {reorder}"
        )
    moved = _moved(t_sparse, g_sparse, "sparse feature") + _moved(t_dense, g_dense, "dense")
    if moved:
        raise CheckpointError(
            f"checkpoint {path} was trained on its inputs from other columns: "
            f"{'; '.join(moved)}: {by_position}; give each input the column it was trained on "
            "(data.schema.sparse.<feature>.column, data.schema.dense.<i>.column)"
        )
    pairs = zip(t_sparse + t_dense, g_sparse + g_dense, strict=True)
    renamed = [f"{a['column']} -> {b['column']}" for a, b in pairs
               if a["column"] is not None and a["column"] != b["column"]]  # fmt: skip
    if not renamed or not is_rank_zero():
        return  # (said once, by rank 0)
    log.warning(
        "the checkpoint's inputs are read from other columns than its run read (%s): the "
        "model takes them by position, so they must hold the same values",
        ", ".join(renamed),
    )


def _input_lists(record: dict | None) -> tuple[list[dict], list[dict]] | None:
    """(sparse, dense) of an inputs record; None for none. The record's first form (this
    session's: ``["feature", ...]`` and ``["price (log1p)", ...]``) gives its order and
    ``log1p`` without columns (compared as such: review)."""
    if not record or record.get("sparse") is None or record.get("dense") is None:
        return None
    sparse = [e if isinstance(e, dict) else {"feature": str(e), "column": None}
              for e in record["sparse"]]  # fmt: skip
    dense = [e if isinstance(e, dict) else {"column": None, "log1p": str(e).endswith(" (log1p)")}
             for e in record["dense"]]  # fmt: skip
    return sparse, dense


def _features(sparse: list[dict]) -> str:
    return ", ".join(f["feature"] for f in sparse)


def _columns(dense: list[dict]) -> str:
    return ", ".join(c["column"] + (" (log1p)" if c["log1p"] else "") for c in dense) or "none"


def _moved(trained: list[dict], given: list[dict], kind: str) -> list[str]:
    """``sparse feature cat_0 reads C2, which the run read for cat_1`` (``kind``: dense
    columns by position) for each given column that the run read at another position of the
    same list (a swap; a column the run never read is a rename, and a record without columns
    says nothing of them)."""
    at: dict[str, list[int]] = {}  # (two features may read one column)
    for i, entry in enumerate(trained):
        if entry["column"] is not None:
            at.setdefault(entry["column"], []).append(i)

    def name(entries: list[dict], i: int) -> str:
        return entries[i]["feature"] if "feature" in entries[i] else f"column {i}"

    return [
        f"{kind} {name(given, i)} reads {entry['column']}, which the run read for "
        f"{name(trained, at[entry['column']][0])}"
        for i, entry in enumerate(given)
        if entry["column"] in at and i not in at[entry["column"]]
    ]


#: The id records a checkpoint keeps and its users must share, with one line per differing
#: feature and the refusal around them. Other id policies: the tables load (same shapes) and
#: then look up other rows for the same ids. Other id kinds: ``modulo`` and
#: ``managed_collision`` hash ``123`` and ``"123"`` to different rows.
_ID_RECORDS = {
    "id_policies": (
        "data.schema.sparse.{}.id_policy: checkpoint {}, this job {}",
        "was trained with other id policies ({}): the same raw ids would look up other rows "
        "of its tables; set the policies it was trained with",
    ),
    "id_kinds": (
        "{}: trained on {} ids, this data holds {} ones",
        "was trained on ids of another type ({}): its id policy hashes an integer and the "
        "same digits as a string to different rows; give those columns the training data's "
        "type (Parquet: cast them; Criteo TSV's C columns are always strings: convert it to "
        "data=parquet)",
    ),
}


def _check_id_records(
    path: Path, trainer_state: dict[str, Any], wanted: dict[str, dict[str, str] | None]
) -> None:
    """Refuse a checkpoint whose :data:`_ID_RECORDS` differ from this job's ``wanted`` ones
    (``{record: {feature: value}}``; None, or a checkpoint without the record: not checked).

    Raises:
        CheckpointError: naming up to three features of the first record that differs.
    """
    for record, (line, refusal) in _ID_RECORDS.items():
        keys = _differing(trainer_state.get(record), wanted[record], line)
        if keys:
            raise CheckpointError(f"checkpoint {path} {refusal.format(keys)}")


def _differing(saved: dict[str, str] | None, wanted: dict[str, str] | None, line: str) -> str:
    """``line.format(feature, saved, wanted)`` for up to three features whose values differ,
    joined by "; " (then "and N more"); empty when they agree or either side is None."""
    if saved is None or wanted is None:
        return ""
    differ = sorted(f for f in saved.keys() & wanted.keys() if saved[f] != wanted[f])
    more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
    return "; ".join(line.format(f, saved[f], wanted[f]) for f in differ[:3]) + more


def _dcp_load(path: Path, state: dict[str, Any]) -> None:
    """DCP-load ``state`` in place from ``path`` with the restricted metadata reader.

    Raises:
        CheckpointError: files DCP cannot read (a data file missing or cut short is named),
            or state it cannot reshard (row-wise Adagrad's momentum of a table in another
            number of column shards; the message says so).
    """
    reader = SafeFileSystemReader(str(path))
    try:  # first, alone: DCP logs a traceback for each fallback it tries on unreadable metadata
        _check_data_files(path, reader.read_metadata())
    except CheckpointError as err:
        raise CheckpointError(f"checkpoint {path} cannot be read: {err}") from None
    except Exception as err:  # (an object of the admitted classes, wrongly shaped)
        raise CheckpointError(
            f"checkpoint {path} cannot be read: {path / '.metadata'}: {type(err).__name__}: {err}"
        ) from None
    try:
        with warnings.catch_warnings():
            # Loading without a process group (evaluate / predict / export on one process) is
            # what DCP then assumes; it says so on every load.
            warnings.filterwarnings("ignore", message=r"torch.distributed is disabled")
            dcp.load(state, storage_reader=reader)
    except (Exception, CheckpointException) as err:  # CheckpointException is a BaseException
        stop = _interruption(err)
        if stop is not None:  # Ctrl-C / SIGTERM while loading: no damaged checkpoint (review)
            raise stop from None
        lines = [line for line in str(err).strip().splitlines() if line.strip()]
        first = lines[-1][:300] if lines else type(err).__name__
        raise CheckpointError(f"checkpoint {path} cannot be read: {first}{_hint(first)}") from None


def _interruption(err: BaseException) -> BaseException | None:
    """The Ctrl-C (``KeyboardInterrupt``) or SIGTERM (:class:`Terminated`) a DCP collective
    wrapped in its ``CheckpointException`` (every rank's failure is in ``failures``), or
    None."""
    stops = (exc for exc in _failures(err) if isinstance(exc, (KeyboardInterrupt, Terminated)))
    return next(stops, None)


def _failures(err: BaseException) -> list[BaseException]:
    """The exceptions a DCP collective's ``CheckpointException`` wraps, every rank's; none for
    another error."""
    wrapped = err.failures.values() if isinstance(err, CheckpointException) else []
    return [exc for exc, _ in wrapped]


def _check_data_files(path: Path, metadata: Metadata) -> None:
    """Each data file the metadata points into is there and holds the bytes it records
    (DCP's ``_StorageInfo``: file, offset, length); DCP itself fails on a cut-short one with
    an ``EOFError`` that names no file.

    Raises:
        CheckpointError: naming the first missing or cut-short file and the files affected.
    """
    needed: dict[str, int] = {}
    for info in (getattr(metadata, "storage_data", None) or {}).values():
        name = getattr(info, "relative_path", None)
        if isinstance(name, str):
            end = int(info.offset) + int(info.length)
            needed[name] = max(needed.get(name, 0), end)
    for name, end in sorted(needed.items()):
        file = path / name
        size = file.stat().st_size if file.is_file() else None
        if size is None or size < end:
            state = "is missing" if size is None else f"is cut short ({size:,} of {end:,} bytes)"
            damaged = [path, *_sharing(path, file)]  # (best and its step: hard links)
            moves = "; ".join(f"mv {p} {p}.damaged" for p in damaged)
            raise CheckpointError(  # (it said "use another checkpoint", and an earlier one
                # of the folder was then refused beside it: checkpoints review; resume=auto
                # was no way for a fine-tuning or an evaluate; a count of the linked ones sent
                # the user to the next: diff reviews)
                f"{file} {state}: damaged after it was written; move the checkpoint(s) holding "
                f"it aside ({moves}) and take an earlier one of its run folder "
                f"({run_folder_of(path)}: given as the checkpoint, it takes the next; "
                "train.resume=auto there continues it)"
            )


def _sharing(path: Path, file: Path) -> list[Path]:
    """The other checkpoints of ``path``'s folder whose file of ``file``'s name is the same
    file (``best`` and the step saved with it link their DCP files)."""
    if not file.is_file() or file.stat().st_nlink < 2:
        return []
    others = (  # (not one already set aside: diff review)
        p
        for p in sorted(path.parent.iterdir())
        if p != path and p.is_dir() and not p.name.endswith(".damaged")
    )
    return [p for p in others if (p / file.name).is_file() and (p / file.name).samefile(file)]


def _hint(error: str) -> str:
    """What a DCP load error means, where it is known: row-wise Adagrad's ``momentum1`` of a
    table cut into column shards holds one value per row and shard (TorchRec), so its size
    follows the number of column shards, which DCP cannot reshard."""
    if error.startswith("EOFError") or "unexpected end of file" in error.lower():
        return " (a file of it is cut short: damaged after it was written; use another one)"
    if "Size mismatch" in error and "momentum1" in error:
        return (
            " (row-wise Adagrad keeps a table's momentum per column shard: resume with as many "
            "column shards as the checkpoint's run had, i.e. its sharding type and ranks for "
            "column-wise and grid tables; or another sparse optimizer than the checkpoint's)"
        )
    dense_or_optimizer = ("dense_arch", "over_arch", "inter_arch", "optim.")
    if any(f in error for f in ("Size mismatch", "Missing key", "Unexpected key")) and any(
        part in error for part in dense_or_optimizer
    ):
        return (
            " (the checkpoint holds another model or optimizer: model.dense_arch_layer_sizes, "
            "over_arch_layer_sizes, interaction_type or the optimizer differ from its run's; "
            "use that run's settings, in its .hydra/config.yaml)"
        )
    return ""


def find_checkpoint(location: str, warn: bool = True, key: str = "checkpoint") -> Path:
    """The checkpoint folder ``checkpoint=`` (or another ``key``) names, as an absolute path: a
    ``checkpoints/step_<n>`` (or ``best``) folder, or a run folder: its best validation's
    checkpoint (``train.keep_best``) if it has one, else its newest complete checkpoint.

    Raises:
        CheckpointError: nothing there, a run folder without a complete checkpoint, or an
            incomplete (``.partial``) save.
    """
    # absolute: the records name it (a relative one named nothing from another folder: review)
    path = absolute_path(location)
    if path.is_dir() and not (path / STATE_FILE).is_file() and not path.name.endswith(".partial"):
        run_dir = path.parent if path.name == CHECKPOINTS else path
        found = best_checkpoint(run_dir)
        if found is None:
            steps = complete_checkpoints(run_dir)
            if not steps:
                raise CheckpointError(
                    f"{key}={location}: no complete checkpoint in this run folder"
                    + (_scored_by(run_dir) or " (train with train.checkpoint_every_n_steps=N "
                       "to write some)")
                )  # fmt: skip
            found = steps[-1]
            if warn:  # (once: a job's pre-flight looks too)
                warn_damaged(run_dir, found)
        if warn:
            _warn_unfinished(run_dir, found)
        return found
    return _complete_checkpoint(path, key)


#: The mode of the run that writes each record naming the checkpoint it read (a training
#: run's metrics.json names none).
_SCORED_RECORDS = {
    "metrics.json": EvalMetrics.mode,
    "predict_report.json": "predict",
    "export.json": "export",
}


def _scored_by(run_dir: Path) -> str:
    """Where ``run_dir`` holds the output of an evaluate, predict or export run (their records
    name the checkpoint they read; an export into ``export.output_dir`` left its
    ``.hydra/config.yaml`` alone, which names it too), the rest of the refusal naming it: such
    a folder was told to train with checkpoints (after-training review); else ``""``."""
    for name, mode in _SCORED_RECORDS.items():
        record = read_json_object(run_dir / name) or {}
        if record.get("checkpoint"):
            return _scored_line(mode, record["checkpoint"])
    read = recorded_checkpoint(run_dir)  # (a training run's names none: one load)
    mode = recorded_mode(run_dir) if read else None
    return _scored_line(mode, read) if read and mode not in (None, "train") else ""


def _scored_line(mode: str, read: str) -> str:
    """:func:`_scored_by`'s words for a run of ``mode`` that read checkpoint ``read``."""
    return (
        f": it holds a mode={mode} run's output, which writes none; that run read "
        f"checkpoint={read} (name it, or its training run's folder)"
    )


def _warn_unfinished(run_dir: Path, taken: Path) -> None:
    """A warning where the run of ``run_dir`` whose checkpoint ``taken`` is scored did not
    finish (its ``metrics.json`` says failed or interrupted): a best or step from before the
    end, or of an earlier attempt beside a refused job's record, was scored without a word
    (diff review)."""
    if record_status(run_dir / "metrics.json") in UNFINISHED:
        log.warning(
            "%s: the run of this folder %s (metrics.json); taking %s, saved before that",
            run_dir, ended_how(run_dir), taken.name,
        )  # fmt: skip


def load_model_weights(
    path: Path,
    model: torch.nn.Module,
    tables: dict[str, list[int]],
    id_policies: dict[str, str] | None = None,
    id_kinds: dict[str, str] | None = None,
    world_size: int = 1,
    inputs: dict[str, list[dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    """Load only the model's weights of checkpoint ``path`` into ``model`` (a collective when a
    process group exists) and return its trainer state. Any sharding type and world size, on
    either side, data_parallel included: DCP reshards the tables to this model's placement;
    optimizer state is not read.

    ``id_policies``: this job's ``{feature: id policy}``; ``id_kinds``: how this job's data
    stores the ids of its hashed features (``DataInfo.id_kinds``); None: not checked.
    ``world_size``: this job's ranks (:func:`check_managed_ranks`). ``inputs``: what this
    job's model reads by position (:attr:`CheckpointLayout.inputs`; None: not checked).

    Raises:
        CheckpointError: another model shape, other id policies or id kinds, inputs in
            another order, managed-collision tables on a world size that does not divide the
            saved one, or files DCP cannot read.
    """
    trainer_state = _trainer_state_matching(path, tables, id_policies, id_kinds, inputs)
    check_managed_ranks(path, trainer_state.get("world_size"), id_policies, world_size)
    state = {"model": model.state_dict()}
    _dcp_load(path, state)
    model.load_state_dict(state["model"])
    return trainer_state
