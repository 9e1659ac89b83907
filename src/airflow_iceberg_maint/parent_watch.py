"""Worker processes that end with the process that started them, also when it is killed with -9.

A worker of a process pool holds the writing end of its own task queue (inherited through a fork,
or passed with the queue from a forkserver), so when the caller dies the queue never reaches its
end and the worker would wait for a task for ever. Each worker therefore asks Linux to kill it
when its parent ends (``PR_SET_PDEATHSIG``), and elsewhere runs a thread that watches its parent's
pid. A forked worker's parent is the caller (a caller that died before the request is caught by
comparing pids); a forkserver's worker's parent is the server, which ends with the caller.
``started_pool`` starts such a pool and, when starting a worker fails, ends those already started.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.context import BaseContext
from typing import Any

PR_SET_PDEATHSIG = 1
#: How often a worker without ``PR_SET_PDEATHSIG`` looks for its parent.
WATCH_SECONDS = 1.0

_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def end_with_parent(parent: int | None) -> None:
    """In a worker: end this process once its parent ends (``parent``: the pid that forked it; None for a
    forkserver's worker, whose parent is the server).

    The worker also takes the default action on SIGTERM (its pool's way to stop it), not a handler it
    inherited: Airflow's would raise inside the worker as if the task were stopped."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    watched = os.getppid() if parent is None else parent
    if _LIBC is None or _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
        threading.Thread(target=_watch, args=(watched,), name="parent watch", daemon=True).start()
    if os.getppid() != watched:  # it ended before the request
        os._exit(1)


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(WATCH_SECONDS)
    os._exit(1)


def _start_worker(parent: int | None, initializer: Callable[..., None] | None, initargs: tuple[Any, ...]) -> None:
    end_with_parent(parent)
    if initializer is not None:
        initializer(*initargs)


def _ready() -> None:
    """A first task: a fork pool forks every worker on its first submit."""


def started_pool(
    workers: int,
    context: BaseContext,
    initializer: Callable[..., None] | None = None,
    initargs: tuple[Any, ...] = (),
) -> ProcessPoolExecutor:
    """A pool whose workers end with this process, started now (all of them for ``fork``); ``initializer``
    runs in each after that. If starting one fails, those already started are ended and the error raised."""
    parent = os.getpid() if context.get_start_method() == "fork" else None
    pool = ProcessPoolExecutor(workers, context, initializer=_start_worker, initargs=(parent, initializer, initargs))
    before = set(multiprocessing.active_children())
    try:
        pool.submit(_ready)
    except BaseException:
        # The workers started before the failure would wait for tasks that never come.
        for child in set(multiprocessing.active_children()) - before:
            child.kill()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    return pool
