"""The metadata change of an expiry, through pyiceberg's own update models and commit path.

The updates are pyiceberg's ``RemoveSnapshotRefUpdate``, ``RemoveSnapshotsUpdate`` (which also
drops the statistics files of the removed snapshots) and ``RemovePartitionStatisticsUpdate``.
A dry run applies them with pyiceberg's ``update_table_metadata``; a real run sends them through
``commit_fence.commit_fenced``: the commit checks everything the plan read (S18), since
pyiceberg's ``RemoveSnapshotsUpdate`` silently drops any ref that points at a removed snapshot,
and a ref created, or retention changed, during the run would otherwise be lost.
"""

from __future__ import annotations

from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import (
    RemovePartitionStatisticsUpdate,
    RemoveSnapshotRefUpdate,
    RemoveSnapshotsUpdate,
    TableUpdate,
    update_table_metadata,
)

from airflow_iceberg_maint.commit_fence import Committed, commit_fenced
from airflow_iceberg_maint.expiry.retention import Retention

# The models are built from their JSON field names (the aliases): mypy's view of pydantic accepts no other.


def expiry_updates(metadata: TableMetadata, retention: Retention) -> tuple[TableUpdate, ...]:
    # Only what ``metadata`` still holds: the dry run's re-check applies the plan to reloaded metadata.
    expired = set(retention.expired_snapshot_ids) & {s.snapshot_id for s in metadata.snapshots}
    removed = [name for name in retention.removed_refs if name in metadata.refs]
    updates: list[TableUpdate] = [RemoveSnapshotRefUpdate.model_validate({"ref-name": name}) for name in removed]
    if expired:
        updates.append(RemoveSnapshotsUpdate.model_validate({"snapshot-ids": sorted(expired)}))
    updates += [
        RemovePartitionStatisticsUpdate.model_validate({"snapshot-id": stats.snapshot_id})
        for stats in metadata.partition_statistics
        if stats.snapshot_id in expired
    ]
    return tuple(updates)


def metadata_after(metadata: TableMetadata, retention: Retention) -> TableMetadata:
    """The metadata the commit would produce (without its metadata-log entry)."""
    return update_table_metadata(metadata, expiry_updates(metadata, retention))


def commit_expiry(table: Table, retention: Retention) -> Committed:
    """Commit on top of ``table.metadata`` through the fence (``commit_fence``); ``table`` then holds the
    committed metadata, read from its file.

    Raises pyiceberg's ``CommitFailedException`` when the table was seen to change since it was loaded.
    """
    base = table.metadata
    return commit_fenced(table, base, table.metadata_location, expiry_updates(base, retention))


def applied_on(committed: Committed, base: TableMetadata, retention: Retention) -> bool:
    """Whether the commit applied to exactly the metadata the plan read, with the refs the plan left."""
    expected_refs = {n: r.snapshot_id for n, r in base.refs.items() if n not in retention.removed_refs}
    return committed.applied_on_base and {n: r.snapshot_id for n, r in committed.metadata.refs.items()} == expected_refs
