"""Keys the schema knows, and refusing the ones it does not with the closest known key.

Hydra refuses ``train.lr=0.1`` with "Key 'lr' is not in struct" and a hint to append it with
``+``; an appended key (``+train.lr=0.1``) then composes, lands in the saved config and is
ignored by the typed config, so a user believes they changed the rate. Two checks close this:

* :func:`check_override_keys` reads the command line before Hydra composes, so the plain form
  gets a suggestion instead of Hydra's hint;
* :func:`check_composed_keys` walks the composed config against each node's dataclass, so a key
  appended with ``+`` / ``++`` (or by a YAML file) is refused too.

Maps meant to be open (``sharding.per_table_sharding_type``, ``per_table_compute_kernel``:
``dict``-typed fields) take any key; a map of dataclass values (``data.schema.sparse``: feature
name -> ``SparseFeature``) takes any entry name, but each entry's keys are checked.
"""

import dataclasses
import difflib
import functools
import json
import typing
from collections.abc import Iterable, Iterator, Sequence
from enum import Enum
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, QuotedString, ValueType
from hydra.errors import HydraException
from omegaconf import DictConfig, ListConfig, OmegaConf

from dlrm_exp.config.checks import GROUPS
from dlrm_exp.config.conf_tree import conf_dir
from dlrm_exp.errors import ConfigError
from dlrm_exp.util.classes import with_subclasses
from dlrm_exp.util.text import closest, first_few

#: Short names users type for a key of another name (``train.lr`` means a learning rate).
ALIASES = {
    "lr": "optimizer.learning_rate",
    "dense_lr": "optimizer.dense_learning_rate",
    "bs": "train.batch_size",
    "batch": "train.batch_size",
    "num_epochs": "train.epochs",
    "steps": "train.max_steps",
    "embedding_size": "model.embedding_dim",
    "nproc": "hardware.nproc_per_node",
    "world_size": "hardware.nproc_per_node",
}
#: Config groups and other selectors whose override chooses an option, not a key.
SELECTORS = set(GROUPS)
#: Keys the config fills itself, with what sets them instead: ``model.tables`` given on the
#: command line replaced the 26 Criteo tables by one without a word (configuration review).
DERIVED = {
    "model.tables": (
        "the tables come from the data's feature schema (data/schema=<name>, with data=parquet "
        "or data=criteo_tsv) or, for Criteo-shaped arrays, model.num_embeddings_per_feature"
    ),
}


def _is_dataclass_type(tp: object) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _is_open_map(tp: object) -> bool:
    return typing.get_origin(tp) is dict or tp is dict


def schema_keys(root: type) -> tuple[set[str], dict[str, set[str] | None]]:
    """(every full key of ``root``'s schema, its open maps: ``{full key: the keys each value
    may hold}``, None for values of no dataclass). A field typed with a dataclass base
    (``data: DataConfig``) counts the fields of every subclass. A map of dataclass values
    (``data.schema.sparse``: feature name -> ``SparseFeature``) takes any entry name, but
    each entry only its value's keys."""
    keys, values = _schema_walk(root)
    return keys, {m: None if v is None else schema_keys(v)[0] for m, v in values.items()}


