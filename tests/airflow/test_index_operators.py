"""The index operators and the lag sensor against a real SQLite catalog, called as a worker calls them."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.airflow.operators.index import (
    IcebergCommitIndexExtractOperator,
    IcebergExpireIndexExtractsOperator,
)
from airflow_iceberg_maint.airflow.operators.index_definitions import (
    EXPIRE_KEY,
    LAGS_KEY,
    SHARDED_KEY,
    IcebergCreateMissingIndexesOperator,
    IcebergIndexLagPlanOperator,
)
from airflow_iceberg_maint.airflow.operators.orphan_planning import IcebergOrphanDueTablesOperator
from airflow_iceberg_maint.index.lifecycle.lag import index_lag
from airflow_iceberg_maint.index.metadata.store import IndexStore
from tests.airflow.helpers import pushed, task_context
from tests.airflow.index_helpers import (
    TABLE,
    append,
    assert_lookups_exact,
    events_table,
    extract_ids,
    extract_snapshots,
)
from tests.support.airflow_dags import DAGS

DEFINITIONS = str(DAGS / "iceberg_indexes.yaml")
POLICIES = str(DAGS / "iceberg_maint_policies.yaml")


def create(context: Context, **kwargs: Any) -> list[dict]:
    return IcebergCreateMissingIndexesOperator(task_id="create", definitions_file=DEFINITIONS, **kwargs).execute(
        context
    )


def plan(context: Context) -> list[dict]:
    return IcebergIndexLagPlanOperator(task_id="plan", definitions_file=DEFINITIONS).execute(context)


def commit(context: Context, index: str, **kwargs: Any) -> dict:
    return IcebergCommitIndexExtractOperator(task_id="commit", table=TABLE, index=index, **kwargs).execute(context)


def test_create_missing_indexes_once_and_skips_missing_tables(catalog: SqlCatalog, context: Context) -> None:
    assert create(context) == []  # the table does not exist yet
    events_table(catalog)
    assert create(context) == [
        {"table": TABLE, "index": "events_by_id", "created": True},
        {"table": TABLE, "index": "events_by_kind", "created": True},
    ]
    assert create(context, tables=TABLE) == [
        {"table": TABLE, "index": "events_by_id", "created": False},
        {"table": TABLE, "index": "events_by_kind", "created": False},
    ]
    assert create(context, tables=["other.table"]) == []
    assert IndexStore(catalog.load_table(TABLE)).names() == ["events_by_id", "events_by_kind"]


def test_plan_commit_and_retry_are_keyed_by_snapshot(catalog: SqlCatalog, context: Context) -> None:
    events_table(catalog)
    create(context)
    snapshot = catalog.load_table(TABLE).current_snapshot().snapshot_id
    assert plan(context) == [{"table": TABLE, "index": "events_by_id"}]
    assert pushed(context)[SHARDED_KEY] == [{"table": TABLE, "index": "events_by_kind", "shards": 2}]
    lags = pushed(context)[LAGS_KEY]
    assert [(lag["index"], lag["extract_snapshot_id"], lag["reasons"]) for lag in lags] == [
        ("events_by_id", None, ["no extract yet"]),
        ("events_by_kind", None, ["no extract yet"]),
    ]
    assert pushed(context)[EXPIRE_KEY] == [
        {"table": TABLE, "index": "events_by_id", "retain_last": 2},
        {"table": TABLE, "index": "events_by_kind", "retain_last": 2},
    ]

    first = commit(context, "events_by_id")
    assert first.pop("seconds") >= 0
    [extract_id] = extract_ids(catalog, "events_by_id")
    assert first == {
        "table": TABLE,
        "index": "events_by_id",
        "requested_mode": "incremental",
        "extract_id": extract_id,
        "source_table_snapshot_id": snapshot,
        "mode": "full",
        "entries": 40,
        "region_files_written": 1,
        "region_files_reused": 0,
        "committed": True,
    }
    # A retry of a try that committed (or a full rebuild request for the same snapshot) commits nothing.
    for full in (False, True):
        assert commit(context, "events_by_id", full=full) == {
            "table": TABLE,
            "index": "events_by_id",
            "requested_mode": "full" if full else "incremental",
            "extract_id": extract_id,
            "source_table_snapshot_id": snapshot,
            "mode": None,
            "committed": False,
        }
    assert extract_snapshots(catalog, "events_by_id") == [snapshot]
    assert plan(context) == []
    assert pushed(context)[SHARDED_KEY] == [{"table": TABLE, "index": "events_by_kind", "shards": 2}]
    assert_lookups_exact(catalog, "events_by_id", "id", [0, 17, 39, 40])


def test_thresholds_come_from_the_definitions(catalog: SqlCatalog, context: Context) -> None:
    events_table(catalog)
    create(context)
    commit(context, "events_by_id", full="true")
    commit(context, "events_by_kind")
    assert plan(context) == []
    append(catalog, 5)
    append(catalog, 5)
    # events_by_id lags at any new snapshot; events_by_kind only beyond 2 snapshots or 10 files.
    assert plan(context) == [{"table": TABLE, "index": "events_by_id"}]
    assert [lag["reasons"] for lag in pushed(context)[LAGS_KEY]] == [["2 snapshot(s) behind > 0"], []]
    append(catalog, 5)
    assert plan(context) == [{"table": TABLE, "index": "events_by_id"}]
    assert pushed(context)[SHARDED_KEY] == [{"table": TABLE, "index": "events_by_kind", "shards": 2}]
    assert pushed(context)[LAGS_KEY][1]["reasons"] == ["3 snapshot(s) behind > 2"]


def test_commit_at_an_older_snapshot_then_current(catalog: SqlCatalog, context: Context) -> None:
    events_table(catalog)
    create(context)
    old = catalog.load_table(TABLE).current_snapshot().snapshot_id
    append(catalog, 10)
    summary = commit(context, "events_by_kind", snapshot_id=str(old))
    assert (summary["source_table_snapshot_id"], summary["entries"]) == (old, 40)
    summary = commit(context, "events_by_kind")
    assert summary["entries"] == 50 and summary["committed"] is True
    table = catalog.load_table(TABLE)
    metadata, _, _ = IndexStore(table).load("events_by_kind")
    assert index_lag(table, "events_by_kind", metadata).stale is False
    assert_lookups_exact(catalog, "events_by_kind", "kind", ["click", "view", "purchase", "signup", "none"])


def test_expire_keeps_the_newest_and_a_retry_finds_nothing(catalog: SqlCatalog, context: Context) -> None:
    events_table(catalog)
    create(context)
    for _ in range(3):
        commit(context, "events_by_id")
        append(catalog, 3)
    commit(context, "events_by_id")
    snapshots = extract_snapshots(catalog, "events_by_id")
    ids = extract_ids(catalog, "events_by_id")
    assert len(snapshots) == len(set(snapshots)) == 4
    expire = IcebergExpireIndexExtractsOperator(task_id="expire", table=TABLE, index="events_by_id", retain_last="2")
    result = expire.execute(context)
    assert result == {
        "table": TABLE,
        "index": "events_by_id",
        "expired_extract_ids": ids[:2],
        "deleted_files": 4,
        "failed_count": 0,
    }
    assert extract_snapshots(catalog, "events_by_id") == snapshots[2:]
    assert expire.execute(context)["expired_extract_ids"] == []
    assert_lookups_exact(catalog, "events_by_id", "id", [0, 48, 49])


def test_bad_input_fails_without_retry(catalog: SqlCatalog, context: Context, tmp_path: Path) -> None:
    events_table(catalog)
    with pytest.raises(AirflowFailException, match=r"index 'events_by_id': table .* has no such index"):
        commit(context, "events_by_id")
    bad = tmp_path / "indexes.yaml"
    bad.write_text("- table: demo.events\n  indexes:\n    - name: by_x\n      ordering: nope\n")
    with pytest.raises(AirflowFailException, match=r"nope"):
        IcebergCreateMissingIndexesOperator(task_id="c", definitions_file=str(bad)).execute(context)
    bad.write_text(
        "- table: demo.events\n  indexes:\n    - name: by_id\n      ordering: id\n      lag: {max_snapshot: 1}\n"
    )
    with pytest.raises(AirflowFailException, match=r"by_id\) lag: unknown key\(s\) max_snapshot"):
        IcebergIndexLagPlanOperator(task_id="p", definitions_file=str(bad)).execute(context)
    with pytest.raises(AirflowFailException, match=r"give --retain-last N, --older-than TIMESTAMP, or both"):
        create(context)
        IcebergExpireIndexExtractsOperator(task_id="e", table=TABLE, index="events_by_id").execute(context)
    with pytest.raises(AirflowFailException, match=r"argument older_than: timestamp .* needs a time zone"):
        IcebergExpireIndexExtractsOperator(
            task_id="e", table=TABLE, index="events_by_id", older_than="2026-01-01T00:00:00"
        ).execute(context)


def test_orphan_evaluation_of_named_tables(catalog: SqlCatalog, context: Context) -> None:
    events_table(catalog)
    jobs = IcebergOrphanDueTablesOperator(
        task_id="o",
        tables=[TABLE, "demo.missing"],
        policy_file=POLICIES,
    ).execute(context)
    assert len(jobs) == 1
    job = jobs[0]
    assert (job["table"], job["policy"], job["dry_run"]) == (TABLE, "remove_orphans_weekly", False)
    assert job["location"] == catalog.load_table(TABLE).metadata.location
    age = datetime.now(UTC) - datetime.fromisoformat(job["older_than"])
    assert 3 * 86400 - 60 < age.total_seconds() < 3 * 86400 + 60
    assert [e["reason"] for e in pushed(context)["evaluations"]] == ["never cleaned: due"]


def test_incremental_by_default_full_on_request(catalog: SqlCatalog, context: Context) -> None:
    events_table(catalog)
    create(context)
    # No base extract yet: the incremental request falls back to a full build, and says so.
    first = commit(context, "events_by_id")
    assert (first["requested_mode"], first["mode"], first["entries"]) == ("incremental", "full", 40)
    append(catalog, 5)
    second = commit(context, "events_by_id")
    assert (second["requested_mode"], second["mode"], second["entries"]) == ("incremental", "incremental", 45)
    append(catalog, 5)
    third = commit(context, "events_by_id", full="True")
    assert (third["requested_mode"], third["mode"], third["entries"], third["region_files_reused"]) == (
        "full",
        "full",
        50,
        0,
    )
    assert_lookups_exact(catalog, "events_by_id", "id", [0, 40, 44, 45, 49, 50])


def test_refresh_logs_its_phases_in_the_task_log(
    catalog: SqlCatalog, context: Context, capsys: pytest.CaptureFixture[str]
) -> None:
    events_table(catalog)
    create(context)
    capsys.readouterr()
    result = commit(context, "events_by_id")
    files = len(catalog.load_table(TABLE).inspect.files())
    out = capsys.readouterr().out
    assert f"reading data files: 0 of {files}, started" in out
    assert f"reading data files: {files} of {files}, done" in out
    # The number of regions is known only once the merge ends: no total.
    assert f"building regions: {result['region_files_written']}, done" in out


def test_sharded_build_operators_plan_build_and_commit_once(catalog: SqlCatalog, context: Context) -> None:
    from airflow_iceberg_maint.airflow.operators.index_shards import (
        COMMITS_KEY,
        IcebergBuildIndexShardOperator,
        IcebergPlanIndexShardsOperator,
    )

    events_table(catalog, 80)
    create(context)
    shards = IcebergPlanIndexShardsOperator(
        task_id="plan_shards", indexes=[{"table": TABLE, "index": "events_by_id", "shards": 3}]
    ).execute(context)
    [to_commit] = pushed(context)[COMMITS_KEY]
    assert [s["shard"] for s in shards] == [0, 1, 2] and to_commit["index"] == "events_by_id"
    results = [IcebergBuildIndexShardOperator(task_id="shard", **s).execute(context) for s in shards]
    assert sorted(r["entries"] for r in results) == [26, 27, 27]

    class Pulling:  # the shard results, as XCom gives them (None for a failed shard)
        def __init__(self) -> None:
            self.pulled: list = []

        def xcom_pull(self, task_ids: str) -> list:
            assert task_ids == "build_index_shard"
            return self.pulled

    ti = Pulling()
    ti.pulled = [results[0], None, results[2]]
    with pytest.raises(AirflowFailException, match=r"no successful result of shard\(s\) \[1\]; nothing committed"):
        commit(task_context(ti), "events_by_id", sharded_build=to_commit["sharded_build"])
    assert extract_ids(catalog, "events_by_id") == []
    ti.pulled = results
    first = commit(task_context(ti), "events_by_id", sharded_build=to_commit["sharded_build"])
    again = commit(task_context(ti), "events_by_id", sharded_build=to_commit["sharded_build"])
    assert (first["committed"], first["shards"], first["entries"], again["committed"]) == (True, 3, 80, False)
    assert first["extract_id"] == again["extract_id"] == extract_ids(catalog, "events_by_id")[0]
    assert_lookups_exact(catalog, "events_by_id", "id", [0, 26, 27, 53, 79, 80])
