"""The command a run was started with, read back from its folder's Hydra records, to tell a
later job how to give a checkpoint the data it was trained on, and the model it built."""

import re
from pathlib import Path

from omegaconf import OmegaConf

from dlrm_exp.record.runs import job_overrides

#: The overrides that choose a run's data: ``data=...``, ``data.*=...``, ``data/schema=...``,
#: and an ``experiment=``, whose preset may choose the data.
_DATA_OVERRIDE = re.compile(r"[+~]*(data([./=]|$)|experiment=)")


#: The overrides that choose a run's model: ``model.*=...`` and an ``experiment=``, whose
#: preset may set model keys (the ``model=`` choice is read from the runtime choices).
_MODEL_OVERRIDE = re.compile(r"[+~]*(model\.|experiment=)")


def data_overrides(run_dir: Path) -> list[str] | None:
    """The data overrides of the run in ``run_dir`` (:data:`_DATA_OVERRIDE`), from its
    ``.hydra/overrides.yaml``; None where the folder has none to read."""
    return _overrides(run_dir, _DATA_OVERRIDE)


def _overrides(run_dir: Path, kind: re.Pattern) -> list[str] | None:
    """The overrides of the run in ``run_dir`` that ``kind`` matches, from its
    ``.hydra/overrides.yaml``; None where the folder has none to read."""
    if not (run_dir / ".hydra" / "overrides.yaml").is_file():
        return None
    try:
        overrides = job_overrides(run_dir)
    except ValueError:
        return None
    return [o for o in overrides if kind.match(o)]


def model_command(run_dir: Path, sources: bool = True) -> str | None:
    """What to give a job to build the model of the run in ``run_dir``: its ``model=``
    choice (``hydra.runtime.choices`` of its ``.hydra/hydra.yaml``: chosen on the command
    line, by a preset or by default) and its ``model.*`` / ``experiment=`` overrides, after
    its config sources (:func:`_dirs_args`: a model option of one's own lives there; not
    with ``sources=False``, where a data command beside it names them); None
    where the folder has no record (a refusal said ``model=...`` where the run's folder
    records ``model=tiny``: after-training review)."""
    overrides = _overrides(run_dir, _MODEL_OVERRIDE)
    try:
        hydra = OmegaConf.load(run_dir / ".hydra" / "hydra.yaml")
        choice = OmegaConf.select(hydra, "hydra.runtime.choices.model", default=None)
    except (OSError, ValueError):
        choice = None
    if overrides is None or choice is None:
        return None
    dirs = _dirs_args(run_dir) if sources else []
    return " ".join([*dirs, f"model={choice}", *overrides])


def config_dirs(run_dir: Path) -> list[str]:
    """The config sources the run in ``run_dir`` was given on its command line (a schema of
    one's own lives there), by ``--config-dir`` or ``hydra.searchpath=[...]`` (diff review),
    from its ``.hydra/hydra.yaml`` (``hydra.runtime.config_sources``): a folder as its path,
    a package as ``pkg://<module>``; none where it has no record."""
    try:
        hydra = OmegaConf.load(run_dir / ".hydra" / "hydra.yaml")
        sources = OmegaConf.select(hydra, "hydra.runtime.config_sources", default=None) or []
    except (OSError, ValueError):
        return []
    given = ("command-line", "hydra.searchpath in command-line")
    return [
        str(s.path) if s.get("schema") == "file" else f"{s.get('schema')}://{s.path}"
        for s in sources
        if s.get("provider") in given and s.get("path")
    ]


def data_command(run_dir: Path) -> str | None:
    """What to add to a command to read the run's data as it did: its :func:`config_dirs`
    (``--config-dir <dir>``; several, or a package, as ``hydra.searchpath=[...]``) and its
    :func:`data_overrides` (relative paths as it read them, from the folder it started in);
    None where the folder has no record."""
    overrides = data_overrides(run_dir)
    if overrides is None:
        return None
    return " ".join([*_dirs_args(run_dir), *overrides]) or "no data overrides (the default data)"


def _dirs_args(run_dir: Path) -> list[str]:
    """The run's :func:`config_dirs` as command-line arguments: ``--config-dir <dir>``, or
    several (or a package) as one ``hydra.searchpath=[...]`` (Hydra takes one
    ``--config-dir``, and a folder)."""
    dirs = config_dirs(run_dir)
    if len(dirs) == 1 and "://" not in dirs[0]:
        return [f"--config-dir {dirs[0]}"]
    if dirs:
        paths = ",".join(d if "://" in d else f"file://{d}" for d in dirs)
        return [f"'hydra.searchpath=[{paths}]'"]
    return []
