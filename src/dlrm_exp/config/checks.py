"""Helpers shared by the group schemas: the check that raises :class:`ConfigError`."""

import dataclasses
import functools
import logging
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType

from dlrm_exp.errors import ConfigError


def require(condition: bool, message: str) -> None:
    """Raise :class:`~dlrm_exp.errors.ConfigError` with ``message`` (which names the override
    that fixes it) unless ``condition`` holds. Used instead of ``assert`` for user input."""
    if not condition:
        raise ConfigError(message)


#: ``{swept key: its values}`` of the running multirun (:func:`sweeping`); empty outside one.
_SWEPT: ContextVar[Mapping[str, Sequence[str]]] = ContextVar("swept", default=MappingProxyType({}))


#: The keys the running multirun's command line gives one value for every job
#: (:func:`sweeping`); empty outside one.
_FIXED: ContextVar[frozenset[str]] = ContextVar("fixed", default=frozenset())


@contextmanager
def sweeping(values: Mapping[str, Sequence[str]], fixed: Iterable[str] = ()) -> Iterator[None]:
    """Within the block, the config being built is a job of a multirun that sweeps ``values``
    (``{"sharding": ["auto", "from_file"], ...}``, each value as typed) and gives the keys
    ``fixed`` one value for every job: :func:`require_read` warns instead of refusing where
    another job of the sweep reads the key."""
    swept, held = _SWEPT.set(MappingProxyType(dict(values))), _FIXED.set(frozenset(fixed))
    try:
        yield
    finally:
        _SWEPT.reset(swept)
        _FIXED.reset(held)


def fixed_in_sweep(key: str) -> bool:
    """Whether the running multirun gives ``key`` one value for every job on its command
    line (no group preset then sets it another way in another job)."""
    return key in _FIXED.get()


#: A predicate on a swept value as typed: whether that value turns the key's reader on.
Reads = Callable[[str], bool]


def require_read(condition: bool, message: str, readers: Mapping[str, Reads]) -> None:
    """A key set where no setting reads it (``sharding.plan_path`` without
    ``sharding=from_file``): the run would ignore it without a word, so it is refused, unless
    another job of this multirun reads it: the sweep gives one of ``readers`` (``{key or
    group: whether a value turns the reader on}``) a value that does (``-m
    sharding=auto,from_file sharding.plan_path=p.json``, an ablation), or sweeps presets
    (``experiment=``, which may set anything); then this job logs that it ignores the key.
    A preset (a group reader such as ``optimizer``, or ``experiment``) turns nothing on
    where the command line gives every job the keys among ``readers`` that decide it
    (:func:`fixed_in_sweep`; ``mode`` is such a key, no group): ``-m hardware=cpu,h100_80gb_x8
    hardware.compute_device=cpu`` reads no job's GPU memory keys (each such job warned:
    reviews). A reader key also reads the keys under it that a sweep names (a map's entry).

    Raises:
        ConfigError: ``message``, outside such a sweep.
    """
    if condition:
        return
    swept = _SWEPT.get()
    deciding = [k for k in readers if k not in GROUPS]
    presets = not deciding or not all(fixed_in_sweep(k) for k in deciding)
    on = [
        k
        for k, reads in readers.items()
        if (k not in GROUPS or presets) and any(reads(v) for v in _swept_values(swept, k))
    ]
    on += ["experiment"] if "experiment" in swept and presets else []
    if not on:
        raise ConfigError(message)
    logging.getLogger(__name__).warning(
        "%s; this job of the sweep over %s ignores it", message, ", ".join(sorted(on))
    )


#: The config groups (``conf/<group>/``): a preset of one may set any of its keys; an override
#: of one chooses an option, not a key (:data:`dlrm_exp.config.keys.SELECTORS`).
GROUPS = frozenset({"data", "experiment", "hardware", "model", "optimizer", "qcomms", "sharding"})


def _swept_values(swept: Mapping[str, Sequence[str]], key: str) -> list[str]:
    """The values a sweep gives ``key``, or a key under it where ``key`` is no group (a map's
    entry: ``+model.embedding_data_type_per_table.t_cat_0=fp16,fp32``; refused in its fp32
    job: review). A group's preset is its own value: ``optimizer.learning_rate=0.1,0.2``
    sweeps no optimizer (it was taken for one: diff review)."""
    if key in GROUPS:
        return list(swept.get(key, ()))
    return [v for k, values in swept.items() if k == key or k.startswith(f"{key}.") for v in values]


def is_value(*wanted: str) -> Reads:
    """A :data:`Reads` true for the values ``wanted`` (case-insensitive, as typed)."""
    return lambda value: value.lower() in {w.lower() for w in wanted}


def is_not_value(*unwanted: str) -> Reads:
    """A :data:`Reads` true for any value but ``unwanted`` (case-insensitive)."""
    return lambda value: value.lower() not in {u.lower() for u in unwanted}


def is_positive(value: str) -> bool:
    """A :data:`Reads` for counts: a value above 0 (one that is no number counts as one)."""
    try:
        return float(value) > 0
    except ValueError:
        return True


@functools.cache
def field_defaults(cls: type) -> MappingProxyType:
    """``{field: its default}`` of the dataclass ``cls`` (a ``default_factory``'s value made
    once): what a key left unset holds, for the rules that tell a set key from an unset one."""
    unset = dataclasses.MISSING
    return MappingProxyType(
        {
            f.name: f.default if f.default_factory is unset else f.default_factory()
            for f in dataclasses.fields(cls)
        }
    )


def require_positive(
    values: Mapping[str, float | None],
    *,
    nullable: bool = False,
    message: str = "{key} must be positive, got {value}",
) -> None:
    """Each value > 0 and finite (or None, where ``nullable``): ``inf`` reached a
    ``timedelta`` or an integer conversion as a raw ``OverflowError``.

    Args:
        values: ``{override key: value}``, e.g. ``{"data.num_train_samples": 0}``.
        nullable: None passes (an optional setting left unset).
        message: the error, formatted with ``key`` and ``value``.

    Raises:
        ConfigError: the first value that breaks the rule, as ``message``.
    """
    for key, value in values.items():
        ok = nullable if value is None else value > 0
        require(ok, message.format(key=key, value=value))
        require(value is None or math.isfinite(value), f"{key} must be finite, got {value}")


def check_layer_sizes(name: str, sizes: list[int]) -> None:
    """An MLP's layer sizes: at least one, all positive.

    Raises:
        ConfigError: naming ``name``.
    """
    require(len(sizes) > 0, f"{name} must list at least one layer: set {name}=[...]")
    require(all(s > 0 for s in sizes), f"{name} must be positive integers, got {sizes}")
