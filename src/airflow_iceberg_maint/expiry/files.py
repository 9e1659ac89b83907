"""The files only expired snapshots reached, found from manifests: storage is never listed.

Candidates are what the expired snapshots reached: their manifest lists, the manifests those
name, the live entries (data, delete and deletion-vector files) of the manifests no kept
snapshot lists, and their statistics and partition statistics files. The kept set is what the
metadata after the expiry references (every snapshot, ref, the metadata log, kept statistics
files), read with the orphan engine's walk, plus every reference source (the indexes). A
candidate is deleted only when no kept path names it exactly or under another spelling (S4).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from pyiceberg.io import FileIO
from pyiceberg.table.metadata import TableMetadata

from airflow_iceberg_maint.catalog import refresh_table
from airflow_iceberg_maint.errors import MetadataReadError
from airflow_iceberg_maint.index.lifecycle.references import not_referenced
from airflow_iceberg_maint.orphans.options import refuse_gc_disabled
from airflow_iceberg_maint.progress import Phase
from airflow_iceberg_maint.reachability.manifests import sized_live_file_paths, sized_manifest_paths
from airflow_iceberg_maint.reachability.reference_walk import ReferenceWalk, collect_referenced
from airflow_iceberg_maint.reachability.referenced import ReferencedSet
from airflow_iceberg_maint.reachability.sources import ReferenceSource

#: Path -> size in bytes, in the order found.
Sized = dict[str, int]


def _read_lists(io: FileIO, lists: list[str]) -> tuple[Sized, Sized]:
    """Each manifest list's own size, and the manifests they name with their lengths (each once)."""
    sizes: Sized = {}
    manifests: Sized = {}
    for manifest_list in lists:
        sizes[manifest_list], named = sized_manifest_paths(io, manifest_list)
        for path, length in named:
            manifests.setdefault(path, length)
    return sizes, manifests


def _read_live_files(io: FileIO, manifests: list[str]) -> tuple[int, Sized]:
    """How many manifests were read, and their live files with their sizes (each once)."""
    found: Sized = {}
    for manifest in manifests:
        for path, size in sized_live_file_paths(io, manifest):
            found.setdefault(path, size)
    return len(manifests), found


def _expired_reach(
    walk: ReferenceWalk,
    before: TableMetadata,
    expired: set[int],
    lists: Iterator[tuple[Sized, Sized]],
    kept: ReferencedSet,
) -> Sized:
    """Manifest lists and statistics of the expired snapshots, their manifests no kept snapshot lists, and
    those manifests' live files (each with its size). ``lists``: ``_read_lists`` of the expired manifest lists."""
    found: Sized = {}
    with Phase("reading expired manifests") as reading:
        manifests: Sized = {}
        for sizes, named in lists:
            found.update(sizes)
            for path, length in named.items():
                manifests.setdefault(path, length)
        # A manifest a kept snapshot lists keeps its entries: only the others are read.
        unread = set(not_referenced(list(manifests), kept))
        reading.set_total(len(unread))
        for path in manifests:
            if path in unread:
                found.setdefault(path, manifests[path])
        for count, entries in walk.read_chunks(_read_live_files, [m for m in manifests if m in unread]):
            for path, size in entries.items():
                found.setdefault(path, size)
            reading.advance(count)
    for stats in [*before.statistics, *before.partition_statistics]:
        if stats.snapshot_id in expired:
            found.setdefault(stats.statistics_path, stats.file_size_in_bytes)
    return found


def _unreferenced(found: Sized, refs: ReferencedSet) -> Sized:
    survivors = set(not_referenced(list(found), refs))
    return {path: size for path, size in found.items() if path in survivors}


def deletable_files(
    walk: ReferenceWalk,
    before: TableMetadata,
    after: tuple[TableMetadata, str],
    expired: set[int],
    sources: Sequence[ReferenceSource],
) -> Sized:
    """What ``expired`` snapshots of ``before`` reached and nothing ``after`` (metadata, location) or a source does."""
    lists = [s.manifest_list for s in before.snapshots if s.snapshot_id in expired and s.manifest_list]
    read = walk.read_chunks(_read_lists, lists)  # queued now: decoded beside the kept walk
    kept = ReferencedSet(walk.equivalence)
    collect_referenced(kept, walk, sources, *after)
    return _unreferenced(_expired_reach(walk, before, expired, read, kept), kept)


def recheck(
    walk: ReferenceWalk,
    planned: Sized,
    known: frozenset[int],
    sources: Sequence[ReferenceSource],
    view: Callable[[TableMetadata], TableMetadata],
) -> Sized:
    """Reload the table and keep any planned file that metadata committed since references.

    ``known``: the snapshots already read (only newer ones are read now, and only manifests
    the walk has not seen); ``view`` turns the reloaded metadata into the metadata that counts
    (the plan applied to it, on a dry run).
    """
    table = walk.table
    try:
        refresh_table(table)
    except Exception as exc:
        raise MetadataReadError(
            f"table {'.'.join(table.name())}: cannot be reloaded for the re-check before deleting "
            f"({type(exc).__name__}: {exc}); nothing was deleted"
        ) from exc
    refuse_gc_disabled(table)
    late = ReferencedSet(walk.equivalence)
    collect_referenced(late, walk, sources, view(table.metadata), table.metadata_location, skip=known)
    return _unreferenced(planned, late)
