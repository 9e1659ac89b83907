"""The files only expired snapshots reached, found from manifests: storage is never listed.

Candidates are what the expired snapshots reached: their manifest lists, the manifests those
name, the live entries (data, delete and deletion-vector files) of the manifests no kept
snapshot lists, and their statistics and partition statistics files. The kept set is what the
metadata after the expiry references (every snapshot, ref, the metadata log, kept statistics
files), read with the orphan engine's walk, plus every reference source (the indexes). A
candidate is deleted only when no kept path names it exactly or under another spelling (S4).
When the expiry drops no manifest, only the expired manifest lists and statistics files are
candidates and no kept manifest is read (``dropped``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import pyarrow as pa
from pyiceberg.io import FileIO
from pyiceberg.table.metadata import TableMetadata

from airflow_iceberg_maint.catalog import refresh_table
from airflow_iceberg_maint.errors import MetadataReadError
from airflow_iceberg_maint.expiry.dropped import (
    Sized,
    expired_lists,
    expired_statistics,
    held_lists,
    kept_lists,
    kept_references,
    merged,
    read_lists,
)
from airflow_iceberg_maint.index.lifecycle.references import not_referenced
from airflow_iceberg_maint.orphans.options import refuse_gc_disabled
from airflow_iceberg_maint.progress import Phase
from airflow_iceberg_maint.reachability.manifests import live_file_paths, sized_live_file_paths
from airflow_iceberg_maint.reachability.path_hashes import PathHasher
from airflow_iceberg_maint.reachability.reference_walk import ReferenceWalk, collect_referenced
from airflow_iceberg_maint.reachability.referenced import ReferencedSet
from airflow_iceberg_maint.reachability.sources import ReferenceSource


def _hashed_live_files(hasher: PathHasher, io: FileIO, manifests: list[str]) -> tuple[int, pa.RecordBatch]:
    """How many manifests were read, and the hashes of their live entries (decoded and hashed on the workers)."""
    return len(manifests), hasher.batch([path for manifest in manifests for path in live_file_paths(io, manifest)])


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
    lists: tuple[Sized, Sized],
    kept: ReferencedSet,
) -> Sized:
    """Manifest lists and statistics of the expired snapshots, their manifests no kept snapshot lists, and
    those manifests' live files (each with its size). ``lists``: ``read_lists`` of the expired manifest lists."""
    found: Sized = dict(lists[0])
    with Phase("reading expired manifests") as reading:
        manifests = lists[1]
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
    for path, size in expired_statistics(before, expired).items():
        found.setdefault(path, size)
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
    """What ``expired`` snapshots of ``before`` reached and nothing ``after`` (metadata, location) or a source does.

    The manifest lists, expired and kept, are read first (queued together); when they show that no
    manifest is dropped, no kept manifest is read (``dropped``). Otherwise every kept reference is.
    """
    kept_paths, expired_paths = kept_lists(after[0]), expired_lists(before, expired)
    # Lists the digest cache holds are read here (a digest costs less than a worker's start), the rest
    # queued for the workers at once, both side by side.
    held = walk.stored_lists([*expired_paths, *kept_paths])
    expired_read = walk.read_chunks(read_lists, [p for p in expired_paths if p not in held])
    kept_read = walk.read_chunks(read_lists, [p for p in kept_paths if p not in held])
    reached = merged([held_lists(held, expired_paths), *expired_read])
    _, kept_manifests = merged([held_lists(held, kept_paths), *kept_read])
    kept = kept_references(walk, after, (kept_paths, kept_manifests), sources)
    if all(manifest in kept_manifests for manifest in reached[1]):
        return _unreferenced({**reached[0], **expired_statistics(before, expired)}, kept)
    unseen = [m for m in kept_manifests if m not in walk.seen]
    with Phase("reading manifests") as reading:
        reading.set_total(len(unseen))
        for count, batch in walk.read_chunks(partial(_hashed_live_files, PathHasher(walk.equivalence)), unseen):
            kept.add_hashes(batch)
            reading.advance(count)
    walk.seen.update(unseen)  # the re-check reads only manifests committed since
    return _unreferenced(_expired_reach(walk, before, expired, reached, kept), kept)


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
