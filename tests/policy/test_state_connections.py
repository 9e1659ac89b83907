"""The state stores of a process share one pool of connections to a server database.

A worker process makes a store per task (leases, cleanup records, status records), and a fleet scan
one per table; connections that stayed open in each store's own pool until a garbage collection
used up PostgreSQL's connections in a long run ("too many clients already").
"""

from __future__ import annotations

import logging
import os
import uuid
from datetime import timedelta

import pytest
import sqlalchemy as sa

from airflow_iceberg_maint.state.cleanup import SqlStateStore, state_engine
from airflow_iceberg_maint.state.leases import try_take
from airflow_iceberg_maint.state.sql_leases import SqlLeases
from airflow_iceberg_maint.state.status_records import SqlRecords
from tests.support.services import service

STORES = 40
POOL_SIZE = 5  # SQLAlchemy's default


def _connections(url: str, application: str) -> int:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = :a AND pid <> pg_backend_pid()"
        return int(conn.execute(sa.text(query), {"a": application}).scalar_one())


@pytest.mark.postgres
def test_stores_kept_alive_and_used_hold_at_most_one_pool_of_connections() -> None:
    application = f"state-{uuid.uuid4().hex[:8]}"
    url = f"{service('TEST_PG_URL')}?application_name={application}"
    kept: list[object] = []  # alive to the end: no garbage collection may close what they opened
    for i in range(STORES):
        leases, records, cleanup = SqlLeases(url), SqlRecords(url), SqlStateStore(url)
        mine, _lease = try_take(leases, f"db.t{i}-{application}", "owner", timedelta(seconds=60), logging.getLogger())
        assert mine
        records.put(f"key-{application}-{i}", {"i": i}, "a record")
        assert records.get(f"key-{application}-{i}") == {"i": i}
        assert cleanup.get(str(uuid.uuid4())) is None
        kept += [leases, records, cleanup]
    assert 1 <= _connections(url, application) <= POOL_SIZE  # one kept for the next store, never one a store


@pytest.mark.postgres
def test_a_forked_child_opens_its_own_connections_and_the_parents_stay_usable() -> None:
    url = service("TEST_PG_URL")
    records = SqlRecords(url)
    records.put("fork-parent", {"by": "parent"}, "a record")
    parent_engine = state_engine(url)
    pid = os.fork()
    if pid == 0:  # the child: a new engine, its own connection; it ends as a task process does
        ok = False
        try:
            child = SqlRecords(url)
            child.put("fork-child", {"by": "child"}, "a record")
            ok = state_engine(url) is not parent_engine and child.get("fork-parent") == {"by": "parent"}
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert records.get("fork-child") == {"by": "child"}  # the parent's pooled connection still answers
    assert state_engine(url) is parent_engine


def test_an_in_memory_sqlite_store_keeps_its_tables_between_statements() -> None:
    records = SqlRecords("sqlite://")
    records.put("k", {"a": 1}, "a record")
    assert records.get("k") == {"a": 1}
    assert SqlStateStore("sqlite:///:memory:").get(str(uuid.uuid4())) is None
