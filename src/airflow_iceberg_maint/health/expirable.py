"""What ``expire-snapshots`` with the table's defaults would expire and delete now: its dry run's plan.

The same steps as the dry run of ``expiry.run`` (the table's ``history.expire.*`` settings, the
snapshots the indexes pin, ``plan_retention``, the metadata after it, ``deletable_files`` with the
indexes' files as a reference source), without the dry run's reload of the table for its
re-check: on a table nobody commits to meanwhile both give the same snapshots, files and bytes
(tests/health/test_expirable.py compares them). A table with ``gc.enabled=false`` expires nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pyiceberg.table import Table

from airflow_iceberg_maint.errors import GcDisabledError
from airflow_iceberg_maint.expiry.commit import metadata_after
from airflow_iceberg_maint.expiry.files import deletable_files
from airflow_iceberg_maint.expiry.pins import pinned_snapshots
from airflow_iceberg_maint.expiry.retention import plan_retention
from airflow_iceberg_maint.expiry.settings import ExpireOptions, resolve_settings
from airflow_iceberg_maint.fs.locations import PathEquivalence
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES, INDEX_SNAPSHOTS
from airflow_iceberg_maint.orphans.options import refuse_gc_disabled
from airflow_iceberg_maint.reachability.reference_walk import ReferenceWalk


@dataclass(frozen=True)
class Expirable:
    snapshot_ids: list[int]
    files: dict[str, int]  # path -> bytes
    gc_disabled: bool = False

    @property
    def bytes(self) -> int:
        return sum(self.files.values())


def expirable(table: Table, now: datetime, reader_processes: int | None = None, cache: str | None = None) -> Expirable:
    """The snapshots and files the default expiry's dry run would report for ``table`` at ``now``.

    ``cache``: the digest cache's folder (S22), or None to read every manifest list and manifest.
    """
    try:
        refuse_gc_disabled(table)
    except GcDisabledError:
        return Expirable([], {}, gc_disabled=True)
    metadata, location = table.metadata, table.metadata_location
    settings = resolve_settings(metadata.properties, ExpireOptions(dry_run=True), now)
    pinned = pinned_snapshots(table, [INDEX_SNAPSHOTS])
    retention = plan_retention(metadata, settings, int(now.timestamp() * 1000), pinned)
    if not retention.expired_snapshot_ids:
        return Expirable([], {})
    expired = set(retention.expired_snapshot_ids)
    after = (metadata_after(metadata, retention), location)
    with ReferenceWalk(table, PathEquivalence(), reader_processes, cache=cache, early_workers=cache is None) as walk:
        files = deletable_files(walk, metadata, after, expired, [INDEX_FILES])
    return Expirable(retention.expired_snapshot_ids, files)
