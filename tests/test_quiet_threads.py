"""Forks happen only while every other thread is quiet, and never while a quiet thread works."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from airflow_iceberg_maint.quiet_threads import forking, quiet_thread, working


@contextmanager
def _running(target: Callable[[threading.Event], None]) -> Iterator[threading.Event]:
    """``target(stop)`` on a thread of its own for the body; stopped and joined after."""
    stop = threading.Event()
    thread = threading.Thread(target=target, args=(stop,), daemon=True)
    thread.start()
    try:
        yield stop
    finally:
        stop.set()
        thread.join()


SCRIPT = """
import threading
from airflow_iceberg_maint.quiet_threads import forking, quiet_thread

def quiet(ready, stop):
    with quiet_thread():
        ready.set()
        stop.wait()

with forking() as safe:
    assert safe, "alone"
stop = threading.Event()
other = threading.Thread(target=stop.wait)
other.start()
with forking() as safe:
    assert not safe, "beside a thread of unknown work"
stop.set()
other.join()
ready, stop = threading.Event(), threading.Event()
waiter = threading.Thread(target=quiet, args=(ready, stop))
waiter.start()
assert ready.wait(60)
with forking() as safe:
    assert safe, "beside a quiet thread"
stop.set()
waiter.join()
print("checked")
"""


def test_an_unknown_thread_means_no_fork_and_a_quiet_one_allows_it() -> None:
    """In a fresh interpreter: a test session runs threads of its own."""
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout == "checked\n", done.stderr


def test_a_fork_waits_for_a_quiet_threads_work_to_end() -> None:
    working_now, release, trying, forked = threading.Event(), threading.Event(), threading.Event(), threading.Event()

    def work(stop: threading.Event) -> None:
        with quiet_thread(), working():
            working_now.set()
            release.wait()

    def fork(stop: threading.Event) -> None:
        trying.set()
        with forking(wait_seconds=600):
            forked.set()

    with _running(work):
        assert working_now.wait(60)
        with _running(fork):
            assert trying.wait(60)
            assert not forked.wait(0.5)  # held out while the work goes on
            release.set()
            assert forked.wait(60)


def test_a_fork_gives_up_on_work_that_takes_too_long() -> None:
    working_now, release = threading.Event(), threading.Event()

    def work(stop: threading.Event) -> None:
        with quiet_thread(), working():
            working_now.set()
            release.wait()

    with _running(work):
        assert working_now.wait(60)
        with forking(wait_seconds=0.05) as safe:
            assert not safe  # the reads stay on threads
        release.set()
