"""Expiry on an indexed table (S13): the snapshot of each index's newest extract is kept, no index file
is deleted, lookups return exactly the table's rows, and the next refresh is incremental."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.expressions import EqualTo
from pyiceberg.table import Table

from airflow_iceberg_maint.index.lifecycle.references import index_file_batches
from airflow_iceberg_maint.index.metadata.builders import new_index_metadata
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.index.read.lookup import lookup
from airflow_iceberg_maint.index.write.incremental import refresh_index
from airflow_iceberg_maint.index.write.refresh import refresh_full
from tests.expiry.history import after_clock_passes, exists
from tests.expiry.test_expiry import expire
from tests.orphans.scenario import SCHEMA, rows

PROBES = [0, 5, 499, 700, 1001, 1003, 99_999]


def _commit(table: Table, data: pa.Table) -> int:
    table.append(data)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    after_clock_passes(snapshot.timestamp_ms)
    return snapshot.snapshot_id


def _lookups_are_exact(table: Table) -> None:
    for value in PROBES:
        found = lookup(table, "by_id", [(value,)])
        expected = table.scan(row_filter=EqualTo("id", value)).to_arrow().to_pylist()  # type: ignore[arg-type, call-arg]
        assert Counter(map(repr, found.rows.to_pylist())) == Counter(map(repr, expected)), value


def test_expiry_keeps_the_newest_extract_snapshot_and_every_index_file(sqlite_catalog: Catalog) -> None:
    table = sqlite_catalog.create_table("db.events", schema=SCHEMA)
    IndexStore(table).create(new_index_metadata(table, "by_id", ["id"], [], True, {}), "by_id")
    first = _commit(table, rows(0, 500))
    refresh_full(table, "by_id")
    extracted = _commit(table, rows(500, 500))
    refresh_full(table, "by_id")
    head = _commit(table, rows(1000, 2))  # a small lag: lookups reconcile it rather than scan
    every = {s.snapshot_id for s in table.metadata.snapshots}
    index_files = {p for batch in index_file_batches(table) for p in batch}

    report = expire(table, older_than=datetime.now(UTC), retain_last=1)

    assert report.expired_snapshot_ids == sorted(every - {head, extracted})
    assert first in report.expired_snapshot_ids
    assert report.kept_for_pins == {str(extracted): "newest extract of index by_id"}
    assert all(exists(table, p) for p in index_files)
    assert not index_files & set(report.deleted_files)
    _lookups_are_exact(table)
    assert lookup(table, "by_id", [(5,)]).mode == "reconciled"  # from the kept extract, not a scan
    assert refresh_index(table, "by_id").mode == "incremental"
    _lookups_are_exact(table)

    # The next expiry keeps the new extract's snapshot (the head) and lets the old one go.
    head2 = _commit(table, rows(1002, 2))
    report = expire(table, older_than=datetime.now(UTC), retain_last=1)
    assert report.expired_snapshot_ids == [extracted]
    assert report.kept_for_pins == {str(head): "newest extract of index by_id"}
    assert {s.snapshot_id for s in table.metadata.snapshots} == {head, head2}
    _lookups_are_exact(table)
