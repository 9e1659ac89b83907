"""The parallel walk over a table's manifest lists and manifests that fills a ``ReferencedSet``."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa
from pyiceberg.io import FileIO
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata

from airflow_iceberg_maint.fs.locations import PathEquivalence, Uri
from airflow_iceberg_maint.progress import Phase
from airflow_iceberg_maint.reachability.digest_deltas import Entries
from airflow_iceberg_maint.reachability.digests import through_cache
from airflow_iceberg_maint.reachability.manifest_pool import ManifestPool, worker_count
from airflow_iceberg_maint.reachability.manifests import (
    live_file_path_chunks,
    live_file_paths,
    stored_manifest_lists,
    unique_manifest_paths,
)
from airflow_iceberg_maint.reachability.path_hashes import PathHasher
from airflow_iceberg_maint.reachability.referenced import ReferencedSet, Reread, given_paths, manifest_rereads
from airflow_iceberg_maint.reachability.sources import ReferenceSource, source_path_batches

log = logging.getLogger(__name__)

REMOTE_READERS = 8  # concurrent manifest reads on object stores
T = TypeVar("T")


def metadata_level_paths(metadata: TableMetadata, metadata_location: str) -> list[str]:
    """Metadata files, the version hint, and statistics files of the current metadata."""
    paths = [metadata_location, f"{metadata.location.rstrip('/')}/metadata/version-hint.text"]
    paths.extend(entry.metadata_file for entry in metadata.metadata_log)
    paths.extend(stat.statistics_path for stat in metadata.statistics)
    paths.extend(stat.statistics_path for stat in metadata.partition_statistics)
    return paths


@dataclass
class ReferenceWalk:
    """Reads manifest lists and manifests, each unique manifest once.

    Decoding is CPU-bound Python. On local disks a large table is decoded by worker processes
    (``processes``: None picks one a core when there are enough files, 0 or 1 reads here);
    on object stores each read waits on the network, so reads overlap on threads.
    ``seen`` holds the manifests read so far, so a later walk (the re-check) reads only new ones.
    """

    table: Table
    equivalence: PathEquivalence
    processes: int | None = None
    snapshots: int = 0
    manifests_read: int = 0
    cache: str | None = None  # a digest store's folder (S22); None: every file is read
    #: Start the workers on entering, so that their start overlaps what the caller does first (an
    #: orphan run's listing; after it, threads may be alive, and workers then come from the slower
    #: forkserver). False: only when files are read that the cache does not hold (an expiry).
    early_workers: bool = True

    def __post_init__(self) -> None:
        # The reads take the store from the FileIO, so the worker processes, built from its properties, use it too.
        self.io = through_cache(self.table.io, self.cache)
        self.seen: set[str] = set()
        self._local = Uri.parse(self.table.metadata.location).is_local
        self._threads = None if self._local else ThreadPoolExecutor(max_workers=REMOTE_READERS)
        self._workers: ManifestPool | None = None
        self._workers_failed = False

    def __enter__(self) -> ReferenceWalk:
        if self.early_workers:
            self._start_workers(len(self.table.metadata.snapshots))  # one manifest list a snapshot
        return self

    def __exit__(self, *exc: object) -> None:
        if self._threads is not None:
            self._threads.shutdown(cancel_futures=True)
        if self._workers is not None:
            self._workers.close()

    def _map(self, fn: Callable[[str], Any], items: Iterable[str]) -> Iterator[Any]:
        return self._threads.map(fn, items) if self._threads is not None else map(fn, items)

    def _start_workers(self, files: int) -> None:
        if self._workers is not None or self._workers_failed or not self._local:
            return
        count = worker_count(files, self.processes)
        if count:
            try:
                self._workers = ManifestPool(self.io, self.table.metadata.location, count)
                log.info("decoding manifests in %d worker processes (%s)", count, self._workers.start_method)
            except (OSError, ValueError, RuntimeError) as exc:
                log.info("decoding manifests in this process: no worker processes (%s)", exc)
                self._workers_failed = True

    def _pooled(self, pooled: Callable[[ManifestPool], Iterator[T]], here: Callable[[], Iterator[T]]) -> Iterator[T]:
        """Run a stage on the workers; if they break, redo the whole stage here (sets ignore repeats)."""
        if self._workers is not None:
            try:
                yield from pooled(self._workers)
                return
            except BrokenProcessPool as exc:
                log.warning("manifest workers stopped (%s); reading in this process", exc)
                self._workers.close()
                self._workers, self._workers_failed = None, True
        yield from here()

    def stored_lists(self, manifest_lists: list[str]) -> dict[str, tuple[int, Entries]]:
        """The manifest lists the digest cache holds, read here (on threads on object stores)."""
        return stored_manifest_lists(self.io, manifest_lists, self._map)

    def read_chunks(self, read: Callable[[FileIO, list[str]], T], files: list[str]) -> Iterator[T]:
        """``read(io, chunk)`` of chunks that hold each file once (a file may come twice if the workers broke).

        The reads are queued at once (on the workers for a large local table, ``read`` being a
        module-level function; a file a chunk on threads on object stores), so they overlap
        whatever the caller does before taking the results.
        """
        io = self.io
        self._start_workers(len(files))
        if self._workers is not None:
            queued = self._workers.read_chunks(read, files)
            return self._pooled(lambda _: (future.result() for future in queued), lambda: iter([read(io, files)]))
        if self._threads is not None:
            return self._threads.map(lambda f: read(io, [f]), files)
        return iter([read(io, files)])

    def hash_batches(
        self, metadata: TableMetadata, skip_snapshots: frozenset[int] = frozenset(), listed_under: str | None = None
    ) -> Iterator[tuple[pa.RecordBatch, Reread]]:
        """Hashes of every snapshot's manifest list, manifests and live content files, each with its source.

        Covers all branches, tags and staged snapshots. With ``listed_under`` (the scan root),
        local paths below it get DEFERRED identities (``PathHasher``); the source reads a
        batch's paths again for ``ReferencedSet.resolve``.
        """
        io, hasher = self.io, PathHasher(self.equivalence, listed_under)
        snapshots = [s for s in metadata.snapshots if s.snapshot_id not in skip_snapshots]
        self.snapshots += len(snapshots)
        lists = [s.manifest_list for s in snapshots if s.manifest_list]
        # One phase for the run: the re-check's walk continues the count of the first.
        with Phase("reading manifests", done=self.manifests_read) as reading:
            yield hasher.batch(lists), given_paths(lists)
            self._start_workers(len(lists))
            found: dict[str, None] = {}  # a dict: a stage redone here after its workers broke repeats itself

            def here() -> Iterator[tuple[list[str], pa.RecordBatch | None]]:
                manifests = [m for m in unique_manifest_paths(io, lists, self._map) if m not in self.seen]
                yield manifests, None
                if self._threads is not None:  # reads overlap on threads, a manifest each
                    for m, paths in zip(manifests, self._map(lambda m: live_file_paths(io, m), manifests), strict=True):
                        yield [m], hasher.batch(paths)
                    return
                for m in manifests:  # here, a chunk of a manifest at a time: a large one is never held whole
                    for paths in live_file_path_chunks(io, m):
                        yield [m], hasher.batch(paths)

            counted: set[str] = set()  # a manifest read in chunks comes once a chunk
            for chunk, batch in self._pooled(lambda pool: pool.walk(lists, self.seen, hasher), here):
                if batch is None:  # manifests named for the first time: they are referenced files too
                    found.update(dict.fromkeys(chunk))
                    reading.set_total(self.manifests_read + len(found))
                    yield hasher.batch(chunk), given_paths(chunk)
                else:
                    reading.advance(len(set(chunk) - counted))
                    counted.update(chunk)
                    yield batch, manifest_rereads(io, chunk)
            self.seen.update(found)
        self.manifests_read += len(found)

    def path_batches(self, metadata: TableMetadata) -> Iterator[list[str]]:
        """The same walk as strings, read here (for the rare report of conflicting pairs)."""
        io = self.io
        lists = [s.manifest_list for s in metadata.snapshots if s.manifest_list]
        yield lists
        manifests = unique_manifest_paths(io, lists, self._map)
        yield manifests
        yield from self._map(lambda m: live_file_paths(io, m), manifests)


def collect_referenced(
    refs: ReferencedSet,
    walk: ReferenceWalk,
    sources: Sequence[ReferenceSource],
    metadata: TableMetadata,
    metadata_location: str,
    skip: frozenset[int] = frozenset(),
    listed_under: str | None = None,
) -> None:
    """Add everything ``metadata`` of the walk's table references (snapshots in ``skip`` excepted).

    Orphan removal passes the table's current metadata, snapshot expiry the metadata it commits.
    With ``listed_under``, identities of local paths below it wait for ``refs.resolve``.
    """
    refs.add(metadata_level_paths(metadata, metadata_location))
    for batch, reread in walk.hash_batches(metadata, skip, listed_under):
        refs.add_hashes(batch, reread)
    for paths in source_path_batches(walk.table, sources):
        refs.add(paths)
