"""Job configuration: absolute UTC cutoff, validated location, dry run, engine options."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.errors import InvalidInputError, LocationRefusedError
from airflow_iceberg_maint.expiry.settings import ExpireOptions
from airflow_iceberg_maint.orphans.options import DEFAULT_MEMORY_BUDGET_MB
from airflow_iceberg_maint.policy.job_config import (
    ExpiryJobConfig,
    build_expiry_job,
    build_orphan_job,
    plan_expiry_jobs,
    plan_orphan_jobs,
)
from airflow_iceberg_maint.policy.policies import OrphanRemovalContent, SnapshotExpiryContent, parse_policies
from airflow_iceberg_maint.state.cleanup import SqlStateStore, record_attempt

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


def test_the_listing_reaches_the_engine_and_the_job_json(table_location: str) -> None:
    job = build_orphan_job("db.t", table_location, OrphanRemovalContent(listing="/inv/listing.parquet"), NOW)
    assert job.to_options().listing == "/inv/listing.parquet"
    assert job.to_json()["listing"] == "/inv/listing.parquet"
    assert "listing" not in build_orphan_job("db.t", table_location, OrphanRemovalContent(), NOW).to_json()


def test_the_memory_budget_reaches_the_engine_and_the_job_json(table_location: str) -> None:
    job = build_orphan_job("db.t", table_location, OrphanRemovalContent(memory_budget_mb=64), NOW)
    assert job.to_options(max_concurrent_deletes=2).memory_budget_mb == 64
    assert job.to_json()["memory_budget_mb"] == 64  # the removal operator's argument of that name
    default = build_orphan_job("db.t", table_location, OrphanRemovalContent(), NOW)
    assert default.to_options().memory_budget_mb == DEFAULT_MEMORY_BUDGET_MB
    assert "memory_budget_mb" not in default.to_json()


def test_naive_now_is_refused(table_location: str) -> None:
    with pytest.raises(InvalidInputError, match="timezone-aware"):
        build_orphan_job("db.t", table_location, OrphanRemovalContent(), datetime(2026, 1, 1))


def test_expiry_job_from_the_contract_example() -> None:
    content = SnapshotExpiryContent(older_than_days=5, retain_last=1, dry_run=False)
    job = build_expiry_job("sales.orders", {}, content, NOW)
    assert job == ExpiryJobConfig("sales.orders", NOW - timedelta(days=5), 1, False)
    assert job.older_than.tzinfo == UTC
    assert job.to_json() == {
        "table": "sales.orders",
        "older_than": "2026-02-24T06:00:00+00:00",
        "retain_last": 1,
        "dry_run": False,
    }


def test_expiry_job_defaults_come_from_the_table_properties() -> None:
    properties = {
        "history.expire.max-snapshot-age-ms": str(2 * 86_400_000),
        "history.expire.min-snapshots-to-keep": "3",
    }
    job = build_expiry_job("db.t", properties, SnapshotExpiryContent(dry_run=True), NOW)
    assert job == ExpiryJobConfig("db.t", NOW - timedelta(days=2), 3, True)
    # The content's values win over the properties; without either, Iceberg's defaults: 5 days and 1.
    explicit = build_expiry_job("db.t", properties, SnapshotExpiryContent(older_than_days=1, retain_last=2), NOW)
    assert (explicit.older_than, explicit.retain_last) == (NOW - timedelta(days=1), 2)
    bare = build_expiry_job("db.t", {}, SnapshotExpiryContent(), NOW)
    assert (bare.older_than, bare.retain_last) == (NOW - timedelta(days=5), 1)


@pytest.mark.parametrize(
    ("properties", "content", "message"),
    [
        (
            {"history.expire.min-snapshots-to-keep": "0"},
            SnapshotExpiryContent(),
            "table property history.expire.min-snapshots-to-keep='0': expected a whole number >= 1",
        ),
        (
            {"history.expire.max-snapshot-age-ms": "five days"},
            SnapshotExpiryContent(retain_last=1),
            "table property history.expire.max-snapshot-age-ms='five days': expected a whole number >= 0",
        ),
        (
            {},
            SnapshotExpiryContent(older_than_days=100_000),
            "content.olderThanDays 100000: expected at most 20513 days (back to 1970-01-01)",
        ),
        (
            {},
            SnapshotExpiryContent(retain_last=0),
            "retain_last 0: expected a whole number >= 1 (every branch keeps its head)",
        ),
    ],
)
def test_expiry_job_refuses_what_the_run_would_refuse(
    properties: dict[str, str], content: SnapshotExpiryContent, message: str
) -> None:
    with pytest.raises(InvalidInputError) as caught:
        build_expiry_job("db.t", properties, content, NOW)
    assert str(caught.value) == message


def test_expiry_job_explicit_cutoff_and_engine_options() -> None:
    cutoff = datetime(2026, 2, 1, tzinfo=UTC)
    job = build_expiry_job("db.t", {}, SnapshotExpiryContent(older_than_days=5), NOW, older_than=cutoff)
    assert job.older_than == cutoff
    with pytest.raises(InvalidInputError, match="is in the future"):
        build_expiry_job("db.t", {}, SnapshotExpiryContent(), NOW, older_than=NOW + timedelta(seconds=1))
    options = job.to_options(max_concurrent_deletes=2)
    assert options == ExpireOptions(older_than=cutoff, retain_last=1, dry_run=False, max_concurrent_deletes=2)
    with pytest.raises(InvalidInputError, match="timezone-aware"):
        build_expiry_job("db.t", {}, SnapshotExpiryContent(), datetime(2026, 1, 1))


def test_plans_of_each_kind_use_their_own_policies_and_clock(sqlite_catalog: SqlCatalog, tmp_path: Path) -> None:
    sqlite_catalog.create_namespace("sales")
    schema = pa.schema([("id", pa.int64())])
    sqlite_catalog.create_table("sales.orders", schema, properties={"history.expire.min-snapshots-to-keep": "4"})
    items = sqlite_catalog.create_table("sales.items", schema)
    store = SqlStateStore(f"sqlite:///{tmp_path}/state.db")
    # sales.items: expired 2 days ago, interval 1 day (score 2); sales.orders: never expired (highest score).
    record_attempt(
        store,
        table_uuid=str(items.metadata.table_uuid),
        table="sales.items",
        at=NOW - timedelta(days=2),
        dry_run=False,
        succeeded=True,
        job="system_iceberg_snapshot_expiry",
    )
    policies = parse_policies(
        [
            {"name": "orphans", "type": "system_iceberg_orphan_file_removal", "tables": ["sales.items"]},
            {
                "name": "expire",
                "type": "system_iceberg_snapshot_expiry",
                "minIntervalDays": 1,
                "tables": ["sales.*"],
                "content": {"olderThanDays": 3},
            },
        ]
    )
    expiry = plan_expiry_jobs(sqlite_catalog, policies, store, NOW, "p.yaml")
    assert [(e.table, e.type, e.due, e.reason) for e in expiry.evaluations] == [
        ("sales.items", "system_iceberg_snapshot_expiry", True, "last expired 2 days ago, interval 1 day: due"),
        ("sales.orders", "system_iceberg_snapshot_expiry", True, "never expired: due"),
    ]
    assert expiry.jobs == [
        (ExpiryJobConfig("sales.orders", NOW - timedelta(days=3), 4, False), "expire"),
        (ExpiryJobConfig("sales.items", NOW - timedelta(days=3), 1, False), "expire"),
    ]
    orphans = plan_orphan_jobs(sqlite_catalog, policies, store, NOW, "p.yaml")
    assert [(e.table, e.reason) for e in orphans.evaluations] == [("sales.items", "never cleaned: due")]
    assert [(job.table, name) for job, name in orphans.jobs] == [("sales.items", "orphans")]
