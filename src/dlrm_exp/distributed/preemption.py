"""Hold a preemption signal back while a checkpoint is being written.

submitit (Slurm, or its local executor under ``hydra/launcher=local``) answers its preemption
signal (``USR2``, or the name in ``SUBMITIT_PREEMPT_SIGNAL``) from a Python signal handler that
requeues the job and calls ``sys.exit``, so the ``SystemExit`` is raised wherever the main thread
happens to be. Inside ``torch.distributed.checkpoint.save`` it is caught and re-raised as a
``CheckpointException``: the task then exits 1 instead of submitit's requeue code, the job is not
requeued, and the checkpoint is left as a ``.partial`` folder (seen in CI, issue 23's suite).
:func:`preemption_held` records such a signal during the save and hands it to the original
handler once the save is committed, so a preempted job always resumes from a complete checkpoint.
Ctrl-C and SIGTERM met the same fate (a 111-line ``CheckpointException`` traceback, exit 1, a
sweep without its summary: crash review): :func:`save_signals_held` holds them too, saying so,
and a second one stops the save at once.
"""

import os
import signal
import sys
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
    with _held([preemption_signal()]):
        yield


#: Signals that stop a run (Ctrl-C; SIGTERM where the entry point raises ``Terminated``).
_STOPS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def save_signals_held() -> Iterator[None]:
    """:func:`preemption_held` for the preemption signal, Ctrl-C and SIGTERM: each is handled
    once the block ends (a line says the save finishes first); a second Ctrl-C or SIGTERM
    meanwhile is handled at once."""
    with _held([preemption_signal(), *_STOPS]):
        yield


@contextmanager
def _held(signals: list[signal.Signals | None]) -> Iterator[None]:
    """Hold ``signals`` (those with a Python handler, in the main thread) within the block;
    the first one received goes to its handler when the block ends. A second stop signal
    (:data:`_STOPS`) goes to its handler when it comes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handlers = {s: signal.getsignal(s) for s in signals if s is not None}
    held = {s: h for s, h in handlers.items() if callable(h)}
    received: list[tuple[int, FrameType | None]] = []

    def restore() -> None:
        for sig, handler in held.items():
            signal.signal(sig, handler)

    def hold(signum: int, frame: FrameType | None) -> None:
        if signum in _STOPS and any(r in _STOPS for r, _ in received):
            restore()  # asked twice: now
            held[signal.Signals(signum)](signum, frame)  # type: ignore[operator]
            return
        received.append((signum, frame))
        if signum in _STOPS:
            name = signal.Signals(signum).name
            sys.stderr.write(f"{name}: the checkpoint being saved is finished first ({name} "
                             "again stops at once, leaving it unfinished)\n")  # fmt: skip

    for sig in held:
        signal.signal(sig, hold)
    try:
        yield
    finally:
        restore()
        if received:
            signum, frame = received[0]
            held[signal.Signals(signum)](signum, frame)  # type: ignore[operator]
