"""Short text for messages."""

from collections.abc import Sequence


def first_few(items: Sequence[str], shown: int = 3) -> str:
    """``a, b, c, ...``: the first ``shown`` of ``items``, and ``...`` when there are more."""
    return ", ".join(items[:shown]) + (", ..." if len(items) > shown else "")
