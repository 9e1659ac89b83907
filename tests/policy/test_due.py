"""Trigger evaluation: days since the last cleanup against the policy's minimum interval."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.policy.due import NEVER_CLEANED_SCORE, evaluate, evaluate_policies, unattached
from airflow_iceberg_maint.policy.policies import parse_policies, parse_policy
from airflow_iceberg_maint.state.cleanup import CleanupState, SqlStateStore, record_attempt

NOW = datetime(2026, 3, 1, 6, 0, tzinfo=UTC)
UUID = "0b8a6f52-6a4c-4bfb-9d0e-3c1e2f8f1a01"
POLICY = parse_policy(
    {
        "name": "weekly",
        "type": "system_iceberg_orphan_file_removal",
        "minIntervalDays": 7,
        "tables": ["db.*"],
        "content": {},
    }
)


def cleaned(days_ago: float) -> CleanupState:
    at = NOW - timedelta(days=days_ago)
    return CleanupState(UUID, "system_iceberg_orphan_file_removal", "db.t", at, at, "success", False)


def test_never_cleaned_is_due_with_the_highest_score() -> None:
    result = evaluate("db.t", UUID, POLICY, None, NOW)
    assert result.due and result.score == NEVER_CLEANED_SCORE
    assert result.days_since_last_cleanup is None and result.last_cleanup_at is None
    assert result.reason == "never cleaned: due"
    assert evaluate("db.t", UUID, POLICY, cleaned(10_000), NOW).score < NEVER_CLEANED_SCORE


@pytest.mark.parametrize(("days_ago", "due"), [(0, False), (6.99, False), (7, True), (30, True)])
def test_trigger_is_days_since_at_least_the_interval(days_ago: float, due: bool) -> None:
    result = evaluate("db.t", UUID, POLICY, cleaned(days_ago), NOW)
    assert result.due is due
    assert result.days_since_last_cleanup == pytest.approx(days_ago)
    assert result.score == pytest.approx(days_ago)
    assert result.min_interval_days == 7
    assert ("not due" not in result.reason) is due


def test_reason_is_readable() -> None:
    result = evaluate("db.t", UUID, POLICY, cleaned(8), NOW)
    assert result.reason == "last cleaned 8 days ago, interval 7 days: due"
    assert result.to_json() == {
        "table": "db.t",
        "table_uuid": UUID,
        "policy": "weekly",
        "last_cleanup_at": (NOW - timedelta(days=8)).isoformat(),
        "days_since_last_cleanup": 8.0,
        "min_interval_days": 7.0,
        "due": True,
        "score": 8.0,
        "reason": result.reason,
    }


def test_only_success_counts_and_dry_runs_do_not_reset() -> None:
    attempted_only = CleanupState(UUID, "system_iceberg_orphan_file_removal", "db.t", None, NOW, "success", True)
    assert evaluate("db.t", UUID, POLICY, attempted_only, NOW).due


def test_disabled_policy_is_never_due() -> None:
    disabled = parse_policy({**POLICY.to_json(), "enabled": False})
    result = evaluate("db.t", UUID, disabled, None, NOW)
    assert not result.due and result.reason == "policy 'weekly' is disabled"


def test_no_policy_uses_the_default_interval() -> None:
    result = evaluate("db.t", UUID, None, cleaned(7), NOW)
    assert result.policy is None and result.min_interval_days == 7 and result.due


def test_future_last_cleanup_waits() -> None:
    result = evaluate("db.t", UUID, POLICY, cleaned(-1), NOW)
    assert not result.due and "in the future" in result.reason


def test_unattached_is_not_due() -> None:
    result = unattached("hr.people", UUID, "policies.yaml")
    assert not result.due
    assert result.reason == "no orphan-removal policy in policies.yaml attaches to hr.people: not due"
    expiry = unattached("hr.people", UUID, "policies.yaml", "system_iceberg_snapshot_expiry")
    assert (expiry.due, expiry.type) == (False, "system_iceberg_snapshot_expiry")
    assert expiry.reason == "no snapshot-expiry policy in policies.yaml attaches to hr.people: not due"


def test_naive_now_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="timezone-aware"):
        evaluate("db.t", UUID, POLICY, None, datetime(2026, 1, 1))


EXPIRY = parse_policy(
    {
        "name": "expire_daily",
        "type": "system_iceberg_snapshot_expiry",
        "minIntervalDays": 1,
        "tables": ["db.*"],
        "content": {"olderThanDays": 5, "retainLast": 1},
    }
)


def expired(days_ago: float) -> CleanupState:
    at = NOW - timedelta(days=days_ago)
    return CleanupState(UUID, "system_iceberg_snapshot_expiry", "db.t", at, at, "success", False)


@pytest.mark.parametrize(
    ("state", "due", "score", "reason"),
    [
        (None, True, NEVER_CLEANED_SCORE, "never expired: due"),
        (expired(2), True, 2.0, "last expired 2 days ago, interval 1 day: due"),
        (expired(0.5), False, 0.5, "last expired 0.5 days ago, interval 1 day: not due"),
        (expired(-1), False, 0.0, "last expiry at 2026-03-02T06:00:00+00:00 is in the future: not due"),
    ],
)
def test_expiry_is_due_by_days_since_last_expiry(
    state: CleanupState | None, due: bool, score: float, reason: str
) -> None:
    result = evaluate("db.t", UUID, EXPIRY, state, NOW)
    assert (result.type, result.due, result.score, result.reason) == (
        "system_iceberg_snapshot_expiry",
        due,
        score,
        reason,
    )


def test_policy_json_is_one_entry_of_policies() -> None:
    assert evaluate("db.t", UUID, EXPIRY, expired(2), NOW).policy_json() == {
        "policy": "expire_daily",
        "type": "system_iceberg_snapshot_expiry",
        "due": True,
        "last_run_at": "2026-02-27T06:00:00+00:00",
        "days_since_last_run": 2.0,
        "min_interval_days": 1.0,
        "reason": "last expired 2 days ago, interval 1 day: due",
        "score": 2.0,
    }
    assert evaluate("db.t", UUID, POLICY, None, NOW).policy_json() == {
        "policy": "weekly",
        "type": "system_iceberg_orphan_file_removal",
        "due": True,
        "last_run_at": None,
        "days_since_last_run": None,
        "min_interval_days": 7.0,
        "reason": "never cleaned: due",
        "score": NEVER_CLEANED_SCORE,
    }


def test_each_policy_is_evaluated_against_its_own_kind(tmp_path: Path) -> None:
    store = SqlStateStore(f"sqlite:///{tmp_path}/state.db")
    # Cleaned of orphans 3 days ago, expired 2 days ago: expiry (daily) is due, orphan removal (weekly) is not.
    for job, days_ago in (("system_iceberg_orphan_file_removal", 3), ("system_iceberg_snapshot_expiry", 2)):
        at = NOW - timedelta(days=days_ago)
        record_attempt(store, table_uuid=UUID, table="db.t", at=at, dry_run=False, succeeded=True, job=job)
    disabled = parse_policy({**EXPIRY.to_json(), "name": "off", "tables": ["hr.people"], "enabled": False})
    policies = parse_policies([POLICY.to_json(), EXPIRY.to_json(), disabled.to_json()])
    assert [e.policy_json() for e in evaluate_policies("db.t", UUID, policies, store, NOW)] == [
        {
            "policy": "weekly",
            "type": "system_iceberg_orphan_file_removal",
            "due": False,
            "last_run_at": "2026-02-26T06:00:00+00:00",
            "days_since_last_run": 3.0,
            "min_interval_days": 7.0,
            "reason": "last cleaned 3 days ago, interval 7 days: not due",
            "score": 3.0,
        },
        {
            "policy": "expire_daily",
            "type": "system_iceberg_snapshot_expiry",
            "due": True,
            "last_run_at": "2026-02-27T06:00:00+00:00",
            "days_since_last_run": 2.0,
            "min_interval_days": 1.0,
            "reason": "last expired 2 days ago, interval 1 day: due",
            "score": 2.0,
        },
    ]
    [off] = evaluate_policies("hr.people", UUID, policies, store, NOW)
    assert (off.policy, off.due, off.reason) == ("off", False, "policy 'off' is disabled")
    assert evaluate_policies("ops.logs", UUID, policies, store, NOW) == []
