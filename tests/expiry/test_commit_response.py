"""S2 at the commit: the expiry works from the committed metadata file, never from the catalog's response.

``TrimmedResponses`` is a real SQLite catalog whose commit responses hold only the snapshots refs
point at (as a REST catalog may answer); the metadata files it writes are complete.
"""

from __future__ import annotations

from datetime import UTC, datetime

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import CommitTableResponse, Table
from pyiceberg.table.update import TableRequirement, TableUpdate

from airflow_iceberg_maint.catalog import load_table
from airflow_iceberg_maint.expiry.run import expire_snapshots
from airflow_iceberg_maint.expiry.settings import ExpireOptions
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES, INDEX_SNAPSHOTS
from tests.expiry.history import after_clock_passes, exists, reachable, snapshot_rows
from tests.orphans.scenario import SCHEMA, rows


class TrimmedResponses(SqlCatalog):
    def commit_table(
        self, table: Table, requirements: tuple[TableRequirement, ...], updates: tuple[TableUpdate, ...]
    ) -> CommitTableResponse:
        response = super().commit_table(table, requirements, updates)
        metadata = response.metadata
        pointed = {ref.snapshot_id for ref in metadata.refs.values()}
        trimmed = metadata.model_copy(update={"snapshots": [s for s in metadata.snapshots if s.snapshot_id in pointed]})
        return CommitTableResponse(metadata=trimmed, metadata_location=response.metadata_location)  # type: ignore[call-arg]


def test_a_commit_response_holding_only_ref_heads_deletes_nothing_a_kept_snapshot_needs(
    sqlite_catalog: SqlCatalog,
) -> None:
    """s1 appends A; s2 appends B (listing s1's manifest); s3 deletes A's rows; s4 appends. Expiring s1 with
    s2, s3 and s4 kept deletes s1's manifest list only: s2 still lists s1's manifest and A."""
    table = sqlite_catalog.create_table("db.events", schema=SCHEMA, properties={"format-version": "2"})
    for write in (
        lambda: table.append(rows(0, 3)),
        lambda: table.append(rows(3, 3)),
        lambda: table.delete("id < 3"),
        lambda: table.append(rows(6, 3)),
    ):
        write()
        after_clock_passes(table.metadata.snapshots[-1].timestamp_ms)
    s1, s2 = table.metadata.snapshots[0], table.metadata.snapshots[1]
    trimmed = TrimmedResponses("default", **sqlite_catalog.properties)
    table = load_table(trimmed, "db.events")
    before = reachable(table)
    rows_before = snapshot_rows(table)
    kept_paths = {m.manifest_path for m in s2.manifests(table.io)}

    report = expire_snapshots(
        table,
        ExpireOptions(older_than=datetime.now(UTC), retain_last=3),
        sources=[INDEX_FILES],
        pins=[INDEX_SNAPSHOTS],
    )

    after = load_table(sqlite_catalog, "db.events")
    assert report.expired_snapshot_ids == [s1.snapshot_id]
    assert report.deleted_files == [s1.manifest_list]
    assert set(report.deleted_files) == before - reachable(after)
    assert all(exists(after, p) for p in kept_paths) and all(exists(after, p) for p in reachable(after))
    assert (
        snapshot_rows(after)[f"snapshot:{s2.snapshot_id}"]
        == rows_before[f"snapshot:{s2.snapshot_id}"]
        == list(range(6))
    )
