"""A setting that ran other than the config asked: what was asked, what ran instead, and why.

A library may replace a setting it cannot honour with a warning in its own log (TorchRec runs
an FP8 reduce-scatter in FP16 / BF16); a run records each such substitution in
``metrics.json`` and says so in one line, so a comparison is labelled by what ran.
"""

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Substitution:
    """One substitution.

    Attributes:
        setting: the config key or group, e.g. ``qcomms``.
        asked: what the config asked, e.g. ``fp8``.
        ran: what ran instead, short enough for a table cell, e.g.
            ``reduce_scatter FP16/BF16``.
        reason: why, e.g. ``TorchRec has no FP8 reduce-scatter``.
    """

    setting: str
    asked: str
    ran: str
    reason: str

    def line(self) -> str:
        """The one line a run prints and logs at start."""
        return (
            f"{self.setting} {self.asked}: ran {self.ran} instead ({self.reason}); "
            "recorded in metrics.json"
        )

    def to_json(self) -> dict[str, str]:
        """The entry of ``metrics.json``'s ``substitutions`` list."""
        return asdict(self)


def precisions_text(precisions: Mapping[str, Mapping[str, str]]) -> str:
    """Per-collective precisions as one short text, forward/backward:
    ``{"reduce_scatter": {"forward": "FP16", "backward": "BF16"}}`` ->
    ``reduce_scatter FP16/BF16``; collectives comma-separated, ``""`` when empty."""
    return ", ".join(f"{name} {p['forward']}/{p['backward']}" for name, p in precisions.items())


def collectives_ran(
    precisions: Mapping[str, Mapping[str, str]], world_size: int, sharding_types: Iterable[str]
) -> str:
    """What the embedding collectives ran in, as one text: :func:`precisions_text` of the
    codecs built (``precisions``), ``FP32`` without codecs, ``none`` where no embedding
    collective ran (one rank, or every table's sharding type ``data_parallel``)."""
    replicated = set(sharding_types) == {"data_parallel"}
    return precisions_text(precisions) or ("none" if world_size == 1 or replicated else "FP32")
