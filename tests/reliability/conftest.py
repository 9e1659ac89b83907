"""Shared by the reliability tests: the figures summary at the end of the run."""

from __future__ import annotations

from typing import Any

from tests.reliability import figures


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if figures.LINES:
        terminalreporter.section("reliability figures" + (" (soak)" if figures.SOAK else ""))
        for line in figures.LINES:
            terminalreporter.write_line(line)
