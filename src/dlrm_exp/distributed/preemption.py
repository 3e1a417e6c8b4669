"""Hold a preemption signal back while a checkpoint is being written.

submitit (Slurm, or its local executor under ``hydra/launcher=local``) answers its preemption
signal (``USR2``, or the name in ``SUBMITIT_PREEMPT_SIGNAL``) from a Python signal handler that
requeues the job and calls ``sys.exit``, so the ``SystemExit`` is raised wherever the main thread
happens to be. Inside ``torch.distributed.checkpoint.save`` it is caught and re-raised as a
``CheckpointException``: the task then exits 1 instead of submitit's requeue code, the job is not
requeued, and the checkpoint is left as a ``.partial`` folder (seen in CI, issue 23's suite).
:func:`save_signals_held` records such a signal during the save and hands it to the original
handler once the save is committed, so a preempted job always resumes from a complete checkpoint.
Ctrl-C and SIGTERM met the same fate (a 111-line ``CheckpointException`` traceback, exit 1, a
sweep without its summary: crash review): it holds them too, saying so, and a second one more
than a second later stops the save at once.
"""

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

PREEMPT_SIGNAL_ENV = "SUBMITIT_PREEMPT_SIGNAL"
"""The variable submitit reads for the name of its preemption signal (default ``USR2``)."""


def preemption_signal() -> signal.Signals | None:
    """The signal submitit treats as preemption, or None if the name in
    ``SUBMITIT_PREEMPT_SIGNAL`` is not a signal of this platform (submitit refuses it too)."""
    return getattr(signal, "SIG" + os.environ.get(PREEMPT_SIGNAL_ENV, "USR2"), None)


#: Signals that stop a run (Ctrl-C; SIGTERM where the entry point raises ``Terminated``).
_STOPS = (signal.SIGINT, signal.SIGTERM)
#: A second stop signal within this many seconds of the first is the same request: a
#: terminal's Ctrl-C reaches every worker, and torch's elastic agent sends them its own SIGINT
#: a millisecond later, which ended the save at once (diff review).
_SAME_REQUEST_S = 1.0


def stops_the_run(handler: object) -> bool:
    """Whether a signal ``handler`` ends the run: Ctrl-C's ``KeyboardInterrupt``, or one
    marked ``stops_the_run`` (the entry point's SIGTERM, which raises ``Terminated``); not
    submitit's SIGTERM handler, which logs and goes on."""
    return handler is signal.default_int_handler or bool(getattr(handler, "stops_the_run", False))


@contextmanager
def save_signals_held() -> Iterator[None]:
    """Within the block, the preemption signal (where it has a Python handler: default or
    ignored, nothing would raise mid-save), Ctrl-C and SIGTERM (where their handler stops the
    run) are recorded instead of handled; each is handled once the block ends (a line says the save
    finishes first); another Ctrl-C or SIGTERM more than a second later is handled at once."""
    with _held(preemption_signal(), _STOPS):
        yield


@contextmanager
def _held(preempt: signal.Signals | None, stops: tuple[signal.Signals, ...]) -> Iterator[None]:
    """Hold the preemption signal ``preempt`` and the ``stops`` (in the main thread, those
    with a Python handler; a stop only where its handler stops the run; ``preempt`` is held
    as the preemption whatever its number: submitit's may be TERM; review) within the block.
    When it ends, each signal received goes to its handler once, the preemption signal first
    (it requeues the job: a stop handled first would lose it; diff review). A stop more than
    :data:`_SAME_REQUEST_S` after the first goes to its handler when it comes, and the held
    stops are then dropped (one stop, not two)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: dict[int, Any] = {}
    if preempt is not None and callable(handler := signal.getsignal(preempt)):
        held[preempt] = handler
    for sig in stops:
        if sig not in held and stops_the_run(handler := signal.getsignal(sig)):
            held[sig] = handler
    received: dict[int, FrameType | None] = {}  # the first of each signal, in arrival order
    first_stop: list[float] = []
    installed: list[int] = []

    def restore() -> None:
        while installed:
            sig = installed.pop()
            signal.signal(sig, held[sig])

    def hold(signum: int, frame: FrameType | None) -> None:
        if signum != preempt:  # a stop
            if first_stop and time.monotonic() - first_stop[0] > _SAME_REQUEST_S:
                restore()  # asked again: now, and once
                for stop in [s for s in received if s != preempt]:
                    del received[stop]
                held[signum](signum, frame)
                return
            if not first_stop:
                first_stop.append(time.monotonic())
                name = signal.Signals(signum).name
                sys.stderr.write(f"{name}: the checkpoint being saved is finished first ({name} "
                                 "again stops at once, leaving it unfinished)\n")  # fmt: skip
        received.setdefault(signum, frame)

    try:
        for sig in held:  # (inside the try: a signal meanwhile still restores them)
            signal.signal(sig, hold)
            installed.append(sig)
        yield
    finally:
        restore()
        for signum in sorted(received, key=lambda s: s != preempt):  # (stable: arrival order)
            held[signum](signum, received[signum])
