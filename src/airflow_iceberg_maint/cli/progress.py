"""The terminal display of the long phases the core reports (``airflow_iceberg_maint.progress``), drawn on stderr."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from airflow_iceberg_maint.progress import reporting


class TerminalReporter:
    """One bar a phase: the count done, of the total once known, and the time it took."""

    def __init__(self, console: Console) -> None:
        self.display = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            # stdout holds the result (with --json, one JSON object); only stderr's log lines go above the bars.
            redirect_stdout=False,
        )
        self._tasks: dict[str, TaskID] = {}

    def update(self, phase: str, done: int, total: int | None, finished: bool) -> None:
        if finished and total is None:
            total = done
        task = self._tasks.get(phase)
        if task is None:
            self._tasks[phase] = self.display.add_task(phase, total=total, completed=done)
        else:
            self.display.update(task, total=total, completed=done)


@contextmanager
def terminal_progress(force: bool) -> Iterator[TerminalReporter]:
    """Draw the phases reported inside on stderr; ``force`` draws even when stderr is not a terminal."""
    reporter = TerminalReporter(Console(file=sys.stderr, force_terminal=True if force else None))
    with reporter.display, reporting(reporter):
        yield reporter
