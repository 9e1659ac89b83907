"""Job configuration: absolute UTC cutoff, validated location, dry run, engine options."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from airflow_iceberg_maint.errors import InvalidInputError, LocationRefusedError
from airflow_iceberg_maint.policy.job_config import build_orphan_job
from airflow_iceberg_maint.policy.policies import OrphanRemovalContent

NOW = datetime(2026, 3, 1, 6, 0, tzinfo=UTC)


@pytest.fixture
def table_location(tmp_path: Path) -> str:
    (tmp_path / "db" / "t" / "data").mkdir(parents=True)
    (tmp_path / "db" / "other").mkdir(parents=True)
    return f"file://{tmp_path}/db/t"


def test_days_become_an_absolute_utc_cutoff(table_location: str) -> None:
    job = build_orphan_job("db.t", table_location, OrphanRemovalContent(older_than_days=3), NOW)
    assert job.older_than == NOW - timedelta(days=3)
    assert job.older_than.tzinfo == UTC
    assert job.location == table_location
    assert job.dry_run is False
    assert job.to_json() == {
        "table": "db.t",
        "older_than": "2026-02-26T06:00:00+00:00",
        "location": table_location,
        "dry_run": False,
    }


def test_zero_days_means_now(table_location: str) -> None:
    assert build_orphan_job("db.t", table_location, OrphanRemovalContent(older_than_days=0), NOW).older_than == NOW


def test_location_under_the_table_is_kept_and_dry_run_passes(table_location: str) -> None:
    content = OrphanRemovalContent(location=f"{table_location}/data/", dry_run=True)
    job = build_orphan_job("db.t", table_location, content, NOW)
    assert job.location == f"{table_location}/data"
    assert job.dry_run is True


@pytest.mark.parametrize("suffix", ["/../other", "/../../db", "/data/../../other"])
def test_location_outside_the_table_is_refused_before_anything_runs(table_location: str, suffix: str) -> None:
    content = OrphanRemovalContent(location=table_location + suffix)
    with pytest.raises(LocationRefusedError, match="expected the table location"):
        build_orphan_job("db.t", table_location, content, NOW)


def test_explicit_cutoff_overrides_days(table_location: str) -> None:
    cutoff = datetime(2026, 2, 1, tzinfo=UTC)
    job = build_orphan_job("db.t", table_location, OrphanRemovalContent(older_than_days=3), NOW, older_than=cutoff)
    assert job.older_than == cutoff
    with pytest.raises(InvalidInputError, match="in the future"):
        build_orphan_job("db.t", table_location, OrphanRemovalContent(), NOW, older_than=NOW + timedelta(seconds=1))


def test_engine_options_carry_the_job(table_location: str) -> None:
    job = build_orphan_job("db.t", table_location, OrphanRemovalContent(dry_run=True), NOW)
    options = job.to_options(prefix_mismatch_mode="ignore", max_concurrent_deletes=2)
    assert (options.older_than, options.location, options.dry_run) == (job.older_than, job.location, True)
    assert options.prefix_mismatch_mode == "ignore" and options.max_concurrent_deletes == 2


def test_naive_now_is_refused(table_location: str) -> None:
    with pytest.raises(InvalidInputError, match="timezone-aware"):
        build_orphan_job("db.t", table_location, OrphanRemovalContent(), datetime(2026, 1, 1))
