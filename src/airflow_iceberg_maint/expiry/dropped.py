"""Whether an expiry drops any manifest, and what it can free when it drops none (S14).

A data or delete file becomes a candidate only as a live entry of a manifest that an expired
snapshot listed and no kept snapshot lists. When every manifest the expired manifest lists name
is still named by a kept manifest list, no data or delete file can be freed: the candidates are
only the expired manifest lists and the expired snapshots' statistics files. Those are checked
against every reference but the kept manifests' entries (the metadata files and log, the kept
manifest lists and the manifests they name, the kept statistics files and every reference
source): a manifest's entries name data, delete and deletion-vector files, never another
snapshot's manifest list or statistics file. So neither the kept manifests are read nor is
every kept path ``stat``-ed. Iceberg Java's ``ReachableFileCleanup`` makes the same cut.

When some manifest is dropped, every kept reference is read as before (``files.deletable_files``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pyiceberg.io import FileIO
from pyiceberg.table.metadata import TableMetadata

from airflow_iceberg_maint.reachability.digest_deltas import Entries
from airflow_iceberg_maint.reachability.manifests import sized_manifest_paths
from airflow_iceberg_maint.reachability.reference_walk import ReferenceWalk, metadata_level_paths
from airflow_iceberg_maint.reachability.referenced import ReferencedSet
from airflow_iceberg_maint.reachability.sources import ReferenceSource, source_path_batches

#: Path -> size in bytes, in the order found.
Sized = dict[str, int]


def read_lists(io: FileIO, lists: list[str]) -> tuple[Sized, Sized]:
    """Each manifest list's own size, and the manifests they name with their lengths (each once)."""
    return _sized((manifest_list, sized_manifest_paths(io, manifest_list)) for manifest_list in lists)


def held_lists(held: dict[str, tuple[int, Entries]], lists: list[str]) -> tuple[Sized, Sized]:
    """``read_lists`` of those ``lists`` in ``held`` (``stored_manifest_lists``)."""
    return _sized((manifest_list, held[manifest_list]) for manifest_list in lists if manifest_list in held)


def _sized(named: Iterable[tuple[str, tuple[int, Entries]]]) -> tuple[Sized, Sized]:
    sizes: Sized = {}
    manifests: Sized = {}
    for manifest_list, (size, (paths, lengths)) in named:
        sizes[manifest_list] = size
        # In C: a table's lists name its manifests again and again (a warm run's main cost). A manifest
        # keeps its first place, with the length the last list gave it (every list of a correct
        # writer gives the same: one file; it only counts in the bytes a report says were freed).
        manifests.update(zip(paths, lengths, strict=True))
    return sizes, manifests


def merged(parts: Iterable[tuple[Sized, Sized]]) -> tuple[Sized, Sized]:
    """``read_lists`` of several chunks as one."""
    sizes: Sized = {}
    manifests: Sized = {}
    for part_sizes, named in parts:
        sizes.update(part_sizes)
        manifests.update(named)  # as ``_sized``
    return sizes, manifests


def expired_statistics(before: TableMetadata, expired: set[int]) -> Sized:
    """The statistics and partition statistics files of the expired snapshots, with their sizes."""
    return {
        stats.statistics_path: stats.file_size_in_bytes
        for stats in [*before.statistics, *before.partition_statistics]
        if stats.snapshot_id in expired
    }


def expired_lists(before: TableMetadata, expired: set[int]) -> list[str]:
    return [s.manifest_list for s in before.snapshots if s.snapshot_id in expired and s.manifest_list]


def kept_lists(after: TableMetadata) -> list[str]:
    return [s.manifest_list for s in after.snapshots if s.manifest_list]


def kept_references(
    walk: ReferenceWalk,
    after: tuple[TableMetadata, str],
    kept: tuple[list[str], Sized],
    sources: Sequence[ReferenceSource],
) -> ReferencedSet:
    """Every reference of ``after`` (metadata, location) and the sources but the kept manifests' entries.

    ``kept``: the kept manifest lists and the manifests they name. Enough to check the expired manifest
    lists and statistics files, the only candidates when no manifest is dropped.
    """
    refs = ReferencedSet(walk.equivalence)
    refs.add(metadata_level_paths(*after))
    refs.add(kept[0])
    refs.add(list(kept[1]))
    for paths in source_path_batches(walk.table, sources):
        refs.add(paths)
    return refs
