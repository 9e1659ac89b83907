"""The sharded index build on two Celery workers: key ranges built apart, committed once, lookups exact."""

from __future__ import annotations

import pyarrow.compute as pc
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.index.read.lookup import lookup
from tests.celery.helpers import make_table
from tests.support.celery import WORKERS, Deployment


def test_four_shard_tasks_on_both_workers_build_one_extract_whose_lookups_are_exact(
    celery_airflow: Deployment, catalog: SqlCatalog
) -> None:
    table = make_table(catalog, "idx.events", appends=8, per_append=40)
    run = celery_airflow.trigger("celery_index_build", {"table": "idx.events", "shards": 4})
    assert celery_airflow.wait_run("celery_index_build", run) == "success"

    tries = celery_airflow.task_instances("celery_index_build", run)
    shards = {t["map_index"]: t["hostname"] for t in tries if t["task_id"] == "build_index_shard"}
    assert sorted(shards) == [0, 1, 2, 3]
    assert set(shards.values()) == set(WORKERS), shards
    print("index build shards, which worker ran what:", sorted(shards.items()))
    commit = celery_airflow.xcom("celery_index_build", run, "commit_sharded_extract", map_index=0)
    assert (commit["committed"], commit["shards"], commit["entries"]) == (True, 4, 320)

    table = catalog.load_table("idx.events")
    metadata, _, _ = IndexStore(table).load("events_by_id")
    assert [e.source_table_snapshot_id for e in metadata.extracts] == [table.current_snapshot().snapshot_id]
    everything = table.scan().to_arrow()
    for value in (0, 1, 79, 80, 159, 160, 250, 319, 320, -1):
        result = lookup(table, "events_by_id", [(value,)])
        assert result.mode == "index", (value, result.mode)
        expected = everything.filter(pc.equal(everything["id"], value)).to_pylist()
        assert result.rows.to_pylist() == expected, value
