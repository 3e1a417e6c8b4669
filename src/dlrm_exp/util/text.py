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


def step_text(step: float | None) -> str:
    """A training step as messages print it: whole, or where a validation of a checkpoint's
    run was rescaled to another world size or batch, two decimals (``28.85``; it printed
    ``28.846153846153847``: review)."""
    if step is None or float(step).is_integer():
        return str(step if step is None else int(step))
    return f"{step:.2f}"
