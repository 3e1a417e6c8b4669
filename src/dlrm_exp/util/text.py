"""Short text for messages."""

import difflib
from collections.abc import Iterable, Sequence


def first_few(items: Sequence[str], shown: int = 3) -> str:
    """``a, b, c, ...``: the first ``shown`` of ``items``, and ``...`` when there are more."""
    return ", ".join(items[:shown]) + (", ..." if len(items) > shown else "")


def closest(word: str, choices: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The one of ``choices`` closest to ``word`` (difflib's ratio of at least ``cutoff``),
    for a "did you mean" hint; None when none is that close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=cutoff)
    return close[0] if close else None
