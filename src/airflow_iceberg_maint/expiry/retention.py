"""Which snapshots and refs expire, as the Iceberg table spec's snapshot retention says.

- A ref other than ``main`` whose snapshot is older than its ``max-ref-age-ms`` (else the
  table's ``history.expire.max-ref-age-ms``; else never) is removed. ``main`` never is.
- A tag that stays keeps its snapshot.
- A branch that stays keeps its newest ancestors, head first, while fewer than its minimum are
  kept or the ancestor is not older than its cutoff; the first ancestor failing both ends the
  walk. The minimum is the run's retain-last, raised (never lowered) by the branch's own
  ``min-snapshots-to-keep``; the cutoff is ``now - max-snapshot-age-ms`` of the branch, else
  the run's cutoff.
- A snapshot no staying ref reaches (staged, or of a removed ref) stays while not older than
  the run's cutoff.
- ``pinned`` snapshots stay (the snapshot of each index's newest extract, S13).
- With an ``approved`` list (a reviewed run, S16), only approved refs are removed and only
  approved snapshots expire; the rest of the plan is kept and listed as not approved.

Everything else expires. Pure: metadata in, a decision out.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRef, SnapshotRefType
from pyiceberg.table.snapshots import Snapshot

from airflow_iceberg_maint.expiry.settings import Approval, Settings


@dataclass(frozen=True)
class Retention:
    expired_snapshot_ids: list[int]  # ascending
    removed_refs: list[str]  # sorted
    kept_for_pins: dict[int, str] = field(default_factory=dict)  # snapshot -> pin, for those kept only by a pin
    #: Due to expire or be removed, but not on the reviewer's approved list: kept.
    not_approved_snapshot_ids: list[int] = field(default_factory=list)
    not_approved_refs: list[str] = field(default_factory=list)

    @property
    def changes_anything(self) -> bool:
        return bool(self.expired_snapshot_ids or self.removed_refs)


def _millis(settings: Settings) -> int:
    return int(settings.cutoff.timestamp() * 1000)


def ancestors(metadata: TableMetadata, snapshot_id: int) -> Iterator[Snapshot]:
    """The snapshot and its parents, newest first, until a parent is missing (expired earlier)."""
    by_id = {s.snapshot_id: s for s in metadata.snapshots}  # snapshot_by_id is a linear search
    seen: set[int] = set()
    snapshot = by_id.get(snapshot_id)
    while snapshot is not None and snapshot.snapshot_id not in seen:  # a cycle would be damaged metadata
        seen.add(snapshot.snapshot_id)
        yield snapshot
        parent = snapshot.parent_snapshot_id
        snapshot = by_id.get(parent) if parent is not None else None


def ref_expired(name: str, ref: SnapshotRef, metadata: TableMetadata, settings: Settings, now_ms: int) -> bool:
    if name == MAIN_BRANCH:
        return False
    max_age = ref.max_ref_age_ms if ref.max_ref_age_ms is not None else settings.max_ref_age_ms
    snapshot = metadata.snapshot_by_id(ref.snapshot_id)
    return snapshot is not None and max_age is not None and now_ms - snapshot.timestamp_ms > max_age


def branch_retained(metadata: TableMetadata, ref: SnapshotRef, settings: Settings, now_ms: int) -> list[int]:
    minimum = max(settings.retain_last, ref.min_snapshots_to_keep or 0, 1)
    cutoff = now_ms - ref.max_snapshot_age_ms if ref.max_snapshot_age_ms is not None else _millis(settings)
    kept: list[int] = []
    for ancestor in ancestors(metadata, ref.snapshot_id):
        if len(kept) < minimum or ancestor.timestamp_ms >= cutoff:
            kept.append(ancestor.snapshot_id)
        else:
            break
    return kept


def plan_retention(
    metadata: TableMetadata,
    settings: Settings,
    now_ms: int,
    pinned: Mapping[int, str] | None = None,
    approved: Approval | None = None,
) -> Retention:
    due_refs = sorted(n for n, r in metadata.refs.items() if ref_expired(n, r, metadata, settings, now_ms))
    # An unapproved ref stays, and so does what its retention keeps (computed below as for any ref).
    removed = [n for n in due_refs if approved is None or n in approved.refs]
    staying = {n: r for n, r in metadata.refs.items() if n not in removed}
    kept: set[int] = set()
    reachable: set[int] = set()
    for ref in staying.values():
        reachable.update(s.snapshot_id for s in ancestors(metadata, ref.snapshot_id))
        if ref.snapshot_ref_type == SnapshotRefType.TAG:
            kept.add(ref.snapshot_id)
        else:
            kept.update(branch_retained(metadata, ref, settings, now_ms))
    cutoff = _millis(settings)
    kept.update(
        s.snapshot_id for s in metadata.snapshots if s.snapshot_id not in reachable and s.timestamp_ms >= cutoff
    )
    present = {s.snapshot_id for s in metadata.snapshots}
    by_pin = {sid: pin for sid, pin in (pinned or {}).items() if sid in present and sid not in kept}
    kept.update(by_pin)
    due = sorted(present - kept)
    expired = [s for s in due if approved is None or s in approved.snapshot_ids]
    return Retention(
        expired,
        removed,
        by_pin,
        not_approved_snapshot_ids=sorted(set(due) - set(expired)),
        not_approved_refs=sorted(set(due_refs) - set(removed)),
    )
