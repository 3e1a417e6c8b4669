"""The user's own config files (``--config-dir`` / ``-cd``, ``hydra.searchpath=[file://...]``),
read before Hydra composes them: a YAML syntax error there was a 100-line traceback through
Hydra and the YAML parser, and a feature schema of the wrong shape was refused by OmegaConf
naming ``full_key: log1p`` (or no key at all) instead of where it sits.
"""

import dataclasses
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from dlrm_exp.config.keys import check_key, option_has, option_values, refuse_other_option
from dlrm_exp.config.schema import DenseColumn, FeatureSchema, SparseFeature
from dlrm_exp.errors import ConfigError
from dlrm_exp.util.text import closest, first_few

#: The flags that name a config folder of the user's.
_DIR_FLAGS = ("-cd", "--config-dir")
#: The groups whose option files :func:`check_option_file_keys` reads (``data`` options differ
#: in their keys, checked once composed; schema files by :func:`check_config_files`).
_KEYED_GROUPS = ("model", "sharding", "optimizer", "qcomms", "hardware", "experiment")
#: The feature schemas' group.
_SCHEMA = "data/schema"


def config_dirs(args: Sequence[str]) -> list[Path]:
    """The folders a command line adds to Hydra's search path: ``-cd X`` / ``--config-dir X``
    / ``--config-dir=X``, and the ``file://`` entries of ``hydra.searchpath=[...]``."""
    dirs = []
    for i, arg in enumerate(args):
        if arg in _DIR_FLAGS and i + 1 < len(args):
            dirs.append(args[i + 1])
        elif arg.startswith(tuple(f"{flag}=" for flag in _DIR_FLAGS)):
            dirs.append(arg.split("=", 1)[1])
        elif arg.lstrip("+").startswith("hydra.searchpath="):
            entries = [e.strip().strip("'\"") for e in arg.split("=", 1)[1].strip("[]").split(",")]
            dirs += [e[len("file://") :] for e in entries if e.startswith("file://")]  # (quoted
            # entries, as Hydra's docs write them, were left out: diff review)
    return [Path(d).expanduser() for d in dirs]


class Chosen(NamedTuple):
    """A config file the command line picks."""

    #: Its config group (``experiment``, ``data/schema``); "" for a primary config (``-cn``).
    group: str
    #: The option as the command line names it (``sub/p`` of ``experiment=sub/p``).
    option: str
    file: Path


def chosen_files(args: Sequence[str], dirs: Sequence[Path]) -> list[Chosen]:
    """The files of ``dirs`` the command line picks: ``<group>=<option>`` (also each option
    of a ``-m`` sweep's ``a,b``) as ``<dir>/<group>/<option>.yaml`` (an option in a subfolder,
    ``experiment=sub/p``, is still of its group: the checks took the group from the file's
    folder and skipped it), and the primary config of ``-cn`` / ``--config-name``; those that
    exist. (Options the primary config's defaults pick are left to Hydra.)"""
    names = []
    for i, arg in enumerate(args):
        if arg in ("-cn", "--config-name") and i + 1 < len(args):
            names.append(("", args[i + 1]))
        elif arg.startswith("--config-name="):
            names.append(("", arg.split("=", 1)[1]))
    names = [(group, name, name) for group, name in names]
    overrides = [a for a in args if not a.startswith("-")]
    groups = dict.fromkeys(g for g, _ in _choices(args) if "." not in g)  # (not keys)
    for group in groups:  # each value as Hydra parses it: choice(a,b) split at its comma
        # named no file, and the preset's checks were skipped (diff review)
        options = option_values(overrides, [group])
        names += [(group, option, f"{group}/{option}") for option in options]
    return [
        Chosen(group, option, d / f"{name}.yaml")
        for d in dirs
        for group, option, name in names
        if (d / f"{name}.yaml").is_file()
    ]


def _choices(args: Sequence[str]) -> list[tuple[str, list[str]]]:
    """``(group or key, options)`` of each ``[+~]<group>=<a>[,<b>...]`` override of ``args``,
    in order (a ``-m`` sweep's options each; flags and ``-cn``'s value are none)."""
    pairs = []
    for arg in args:
        if not arg.startswith("-") and "=" in arg:
            group, options = arg.lstrip("+~").split("=", 1)
            pairs.append((group, [o.strip() for o in options.split(",")]))
    return pairs


