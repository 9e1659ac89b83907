"""Which manifests a manifest rewrite replaces, and the live entries it regroups (docs/cli.md, "Compaction").

The live entries (ADDED or EXISTING) of the current snapshot are grouped by content (data or
deletes), partition spec and partition value: each group becomes manifests of its own, so no
new manifest mixes partitions. A group stays as it is when its manifests hold nothing else, have
no deleted entries and are no more than its size needs at the target, so a rewrite right after
another finds nothing to do. Every other group is rewritten, and a manifest with no live entry
left is dropped. Planning reads manifests only.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestEntry, ManifestEntryStatus, ManifestFile
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.utils.concurrent import ExecutorFactory

from airflow_iceberg_maint.progress import Phase

#: A group of entries: the manifest content (data 0, deletes 1), the partition spec id, the partition values.
GroupKey = tuple[int, int, tuple[Any, ...]]


def group_key(manifest: ManifestFile, entry: ManifestEntry) -> GroupKey:
    partition = entry.data_file.partition
    return (int(manifest.content), manifest.partition_spec_id, tuple(partition[i] for i in range(len(partition))))


@dataclass
class ManifestPlan:
    """The manifests of ``snapshot`` to replace and to keep, and the entries of each group to write."""

    snapshot: Snapshot | None
    kept: list[ManifestFile] = field(default_factory=list)
    replaced: list[ManifestFile] = field(default_factory=list)
    #: The live entries of each rewritten group, in the order the manifests list them.
    groups: dict[GroupKey, list[ManifestEntry]] = field(default_factory=dict)
    #: Each rewritten group's share of the bytes of the manifests holding it.
    group_bytes: dict[GroupKey, float] = field(default_factory=dict)

    def expected_manifests(self, target_bytes: int) -> int:
        """How many manifests the rewrite writes (an estimate from the replaced manifests' sizes)."""
        return sum(max(1, math.ceil(self.group_bytes[key] / target_bytes)) for key in self.groups)

    def ordered_groups(self) -> list[tuple[GroupKey, list[ManifestEntry]]]:
        """Data groups before delete groups, each by spec and partition (``repr``: values may be None or mixed)."""
        return sorted(self.groups.items(), key=lambda item: (item[0][0], item[0][1], repr(item[0][2])))


def _read(io: FileIO, manifests: list[ManifestFile]) -> list[list[ManifestEntry]]:
    with Phase("reading manifests", total=len(manifests)) as phase:

        def read(manifest: ManifestFile) -> list[ManifestEntry]:
            entries = manifest.fetch_manifest_entry(io, discard_deleted=False)
            phase.advance()
            return entries

        return list(ExecutorFactory.get_or_create().map(read, manifests))


def plan_manifest_rewrite(metadata: TableMetadata, io: FileIO, target_bytes: int) -> ManifestPlan:
    """Plan the rewrite of the current snapshot's manifests into groups of at most ``target_bytes``."""
    snapshot = metadata.current_snapshot()
    if snapshot is None:
        return ManifestPlan(None)
    manifests = list(snapshot.manifests(io))
    entries = _read(io, manifests)
    counts: list[Counter[GroupKey]] = []
    holders: dict[GroupKey, list[int]] = defaultdict(list)
    for index, (manifest, listed) in enumerate(zip(manifests, entries, strict=True)):
        live = Counter(group_key(manifest, e) for e in listed if e.status != ManifestEntryStatus.DELETED)
        counts.append(live)
        for key in live:
            holders[key].append(index)
    share = {
        key: sum(manifests[i].manifest_length * counts[i][key] / max(1, len(entries[i])) for i in held)
        for key, held in holders.items()
    }

    def settled(key: GroupKey) -> bool:
        held = holders[key]
        alone = all(len(counts[i]) == 1 and len(entries[i]) == counts[i][key] for i in held)
        return alone and len(held) <= max(1, math.ceil(share[key] / target_bytes))

    rewritten = {key for key in holders if not settled(key)}
    plan = ManifestPlan(snapshot)
    for manifest, live, listed in zip(manifests, counts, entries, strict=True):
        if live and not (live.keys() & rewritten):
            plan.kept.append(manifest)
            continue
        plan.replaced.append(manifest)
        for entry in listed:
            if entry.status != ManifestEntryStatus.DELETED:
                plan.groups.setdefault(group_key(manifest, entry), []).append(entry)
    plan.group_bytes = {key: share[key] for key in plan.groups}
    return plan
