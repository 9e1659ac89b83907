"""Restoring what an expiry commit removed that a concurrent commit made necessary (S18).

A REST catalog cannot be asked to refuse a commit when anything at all changed: a commit that
lands between the run's last look at the table and its own (a new tag or branch on an expiring
snapshot, a retention property raised) passes the requirements, and the catalog applies the
expiry on that metadata, dropping refs that point at the removed snapshots. Then the retention
is planned again on the metadata the catalog applied the commit on (the committed metadata's
predecessor), and whatever the expiry removed that the new plan keeps is put back in one more
commit, exactly as the predecessor holds it: snapshots, their statistics files, refs.

A snapshot of a v2 table cannot be put back under its own id (``snapshot_copies``): then every
snapshot to put back is added as a same-content copy (new id and sequence number, same manifest
list), its statistics files and refs follow it, and the report names each ref with its old and
new snapshot. What cannot be put back that way either (a v3 table, a restore commit that fails
or races) fails the run with one line naming the ref, its snapshot and the metadata file that
still holds them. The caller deletes nothing in every case.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata, TableMetadataV2
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
from airflow_iceberg_maint.expiry.snapshot_copies import same_content_copies


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


def _updates(predecessor: TableMetadata, added: dict[int, Snapshot], refs: list[str]) -> list[TableUpdate]:
    """Add ``added`` (by the id of the predecessor's snapshot each stands for), its statistics and ``refs``."""
    updates: list[TableUpdate] = [AddSnapshotUpdate(snapshot=s) for s in added.values()]
    updates += [
        SetStatisticsUpdate.model_validate(
            {"statistics": f.model_copy(update={"snapshot_id": added[f.snapshot_id].snapshot_id})}
        )
        for f in predecessor.statistics
        if f.snapshot_id in added
    ]
    updates += [
        SetPartitionStatisticsUpdate.model_validate(
            {"partition-statistics": f.model_copy(update={"snapshot_id": added[f.snapshot_id].snapshot_id})}
        )
        for f in predecessor.partition_statistics
        if f.snapshot_id in added
    ]
    for name in refs:
        ref = predecessor.refs[name]
        target = added.get(ref.snapshot_id)
        updates.append(
            SetSnapshotRefUpdate.model_validate(
                {
                    "ref-name": name,
                    "type": ref.snapshot_ref_type,
                    "snapshot-id": ref.snapshot_id if target is None else target.snapshot_id,
                    "max-ref-age-ms": ref.max_ref_age_ms,
                    "max-snapshot-age-ms": ref.max_snapshot_age_ms,
                    "min-snapshots-to-keep": ref.min_snapshots_to_keep,
                }
            )
        )
    return updates


def _inexact(committed: TableMetadata, added: dict[int, Snapshot], updates: list[TableUpdate]) -> str | None:
    """Why applying ``updates`` would not add ``added`` as they are, or None."""
    try:
        after = update_table_metadata(committed, tuple(updates))
    except ValueError as exc:
        return str(exc).splitlines()[0][:200]
    last = getattr(committed, "last_sequence_number", 0)  # v1 metadata has none
    if getattr(after, "last_sequence_number", 0) < last:
        return f"it would lower the table's last sequence number below {last}"
    wanted = {s.snapshot_id: s for s in added.values()}
    changed = [s.snapshot_id for s in after.snapshots if s.snapshot_id in wanted and s != wanted[s.snapshot_id]]
    if changed:
        return f"snapshot {changed[0]} would lose its parent"
    return None


def _what(predecessor: TableMetadata, snapshots: list[Snapshot], refs: list[str]) -> str:
    if refs:
        ref = predecessor.refs[refs[0]]
        return f"{ref.snapshot_ref_type} {refs[0]!r} (snapshot {ref.snapshot_id})"
    return f"snapshot {snapshots[0].snapshot_id}"


def _plan_updates(
    committed: TableMetadata, predecessor: TableMetadata, snapshots: list[Snapshot], refs: list[str]
) -> tuple[list[TableUpdate], dict[int, Snapshot], str | None]:
    """The updates that put back ``snapshots`` and ``refs``: as they were, else as same-content copies (v2).

    Returns the updates, the copies made (by the id each copies) and why neither works, or None.
    """
    exact = {s.snapshot_id: s for s in snapshots}
    updates = _updates(predecessor, exact, refs)
    reason = _inexact(committed, exact, updates)
    if reason is None or not isinstance(committed, TableMetadataV2):  # v1: re-added as they are; v3: not yet
        return updates, {}, reason
    copies = same_content_copies(committed, predecessor, snapshots, int(time.time() * 1000))
    updates = _updates(predecessor, copies, refs)
    copied = _inexact(committed, copies, updates)
    return updates, copies, None if copied is None else f"{reason}; a copy neither: {copied}"


def _copied(predecessor: TableMetadata, copies: dict[int, Snapshot], refs: list[str]) -> str:
    moved = [
        f"{predecessor.refs[n].snapshot_ref_type} {n!r} now on snapshot "
        f"{copies[predecessor.refs[n].snapshot_id].snapshot_id}, a copy of snapshot {predecessor.refs[n].snapshot_id}"
        for n in refs
        if predecessor.refs[n].snapshot_id in copies
    ]
    return (
        f"; a v2 snapshot cannot be added back under its own id, so {len(copies)} were added as copies with the "
        f"same manifest list and rows ({', '.join(moved) or 'no ref on them'}; "
        + ", ".join(f"{old} -> {new.snapshot_id}" for old, new in copies.items())
        + ")"
    )


def restore_lost(
    table: Table, name: str, committed: Committed, plan_again: Callable[[TableMetadata], Retention]
) -> str | None:
    """Put back what the commit removed that retention planned on its predecessor keeps; what, or None.

    Raises ``ExpiryRestoreError`` when it cannot be put back, as it was or as a same-content copy.
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
    updates, copies, reason = _plan_updates(committed.metadata, predecessor, snapshots, refs)
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
            f"cannot put back ({reason}); the metadata file {committed.predecessor} still holds it. No file was "
            "deleted; run no orphan removal on this table before it is restored: add a snapshot with that "
            "snapshot's manifest list and a sequence number above the table's last, and point the ref at it"
        )
    done = f"restored {len(snapshots)} snapshots and refs {refs} from {committed.predecessor}"
    return done + (_copied(predecessor, copies, refs) if copies else "")