def check_schema_choice(args: Sequence[str], folders: Sequence[Path]) -> None:
    """``data/schema=<name>`` names a file one of the config ``folders`` holds, and
    ``data=parquet`` names a schema at all: Hydra's own errors for either name neither
    ``--config-dir`` nor ``mode=schema`` (a second day's run without the folder: review).
    Skipped where something else may choose or hold one (an ``experiment=``, a ``pkg://``
    search path, a ``data/parquet.yaml`` of the user's own); a ``glob(...)`` is left to Hydra.

    Raises:
        ConfigError: naming the schema, where it was looked for and how to make one.
    """
    if "pkg://" in " ".join(args):
        return
    chosen = set(dict(_choices(args)))
    overrides = [a for a in args if not a.startswith("-")]
    schemas, datas = option_values(overrides, ["data/schema"]), option_values(overrides, ["data"])
    make = (
        "a schema of your own lives in a folder given by --config-dir (mode=schema writes one "
        "from your files and prints the command that trains on it: python -m dlrm_exp "
        "mode=schema schema_scan.path=<files> schema_scan.name=<name>)"
    )
    for name in schemas:  # (each of a sweep's, as Hydra parses them: choice(a,b) split at its
        # comma was skipped, a quoted name refused)
        if not any((d / "data" / "schema" / f"{name}.yaml").is_file() for d in folders):
            where = ", ".join(str(d) for d in folders)
            raise ConfigError(f"data/schema={name}: no data/schema/{name}.yaml in {where}: {make}")
    own_option = any((d / "data" / "parquet.yaml").is_file() for d in folders[1:])
    if "parquet" in datas and not {"data/schema", "experiment"} & chosen:
        if not own_option:
            raise ConfigError(
                f"data=parquet reads its files by a feature schema: add data/schema=<name>; {make}"
            )


def check_config_files(files: Sequence[Chosen]) -> None:
    """Each of ``files`` (:func:`chosen_files`) parses, and a feature schema among them
    (``data/schema/*.yaml``) has the shape of :class:`FeatureSchema`: the rest (values
    across fields, columns in the files) is checked once composed.

    Raises:
        ConfigError: the file, and the line and column of a syntax error or the key
            (``data.schema.dense[0].log1p``) of a value of the wrong kind.
    """
    for group, _, file in files:
        text = file.read_text(encoding="utf-8")
        try:
            node = OmegaConf.create(text)  # (what OmegaConf.load does with the file's text)
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(err, "problem", None) or str(err).splitlines()[0]
            raise ConfigError(f"{file}: not valid YAML ({problem}{where})") from None
        composed = isinstance(node, DictConfig) and "defaults" in node
        if group == _SCHEMA and not composed and "@package" not in _head(text):
            _check_schema(file, node)  # (one Hydra composes from others: checked composed)


def check_option_file_keys(files: Sequence[Chosen], root: type) -> None:
    """The keys each group option file among ``files`` sets (``model/mine.yaml``'s
    ``embedding_dim``; an experiment's ``train.batch_size`` under ``# @package _global_``)
    exist in the schema ``root``, as an override's key must. Hydra refused a misspelt one with
    a multi-line ``ConfigKeyError`` naming no close key (review).

    Raises:
        ConfigError: the file and the unknown key, with the closest known one.
    """
    for group, _, file in files:
        if group not in _KEYED_GROUPS:
            continue
        text = file.read_text(encoding="utf-8")
        node = OmegaConf.create(text)  # (parsed: check_config_files ran first)
        if not isinstance(node, DictConfig):
            continue
        package = _package(text, group)
        plain = OmegaConf.to_container(node, resolve=False)
        try:
            for key in _leaf_keys(plain):
                if key:
                    check_key(".".join(filter(None, [package, key])), root)
        except ConfigError as err:
            raise ConfigError(f"{file}: {err}") from None


#: The values of ``hydra.mode`` that make a command or a preset a sweep (as OmegaConf reads
#: Hydra's ``RunMode``).
MULTIRUN_MODES = ("MULTIRUN", "RunMode.MULTIRUN", "2")


@functools.cache
def _preset(file: Path, _mtime_ns: int) -> tuple[str, DictConfig | ListConfig]:
    """An ``experiment=`` preset file's text and node, read once however many checks read it
    (three did, each on its own: re-read); again once the file changes (``_mtime_ns``)."""
    text = file.read_text(encoding="utf-8")
    return text, OmegaConf.create(text)


