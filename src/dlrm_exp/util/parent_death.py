"""A forked worker that dies with its parent: a SIGKILLed ``mode=preprocess`` (the kernel's
out-of-memory killer sends SIGKILL) left its parse workers waiting forever, holding the output
folder's lock, and the next run was refused as "being written by another run" naming the dead
parent (crash review)."""

import ctypes
import os
import signal
import sys

#: ``prctl``'s option that asks the kernel for a signal when the parent dies (linux/prctl.h).
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """In a forked child of process ``parent``: on Linux, SIGTERM (its default action: end)
    when the thread that forked it ends, as the kernel's ``PR_SET_PDEATHSIG`` delivers it; a
    parent already gone ends this process at once. Elsewhere nothing (no such call)."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != parent:  # it died before the call above: no signal will come
        os._exit(1)
