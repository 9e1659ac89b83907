"""Restoring what an expiry commit removed that a concurrent commit made necessary (S18).

A REST catalog cannot be asked to refuse a commit when anything at all changed: a commit that
lands between the run's last look at the table and its own (a new tag or branch on an expiring
snapshot, a retention property raised) passes the requirements, and the catalog applies the
expiry on that metadata, dropping refs that point at the removed snapshots. Then the retention
is planned again on the metadata the catalog applied the commit on (the committed metadata's
predecessor), and whatever the expiry removed that the new plan keeps is put back in one more
commit, exactly as the predecessor holds it: snapshots, their statistics files, refs.

The Iceberg spec (pyiceberg's and Java's metadata builders, and SeaweedFS's catalog) refuses a
snapshot of a v2 table that has a parent and a sequence number not above the table's last one,
and re-adding one without a parent would lower the table's last sequence number, which a later
commit would reuse: a snapshot cannot be put back exactly then, and nothing else is tried. The
run fails with one line naming the ref, its snapshot and the metadata file that still holds them.
The caller deletes nothing in every case.
"""

from __future__ import annotations

from collections.abc import Callable

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    SetPartitionStatisticsUpdate,
    SetSnapshotRefUpdate,
    SetStatisticsUpdate,
    TableUpdate,
    update_table_metadata,
)

from airflow_iceberg_maint.commit_fence import Committed, commit_fenced
from airflow_iceberg_maint.errors import ExpiryRestoreError, first_line
from airflow_iceberg_maint.expiry.retention import Retention


def _lost(
    committed: TableMetadata, predecessor: TableMetadata, retention: Retention
) -> tuple[list[Snapshot], list[str]]:
    """The snapshots and refs of ``predecessor`` the commit removed and ``retention`` (planned on it) keeps."""
    present = {s.snapshot_id for s in committed.snapshots}
    expired = set(retention.expired_snapshot_ids)
    snapshots = [s for s in predecessor.snapshots if s.snapshot_id not in present and s.snapshot_id not in expired]
    snapshots.sort(key=lambda s: (s.sequence_number or 0, s.timestamp_ms))
    refs = sorted(n for n in predecessor.refs if n not in committed.refs and n not in retention.removed_refs)
    return snapshots, refs


def _updates(predecessor: TableMetadata, snapshots: list[Snapshot], refs: list[str]) -> list[TableUpdate]:
    ids = {s.snapshot_id for s in snapshots}
    updates: list[TableUpdate] = [AddSnapshotUpdate(snapshot=s) for s in snapshots]
    updates += [
        SetStatisticsUpdate.model_validate({"statistics": f}) for f in predecessor.statistics if f.snapshot_id in ids
    ]
    updates += [
        SetPartitionStatisticsUpdate.model_validate({"partition-statistics": f})
        for f in predecessor.partition_statistics
        if f.snapshot_id in ids
    ]
    for name in refs:
        ref = predecessor.refs[name]
        updates.append(
            SetSnapshotRefUpdate.model_validate(
                {
                    "ref-name": name,
                    "type": ref.snapshot_ref_type,
                    "snapshot-id": ref.snapshot_id,
                    "max-ref-age-ms": ref.max_ref_age_ms,
                    "max-snapshot-age-ms": ref.max_snapshot_age_ms,
                    "min-snapshots-to-keep": ref.min_snapshots_to_keep,
                }
            )
        )
    return updates


def _inexact(committed: TableMetadata, predecessor: TableMetadata, updates: list[TableUpdate]) -> str | None:
    """Why applying ``updates`` would not restore exactly what ``predecessor`` holds, or None."""
    try:
        after = update_table_metadata(committed, tuple(updates))
    except ValueError as exc:
        return str(exc).splitlines()[0][:200]
    last = getattr(committed, "last_sequence_number", 0)  # v1 metadata has none
    if getattr(after, "last_sequence_number", 0) < last:
        return f"it would lower the table's last sequence number below {last}"
    before = {s.snapshot_id: s for s in predecessor.snapshots}
    changed = [s.snapshot_id for s in after.snapshots if s.snapshot_id in before and s != before[s.snapshot_id]]
    if changed:
        return f"snapshot {changed[0]} would lose its parent"
    return None


def _what(predecessor: TableMetadata, snapshots: list[Snapshot], refs: list[str]) -> str:
    if refs:
        ref = predecessor.refs[refs[0]]
        return f"{ref.snapshot_ref_type} {refs[0]!r} (snapshot {ref.snapshot_id})"
    return f"snapshot {snapshots[0].snapshot_id}"


def restore_lost(
    table: Table, name: str, committed: Committed, plan_again: Callable[[TableMetadata], Retention]
) -> str | None:
    """Put back what the commit removed that retention planned on its predecessor keeps; what, or None.

    Raises ``ExpiryRestoreError`` when it cannot be put back exactly.
    """
    if committed.predecessor is None:
        raise ExpiryRestoreError(
            f"table {name}: the expiry commit {committed.location} names no previous metadata file, so what a "
            "concurrent commit needed cannot be checked; no file was deleted"
        )
    try:
        predecessor = FromInputFile.table_metadata(table.io.new_input(committed.predecessor))
    except Exception as exc:  # unreadable: what the other commit needed cannot be told
        raise ExpiryRestoreError(
            f"table {name}: a commit landed during the expiry, and the metadata file it made, "
            f"{committed.predecessor}, cannot be read ({type(exc).__name__}); no file was deleted, and no "
            "orphan removal should run on this table before it is checked"
        ) from exc
    snapshots, refs = _lost(committed.metadata, predecessor, plan_again(predecessor))
    if not snapshots and not refs:
        return None
    what = _what(predecessor, snapshots, refs)
    updates = _updates(predecessor, snapshots, refs)
    reason = _inexact(committed.metadata, predecessor, updates)
    if reason is None:
        try:
            # Not fenced by the lease (S15): it only puts back what this run's own commit removed.
            restored = commit_fenced(table, committed.metadata, committed.location, updates)
        except CommitFailedException as exc:
            reason = f"the table changed again ({first_line(exc)})"
        except Exception as exc:  # the catalog or the store failed: the restore may or may not have landed
            reason = f"the restore commit failed, it may or may not have landed ({first_line(exc)})"
        else:
            if not restored.applied_on_base:
                reason = f"another commit landed before the restore ({restored.predecessor})"
    if reason is not None:
        raise ExpiryRestoreError(
            f"table {name}: a commit that landed during the expiry needs {what}, which the expiry removed and "
            f"cannot put back exactly ({reason}); the metadata file {committed.predecessor} still holds it. No "
            "file was deleted; run no orphan removal on this table before it is restored"
        )
    return f"restored {len(snapshots)} snapshots and refs {refs} from {committed.predecessor}"
