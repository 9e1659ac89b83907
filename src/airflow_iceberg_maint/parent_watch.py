"""Forked worker processes end with the process that forked them, also when it is killed with -9.

A forked worker inherits the writing end of its own task queue, so when its parent dies the
queue never reaches its end and the worker would wait for a task for ever. Each forked worker
therefore asks Linux to kill it when its parent ends (``PR_SET_PDEATHSIG``), and elsewhere runs a
thread that watches its parent's pid. A parent that died before the request is caught by
comparing the pid it passed with the worker's parent now.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1
#: How often a worker without ``PR_SET_PDEATHSIG`` looks for its parent.
WATCH_SECONDS = 1.0


_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def end_with_parent(parent: int) -> None:
    """A forked worker's initializer: end this process once ``parent`` (the pid that forked it) ends.

    The worker also takes the default action on SIGTERM (its pool's way to stop it), not a handler it
    inherited: Airflow's would raise inside the worker as if the task were stopped."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if _LIBC is None or _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
        threading.Thread(target=_watch, args=(parent,), name="parent watch", daemon=True).start()
    if os.getppid() != parent:  # it ended before the request
        os._exit(1)


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(WATCH_SECONDS)
    os._exit(1)
