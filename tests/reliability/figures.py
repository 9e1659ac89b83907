"""Run size of the reliability suite (bounded by default, long under ICEBERG_MAINT_SOAK=1) and its figures.

Each test reports one line ``reliability: <test> key=value ...`` (runs, kills, faults, commits,
files lost); the lines are printed as they come (visible with ``-s``) and again in a summary
section at the end of the pytest run, where ``make soak`` output can be collected for docs/benchmarks.md.
"""

from __future__ import annotations

import os

_SOAK_VALUE = os.environ.get("ICEBERG_MAINT_SOAK", "")
if _SOAK_VALUE not in ("", "0", "1"):
    raise ValueError(f"ICEBERG_MAINT_SOAK={_SOAK_VALUE!r}: expected unset, 0 (bounded run) or 1 (long run)")
SOAK = _SOAK_VALUE == "1"

LINES: list[str] = []


def scale(default: int, soak: int) -> int:
    """The bounded figure, or the long one under ICEBERG_MAINT_SOAK=1."""
    return soak if SOAK else default


def report(test: str, **figures: object) -> str:
    line = f"reliability: {test} " + " ".join(f"{key}={value}" for key, value in figures.items())
    LINES.append(line)
    print(line)
    return line