@functools.cache
def schema_fields(root: type) -> dict[str, Any]:
    """``{full key: its type hint}`` of ``root``'s schema, every subclass of a field's
    dataclass walked (``data: DataConfig``: each data option's keys); an open map is one key,
    not walked (read only: built once per class)."""
    fields: dict[str, Any] = {}

    def walk(cls: type, prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            key, tp = f"{prefix}{f.name}", hints[f.name]
            fields[key] = tp
            if not _is_open_map(tp) and _is_dataclass_type(tp):
                for sub in with_subclasses(tp):
                    walk(sub, f"{key}.")

    walk(root, "")
    return fields


def _schema_walk(root: type) -> tuple[set[str], dict[str, type | None]]:
    """(every full key of ``root``'s schema, its open maps' value dataclasses or None)."""
    fields = schema_fields(root)
    open_maps = {key: _map_value_type(tp) for key, tp in fields.items() if _is_open_map(tp)}
    return set(fields), open_maps


def suggest(key: str, known: Iterable[str]) -> str | None:
    """The known key closest to ``key``: an alias of its last part (``lr`` ->
    ``optimizer.learning_rate``), else the one key of its group whose last part is ``key``'s
    (``train.patience`` -> ``train.early_stopping.patience``: the closest full key was
    ``train.pipeline``, tuning review), else the closest full key, else the known key whose
    last part is closest to ``key``'s."""
    known = sorted(known)
    leaf = key.rsplit(".", 1)[-1]
    if leaf in ALIASES:
        return ALIASES[leaf]
    group = key.split(".")[0]
    nested = [k for k in known if k.split(".")[0] == group and k.rsplit(".", 1)[-1] == leaf]
    if len(nested) == 1:  # train.patience: train.early_stopping.patience, not train.pipeline
        return nested[0]
    close = closest(key, known, cutoff=0.75)
    if close:
        return close
    by_leaf = {k.rsplit(".", 1)[-1]: k for k in known}
    close = closest(leaf, by_leaf, cutoff=0.7)
    return by_leaf[close] if close else None


def unknown_key_error(key: str, known: Iterable[str]) -> ConfigError:
    """The refusal of ``key``, with the closest known key when there is one."""
    hint = suggest(key, known)
    fix = f": did you mean {hint}?" if hint else " (python -m dlrm_exp --cfg job lists every key)"
    return ConfigError(f"unknown config key {key}{fix}")


def _under_open_map(key: str, open_maps: Iterable[str]) -> bool:
    return any(key.startswith(f"{m}.") for m in open_maps)


def _map_value_type(tp: object) -> type | None:
    """The dataclass an open map's values are (``dict[str, SparseFeature]``), else None."""
    args = typing.get_args(tp)
    value = args[1] if len(args) == 2 else None
    return value if _is_dataclass_type(value) else None


def _check_typed_map_key(key: str, open_maps: dict[str, set[str] | None]) -> None:
    """Refuse ``<map>.<entry>.<field>`` when the map's values have no such field.

    Raises:
        ConfigError: naming the closest field of the map's values.
    """
    for m, fields in open_maps.items():
        if fields is None or not key.startswith(f"{m}."):
            continue
        entry, _, rest = key[len(m) + 1 :].partition(".")
        if rest and rest not in fields:
            raise unknown_key_error(key, {f"{m}.{entry}.{f}" for f in fields})


def _refuse_entry_added_by_parts(key: str, root: type) -> None:
    """Refuse ``+<map>.<entry>...`` on a map of dataclass values (``data.schema.sparse``).

    OmegaConf cannot make a typed entry from ``+data.schema.sparse.new={...}`` or key by key
    ("Invalid type assigned: dict is not a subclass of SparseFeature"), and an existing entry
    takes no ``+``; merging the whole map, ``++data.schema.sparse={new: {...}}``, adds one.

    Raises:
        ConfigError: naming the form that adds an entry, with the entry's required keys.
    """
    for m, value in _schema_walk(root)[1].items():
        if value is not None and key.startswith(f"{m}."):
            entry = key[len(m) + 1 :].partition(".")[0]
            required = ", ".join(
                f"{f.name}: ..."
                for f in dataclasses.fields(value)
                if f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING
                or f.default == "???"
            )
            raise ConfigError(
                f"+{key}: an entry of {m} cannot be added key by key (OmegaConf cannot type "
                f"it); add it whole by merging it into the map, '++{m}={{{entry}: "
                f"{{{required}}}}}', or change a key of an entry the config has without +"
            )


def check_override_keys(overrides: Sequence[str], root: type) -> None:
    """Refuse a ``key=value`` (or ``+key`` / ``++key``) override whose key no schema has.
    Group choices (``model=mlperf``), ``hydra.*`` and deletions (``~key``) are left to Hydra,
    as are arguments that do not parse as overrides.

    Raises:
        ConfigError: an unknown key, naming the closest known one.
    """
    for text, override in parsed_overrides(overrides):
        key = override.key_or_group
        if not key:  # "=256": a value without its key
            raise ConfigError(f"the override {text!r} names no key (key=value)")
        if (
            key in SELECTORS - {"experiment"}  # presets are add-ons: a list stacks them
            and override.value_type == ValueType.ELEMENT
            and isinstance(override.value(), list)
        ):  # Hydra merges the options into one config: meant as a sweep (review)
            options = ",".join(str(v) for v in override.value())
            raise ConfigError(
                f"{text} merges those {key} options into one config; to run each, sweep "
                f"them: -m {key}={options}"
            )
        if override.is_delete():
            continue
        if key in SELECTORS or "/" in key:  # (data/schema, hydra/launcher: groups too)
            _refuse_null_choice(text, key, override)
        scalar = override.value_type == ValueType.ELEMENT and not isinstance(
            override.value(), (dict, list)
        )  # (a sweep, choice({...}), or Hydra's {...} / [...] forms set a group: review)
        value = text.split("=", 1)[-1]
        check_key(key, root, added=override.is_add(), value=value, scalar=scalar)


def check_group_additions(overrides: Sequence[str]) -> None:
    """A group that ``conf/config.yaml``'s defaults list chooses (every one of
    :data:`SELECTORS`) is chosen without ``+``: Hydra answered ``+experiment=fast`` (its docs'
    idiom where the primary config has no experiment) with defaults-list syntax, "use
    'override experiment: fast'" (configuration review). Not for a primary config of the
    user's own (``-cn``), whose defaults may lack the group: the caller skips those.

    Raises:
        ConfigError: naming the override without its ``+``.
    """
    for text, override in parsed_overrides(overrides):
        added = override.is_add() or override.is_force_add()
        value = None if override.is_sweep_override() else override.value()
        if override.key_or_group in SELECTORS and added and not isinstance(value, list):
            raise ConfigError(
                f"{text}: conf/config.yaml's defaults choose {override.key_or_group} already: "
                f"choose it without +, {text.lstrip('+')}"
            )


def check_basic_sweeper_sweeps(overrides: Sequence[str], where: str = "") -> None:
    """A ``-m`` sweep with Hydra's basic sweeper (no ``hydra/sweeper=`` chosen) sweeps lists,
    ``choice(...)`` and ``range(...)``: an ``interval(a,b)`` (a search range) ended in
    Hydra's traceback "BasicSweeper does not support sweep type : INTERVAL_SWEEP", leaving a
    sweep folder with only its lock (configuration review). ``where``: whose overrides they
    are, for the message (a preset's ``hydra.sweeper.params``: diff review).

    Raises:
        ConfigError: naming the search sweeper and the list form.
    """
    for text, override in parsed_overrides(overrides):
        if override.is_sweep_override() and override.is_interval_sweep():
            key = override.key_or_group
            listed = f"in its params: {key}: a,b,c" if where else f"-m {key}=a,b,c"
            raise ConfigError(  # (a preset's own: the command line's list did not replace it)
                f"{where}{text}: interval(...) is a search range, which Hydra's basic "
                f"sweeper cannot sweep: list the values ({listed}), or search it with "
                "hydra/sweeper=lr_search (Optuna; docs/sweeps-and-statistics.md)"
            )


def _refuse_null_choice(text: str, group: str, override: Override) -> None:
    """Refuse ``group=null`` (alone or in a sweep): Hydra's own error was a 25-line traceback
    ("Config group override must be a string or a list. Got NoneType"; configuration
    review), also for ``experiment=null``, the default ``conf/config.yaml`` writes.

    Raises:
        ConfigError: naming how to choose none (a preset) or an option (another group).
    """
    values = override_values(override)
    if values is not None and any(v is None for v in values):  # (a glob: left to Hydra)
        listed = f" (python -m dlrm_exp --help lists the {group} options)"
        listed = listed if group in GROUPS else ""
        fix = (
            "leave it out (or ~experiment) to run without a preset; a sweep with and without "
            "one is two commands"
            if group == "experiment"
            else f"choose one of its options{listed}"
        )
        raise ConfigError(f"{text}: a config group's choice cannot be null: {fix}")


def check_key(
    key: str, root: type, added: bool = False, value: str = "", scalar: bool = False
) -> None:
    """Refuse a dotted ``key`` that the schema ``root`` lacks (``hydra.*``, group choices and
    ``group/option`` keys are left to Hydra): a key under an open map must be one its values
    take, and an entry is not added by its parts (``added``: a ``+key``). ``value``: what the
    key is set to, to suggest ``group=value`` for a misspelt group; ``scalar``: that value is
    one plain value (no sweep, no ``{...}`` / ``[...]``), refused for a group of settings.

    Raises:
        ConfigError: the unknown key, naming the closest known one; a key the config fills
            itself (:data:`DERIVED`), naming what sets it.
    """
    known, open_maps = _schema_keys_of(root)
    if key.split(".")[0] == "hydra" or "/" in key or key in SELECTORS:
        return
    derived = [k for k in DERIVED if key == k or key.startswith(f"{k}.")]
    if derived:
        raise ConfigError(f"{key} is filled by the config, not set: {DERIVED[derived[0]]}")
    if key in known:
        if scalar:
            _refuse_value_for_group(key, known, value)
        return
    if _under_open_map(key, open_maps):
        _check_typed_map_key(key, open_maps)
        if added:
            _refuse_entry_added_by_parts(key, root)
        return
    if _list_item_key(key, known):
        return  # an item of a list (data.schema.dense.2.log1p): the list's node checks it
    choice = group_choice_hint(key, value)
    if choice is not None:
        raise ConfigError(f"unknown config key {key}: did you mean {choice}?")
    raise unknown_key_error(key, known)


def _refuse_value_for_group(key: str, known: set[str], value: str) -> None:
    """Refuse a plain ``value`` given to ``key``, a group of settings (a dataclass node:
    ``train.early_stopping=false`` was OmegaConf's five lines "bool is not a subclass of
    EarlyStopping": tuning review); a ``{...}`` or ``[...]`` value is Hydra's way to set it,
    and a sweep may choose among those (the caller passes neither).

    Raises:
        ConfigError: naming the group's keys.
    """
    fields = sorted(k for k in known if k.startswith(f"{key}."))
    if fields:
        raise ConfigError(
            f"{key}={value}: {key} is a group of settings, not a value: set one of its keys "
            f"({first_few(fields)}; python -m dlrm_exp --cfg job shows them)"
        )


def check_data_option_keys(
    overrides: Sequence[str], options: dict[str, type], preset_data: str | None = None
) -> None:
    """Refuse a ``data.<key>`` override that the chosen data option lacks (``data.path`` with
    the default ``data=synthetic``), before Hydra composes: its own error suggests
    ``+data.path``, which the composed-key check then refuses. The option is the command
    line's ``data=<option>``, else the one the chosen ``experiment=`` presets choose
    (``preset_data``: ``experiment=mlperf_dcnv2``'s ``criteo_multihot``; they were skipped,
    and Hydra's advice to add ``+`` was then refused: configuration review), else the group
    default of ``conf/config.yaml``; nothing is checked when presets that choose none or
    several, or a sweep over ``data``, may choose another.

    Raises:
        ConfigError: naming the key, the chosen option and the options that have the key.
    """
    parsed = [override for _, override in parsed_overrides(overrides)]
    choice = None
    for o in parsed:
        preset = o.key_or_group == "experiment" and preset_data is None
        swept = o.key_or_group == "data" and o.is_sweep_override()
        if preset or swept or o.key_or_group == "hydra.sweeper.params.data":
            return  # (may choose another option)
        if o.key_or_group == "data" and not o.is_delete():
            choice = str(o.value())
    choice = choice or preset_data or _group_default("data")  # (config.yaml read only then)
    if choice not in options:
        return  # an unknown option: Hydra names it
    _refuse_unread_model_keys(parsed, choice, options[choice])
    for o in parsed:
        field = o.key_or_group.removeprefix("data.")
        if o.key_or_group == "data/schema":  # the schema group's choice
            what, field = f"data/schema={o.get_value_element_as_str()}", "schema"
        else:
            what = f"config key {o.key_or_group}"
        if field == o.key_or_group or o.is_delete() or option_has(options[choice], field):
            continue
        refuse_other_option(what, field, choice, options)


#: The model keys a feature schema decides where it sizes the tables itself (``data=parquet``).
_SCHEMA_DECIDES = ("model.num_dense_features", "model.num_embeddings_per_feature")


def _refuse_unread_model_keys(parsed: Sequence[Override], choice: str, option: type) -> None:
    """Refuse :data:`_SCHEMA_DECIDES` keys given with a data ``option`` whose feature schema
    gives the dense width and the tables' rows (``data=parquet``): they were replaced without
    a word (configuration review), where ``data=criteo_tsv`` refuses a dense width its
    schema disagrees with.

    Raises:
        ConfigError: naming the key and what sets it.
    """
    if not option_has(option, "schema") or option.tables_sized_by_model():  # type: ignore[attr-defined]
        return
    for o in parsed:
        if o.key_or_group in _SCHEMA_DECIDES and not o.is_delete():
            raise ConfigError(
                f"{o.key_or_group} is not read with data={choice}: its feature schema "
                "(data/schema=<name>) gives the dense columns (its dense list) and each "
                "table's rows (each feature's num_embeddings); model.num_embeddings_cap caps "
                "the rows"
            )


def refuse_other_option(what: str, field: str, choice: str, options: dict[str, type]) -> None:
    """Refuse ``what`` (a key, or the ``data/schema`` group's choice) that needs the data
    option's ``field``, which the chosen option lacks; nothing when no option has it (the
    unknown-key check names the closest key).

    Raises:
        ConfigError: naming the chosen option and the options that have ``field``.
    """
    having = [f"data={name}" for name, cls in options.items() if option_has(cls, field)]
    if having:
        raise ConfigError(
            f"{what} does not apply to the chosen data option ({choice}: "
            f"{options[choice].__name__}): choose one that has it ({', '.join(having)})"
        )


#: The keys of Hydra's basic sweeper's params (``hydra.sweeper.params.<key>``).
_SWEEPER_PARAMS = "hydra.sweeper.params."


def parsed_overrides(overrides: Sequence[str]) -> tuple[tuple[str, Override], ...]:
    """``(text, Hydra's parsed override)`` of each of ``overrides`` that parses as one (a
    flag's value, ``--cfg job``'s ``job``, or a typo Hydra reports itself, does not); parsed
    once for the checks of a command line (:func:`_parsed_once`)."""
    return _parsed_once(tuple(overrides))


@functools.lru_cache(maxsize=8)
def _parsed_once(overrides: tuple[str, ...]) -> tuple[tuple[str, Override], ...]:
    parser = OverridesParser.create()
    parsed = []
    for text in overrides:
        try:
            (override,) = parser.parse_overrides([text])
        except HydraException:
            continue
        parsed.append((text, override))
    return tuple(parsed)


def option_values(overrides: Sequence[str], keys: Sequence[str]) -> list[str]:
    """The values the ``overrides`` give any of ``keys`` (``data=a``; each of a sweep's,
    ``a,b`` or ``choice(a,b)``, as Hydra parses them: a split at commas took
    ``choice(a`` for an option: diff review); deletions give none, nor a ``glob(...)``,
    which Hydra expands only once its config loader exists (it raised here: diff review).
    A ``hydra.sweeper.params.<key>`` value is read again as ``<key>=<value>``, as Hydra's
    basic sweeper reads it: a quoted ``"a,b"`` is a sweep of two (it was one value: review)."""
    values = []
    for _, override in parsed_overrides(overrides):
        if override.key_or_group not in keys or override.is_delete():
            continue
        given = override_values(override)  # (quoted 'tiny' named no file: review)
        if given is None:  # (glob: left to Hydra)
            continue
        found = [str(v) for v in given]
        param = override.key_or_group.removeprefix(_SWEEPER_PARAMS)
        if param != override.key_or_group:
            found = option_values([f"{param}={v}" for v in found], [param])
        values += found
    return values


def override_values(override: Override) -> list[Any] | None:
    """The values a parsed override gives, as Hydra reads them: each of a sweep's (``a,b``,
    ``choice(a,b)``, ``range(...)``) or its one value, quotes stripped; None for a
    ``glob(...)``, which Hydra expands only once its config loader exists (it raised here:
    diff review). Three checks read them each their own way (re-read)."""
    try:
        given = list(override.sweep_iterator()) if override.is_sweep_override() else []
        values = given or [override.value()]
    except HydraException:
        return None
    return [v.text if isinstance(v, QuotedString) else v for v in values]


def option_has(cls: type, field: str) -> bool:
    """Whether the data option's schema ``cls`` has the (dotted) key ``field``."""
    known, open_maps = _schema_keys_of(cls)
    return field in known or _under_open_map(field, open_maps) or _list_item_key(field, known)


@functools.cache
def _schema_keys_of(cls: type) -> tuple[set[str], dict[str, set[str] | None]]:
    """:func:`schema_keys` of a schema (the root, a data option's), built once per class
    (read only)."""
    return schema_keys(cls)


def _group_default(group: str) -> str | None:
    """The option ``conf/config.yaml``'s defaults list picks for ``group``."""
    defaults = OmegaConf.load(conf_dir() / "config.yaml").get("defaults", [])
    picks = [d[group] for d in defaults if isinstance(d, DictConfig) and group in d]
    return str(picks[0]) if picks else None


def group_choice_hint(key: str, value: str) -> str | None:
    """``group=value`` when ``key`` is close to a config group of ``conf/`` that has an option
    ``value`` (``modle=tiny`` -> ``model=tiny``, where the closest key is ``mode``), else None."""
    groups = {
        folder.name: {option.stem for option in folder.glob("*.yaml")}
        for folder in conf_dir().iterdir()
        if folder.is_dir()
    }
    for group in difflib.get_close_matches(key, list(groups), n=3, cutoff=0.6):
        if value in groups[group]:
            return f"{group}={value}"
    return None


def _list_item_key(key: str, known: set[str]) -> bool:
    """``key`` addresses an item of a known list by its index (``data.schema.dense.2.log1p``:
    OmegaConf's dotted form), whose own keys the typed list item refuses at compose time."""
    parts = key.split(".")
    return any(parts[i].isdigit() and ".".join(parts[:i]) in known for i in range(1, len(parts)))


def _node_keys(node: DictConfig, prefix: str, cls: Any = None) -> Iterator[str]:
    """Full keys of ``node`` that its dataclass (``cls``, else the node's own type) does not
    declare, at any depth; an open map's keys are free, but not those of its dataclass
    values."""
    cls = cls or OmegaConf.get_type(node)
    declared = {f.name: f for f in dataclasses.fields(cls)} if _is_dataclass_type(cls) else None
    hints = typing.get_type_hints(cls) if declared is not None else {}
    for name in node.keys():
        key = f"{prefix}{name}"
        if declared is not None and name not in declared:
            yield key
            continue
        child = node._get_node(name)
        if isinstance(child, ListConfig) and not child._is_missing() and not child._is_none():
            for index, item in enumerate(child._iter_ex(resolve=False)):
                if isinstance(item, DictConfig) and not item._is_none():  # a typed list item
                    yield from _node_keys(item, f"{key}.{index}.")
            continue
        if not isinstance(child, DictConfig) or child._is_missing() or child._is_none():
            continue
        if declared is not None and _is_open_map(hints[name]):
            value = _map_value_type(hints[name])
            for entry in child.keys() if value is not None else ():
                item = child._get_node(entry)
                if isinstance(item, DictConfig) and not item._is_none():
                    yield from _node_keys(item, f"{key}.{entry}.", value)
            continue
        yield from _node_keys(child, f"{key}.")


def check_composed_keys(raw: DictConfig, root: type) -> None:
    """Refuse a composed config holding a key its node's dataclass does not declare (one
    appended with ``+key=...``), before it is converted and silently dropped.

    Raises:
        ConfigError: the first unknown key, naming the closest known one.
    """
    unknown = list(_node_keys(raw, ""))
    if not unknown:
        return
    known, open_maps = schema_keys(root)
    key = unknown[0]
    if key in known:  # a key of another option of its group (data.path with data=synthetic)
        parent = key.rsplit(".", 1)[0]
        chosen = OmegaConf.get_type(OmegaConf.select(raw, parent))
        name = chosen.__name__ if chosen is not None else parent
        if parent == "data":  # the options that have it (it said "data=<option>": review)
            from dlrm_exp.config.store import DATA_OPTIONS

            option = next((n for n, c in DATA_OPTIONS.items() if c is chosen), name)
            options = {**DATA_OPTIONS, option: chosen}
            refuse_other_option(f"config key {key}", key.removeprefix("data."), option, options)
        raise ConfigError(
            f"config key {key} does not apply to the chosen {parent} option ({name}): choose "
            f"an option that has it ({parent}=<option>; python -m dlrm_exp --help lists them)"
        )
    if _list_item_key(key, known):  # +data.schema.dense.0.log1pp=false
        parent, name = key.rsplit(".", 1)
        item = OmegaConf.get_type(OmegaConf.select(raw, parent))
        fields = [f.name for f in dataclasses.fields(item)] if _is_dataclass_type(item) else []
        close = closest(name, fields)
        hint = f"did you mean {parent}.{close}?" if close else f"its keys: {', '.join(fields)}"
        raise ConfigError(f"unknown config key {key}: {hint}")
    _check_typed_map_key(key, open_maps)  # a field of a map's value
    raise unknown_key_error(key, known)


def flat_settings(prefix: str, node: Any) -> dict[str, Any]:
    """A group's typed config (a dataclass instance) as ``{"<prefix>.<key>": value}`` with
    JSON values: nested dataclasses and dicts become dotted keys, enums their values, lists
    stay whole (``flat_settings("optimizer", cfg.optimizer)["optimizer.learning_rate"]``)."""

    def plain(value: Any) -> Any:
        return value.value if isinstance(value, Enum) else str(value)

    content = json.loads(json.dumps(dataclasses.asdict(node), default=plain))
    flat: dict[str, Any] = {}

    def walk(key: str, value: Any) -> None:
        if isinstance(value, dict) and value:
            for name, child in value.items():
                walk(f"{key}.{name}", child)
        else:
            flat[key] = value

    walk(prefix, content)
    return flat
