"""The ``system_iceberg_data_compaction`` policy type: its content, its own "days since last compaction" clock
(recorded by ``record_compaction_run``), ``due`` and the status page."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.policy.due import NEVER_CLEANED_SCORE, evaluate, evaluate_policies
from airflow_iceberg_maint.policy.policies import DATA_COMPACTION, DataCompactionContent, parse_policies, parse_policy
from airflow_iceberg_maint.policy.status_rows import Records, table_rows
from airflow_iceberg_maint.state.cleanup import SqlStateStore, record_compaction_run, record_expiry_run

NOW = datetime(2026, 3, 1, 6, tzinfo=UTC)
UUID = "0b8a6f52-6a4c-4bfb-9d0e-3c1e2f8f1a01"
#: The contract's example (docs/cli.md, "Compaction").
EXAMPLE = {
    "name": "compact_daily",
    "type": "system_iceberg_data_compaction",
    "enabled": True,
    "minIntervalDays": 1,
    "tables": ["sales.*"],
    "content": {"targetFileSizeMb": 256, "minInputFiles": 5, "strategy": "binpack", "dryRun": False},
}
WHERE = "policies.yaml: policy 'compact_daily'"


def rewrite_json(*, dry_run: bool = False, failed: int = 0) -> dict[str, Any]:
    """A rewrite-data-files report's JSON, with the contract's keys."""
    return {
        "table": "sales.orders",
        "dry_run": dry_run,
        "strategy": "binpack",
        "target_file_size_bytes": 256 * 1024 * 1024,
        "groups": [],
        "rewritten_data_files": 40,
        "added_data_files": 2,
        "removed_delete_files": 3,
        "rewritten_bytes": 4000,
        "added_bytes": 3900,
        "commits": [] if dry_run else [11, 12],
        "skipped_groups": [],
        "failed": [{"group": f"g{i}", "error": "conflict"} for i in range(failed)],
    }


def test_the_policy_of_the_contract() -> None:
    policy = parse_policy(EXAMPLE)
    assert policy.type == DATA_COMPACTION
    assert policy.content == DataCompactionContent(target_file_size_mb=256.0, min_input_files=5, strategy="binpack")
    assert policy.to_json()["content"] == {
        "targetFileSizeMb": 256.0,
        "minInputFiles": 5,
        "strategy": "binpack",
        "dryRun": False,
    }
    assert parse_policy(policy.to_json()) == policy
    defaults = parse_policy({"name": "c", "type": DATA_COMPACTION}).content
    assert defaults == DataCompactionContent(target_file_size_mb=None, min_input_files=None, strategy="binpack")
    assert parse_policy({**EXAMPLE, "content": {"strategy": "sort"}}).content.strategy == "sort"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"targetFileSizeMb": 0}, f"{WHERE} content.targetFileSizeMb: expected a number of MB > 0, got 0"),
        ({"targetFileSizeMb": -1}, f"{WHERE} content.targetFileSizeMb: must be a finite number >= 0, got -1"),
        ({"targetFileSizeMb": "256"}, f"{WHERE} content.targetFileSizeMb: expected a number, got '256'"),
        ({"minInputFiles": 0}, f"{WHERE} content.minInputFiles: expected a whole number >= 1, got 0"),
        ({"minInputFiles": 2.5}, f"{WHERE} content.minInputFiles: expected a whole number >= 1, got 2.5"),
        (
            {"strategy": "zorder"},
            f"{WHERE} content.strategy: expected one of binpack, sort (sort: the table's sort order; zorder needs "
            "columns, which only the command line and the operator take), got 'zorder'",
        ),
        ({"dryRun": "yes"}, f"{WHERE} content.dryRun: expected true or false, got 'yes'"),
        (
            {"olderThanDays": 3},
            f"{WHERE} content: unknown field 'olderThanDays' "
            "(allowed: dryRun, minInputFiles, strategy, targetFileSizeMb)",
        ),
    ],
)
def test_bad_content_is_refused_naming_the_field(content: object, message: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        parse_policy({**EXAMPLE, "content": content}, source="policies.yaml")
    assert str(caught.value) == message


def test_a_real_run_without_failed_groups_moves_the_compaction_clock_only(tmp_path: Path) -> None:
    store = SqlStateStore(f"sqlite:///{tmp_path}/state.db")
    done = record_compaction_run(store, UUID, rewrite_json(), NOW - timedelta(days=3))
    assert (done.job, done.table, done.last_success_at) == (DATA_COMPACTION, "sales.orders", NOW - timedelta(days=3))
    assert done.last_attempt_counts == {
        "rewritten_data_files": 40,
        "added_data_files": 2,
        "removed_delete_files": 3,
        "rewritten_bytes": 4000,
        "commit_count": 2,
        "failed_count": 0,
    }
    dry = record_compaction_run(store, UUID, rewrite_json(dry_run=True), NOW - timedelta(days=2))
    assert dry.last_success_at == done.last_success_at and dry.last_attempt_dry_run is True
    partial = record_compaction_run(store, UUID, rewrite_json(failed=2), NOW - timedelta(days=1))
    assert partial.last_success_at == done.last_success_at
    assert (partial.last_attempt_status, partial.last_error) == ("failed", "2 file groups failed (first: g0: conflict)")
    # Each kind keeps its own clock: an expiry since moves nothing of compaction's, and none of the others moved.
    expiry = {"table": "sales.orders", "table_uuid": UUID, "dry_run": False, "expired_snapshot_ids": [1]}
    record_expiry_run(store, {**expiry, "deleted_file_count": 1, "deleted_bytes": 9, "failed": []}, NOW)
    assert store.get(UUID, DATA_COMPACTION) == partial
    assert store.get(UUID) is None  # no orphan-removal record


def test_due_reads_days_since_the_last_compaction(tmp_path: Path) -> None:
    store = SqlStateStore(f"sqlite:///{tmp_path}/state.db")
    policy = parse_policy(EXAMPLE)
    never = evaluate("sales.orders", UUID, policy, None, NOW)
    assert (never.due, never.score, never.reason) == (True, NEVER_CLEANED_SCORE, "never compacted: due")
    record_compaction_run(store, UUID, rewrite_json(), NOW - timedelta(days=0.5))
    orphans = {**EXAMPLE, "name": "weekly", "type": "system_iceberg_orphan_file_removal", "content": {}}
    policies = parse_policies([EXAMPLE, orphans])
    each = {e.type: e for e in evaluate_policies("sales.orders", UUID, policies, store, NOW)}
    assert each[DATA_COMPACTION].policy_json() == {
        "policy": "compact_daily",
        "type": DATA_COMPACTION,
        "due": False,
        "last_run_at": (NOW - timedelta(days=0.5)).isoformat(),
        "days_since_last_run": 0.5,
        "min_interval_days": 1.0,
        "reason": "last compacted 0.5 days ago, interval 1 day: not due",
        "score": 0.5,
    }
    assert each["system_iceberg_orphan_file_removal"].reason == "never cleaned: due"


def test_the_status_row_shows_the_compaction_policy(tmp_path: Path) -> None:
    store = SqlStateStore(f"sqlite:///{tmp_path}/state.db")
    record_compaction_run(store, UUID, rewrite_json(), NOW - timedelta(days=2))
    policies = parse_policies([EXAMPLE])
    rows = {r.table: r.to_json() for r in table_rows(policies, [], Records.build(store.all(DATA_COMPACTION), []), NOW)}
    orders = rows["sales.orders"]
    assert orders["compaction"]["due"] is True
    assert orders["compaction"]["reason"] == "last compacted 2 days ago, interval 1 day: due"
    assert [(r["kind"], r["counts"]["rewritten_data_files"]) for r in orders["runs"]] == [("compaction", 40)]
    assert json.loads(json.dumps(orders))["compaction"]["last_run_at"] == (NOW - timedelta(days=2)).isoformat()
    # No compaction policy attaches: no compaction entry.
    other = table_rows(parse_policies([{**EXAMPLE, "tables": ["hr.*"]}]), [], Records.build([], []), NOW)
    assert all(r.evaluation_of(DATA_COMPACTION) is None for r in other if r.table == "sales.orders")
