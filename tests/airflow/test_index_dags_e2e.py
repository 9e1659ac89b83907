"""The index maintenance DAGs end to end with ``dag.test()`` on the real metadata database and a SQLite
catalog: the writer's commit is an asset event and makes the lag watcher fire, the event-triggered
DAG commits an extract, the index ends up current and lookups through it are exact."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from airflow.dag_processing.dagbag import DagBag
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.airflow.index_maintenance import tables_to_maintain
from airflow_iceberg_maint.airflow.triggers.index_events import IcebergIndexLagEventTrigger
from airflow_iceberg_maint.index.lifecycle.lag import index_lag
from airflow_iceberg_maint.index.lifecycle.references import extract_file_batches
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.policy.index_definitions import load_index_definitions
from tests.airflow.helpers import task_states, xcom
from tests.airflow.index_helpers import TABLE, assert_lookups_exact, extract_snapshots
from tests.airflow.test_index_event_trigger import MetastoreAssetState, Running
from tests.support.airflow_dags import DAGS

EVENT = "iceberg_index_maintenance_event_triggered"
SCHEDULED = "iceberg_index_maintenance_scheduled"
WRITER = "iceberg_demo_writer"
ASSET_URI = "iceberg://iceberg_default/demo/events"


@pytest.fixture(scope="module")
def dags() -> dict:
    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    return bag.dags


def asset_events(uri: str) -> list[tuple[str | None, str | None]]:
    """(source DAG, source run) of every event of the asset, oldest first."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (
            session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.uri == uri)
            .order_by(AssetEvent.id)
            .all()
        )
        return [(row.source_dag_id, row.source_run_id) for row in rows]


def queued_for(dag_id: str) -> list[str]:
    """URIs of the assets whose events wait to schedule a run of ``dag_id`` (what the scheduler reads)."""
    from airflow.models.asset import AssetDagRunQueue, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (
            session.query(AssetModel.uri)
            .join(AssetDagRunQueue, AssetDagRunQueue.asset_id == AssetModel.id)
            .filter(AssetDagRunQueue.target_dag_id == dag_id)
            .all()
        )
        return [uri for (uri,) in rows]


def lag_watcher(dag: Any) -> IcebergIndexLagEventTrigger:
    """The events_by_id lag watcher of the DAG's table asset, inflated from its serialized form."""
    [asset] = dag.timetable.asset_condition.objects
    [watcher] = [
        w.trigger
        for w in asset.watchers
        if isinstance(w.trigger, IcebergIndexLagEventTrigger) and w.trigger.indexes == ["events_by_id"]
    ]
    _, kwargs = watcher.serialize()
    return IcebergIndexLagEventTrigger(**{**kwargs, "poll_interval": 0.05})


def write(dags: dict, rows: int) -> dict:
    run = dags[WRITER].test(run_conf={"rows": rows})
    assert run.state == "success"
    return xcom(WRITER, run.run_id, "append_rows")


def maintain(dags: dict, dag_id: str) -> tuple[str, dict[tuple[str, int], str]]:
    run = dags[dag_id].test()
    assert run.state == "success"
    return run.run_id, task_states(dag_id, run.run_id)


def assert_only_referenced_build_files(catalog: SqlCatalog, index: str) -> None:
    """Under the index's build directories only the region files of its extracts are left."""
    table = catalog.load_table(TABLE)
    metadata, _, _ = IndexStore(table).load(index)
    referenced = {p for batch in extract_file_batches(table, metadata) for p in batch}
    data = Path(metadata.location.removeprefix("file://")) / "data"
    left = {f"file://{p}" for p in data.glob("build-*/**/*") if p.is_file()}
    assert left and left <= referenced


def test_tables_to_maintain_follow_the_triggering_assets() -> None:
    definitions = load_index_definitions(DAGS / "iceberg_indexes.yaml")
    assert tables_to_maintain(definitions, [ASSET_URI]) == [TABLE]
    assert tables_to_maintain(definitions, ["iceberg://iceberg_default/other/table"]) == []
    assert tables_to_maintain(definitions, []) == [TABLE]  # a manual or scheduled run: every defined table


