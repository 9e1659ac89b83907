"""The state stores of a process share one pool of connections to a server database.

A worker process makes a store per task (leases, cleanup records, status records), and a fleet scan
one per table; connections that stayed open in each store's own pool until a garbage collection
used up PostgreSQL's connections in a long run ("too many clients already").
"""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta

import pytest
import sqlalchemy as sa

from airflow_iceberg_maint.state.cleanup import SqlStateStore
from airflow_iceberg_maint.state.leases import try_take
from airflow_iceberg_maint.state.sql_leases import SqlLeases
from airflow_iceberg_maint.state.status_records import SqlRecords
from tests.support.services import service

pytestmark = pytest.mark.postgres
STORES = 40
POOL_SIZE = 5  # SQLAlchemy's default


def _connections(url: str, application: str) -> int:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = :a AND pid <> pg_backend_pid()"
        return int(conn.execute(sa.text(query), {"a": application}).scalar_one())


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