#: The chosen files whose defaults and sweeper params decide for a command: ``experiment=``
#: presets and primary configs (``-cn``, group "").
_DECIDING = ("experiment", "")


def _presets(
    files: Sequence[Chosen], groups: Sequence[str] = ("experiment",)
) -> list[tuple[Chosen, str, DictConfig | ListConfig]]:
    """``(chosen, text, node)`` of the files of ``groups`` among ``files`` (the
    ``experiment=`` presets by default), each read once (:func:`_preset`)."""
    return [(c, *_preset(c.file, c.file.stat().st_mtime_ns)) for c in files if c.group in groups]


def _defaults_group(key: str) -> str:
    """The group a defaults-list entry's key names: ``override /data``, ``optional
    experiment``, ``/experiment@_global_`` (those two were missed: diff review)."""
    for word in ("override", "optional"):
        key = key.removeprefix(word).strip()
    return key.lstrip("/").split("@")[0]


def preset_choice(files: Sequence[Chosen], group: str) -> str | None:
    """The option of ``group`` the ``experiment=`` presets and primary configs (``-cn``)
    among ``files`` choose in their defaults lists (``- override /data: criteo_multihot``);
    None where none does, or they choose different ones (a sweep over presets)."""
    found = set()
    for _, _, node in _presets(files, _DECIDING):
        defaults = node.get("defaults") if isinstance(node, DictConfig) else None
        for entry in defaults if isinstance(defaults, ListConfig) else []:
            for key, option in entry.items() if isinstance(entry, DictConfig) else []:
                if _defaults_group(str(key)) == group:
                    found.add(str(option))
    return found.pop() if len(found) == 1 else None


def _sweeper_params(node: DictConfig | ListConfig) -> DictConfig | None:
    """A preset's ``hydra.sweeper.params`` (None: it gives none)."""
    params = OmegaConf.select(node, "hydra.sweeper.params", default=None)
    return params if isinstance(params, DictConfig) else None


def check_preset_data_keys(
    args: Sequence[str], files: Sequence[Chosen], options: dict[str, type], sweep: bool = False
) -> None:
    """The ``data.*`` keys an ``experiment=`` preset among ``files`` sets exist in the data
    option the command line chooses (``data=<option>``, each of a sweep's, and for a
    ``sweep`` the sweeper's ``hydra.sweeper.params.data``, which a single run ignores):
    ``experiment=dlrm_main_mlperf data=criteo_tsv`` (the preset sets ``data.mmap_mode`` for
    its own ``criteo_npy``) was Hydra's seven-line ``ConfigKeyError`` (presets review).

    Raises:
        ConfigError: naming the preset's key, the option chosen and the options that have it
            (:func:`~dlrm_exp.config.keys.refuse_other_option`).
    """
    data_keys = ("data", "hydra.sweeper.params.data") if sweep else ("data",)
    chosen = option_values([a for a in args if not a.startswith("-")], data_keys)
    for preset, text, parsed in _presets(files) if chosen else []:
        node = OmegaConf.to_container(parsed, resolve=False)
        top = isinstance(node, dict) and _package(text, "experiment") == ""  # (_global_)
        data = node.get("data") if top else None
        keys = _leaf_keys(data) if isinstance(data, dict) else []
        for choice, key in ((c, k) for c in chosen if c in options for k in keys):
            if not option_has(options[choice], key):
                what = f"experiment={preset.option}'s data.{key}"
                refuse_other_option(what, key, choice, options)


def check_sweeper_param_keys(args: Sequence[str], files: Sequence[Chosen]) -> None:
    """A ``hydra.sweeper.params`` override of Hydra's basic sweeper (no ``hydra/sweeper=``
    chosen) sets what an ``experiment=`` preset among ``files`` gives it: where none gives
    any, any form of it (``+``, ``{...}``) ended in a
    20-line traceback (``AssertionError: Unexpected type for root: NoneType``: diff review),
    and a key the preset lacks needs its ``+``.

    Raises:
        ConfigError: naming the override and the way that sweeps it.
    """
    if any(a.lstrip("+~").startswith("hydra/sweeper=") for a in args):
        return  # (another sweeper's config, e.g. hydra/sweeper=lr_search, gives its own)
    given = {key for _, _, node in _presets(files) for key in _sweeper_params(node) or ()}
    for arg in args:
        key, _, value = arg.partition("=")
        bare = key.lstrip("+~")
        if not bare.startswith("hydra.sweeper.params"):
            continue
        name = bare.removeprefix("hydra.sweeper.params").lstrip(".")
        unquoted = value.strip("\"'")
        if not given:
            raise ConfigError(
                f"{arg}: the sweeper's params come from a preset's hydra.sweeper.params, "
                "which no preset chosen here has: sweep the key itself, -m "
                f"{name or '<key>'}={unquoted if name else '<a,b>'}"
            )
        if name not in given and not key.startswith("+"):
            raise ConfigError(f"{arg}: the preset's sweeper has no param {name}: add it, +{arg}")


