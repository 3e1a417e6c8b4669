"""Hold a preemption signal back while a checkpoint is being written.

submitit (Slurm, or its local executor under ``hydra/launcher=local``) answers its preemption
signal (``USR2``, or the name in ``SUBMITIT_PREEMPT_SIGNAL``) from a Python signal handler that
requeues the job and calls ``sys.exit``, so the ``SystemExit`` is raised wherever the main thread
happens to be. Inside ``torch.distributed.checkpoint.save`` it is caught and re-raised as a
``CheckpointException``: the task then exits 1 instead of submitit's requeue code, the job is not
requeued, and the checkpoint is left as a ``.partial`` folder (seen in CI, issue 23's suite).
:func:`preemption_held` records such a signal during the save and hands it to the original
handler once the save is committed, so a preempted job always resumes from a complete checkpoint.
"""

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

PREEMPT_SIGNAL_ENV = "SUBMITIT_PREEMPT_SIGNAL"
"""The variable submitit reads for the name of its preemption signal (default ``USR2``)."""


def preemption_signal() -> signal.Signals | None:
    """The signal submitit treats as preemption, or None if the name in
    ``SUBMITIT_PREEMPT_SIGNAL`` is not a signal of this platform (submitit refuses it too)."""
    return getattr(signal, "SIG" + os.environ.get(PREEMPT_SIGNAL_ENV, "USR2"), None)


@contextmanager
def preemption_held() -> Iterator[None]:
    """Within the block, a preemption signal is recorded instead of handled; on leaving it
    (normally or by an exception) the Python handler that was installed gets it.

    Does nothing outside the main thread (only it may set handlers) or when the signal has no
    Python handler (default or ignored: nothing would raise mid-save).
    """
    sig = preemption_signal()
    if sig is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = signal.getsignal(sig)
    if not callable(handler):
        yield
        return
    received: list[tuple[int, FrameType | None]] = []
    signal.signal(sig, lambda signum, frame: received.append((signum, frame)))
    try:
        yield
    finally:
        signal.signal(sig, handler)
        if received:
            handler(*received[0])
