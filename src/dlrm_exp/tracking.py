"""Run outputs: TensorBoard scalars and HParams, and the machine-readable ``metrics.json``."""

import json
import math
import os
import tempfile
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import Any

from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams as hparams_summary

Scalar = int | float | str | bool


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    """Write ``data`` as JSON to ``path`` via a temporary file and ``os.replace``, so a crash
    never leaves a half-written file. Non-finite floats become null."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(_json_safe(data), f, indent=2, sort_keys=False)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temporary file + ``os.replace``)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


class Tracker:
    """TensorBoard event writer for one run folder; a no-op on ranks other than 0.

    Scalars: ``train/loss``, ``train/samples_per_sec``, ``lr``, ``val/*``, ``test/*``.
    HParams: the group choices and key fields, with the final metrics as HParams metrics.
    """

    def __init__(self, run_dir: Path | None, enabled: bool) -> None:
        self.writer: SummaryWriter | None = (
            SummaryWriter(str(run_dir)) if enabled and run_dir is not None else None
        )

    def scalar(self, tag: str, value: float | None, step: int) -> None:
        if self.writer is not None and value is not None and math.isfinite(value):
            self.writer.add_scalar(tag, value, step)

    def scalars(self, prefix: str, values: Mapping[str, float], step: int) -> None:
        for key, value in values.items():
            self.scalar(f"{prefix}/{key}", value, step)

    def hparams(
        self, hparams: Mapping[str, Scalar], metrics: Mapping[str, float], step: int
    ) -> None:
        """Write one HParams entry (TensorBoard's HParams plugin) into this run's event file,
        with each metric also logged as a scalar of the same tag at ``step``."""
        if self.writer is None:
            return
        finite = {k: v for k, v in metrics.items() if v is not None and math.isfinite(v)}
        exp, ssi, sei = hparams_summary(dict(hparams), finite)
        file_writer = self.writer._get_file_writer()
        for summary in (exp, ssi, sei):
            file_writer.add_summary(summary)
        for tag, value in finite.items():
            self.writer.add_scalar(tag, value, step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
