"""The scheduled per-table maintenance flow on two tables at once, on two workers: the lease keeps each
table's steps apart (two runs at once compete for the same tables), the orphans go, nothing live does."""

from __future__ import annotations

import itertools
from typing import Any

from pyiceberg.catalog.sql import SqlCatalog

from tests.celery.helpers import exists, live_files, make_table, plant_orphans
from tests.support.celery import Deployment

TABLES = ("maint.a", "maint.b")
DAG = "celery_table_maintenance"


def _intervals(deployment: Deployment, runs: list[str]) -> list[dict[str, Any]]:
    conn = __import__("psycopg2").connect(deployment.state_dsn)
    try:
        with conn, conn.cursor() as cur:
            cur.execute(
                "select tbl, task, run_id, host, started, ended from celery_lease_intervals where run_id = any(%s)",
                (runs,),
            )
            names = ("table", "task", "run_id", "host", "started", "ended")
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    finally:
        conn.close()


def test_two_runs_maintain_two_tables_at_once_and_the_lease_keeps_each_tables_steps_apart(
    celery_airflow: Deployment, catalog: SqlCatalog
) -> None:
    endpoint = celery_airflow.catalog_properties["s3.endpoint"]
    planted, live = {}, {}
    for name in TABLES:
        table = make_table(catalog, name, appends=3)
        planted[name] = plant_orphans(endpoint, table, 3, "maint")
        live[name] = live_files(table)

    runs = [celery_airflow.trigger(DAG, {}) for _ in range(2)]
    assert [celery_airflow.wait_run(DAG, run) for run in runs] == ["success", "success"]

    intervals = _intervals(celery_airflow, runs)
    # Each run's expiry and orphan removal of each table held the lease: 2 runs x 2 tables x 2 steps.
    assert sorted((i["table"], i["task"]) for i in intervals) == sorted(
        (t, f"maintain_table.{task}")
        for t in TABLES
        for task in ("expire_snapshots", "remove_orphan_files")
        for _ in range(2)
    )
    for name in TABLES:
        mine = sorted((i for i in intervals if i["table"] == name), key=lambda i: i["started"])
        for before, after in itertools.pairwise(mine):
            assert before["ended"] <= after["started"], (name, before, after)  # never two at once
    hosts = sorted((i["table"], i["task"], i["run_id"][-4:], i["host"]) for i in intervals)
    print("maintenance steps, which worker ran what:", hosts)
    tables_at_once = any(
        a["started"] < b["ended"] and b["started"] < a["ended"]
        for a in intervals
        for b in intervals
        if a["table"] == "maint.a" and b["table"] == "maint.b"
    )
    print("the two tables maintained at the same time:", tables_at_once)

    for name in TABLES:
        assert not any(exists(endpoint, uri) for uri in planted[name])
        assert all(exists(endpoint, uri) for uri in live[name])
        assert len(catalog.load_table(name).scan().to_arrow()) == 3 * 50
    # One run deleted each table's orphans; the other, leased after it, found none.
    deleted = sorted(
        celery_airflow.xcom(DAG, run, "maintain_table.remove_orphan_files", map_index=i)["deleted_file_count"]
        for run in runs
        for i in range(2)
    )
    assert deleted == [0, 0, 3, 3]
