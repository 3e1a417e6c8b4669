"""Training-side quality over a running window: log loss and AUROC of the last N training
batches, from the logits the training steps already computed (no extra forward pass).

Set against validation (TensorBoard's ``train_window/*`` beside ``val/*``), it shows
overfitting as it happens: train log loss keeps falling while validation's rises. The window
is this rank's batches (rank 0 logs it), scored as they were trained on, so each batch's
logits come from weights one update older than the next batch's; it is an estimate, not an
evaluation. A checkpoint keeps each rank's window (:meth:`TrainWindow.state`), so a resumed
run scores the same batches as one that ran through. The batches stay on their device: nothing
is copied per step, only when the window is scored or saved.
"""

from collections import deque

import torch
import torch.nn.functional as F
from torchmetrics.functional.classification import binary_auroc


class TrainWindow:
    """The last ``batches`` training batches' logits and labels.

    Args:
        batches: the window's length in batches (0: off; nothing is kept).
    """

    def __init__(self, batches: int) -> None:
        self.batches = batches
        self._logits: deque[torch.Tensor] = deque(maxlen=max(batches, 1))
        self._labels: deque[torch.Tensor] = deque(maxlen=max(batches, 1))

    def add(self, logits: torch.Tensor, labels: torch.Tensor) -> None:
        """Keep one step's ``logits`` (B,) and ``labels`` (B,) (detached, on their device)."""
        if self.batches:
            self._logits.append(logits.detach().reshape(-1))
            self._labels.append(labels.detach().reshape(-1))

    def state(self) -> dict[str, list[torch.Tensor]]:
        """The window's batches on the CPU, oldest first, for a checkpoint:
        ``{"logits": [(B,) float], "labels": [(B,)]}``, one entry per batch (at most
        ``batches``; B may differ between them, the last batch of an epoch being shorter)."""
        return {
            "logits": [t.cpu() for t in self._logits],
            "labels": [t.cpu() for t in self._labels],
        }

    def restore(self, saved: dict[str, list[torch.Tensor]], device: torch.device) -> None:
        """Hold the batches of :meth:`state` (moved to ``device``), the newest ``batches`` of
        them where the window is shorter now.

        Raises:
            ValueError: ``saved`` holds lists of different lengths (not a :meth:`state`).
        """
        self._logits.clear()
        self._labels.clear()
        for logits, labels in zip(saved["logits"], saved["labels"], strict=True):
            self.add(logits.to(device), labels.to(device))

    def metrics(self) -> dict[str, float]:
        """``{"logloss": nats per sample, "auroc": ...}`` of the window (empty when it holds
        nothing or only one class: AUROC is undefined then)."""
        if not self._logits:
            return {}
        logits = torch.cat(list(self._logits)).float()
        labels = torch.cat(list(self._labels)).float()
        if labels.min() == labels.max():
            return {}
        logloss = F.binary_cross_entropy_with_logits(logits, labels).item()
        auroc = binary_auroc(torch.sigmoid(logits), labels.long(), validate_args=False).item()
        return {"logloss": logloss, "auroc": auroc}