def test_writer_commit_fires_the_watcher_then_the_dag_commits_an_extract(dags: dict, catalog: SqlCatalog) -> None:
    events_before = len(asset_events(ASSET_URI))
    first = write(dags, 40)
    assert (first["first_id"], first["rows"]) == (0, 40)
    assert [source for source, _ in asset_events(ASSET_URI)[events_before:]] == [WRITER]

    # The first maintenance run creates both indexes and commits an extract of each (events_by_kind
    # by a build over 2 key-range shards); the table was never cleaned, so orphan removal is due
    # and runs (finding nothing to delete).
    run_id, states = maintain(dags, EVENT)
    assert states == {
        ("tables_to_maintain", -1): "success",
        ("create_missing_indexes", -1): "success",
        ("check_index_lag", -1): "success",
        ("commit_index_extract", 0): "success",
        ("indexes_to_shard", -1): "success",
        ("plan_index_shards", -1): "success",
        ("build_index_shard", 0): "success",
        ("build_index_shard", 1): "success",
        ("sharded_builds_to_commit", -1): "success",
        ("commit_sharded_extract", 0): "success",
        ("indexes_to_expire", -1): "success",
        ("expire_index_extracts", 0): "success",
        ("expire_index_extracts", 1): "success",
        ("evaluate_orphan_removal", -1): "success",
        ("remove_orphan_files", 0): "success",
    }
    assert [r["created"] for r in xcom(EVENT, run_id, "create_missing_indexes")] == [True, True]
    assert xcom(EVENT, run_id, "remove_orphan_files", map_index=0)["orphan_file_count"] == 0
    for index in ("events_by_id", "events_by_kind"):
        assert extract_snapshots(catalog, index) == [first["snapshot_id"]]
    sharded = xcom(EVENT, run_id, "commit_sharded_extract", map_index=0)
    assert {k: sharded[k] for k in ("index", "shards", "mode", "committed", "entries")} == {
        "index": "events_by_kind",
        "shards": 2,
        "mode": "full",
        "committed": True,
        "entries": 40,
    }
    assert sorted(xcom(EVENT, run_id, "build_index_shard", map_index=i)["entries"] for i in (0, 1)) == [20, 20]
    assert_lookups_exact(catalog, "events_by_kind", "kind", ["click", "view", "purchase", "signup"])
    assert_only_referenced_build_files(catalog, "events_by_kind")

    state = MetastoreAssetState("iceberg_default.demo.events.e2e", "iceberg://iceberg_default/demo/events-e2e")

    async def watch(expected: int) -> list[dict]:
        # Inflated afresh each time, as a (re)started triggerer does; the cursor is in the store.
        watcher = lag_watcher(dags[EVENT])
        watcher.asset_state_store = state  # type: ignore[assignment]  # the metastore's store stands in for Airflow's accessors
        running = Running(watcher)
        await running.wait_for(expected)
        assert await running.quiet() == expected  # never again at the next polls
        await running.stop()
        return running.events

    assert asyncio.run(watch(0)) == []  # current after the run
    write(dags, 25)  # dag.test() needs the main thread, so the writer runs between two watches
    assert queued_for(EVENT) == [ASSET_URI]  # the writer's outlet event queues a run of the event DAG
    [event] = asyncio.run(watch(1))
    assert asyncio.run(watch(0)) == []  # the crossing is reported once
    second = catalog.load_table(TABLE).current_snapshot().snapshot_id
    assert event["table_snapshot_id"] == second
    assert [(i["index"], i["reasons"]) for i in event["indexes"]] == [("events_by_id", ["1 snapshot(s) behind > 0"])]
    assert [source for source, _ in asset_events(ASSET_URI)[events_before:]] == [WRITER, WRITER]

    # The run the event schedules: only events_by_id is past its threshold (events_by_kind allows
    # 2 snapshots); orphan removal was just done, so it is not due.
    run_id, states = maintain(dags, EVENT)
    assert xcom(EVENT, run_id, "check_index_lag") == [{"table": TABLE, "index": "events_by_id"}]
    commit = xcom(EVENT, run_id, "commit_index_extract", map_index=0)
    assert (commit["index"], commit["source_table_snapshot_id"], commit["entries"], commit["committed"]) == (
        "events_by_id",
        second,
        65,
        True,
    )
    assert (commit["requested_mode"], commit["mode"]) == ("incremental", "incremental")
    assert states[("remove_orphan_files", -1)] == "skipped"
    assert xcom(EVENT, run_id, "evaluate_orphan_removal", key="evaluations")[0]["due"] is False

    table = catalog.load_table(TABLE)
    metadata, _, _ = IndexStore(table).load("events_by_id")
    assert index_lag(table, "events_by_id", metadata).stale is False
    assert extract_snapshots(catalog, "events_by_id") == [first["snapshot_id"], second]
    assert_lookups_exact(catalog, "events_by_id", "id", [0, 39, 40, 64, 65])

    # Once more: a third extract makes the expiry (retain_last 2) drop the oldest one.
    write(dags, 5)
    run_id, _ = maintain(dags, EVENT)
    expired = {
        xcom(EVENT, run_id, "expire_index_extracts", map_index=i)["index"]: len(
            xcom(EVENT, run_id, "expire_index_extracts", map_index=i)["expired_extract_ids"]
        )
        for i in (0, 1)
    }
    assert expired == {"events_by_id": 1, "events_by_kind": 0}
    assert len(extract_snapshots(catalog, "events_by_id")) == 2
    assert_lookups_exact(catalog, "events_by_id", "id", [0, 64, 69, 70])


def test_scheduled_dag_does_the_same_work_and_nothing_when_current(dags: dict, catalog: SqlCatalog) -> None:
    write(dags, 30)
    _, states = maintain(dags, SCHEDULED)
    assert states[("commit_index_extract", 0)] == states[("commit_sharded_extract", 0)] == "success"
    run_id, states = maintain(dags, SCHEDULED)
    assert xcom(SCHEDULED, run_id, "check_index_lag") == []
    assert states[("commit_index_extract", -1)] == states[("commit_sharded_extract", -1)] == "skipped"
    assert states[("expire_index_extracts", 0)] == "success"
    assert_lookups_exact(catalog, "events_by_kind", "kind", ["click", "view", "purchase", "signup"])
