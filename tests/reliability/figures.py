"""Run size of the reliability suite (bounded by default, long under ICEBERG_MAINT_SOAK=1) and its figures.

A bounded run's seed loops are sized by time, not a count (``Seeds``): a busy machine runs fewer seeds
instead of passing the test's time limit. ``make soak`` runs every seed.

Each test reports one line ``reliability: <test> key=value ...`` (runs, kills, faults, commits,
files lost); the lines are printed as they come (visible with ``-s``) and again in a summary
section at the end of the pytest run, where ``make soak`` output can be collected for docs/benchmarks.md.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator

_SOAK_VALUE = os.environ.get("ICEBERG_MAINT_SOAK", "")
if _SOAK_VALUE not in ("", "0", "1"):
    raise ValueError(f"ICEBERG_MAINT_SOAK={_SOAK_VALUE!r}: expected unset, 0 (bounded run) or 1 (long run)")
SOAK = _SOAK_VALUE == "1"

LINES: list[str] = []
#: Seconds a bounded run's seed loop runs before it stops starting seeds (ICEBERG_MAINT_SEED_SECONDS overrides):
#: about a third of the suite's 300 s limit a test, leaving room for a slow seed and the final checks.
SEED_SECONDS = float(os.environ.get("ICEBERG_MAINT_SEED_SECONDS", "100"))


def scale(default: int, soak: int) -> int:
    """The bounded figure, or the long one under ICEBERG_MAINT_SOAK=1."""
    return soak if SOAK else default


def report(test: str, **figures: object) -> str:
    line = f"reliability: {test} " + " ".join(f"{key}={value}" for key, value in figures.items())
    LINES.append(line)
    print(line)
    return line


class Seeds:
    """Seeds 0 to ``count - 1``: all of them under ICEBERG_MAINT_SOAK=1. In a bounded run, once SEED_SECONDS
    have passed since seed 0 started, no further seed starts, provided seeds 0 and 1 have run and ``covered()``
    holds (the test's end conditions over the seeds run so far: enough kills, kills on both sides of a
    commit). ``ran`` counts the seeds after seed 0 that ran: a test's end checks count those."""

    def __init__(self, count: int, covered: Callable[[], bool] = lambda: True) -> None:
        self.count, self.covered, self.ran = count, covered, 0

    def __iter__(self) -> Iterator[int]:
        started = time.monotonic()
        for seed in range(self.count):
            if not SOAK and seed >= 2 and time.monotonic() - started >= SEED_SECONDS and self.covered():
                return
            self.ran = seed
            yield seed
