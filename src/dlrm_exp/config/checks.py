"""Helpers shared by the group schemas: the check that raises :class:`ConfigError`."""

from dlrm_exp.errors import ConfigError


def require(condition: bool, message: str) -> None:
    """Raise :class:`~dlrm_exp.errors.ConfigError` with ``message`` (which names the override
    that fixes it) unless ``condition`` holds. Used instead of ``assert`` for user input."""
    if not condition:
        raise ConfigError(message)


def check_layer_sizes(name: str, sizes: list[int]) -> None:
    """An MLP's layer sizes: at least one, all positive.

    Raises:
        ConfigError: naming ``name``.
    """
    require(len(sizes) > 0, f"{name} must list at least one layer: set {name}=[...]")
    require(all(s > 0 for s in sizes), f"{name} must be positive integers, got {sizes}")