def preset_sweep_params(files: Sequence[Chosen]) -> list[tuple[str, list[str]]]:
    """``(where, its hydra.sweeper.params as key=value overrides)`` of each ``experiment=``
    preset (``experiment=<name>``) and primary config (``-cn <name>``: its own params were
    left to Hydra's traceback: diff review) among ``files`` that gives the sweeper params."""
    found = []
    for chosen, _, node in _presets(files, _DECIDING):
        params = _sweeper_params(node)
        where = f"experiment={chosen.option}" if chosen.group else f"-cn {chosen.option}"
        if params:
            found.append((where, [f"{k}={v}" for k, v in params.items()]))
    return found


def presets_set_multirun(files: Sequence[Chosen]) -> bool:
    """Whether an ``experiment=`` preset or a ``-cn`` primary config among ``files`` sets
    ``hydra.mode: MULTIRUN`` (the command then sweeps without ``-m``)."""
    return any(_sets_multirun(node) for _, _, node in _presets(files, _DECIDING))


def _sets_multirun(node: DictConfig | ListConfig) -> bool:
    """Whether a preset or primary config sets ``hydra.mode: MULTIRUN`` (any form)."""
    return str(OmegaConf.select(node, "hydra.mode", default="")) in MULTIRUN_MODES


def preset_sweeps(files: Sequence[Chosen]) -> list[tuple[str, int]]:
    """``(preset, swept keys)`` of each ``experiment=`` preset among ``files`` that carries a
    sweep of its own (``hydra.sweeper.params``), which only a ``-m`` command runs (not one
    that sets ``hydra.mode: MULTIRUN`` itself)."""
    found = []
    for chosen, _, node in _presets(files):
        params = _sweeper_params(node)
        if params and not _sets_multirun(node):  # (one that sets hydra.mode sweeps itself)
            found.append((chosen.option, len(params)))
    return found


def _package(text: str, group: str) -> str:
    """The package of a group's option file from its ``# @package`` header (:func:`_head`):
    its group's by default; ``_global_``: the root, and ``_global_.model`` the root's
    ``model`` (it was taken as a key named ``_global_``; diff review)."""
    for line in _head(text).splitlines():
        if "@package" in line:
            package = line.split("@package", 1)[1].strip()
            if package == "_group_":
                return group
            return package.removeprefix("_global_").lstrip(".")
    return group


def _leaf_keys(node: object, prefix: str = "") -> list[str]:
    """The dotted keys of a plain mapping down to its non-mapping values (``defaults``, the
    defaults list, left out at the top)."""
    if not isinstance(node, dict) or not node:
        return [prefix]
    keys = []
    for key, value in node.items():
        if not prefix and key == "defaults":
            continue
        keys += _leaf_keys(value, f"{prefix}.{key}" if prefix else str(key))
    return keys


