"""Same-content copies of v2 snapshots that cannot be added back under their own ids (S18).

A format-v2 snapshot with a parent and a sequence number not above the table's last one cannot be
added (the spec; pyiceberg's and Java's builders and SeaweedFS's catalog refuse it), and one added
without its parent would lower the table's last sequence number. A copy can be added: a new id, the
next sequence numbers above the table's last, the closest ancestor the table still holds (or the
copy of it) as parent, else a parent the table no longer holds (``_parent``), and the original's
manifest list, schema id and summary.

The copy reads exactly what the original read. In v2 every manifest list entry carries its
manifest's sequence number, and readers inherit the data and file sequence numbers a manifest
entry leaves out from that entry (``manifest._inherit_from_manifest``; Java's
``InheritableMetadata``), never from the snapshot: the same manifest list gives the same files
with the same sequence numbers, so deletes apply to the same rows. The copy's timestamp is the
restore's (a metadata file's update time must not go back, which Java's reader checks), so
retention counts its age from then: it is kept longer, never less. Its summary names the
original under ``COPY_OF``.
"""

from __future__ import annotations

from pyiceberg.table.metadata import TableMetadata, TableMetadataV2
from pyiceberg.table.snapshots import Snapshot, Summary

#: The summary property of a copy that names the snapshot it copies.
COPY_OF = "iceberg-maint.copy-of-snapshot-id"


def _parent(
    snapshot: Snapshot, present: set[int], predecessor: dict[int, Snapshot], copies: dict[int, Snapshot]
) -> int:
    """The copy of the closest ancestor that was copied, or the closest one the table still holds; else the
    original's parent, or the original itself, neither of which the table holds any more.

    Never None: a catalog refuses a snapshot with a parent whose sequence number is not above the table's
    last, so a copy applied on a commit that added snapshots meanwhile is refused instead of lowering the
    table's last sequence number (which one without a parent would do). A parent the table does not hold
    ends its ancestry, as after any expiry.
    """
    ancestor = snapshot.parent_snapshot_id
    while ancestor is not None:
        if ancestor in copies:
            return copies[ancestor].snapshot_id
        if ancestor in present:
            return ancestor
        known = predecessor.get(ancestor)
        ancestor = known.parent_snapshot_id if known is not None else None
    return snapshot.parent_snapshot_id if snapshot.parent_snapshot_id is not None else snapshot.snapshot_id


def same_content_copies(
    base: TableMetadataV2, predecessor: TableMetadata, lost: list[Snapshot], now_ms: int
) -> dict[int, Snapshot]:
    """Copies of ``lost`` (snapshots of ``predecessor``) to add on ``base``, by the id each copies."""
    present = {s.snapshot_id for s in base.snapshots}
    by_id = {s.snapshot_id: s for s in predecessor.snapshots}
    taken = present | set(by_id)
    sequence_number: int = base.last_sequence_number
    copies: dict[int, Snapshot] = {}
    # A parent's sequence number is below its children's: parents are copied first.
    for snapshot in sorted(lost, key=lambda s: (s.sequence_number or 0, s.timestamp_ms)):
        new_id = base.new_snapshot_id()
        while new_id in taken:
            new_id = base.new_snapshot_id()
        taken.add(new_id)
        sequence_number += 1
        summary = snapshot.summary.model_dump() if snapshot.summary is not None else {"operation": "append"}
        copies[snapshot.snapshot_id] = snapshot.model_copy(
            update={
                "snapshot_id": new_id,
                "parent_snapshot_id": _parent(snapshot, present, by_id, copies),
                "sequence_number": sequence_number,
                "timestamp_ms": now_ms,
                "summary": Summary(**{**summary, COPY_OF: str(snapshot.snapshot_id)}),
            }
        )
    return copies
