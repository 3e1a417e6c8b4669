"""How :func:`~dlrm_exp.distributed.launch.launch_workers` starts its workers: forked from a
server process that imported torch, TorchRec and the training code once (Python's
``forkserver`` start method with preloaded modules), instead of a fresh interpreter that
imports them for every worker of every job (about 5 s a job on 2 cores). A ``-m`` sweep of
multi-process jobs runs its jobs one after another in one process, so every job after the
first starts its workers without those imports.

A forked worker inherits the server's environment, which is this process's when the server
started; :func:`adopt_launch_environment` gives it the environment of the launch instead (what
a spawned worker would have had), with the launcher's own variables on top.
"""

import inspect
import multiprocessing
import os
from collections.abc import Callable, Sequence
from typing import Any

#: This module's environment when it was imported: in the fork server (which imports it
#: first), the server's, which every worker forked from it starts with.
SERVER_ENV = dict(os.environ)

START_METHOD = "forkserver"


def preload_worker_modules(entry: Callable[..., Any], args: Sequence[Any]) -> None:
    """Name what the fork server imports before it forks workers: this module (for
    :data:`SERVER_ENV`), the worker function ``entry``'s module and those of the functions in
    its ``args`` (the training code, and with it torch, TorchRec and FBGEMM). The server
    starts at the first launch of this process, with these, and serves every later launch."""
    functions = [entry, *(a for a in args if inspect.isfunction(a))]
    names = [__name__, *(f.__module__ for f in functions)]
    modules = [n for n in dict.fromkeys(names) if not n.startswith("__")]  # not __main__
    multiprocessing.get_context(START_METHOD).set_forkserver_preload(modules)


def adopt_launch_environment(launch_env: dict[str, str]) -> None:
    """In a worker: make ``os.environ`` the launching process's environment ``launch_env`` at
    the launch, plus the variables the elastic launcher set for this worker (``RANK``,
    ``MASTER_PORT``, ...: those that differ from the server's :data:`SERVER_ENV`), which win."""
    launcher = {k: v for k, v in os.environ.items() if SERVER_ENV.get(k) != v}
    os.environ.clear()
    os.environ.update(launch_env)
    os.environ.update(launcher)