def check_schema_feature_overrides(overrides: Sequence[str], files: Sequence[Chosen]) -> None:
    """An override of a feature (``data.schema.sparse.<name>...``, no ``+``) names a feature
    of the schema file the command line chose (``data/schema=<option>``, in ``files``).
    Hydra's own error hinted ``+data.schema.sparse.itme...``, which adds a phantom feature
    (review). Left alone without such a file, with one Hydra composes from others, and where
    something else may add features: an override of the map itself (``++data.schema.sparse=
    {x: ...}``), a preset (``experiment=``) or a primary config of one's own (``-cn`` /
    ``-cp``); the check would refuse what Hydra composes (diff review).

    Raises:
        ConfigError: naming the closest feature and how to add one.
    """
    keys = [a.split("=", 1)[0].lstrip("+~") for a in overrides]
    adders = ("data.schema", "data.schema.sparse", "data.schema.dense", "experiment")
    if any(k in adders for k in keys):
        return
    schemas = [c for c in files if c.group == _SCHEMA]
    nodes = [OmegaConf.create(c.file.read_text(encoding="utf-8")) for c in schemas]
    if not nodes or any(not isinstance(n, DictConfig) or "defaults" in n for n in nodes):
        return
    features = list(dict.fromkeys(name for n in nodes for name in (n.get("sparse") or {})))
    stems = ", ".join(c.option for c in schemas)
    dense = [list(n.get("dense") or []) for n in nodes]
    for text in overrides:
        key = text.split("=", 1)[0]
        if key.startswith("data.schema.dense."):
            _check_dense_index(text, key, stems, dense)
        if not key.startswith("data.schema.sparse."):  # (+ / ++ / ~: adding on purpose)
            continue
        name = key.removeprefix("data.schema.sparse.").split(".", 1)[0]
        if name and name not in features:
            close = closest(name, features)
            hint = f"did you mean {close}? " if close else ""
            raise ConfigError(
                f"{text}: the schema {stems} has no feature "
                f"{name} ({hint}features: {first_few(features, 6)}); to add one: "
                f"'++data.schema.sparse={{{name}: {{column: ..., num_embeddings: ...}}}}'"
            )


def _check_dense_index(text: str, key: str, stems: str, dense: list[list]) -> None:
    """An override of a dense column by its index (``data.schema.dense.5.log1p=false``)
    names one the chosen schemas (``dense``: each one's list) have: Hydra's own error was
    "Invalid type assigned: dict is not a subclass of DenseColumn" (own-data review).

    Raises:
        ConfigError: naming the columns there are and how to give others.
    """
    index = key.removeprefix("data.schema.dense.").split(".", 1)[0]
    longest = max(dense, key=len)
    count = len(longest)
    if not index.isdigit() or int(index) < count:
        return
    columns = [str(c.get("column", "?")) for c in longest if isinstance(c, DictConfig)]
    listed = f" (0 to {count - 1}: {first_few(columns, 6)})" if count else ""
    raise ConfigError(
        f"{text}: the schema {stems} has {count} dense column(s){listed}; to give others, "
        "set the whole list: 'data.schema.dense=[{column: ..., log1p: ...}, ...]'"
    )


def _head(text: str) -> str:
    """The comment lines a file's ``text`` starts with, up to its first content line (where
    Hydra reads a ``# @package`` header)."""
    head = []
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            head.append(line)
        elif line.strip():
            break
    return "\n".join(head)


def _check_schema(file: Path, node: DictConfig | ListConfig) -> None:
    """``node`` (a schema file) as :class:`FeatureSchema`, each dense column and sparse
    feature merged on its own so that an error names its place.

    Raises:
        ConfigError: see :func:`check_config_files`.
    """
    if not isinstance(node, DictConfig):
        raise ConfigError(f"{file}: a feature schema is a mapping (label, dense, sparse)")
    dense, sparse = node.get("dense"), node.get("sparse")
    if dense is not None and not isinstance(dense, ListConfig):
        raise ConfigError(f"{file}: data.schema.dense is a list of {{column: ..., log1p: ...}}")
    if sparse is not None and not isinstance(sparse, DictConfig):
        raise ConfigError(
            f"{file}: data.schema.sparse maps feature names to {{column: ..., "
            "num_embeddings: ...}}"
        )
    rest = {k: v for k, v in node.items() if k not in ("dense", "sparse")}
    parts = [("data.schema", FeatureSchema, rest)]
    parts += [(f"data.schema.dense[{i}]", DenseColumn, d) for i, d in enumerate(dense or [])]
    parts += [(f"data.schema.sparse.{n}", SparseFeature, f) for n, f in (sparse or {}).items()]
    for where, cls, value in parts:
        if not isinstance(value, DictConfig | dict):
            example = f", e.g. {{column: {value}}}" if isinstance(value, str) else ""
            raise ConfigError(
                f"{file}: {where} is a mapping of {cls.__name__}'s fields{example}, not {value!r}"
            )
        try:
            OmegaConf.merge(OmegaConf.structured(cls), value)
        except OmegaConfBaseException as err:
            key = f"{where}.{err.full_key}" if getattr(err, "full_key", "") else where
            reason = str(err).splitlines()[0]
            fields = [f.name for f in dataclasses.fields(cls)]
            close = closest(str(err.full_key or ""), fields, cutoff=0.7)
            hint = f": did you mean {close}?" if close and err.full_key not in fields else ""
            raise ConfigError(f"{file}: {key}: {reason}{hint}") from None
