"""Helpers shared by the group schemas: the check that raises :class:`ConfigError`."""

import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

from dlrm_exp.errors import ConfigError


def require(condition: bool, message: str) -> None:
    """Raise :class:`~dlrm_exp.errors.ConfigError` with ``message`` (which names the override
    that fixes it) unless ``condition`` holds. Used instead of ``assert`` for user input."""
    if not condition:
        raise ConfigError(message)


#: The keys the running multirun sweeps (:func:`sweeping`); empty outside one.
_SWEPT: ContextVar[frozenset[str]] = ContextVar("swept", default=frozenset())


@contextmanager
def sweeping(keys: Sequence[str]) -> Iterator[None]:
    """Within the block, the config being built is a job of a multirun that sweeps ``keys``
    (``sharding``, ``optimizer.lr_decay_steps``, ...): :func:`require_read` warns instead of
    refusing where the sweep varies the setting that reads a key."""
    token = _SWEPT.set(frozenset(keys))
    try:
        yield
    finally:
        _SWEPT.reset(token)


def require_read(condition: bool, message: str, readers: Sequence[str]) -> None:
    """A key set where no setting reads it (``sharding.plan_path`` without
    ``sharding=from_file``): the run would ignore it without a word, so it is refused, unless
    the multirun this job belongs to sweeps one of its ``readers`` (the keys or groups that
    turn its reader on: ``-m sharding=auto,from_file sharding.plan_path=p.json``, an ablation
    whose other jobs read it); then this job logs that it ignores the key.

    Raises:
        ConfigError: ``message``, outside such a sweep.
    """
    if condition:
        return
    swept = _SWEPT.get().intersection([*readers, "experiment"])
    if not swept:
        raise ConfigError(message)
    logging.getLogger(__name__).warning(
        "%s; this job of the sweep over %s ignores it", message, ", ".join(sorted(swept))
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
