"""Cleanup state: keyed by table UUID and job, the clock moves only for successful real runs."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from airflow_iceberg_maint.errors import InvalidInputError, MaintenanceError, StorageError
from airflow_iceberg_maint.state.cleanup import (
    CleanupState,
    SqlStateStore,
    default_state_url,
    record_attempt,
    record_expiry_run,
    record_orphan_run,
)

T0 = datetime(2026, 1, 10, 12, 0, tzinfo=UTC)
UUID = "0b8a6f52-6a4c-4bfb-9d0e-3c1e2f8f1a01"


def summary(*, dry_run: bool, failed: int = 0, table_uuid: str = UUID) -> dict:
    return {
        "table": "db.t",
        "table_uuid": table_uuid,
        "dry_run": dry_run,
        "orphan_file_count": 4,
        "orphan_bytes": 400,
        "deleted_file_count": 0 if dry_run else 4 - failed,
        "failed": [{"path": f"file:///x/{i}", "error": "denied"} for i in range(failed)],
    }


@pytest.fixture
def store(tmp_path: Path) -> SqlStateStore:
    return SqlStateStore(f"sqlite:///{tmp_path}/nested/state.db")


def test_empty_store_knows_nothing(store: SqlStateStore) -> None:
    assert store.get(UUID) is None


def test_successful_real_run_sets_the_clock(store: SqlStateStore) -> None:
    state = record_orphan_run(store, summary(dry_run=False), T0)
    assert store.get(UUID) == state
    assert state.last_success_at == T0
    assert state.last_attempt_status == "success"
    assert state.last_attempt_counts == {
        "orphan_file_count": 4,
        "orphan_bytes": 400,
        "deleted_file_count": 4,
        "failed_count": 0,
    }


def test_dry_runs_and_failures_do_not_reset_the_clock(store: SqlStateStore) -> None:
    record_orphan_run(store, summary(dry_run=False), T0)
    later = T0 + timedelta(days=3)
    dry = record_orphan_run(store, summary(dry_run=True), later)
    assert dry.last_success_at == T0
    assert dry.last_attempt_at == later and dry.last_attempt_dry_run is True
    partial = record_orphan_run(store, summary(dry_run=False, failed=1), later + timedelta(hours=1))
    assert partial.last_success_at == T0
    assert partial.last_attempt_status == "failed"
    assert partial.last_error == "1 deletes failed"
    failed = record_attempt(
        store,
        table_uuid=UUID,
        table="db.t",
        at=later + timedelta(hours=2),
        dry_run=False,
        succeeded=False,
        error="table db.t: gc.enabled=false",
    )
    assert store.get(UUID).last_success_at == T0
    assert store.get(UUID).last_error == failed.last_error == "table db.t: gc.enabled=false"


def test_state_is_per_uuid_and_per_job(store: SqlStateStore) -> None:
    other_uuid = "7d1d2f40-0000-4000-8000-000000000000"
    record_orphan_run(store, summary(dry_run=False), T0)
    assert store.get(other_uuid) is None
    assert store.get(UUID, job="system_iceberg_compaction") is None


def test_state_survives_a_new_store_on_the_same_url(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    record_orphan_run(SqlStateStore(url), summary(dry_run=False), T0)
    assert SqlStateStore(url).get(UUID).last_success_at == T0


def test_json_round_trip() -> None:
    state = CleanupState(UUID, "system_iceberg_orphan_file_removal", "db.t", T0, T0, "success", False, {"a": 1})
    assert CleanupState.from_json(state.to_json()) == state


def test_naive_time_is_refused(store: SqlStateStore) -> None:
    with pytest.raises(InvalidInputError, match="timezone-aware"):
        record_orphan_run(store, summary(dry_run=False), datetime(2026, 1, 1))


def test_default_url_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ICEBERG_MAINT_STATE_URL", "sqlite:////elsewhere/s.db")
    assert default_state_url() == "sqlite:////elsewhere/s.db"
    monkeypatch.delenv("ICEBERG_MAINT_STATE_URL")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert default_state_url() == f"sqlite:///{tmp_path}/iceberg-maint/state.db"


def test_bad_url_is_named() -> None:
    with pytest.raises(InvalidInputError, match="state store URL 'not a url'"):
        SqlStateStore("not a url")


def test_unusable_database_is_a_maintenance_error(tmp_path: Path) -> None:
    directory = tmp_path / "a-directory.db"
    directory.mkdir()
    with pytest.raises(MaintenanceError, match="state store sqlite:///"):
        SqlStateStore(f"sqlite:///{directory}")


def expiry_json(*, dry_run: bool, failed: int = 0) -> dict:
    return {
        "table": "db.t",
        "table_uuid": UUID,
        "dry_run": dry_run,
        "expired_snapshot_ids": [11, 12, 13],
        "deleted_file_count": 5 - failed,
        "deleted_bytes": 500,
        "failed": [{"path": f"file:///x/{i}", "error": "denied"} for i in range(failed)],
    }


def test_expiry_runs_have_their_own_clock(store: SqlStateStore) -> None:
    orphans = record_orphan_run(store, summary(dry_run=False), T0)
    expiry = record_expiry_run(store, expiry_json(dry_run=False), T0 + timedelta(days=1))
    assert expiry.job == "system_iceberg_snapshot_expiry"
    assert expiry.last_success_at == T0 + timedelta(days=1)
    assert expiry.last_attempt_counts == {
        "expired_snapshot_count": 3,
        "deleted_file_count": 5,
        "deleted_bytes": 500,
        "failed_count": 0,
    }
    assert store.get(UUID) == orphans
    assert store.get(UUID, "system_iceberg_snapshot_expiry") == expiry
    assert store.all("system_iceberg_snapshot_expiry") == [expiry]
    assert store.all() == [orphans]


def test_only_a_real_expiry_without_failed_deletes_moves_its_clock(store: SqlStateStore) -> None:
    record_expiry_run(store, expiry_json(dry_run=False), T0)
    dry = record_expiry_run(store, expiry_json(dry_run=True), T0 + timedelta(days=1))
    assert dry.last_success_at == T0 and dry.last_attempt_dry_run is True
    partial = record_expiry_run(store, expiry_json(dry_run=False, failed=2), T0 + timedelta(days=2))
    assert partial.last_success_at == T0
    assert (partial.last_attempt_status, partial.last_error) == ("failed", "2 deletes failed")
    assert partial.last_attempt_counts["failed_count"] == 2
    assert store.get(UUID) is None  # no orphan-removal record was made


def test_records_written_before_expiry_existed_read_as_orphan_runs(tmp_path: Path) -> None:
    # A state file as the previous release wrote it: one row, keyed by UUID and the orphan job.
    url = f"sqlite:///{tmp_path}/old.db"
    old_body = json.dumps(
        {
            "table_uuid": UUID,
            "job": "system_iceberg_orphan_file_removal",
            "table": "db.t",
            "last_success_at": "2026-01-10T12:00:00+00:00",
            "last_attempt_at": "2026-01-10T12:00:00+00:00",
            "last_attempt_status": "success",
            "last_attempt_dry_run": False,
            "last_attempt_counts": {"orphan_file_count": 4, "orphan_bytes": 400, "deleted_file_count": 4},
            "last_error": None,
        }
    )
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "CREATE TABLE iceberg_maint_state (table_uuid VARCHAR(36), job VARCHAR(128), body TEXT NOT NULL, "
                "PRIMARY KEY (table_uuid, job))"
            )
        )
        conn.execute(
            sa.text("INSERT INTO iceberg_maint_state VALUES (:u, 'system_iceberg_orphan_file_removal', :b)"),
            {"u": UUID, "b": old_body},
        )
    store = SqlStateStore(url)
    assert store.get(UUID) == CleanupState(
        UUID,
        "system_iceberg_orphan_file_removal",
        "db.t",
        T0,
        T0,
        "success",
        False,
        {"orphan_file_count": 4, "orphan_bytes": 400, "deleted_file_count": 4},
    )
    assert store.get(UUID, "system_iceberg_snapshot_expiry") is None
    record_expiry_run(store, expiry_json(dry_run=False), T0 + timedelta(days=1))
    assert store.get(UUID).last_success_at == T0


def test_a_database_that_cannot_be_reached_may_answer_a_retry(tmp_path: Path) -> None:
    directory = tmp_path / "a-directory.db"
    directory.mkdir()
    with pytest.raises(StorageError, match=r"state store sqlite:///.*unable to open database file") as caught:
        SqlStateStore(f"sqlite:///{directory}")
    assert caught.value.retryable is True
