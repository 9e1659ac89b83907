"""Threads that hold no lock while they wait, and the forks that may happen meanwhile.

A forked child has only the thread that forked it, and every lock as it was at the fork: a lock
another thread held then stays held in the child for ever. So reader processes are forked only
while every other thread of the process is *quiet*: a thread of this project that, between short
pieces of work, only waits on an event of its own (a lease's renewal thread). Such a thread marks
itself with ``quiet_thread()`` and does each piece of work inside ``working()``; compaction forks
its readers inside ``forking()``, and the two exclude each other. A thread this project does not
know of (one an Airflow task or a test runs) means no fork, and so does a piece of work that takes
longer than ``WAIT_SECONDS`` (a lease store slow to answer): the reads then stay on threads.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: How long a fork waits for a quiet thread's piece of work to end.
WAIT_SECONDS = 1.0

_gate = threading.Lock()
_quiet: set[int] = set()


@contextmanager
def quiet_thread() -> Iterator[None]:
    """Mark the calling thread quiet for the body: it does its work inside ``working()`` only."""
    ident = threading.get_ident()
    _quiet.add(ident)
    try:
        yield
    finally:
        _quiet.discard(ident)


@contextmanager
def working() -> Iterator[None]:
    """A quiet thread's piece of work: no fork happens meanwhile."""
    with _gate:
        yield


@contextmanager
def forking(wait_seconds: float = WAIT_SECONDS) -> Iterator[bool]:
    """Keep quiet threads waiting for the body; True when every other thread is quiet (a fork is safe),
    False when one of them works past ``wait_seconds``."""
    if not _gate.acquire(timeout=wait_seconds):
        yield False
        return
    try:
        me = threading.get_ident()
        yield all(t.ident == me or t.ident in _quiet for t in threading.enumerate())
    finally:
        _gate.release()
