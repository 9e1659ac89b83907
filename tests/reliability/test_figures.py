"""figures.Seeds: a bounded run's seed loop sized by time, every seed under soak (no process started: make unit)."""

from __future__ import annotations

import pytest

from tests.reliability import figures


def _run(count: int, covered_after: int) -> list[int]:
    ran: list[int] = []
    for seed in figures.Seeds(count, lambda: len(ran) >= covered_after):
        ran.append(seed)
    return ran


@pytest.mark.parametrize(
    ("soak", "budget", "covered_after", "expected"),
    [
        (False, 3600.0, 0, list(range(10))),  # within the budget: every seed
        (False, 0.0, 0, [0, 1]),  # budget spent: the calibration and one seed still run
        (False, 0.0, 4, [0, 1, 2, 3]),  # budget spent: on until the end conditions hold
        (False, 0.0, 99, list(range(10))),  # ...but never past the count
        (True, 0.0, 0, list(range(10))),  # soak: every seed, whatever the time
    ],
)
def test_seeds_stop_at_the_budget_once_covered(
    monkeypatch: pytest.MonkeyPatch, soak: bool, budget: float, covered_after: int, expected: list[int]
) -> None:
    monkeypatch.setattr(figures, "SOAK", soak)
    monkeypatch.setattr(figures, "SEED_SECONDS", budget)
    assert _run(10, covered_after) == expected


def test_seeds_ran_counts_the_seeds_after_the_calibration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(figures, "SOAK", False)
    monkeypatch.setattr(figures, "SEED_SECONDS", 0.0)
    seeds = figures.Seeds(10)
    assert (list(seeds), seeds.ran) == ([0, 1], 1)
