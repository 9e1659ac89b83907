"""The metadata change of an expiry, through pyiceberg's own update models and commit path.

The updates are pyiceberg's ``RemoveSnapshotRefUpdate``, ``RemoveSnapshotsUpdate`` (which also
drops the statistics files of the removed snapshots) and ``RemovePartitionStatisticsUpdate``.
A dry run applies them with pyiceberg's ``update_table_metadata``; a real run sends them with
``Catalog.commit_table``, the call pyiceberg's ``Transaction`` makes, but with a requirement for
every ref: a ``Transaction`` keeps one requirement of each type, so it would assert one ref
only. Every ref must still point where the plan saw it, or the catalog refuses the commit and
the run plans again; pyiceberg's ``RemoveSnapshotsUpdate`` silently drops any ref that points at
a removed snapshot, so a branch moved back to an expiring snapshot during the run must fail it.
"""

from __future__ import annotations

from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import (
    AssertRefSnapshotId,
    AssertTableUUID,
    RemovePartitionStatisticsUpdate,
    RemoveSnapshotRefUpdate,
    RemoveSnapshotsUpdate,
    TableRequirement,
    TableUpdate,
    update_table_metadata,
)

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


def requirements(metadata: TableMetadata) -> tuple[TableRequirement, ...]:
    refs = sorted(metadata.refs.items())
    return (
        AssertTableUUID(uuid=metadata.table_uuid),
        *(AssertRefSnapshotId.model_validate({"ref": name, "snapshot-id": ref.snapshot_id}) for name, ref in refs),
    )


def commit_expiry(table: Table, retention: Retention) -> tuple[TableMetadata, str]:
    """Commit on top of ``table.metadata``; the committed metadata and its location.

    Raises pyiceberg's ``CommitFailedException`` when a ref moved since the table was loaded.
    """
    base = table.metadata
    response = table.catalog.commit_table(table, requirements(base), expiry_updates(base, retention))
    table.metadata, table.metadata_location = response.metadata, response.metadata_location
    return response.metadata, response.metadata_location


def applied_on(committed: TableMetadata, base: TableMetadata, base_location: str, retention: Retention) -> bool:
    """Whether the commit applied to exactly the metadata the plan read.

    The catalog applies the updates to its current metadata: a commit that landed in between and
    moved no ref (a new ref, a schema change) passes the requirements. Then the plan's kept set
    may miss something, so the caller deletes nothing.
    """
    log = committed.metadata_log
    expected_refs = {n: r.snapshot_id for n, r in base.refs.items() if n not in retention.removed_refs}
    return (
        bool(log)
        and log[-1].metadata_file == base_location
        and {n: r.snapshot_id for n, r in committed.refs.items()} == expected_refs
    )
