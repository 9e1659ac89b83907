"""The delete path checks the run's lease before every batch, on every store (S15): once the lease is lost,
no further batch is sent, whichever caller deletes."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from airflow_iceberg_maint.errors import LeaseLostError
from airflow_iceberg_maint.fs.backends import storage_for
from airflow_iceberg_maint.fs.batches import delete_in_steps
from airflow_iceberg_maint.state.lease_fence import held
from airflow_iceberg_maint.state.sql_leases import SqlLeases
from tests.lease_helpers import hold
from tests.s3_helpers import s3_test_client
from tests.support.services import S3_PROPS

LOG = logging.getLogger(__name__)
TTL = timedelta(seconds=60)
FILES = 2500  # three batches of up to 1,000


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, str], Callable[[], set[str]]]:
    """(root, FileIO properties, what is under the root now) with ``FILES`` files written under it."""
    names = [f"f-{i:05d}" for i in range(FILES)]
    if request.param == "local":
        (tmp_path / "files").mkdir()
        for name in names:
            (tmp_path / "files" / name).write_bytes(b"x")
        root = f"file://{tmp_path}/files"
        return root, {}, lambda: {f"{root}/{p.name}" for p in (tmp_path / "files").iterdir()}
    endpoint, bucket = request.getfixturevalue("s3_endpoint"), request.getfixturevalue("s3_bucket")
    client = s3_test_client(endpoint)
    for name in names:
        client.put_object(Bucket=bucket, Key=f"t/{name}", Body=b"x")
    root = f"s3://{bucket}/t"

    def present() -> set[str]:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="t/")
        return {f"s3://{bucket}/{o['Key']}" for page in pages for o in page.get("Contents", [])}

    return root, {**S3_PROPS, "s3.endpoint": endpoint}, present


def test_no_delete_batch_is_sent_once_the_lease_is_lost(
    place: tuple[str, dict[str, str], Callable[[], set[str]]], tmp_path: Path
) -> None:
    root, properties, present = place
    paths = sorted(present())
    url = f"sqlite:///{tmp_path}/state.db"
    store, storage = SqlLeases(url), storage_for(root, properties)
    with held(store, hold(store, "db.t", "run A", TTL), TTL, LOG):
        assert len(delete_in_steps(storage, paths[:1000], 4).deleted) == 1000  # held: deleted
        with sa.create_engine(url).begin() as conn:  # the database's clock past A's lease; B takes it
            conn.execute(sa.text("UPDATE iceberg_maint_leases SET expires_at = expires_at - 3600"))
        b = hold(store, "db.t", "run B", TTL)
        with pytest.raises(LeaseLostError, match=r"lost before a delete batch: .*\(run B, until "):
            delete_in_steps(storage, paths[1000:], 4)
    assert present() == set(paths[1000:])
    assert store.holder("db.t") == b
