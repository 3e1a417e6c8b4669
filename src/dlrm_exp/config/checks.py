"""Helpers shared by the group schemas: the check that raises :class:`ConfigError`."""

import math
from collections.abc import Mapping

from dlrm_exp.errors import ConfigError


def require(condition: bool, message: str) -> None:
    """Raise :class:`~dlrm_exp.errors.ConfigError` with ``message`` (which names the override
    that fixes it) unless ``condition`` holds. Used instead of ``assert`` for user input."""
    if not condition:
        raise ConfigError(message)


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
