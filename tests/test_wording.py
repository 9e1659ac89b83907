"""One wording for every figure the pages and the approval form show (``airflow.ui.wording``).

The faults it replaces: "15286 bytes" beside KiB, raw ISO times, "0.0 days ago", "1 snapshots behind,
1408.66 s", and an expiry outcome that read like raw keys.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from airflow_iceberg_maint.airflow.ui import wording

NOW = datetime(2026, 6, 10, 12, tzinfo=UTC)
UNITS = {"KiB": 1, "MiB": 2, "GiB": 3, "TiB": 4, "PiB": 5}


@given(st.integers(min_value=0, max_value=2**59))
def test_bytes_in_binary_units_close_to_the_value(count: int) -> None:
    text = wording.size(count)
    if count < 1024:
        assert text == f"{count} B"
        return
    match = re.fullmatch(r"(\d+\.\d) ([KMGTP]iB)", text)
    assert match, text
    value = float(match[1]) * 1024 ** UNITS[match[2]]
    assert abs(value - count) <= 0.05 * 1024 ** UNITS[match[2]] + 1e-9 * count, text
    assert float(match[1]) < 1024


@given(st.integers(min_value=0, max_value=10**6), st.sampled_from(["file", "snapshot", "orphan file", "index"]))
def test_counts_carry_their_noun_in_the_right_number(count: int, noun: str) -> None:
    text = wording.plural(count, noun)
    assert text.startswith(f"{count} ")
    assert text.endswith(noun) == (count == 1)


@given(st.floats(min_value=-1e8, max_value=1e9, allow_nan=False))
def test_ages_read_as_words_never_as_fractions_of_a_day(seconds: float) -> None:
    text = wording.relative(NOW - timedelta(seconds=seconds), NOW)
    assert "0.0" not in text and "." not in text
    if abs(seconds) < 60:
        assert text == "just now"
    else:
        pattern = r"(\d+ min|\d+ h( \d+ min)?|\d+ days?( \d+ h)?)"
        assert re.fullmatch(f"{pattern} ago" if seconds > 0 else f"in {pattern}", text), text


@given(st.integers(min_value=0, max_value=10**4), st.one_of(st.none(), st.floats(min_value=0, max_value=1e7)))
def test_lag_in_words(behind: int, seconds: float | None) -> None:
    text = wording.lag(behind, seconds)
    if behind == 0:
        assert text == "up to date"
    else:
        assert text.startswith(wording.plural(behind, "snapshot") + " behind")
        assert (seconds is None) == ("(" not in text)


def test_outcomes_in_words() -> None:
    expiry = {"expired_snapshot_count": 3, "deleted_file_count": 7, "deleted_bytes": 15286, "failed_count": 0}
    assert wording.outcome("expiry", True, expiry) == "would expire 3 snapshots and delete 7 files (14.9 KiB)"
    assert wording.outcome("expiry", False, expiry) == "expired 3 snapshots, deleted 7 files (14.9 KiB reclaimed)"
    orphans = {"orphan_file_count": 1, "orphan_bytes": 88, "deleted_file_count": 1, "failed_count": 2}
    assert wording.outcome("orphans", True, orphans) == "would delete 1 orphan file (88 B)"
    assert wording.outcome("orphans", False, orphans) == "deleted 1 orphan file (88 B reclaimed); 2 deletes failed"
    assert wording.lag(1, 1408.66) == "1 snapshot behind (23 min)"
    assert wording.duration(0.25) == "0.25 s" and wording.duration(3 * 3600 + 120) == "3 h 2 min"
