"""Progress of the long phases (listing, reading manifests, deleting, building regions).

Like logging, the reporter is ambient: a caller installs one with ``reporting(reporter)`` and
the core reports through ``Phase`` without any signature carrying it; by default nothing is
reported. The core updates a phase per batch, manifest or file, never per path, so a reporter
costs nothing measurable. The command line draws the phases on a terminal; Airflow tasks log
them with ``LoggingReporter``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Protocol


class ProgressReporter(Protocol):
    def update(self, phase: str, done: int, total: int | None, finished: bool) -> None:
        """The state of a phase: when it starts, as it advances, and once more when it ends.

        May be called from several threads (the listing runs beside the manifest reads). A
        phase name seen again continues that phase (a run's second manifest walk).
        """
        ...


class _Silent:
    def update(self, phase: str, done: int, total: int | None, finished: bool) -> None:
        pass


_SILENT = _Silent()
_REPORTER: ContextVar[ProgressReporter | None] = ContextVar("airflow_iceberg_maint_progress", default=None)


@contextmanager
def reporting(reporter: ProgressReporter) -> Iterator[ProgressReporter]:
    """Send the phases of the code run inside to ``reporter`` (threads started inside need ``copy_context``)."""
    token = _REPORTER.set(reporter)
    try:
        yield reporter
    finally:
        _REPORTER.reset(token)


class Phase:
    """One long phase, used as ``with Phase("listing") as listing: ... listing.advance(n)``.

    ``done`` starts above 0 when the phase continues an earlier one of the same name.
    """

    __slots__ = ("_reporter", "done", "name", "total")

    def __init__(self, name: str, total: int | None = None, done: int = 0) -> None:
        self.name, self.done, self.total = name, done, total
        self._reporter = _REPORTER.get() or _SILENT

    def __enter__(self) -> Phase:
        self._report(False)
        return self

    def __exit__(self, *exc: object) -> None:
        self._report(True)

    def advance(self, count: int = 1) -> None:
        self.done += count
        self._report(False)

    def set_total(self, total: int) -> None:
        self.total = total
        self._report(False)

    def _report(self, finished: bool) -> None:
        self._reporter.update(self.name, self.done, self.total, finished)


class InfoLogger(Protocol):
    """A ``logging.Logger``, or a task's logger in Airflow (structlog), which formats the same way."""

    def info(self, message: Any, /, *args: Any) -> Any: ...


class LoggingReporter:
    """Logs each phase when it starts and ends, and its count at most every ``interval`` seconds in between."""

    def __init__(self, logger: InfoLogger, interval: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.logger, self.interval, self.clock = logger, interval, clock
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def update(self, phase: str, done: int, total: int | None, finished: bool) -> None:
        now = self.clock()
        with self._lock:
            last = self._last.get(phase)
            if not finished and last is not None and now - last < self.interval:
                return
            self._last[phase] = now
        of = "" if total is None else f" of {total}"
        state = "done" if finished else "started" if last is None else "in progress"
        self.logger.info("%s: %d%s, %s", phase, done, of, state)
