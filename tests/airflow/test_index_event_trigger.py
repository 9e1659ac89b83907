"""The index-lag event trigger: fires once per threshold crossing, never at every poll, and keeps its
cursor in the asset state store of the real metadata database across a triggerer restart."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from airflow._shared.module_loading import import_string
from airflow.triggers.base import BaseEventTrigger
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.airflow.operators.index import IcebergCommitIndexExtractOperator
from airflow_iceberg_maint.airflow.operators.index_definitions import IcebergCreateMissingIndexesOperator
from airflow_iceberg_maint.airflow.triggers.index_events import IcebergIndexLagEventTrigger, advance
from airflow_iceberg_maint.index.lifecycle.lag import FileCounts, IndexLag
from airflow_iceberg_maint.policy.lag_threshold import CheckedLag, LagThreshold
from tests.airflow.helpers import task_context
from tests.airflow.index_helpers import TABLE, append, events_table
from tests.support.airflow_dags import DAGS

POLL = 0.05
QUIET = 0.6  # > 10 polls


class MetastoreAssetState:
    """One asset's state store on the metadata database, as the Execution API keeps it for watchers
    (values JSON-encoded in the ``asset_state_store`` table); the triggerer reaches the same rows."""

    def __init__(self, name: str, uri: str) -> None:
        from airflow.models.asset import AssetModel
        from airflow.utils.session import create_session

        with create_session() as session:
            asset = AssetModel(name=name, uri=uri, group="iceberg")
            session.add(asset)
            session.flush()
            self.asset_id = asset.id

    def _backend(self) -> tuple[Any, Any]:
        from airflow._shared.state import AssetScope
        from airflow.state.metastore import MetastoreBackend

        return MetastoreBackend(), AssetScope(asset_id=self.asset_id)

    def get(self, key: str, default: Any = None) -> Any:
        backend, scope = self._backend()
        value = backend.get(scope, key)
        return default if value is None else json.loads(value)

    def set(self, key: str, value: Any) -> None:
        backend, scope = self._backend()
        backend.set(scope, key, json.dumps(value))


@pytest.fixture
def state() -> MetastoreAssetState:
    suffix = uuid.uuid4().hex[:8]
    return MetastoreAssetState(f"iceberg_default.demo.events.{suffix}", f"iceberg://iceberg_default/demo/{suffix}")


@pytest.fixture
def indexed(catalog: SqlCatalog) -> SqlCatalog:
    events_table(catalog)
    context = task_context()
    IcebergCreateMissingIndexesOperator(task_id="c", definitions_file=str(DAGS / "iceberg_indexes.yaml")).execute(
        context
    )
    commit_extracts()
    return catalog


def commit_extracts() -> None:
    for index in ("events_by_id", "events_by_kind"):
        IcebergCommitIndexExtractOperator(task_id="x", table=TABLE, index=index).execute(task_context())


def trigger(**kwargs: Any) -> IcebergIndexLagEventTrigger:
    return IcebergIndexLagEventTrigger(
        table=TABLE,
        iceberg_conn_id="iceberg_default",
        indexes=["events_by_id"],
        max_snapshots_behind=0,
        poll_interval=POLL,
        **kwargs,
    )


class Running:
    """A trigger running on the loop as in the triggerer, its events collected in order."""

    def __init__(self, trigger: BaseEventTrigger) -> None:
        self.events: list[dict] = []
        self.task = asyncio.create_task(self._collect(trigger))

    async def _collect(self, trigger: BaseEventTrigger) -> None:
        async for event in trigger.run():
            self.events.append(event.payload)

    async def wait_for(self, count: int, timeout: float = 30) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while len(self.events) < count:
            assert not self.task.done(), self.task.exception()
            assert asyncio.get_running_loop().time() < deadline, f"{len(self.events)} events, expected {count}"
            await asyncio.sleep(POLL / 2)

    async def quiet(self) -> int:
        """Let it poll for a while; the number of events so far."""
        await asyncio.sleep(QUIET)
        assert not self.task.done(), self.task.exception()
        return len(self.events)

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


def in_thread(function: Callable[..., Any], *args: Any) -> Any:
    """Catalog writes run off the loop, as they would in other processes."""
    return asyncio.to_thread(function, *args)


def test_fires_once_per_crossing_and_not_again_without_one(indexed: SqlCatalog, state: MetastoreAssetState) -> None:
    async def scenario() -> None:
        watcher = trigger()
        watcher.asset_state_store = state  # type: ignore[assignment]  # the metastore's store stands in for Airflow's accessors
        running = Running(watcher)
        assert await running.quiet() == 0  # the index is current

        table = await in_thread(append, indexed, 5)
        await running.wait_for(1)
        [event] = running.events
        assert (event["table"], event["table_snapshot_id"]) == (TABLE, table.current_snapshot().snapshot_id)
        assert [(i["index"], i["snapshots_behind"], i["reasons"]) for i in event["indexes"]] == [
            ("events_by_id", 1, ["1 snapshot(s) behind > 0"])
        ]

        assert await running.quiet() == 1  # still lagging: a standing condition is not an event
        await in_thread(append, indexed, 5)
        assert await running.quiet() == 1  # lagging more, behind the same extract: no new crossing

        await in_thread(commit_extracts)  # back within the threshold ...
        assert await running.quiet() == 1
        table = await in_thread(append, indexed, 5)  # ... and across it again
        await running.wait_for(2)
        assert running.events[1]["table_snapshot_id"] == table.current_snapshot().snapshot_id
        assert await running.quiet() == 2
        await running.stop()

    asyncio.run(scenario())


def test_cursor_survives_a_triggerer_restart(indexed: SqlCatalog, state: MetastoreAssetState) -> None:
    first = trigger()
    classpath, kwargs = first.serialize()

    async def before_restart() -> int:
        first.asset_state_store = state  # type: ignore[assignment]  # the metastore's store stands in for Airflow's accessors
        running = Running(first)
        await in_thread(append, indexed, 5)
        await running.wait_for(1)
        assert await running.quiet() == 1
        await running.stop()  # the triggerer goes away
        return running.events[0]["indexes"][0]["extract_snapshot_id"]

    extract_snapshot = asyncio.run(before_restart())
    assert state.get(first.cursor_key) == {"events_by_id": extract_snapshot}

    async def after_restart() -> None:
        # A new triggerer inflates the trigger from its row's kwargs and injects the asset's store.
        again = import_string(classpath)(**kwargs)
        assert BaseEventTrigger.hash(*again.serialize()) == BaseEventTrigger.hash(classpath, kwargs)
        again.asset_state_store = state
        running = Running(again)
        assert await running.quiet() == 0  # the crossing was already reported
        await in_thread(commit_extracts)
        await in_thread(append, indexed, 5)
        await running.wait_for(1)  # the next crossing is
        await running.stop()

    asyncio.run(after_restart())

    async def without_store() -> list[dict]:
        # Without a store the cursor lives in memory: a restart repeats the standing crossing once.
        running = Running(import_string(classpath)(**kwargs))
        await running.wait_for(1)
        assert await running.quiet() == 1
        await running.stop()
        return running.events

    assert len(asyncio.run(without_store())) == 1


def test_every_index_of_the_table_and_a_missing_table(catalog: SqlCatalog) -> None:
    async def scenario() -> None:
        # Without a table (yet), the watcher waits instead of failing.
        running = Running(
            IcebergIndexLagEventTrigger(table=TABLE, iceberg_conn_id="iceberg_default", poll_interval=POLL)
        )
        assert await running.quiet() == 0
        await in_thread(events_table, catalog)
        assert await running.quiet() == 0  # no index yet
        await in_thread(
            IcebergCreateMissingIndexesOperator(
                task_id="c", definitions_file=str(DAGS / "iceberg_indexes.yaml")
            ).execute,
            task_context(),
        )
        await running.wait_for(1)
        if len(running.events[0]["indexes"]) == 1:  # it polled between the two indexes' creation
            await running.wait_for(2)
        reported = sorted((i["index"], i["reasons"]) for event in running.events for i in event["indexes"])
        assert reported == [("events_by_id", ["no extract yet"]), ("events_by_kind", ["no extract yet"])]
        assert await running.quiet() == len(running.events)  # each index once, nothing more
        await running.stop()

    asyncio.run(scenario())


def lag(index: str, extract: int | None, behind: int) -> CheckedLag:
    value = IndexLag(index, 100, extract, behind, None, FileCounts(behind, 0), FileCounts(0, 0), behind > 0)
    return CheckedLag(value, LagThreshold(snapshots=1).exceeded(value))


def test_advance_tracks_crossings_per_index_and_extract() -> None:
    cursor, crossed = advance({}, [lag("a", 7, 2), lag("b", 7, 1)])
    assert (cursor, [c.lag.index for c in crossed]) == ({"a": 7}, ["a"])
    cursor, crossed = advance(cursor, [lag("a", 7, 3), lag("b", 7, 2)])
    assert (cursor, [c.lag.index for c in crossed]) == ({"a": 7, "b": 7}, ["b"])
    cursor, crossed = advance(cursor, [lag("a", 9, 2), lag("b", 7, 0)])  # a: new extract, still lagging
    assert (cursor, [c.lag.index for c in crossed]) == ({"a": 9}, ["a"])
    assert advance(cursor, []) == ({}, [])  # dropped indexes leave the cursor


def test_a_read_error_is_logged_and_polled_again(indexed: SqlCatalog, state: MetastoreAssetState) -> None:
    table = indexed.load_table(TABLE)
    metadata_dir = Path(table.location().removeprefix("file://")) / "index" / "events_by_id" / "metadata"
    broken = metadata_dir / "99999.metadata.json"

    async def scenario() -> None:
        watcher = trigger()
        watcher.asset_state_store = state  # type: ignore[assignment]  # the metastore's store stands in for Airflow's accessors
        running = Running(watcher)
        broken.write_text("{not json")  # the newest metadata version cannot be read
        await in_thread(append, indexed, 5)
        assert await running.quiet() == 0  # nothing reported from unreadable metadata, still polling
        broken.unlink()
        await running.wait_for(1)
        assert running.events[0]["indexes"][0]["reasons"] == ["1 snapshot(s) behind > 0"]
        await running.stop()

    asyncio.run(scenario())
