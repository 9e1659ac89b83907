"""A full extract built by N independent shards, one key range each, and committed once.

1. ``plan_sharded_build`` (one task) splits the key space into ranges (``key_ranges``) and fixes
   what every shard must agree on: the snapshot, the ranges, the entries per region and a
   fresh build ID. The plan is small and JSON-safe (an Airflow XCom).
2. ``build_shard`` (one task per range, anywhere) reads only the data files that may hold its
   keys, and only the identity columns, keeps the entries of its range and cuts and writes
   them with the single build's code, under a directory of its own attempt:
   ``<index>/data/build-<id>/shard-<i>-<attempt>/``, ending with a manifest (the tracking
   entries of its regions, in the tracking-file format). It returns the manifest's location.
3. ``commit_sharded_build`` (one task) concatenates the manifests in range order into one
   tracking file and commits one extract, tagged ``build-id``, by the index's atomic swap (S6).
   Every attempt re-checks inside the swap that no extract of this build or of this snapshot
   exists yet, so a retried or duplicated commit task never commits twice. Then it deletes
   every file under the build directory that no extract references: the files of failed,
   killed or superseded shard attempts and the manifests.

A shard attempt killed mid-write leaves files only under its own attempt directory, which no
commit ever names (the commit takes each shard's result from its one successful attempt); the
commit deletes them. Files appearing after that (a lost worker still writing) are unreferenced
index files for ``index remove-unreferenced`` and the orphan removal, past their age cutoff.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyiceberg.table import Table

from airflow_iceberg_maint.errors import InvalidInputError, MaintenanceError, MetadataReadError
from airflow_iceberg_maint.fs.backends import storage_for
from airflow_iceberg_maint.fs.batches import DEFAULT_MAX_CONCURRENT_DELETES
from airflow_iceberg_maint.fs.locations import PathEquivalence
from airflow_iceberg_maint.index.format.extract_files import RegionEntry, read_tracking_file, write_tracking_file
from airflow_iceberg_maint.index.lifecycle.references import extract_file_batches, not_referenced
from airflow_iceberg_maint.index.metadata.model import Extract, IndexMetadata
from airflow_iceberg_maint.index.metadata.store import CommitProgress, IndexStore
from airflow_iceberg_maint.index.source.snapshot_files import plan_snapshot
from airflow_iceberg_maint.index.write.build import build_regions, entry_bytes, ordering_columns, target_rows
from airflow_iceberg_maint.index.write.key_ranges import FirstKeyBounds, KeyRanges, plan_key_ranges
from airflow_iceberg_maint.index.write.refresh import (
    RefreshResult,
    commit_extract,
    discard_unless_committed,
    refresh_target,
    tracking_file_location,
)
from airflow_iceberg_maint.reachability.referenced import ReferencedSet
from airflow_iceberg_maint.sorting.ordering import comparable

log = logging.getLogger(__name__)

#: Extract property naming the sharded build that committed the extract.
BUILD_ID_PROPERTY = "build-id"
MANIFEST_NAME = "manifest.parquet"


class ShardResultsMissingError(MaintenanceError):
    """Some shards of a build have no successful result: nothing can be committed."""


class _AlreadyIndexed(Exception):
    """Raised inside the commit update: the build, or another extract of the snapshot, is committed."""


@dataclass(frozen=True)
class ShardedBuildPlan:
    """What every shard of one build agrees on."""

    index: str
    build_id: str
    snapshot_id: int
    ranges: KeyRanges
    rows_per_region: int

    @property
    def shards(self) -> int:
        return self.ranges.count

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "build_id": self.build_id,
            "snapshot_id": self.snapshot_id,
            "shards": self.shards,
            "ranges": self.ranges.to_text(),
            "rows_per_region": self.rows_per_region,
        }

    @classmethod
    def from_json(cls, obj: Any) -> ShardedBuildPlan:
        try:
            plan = cls(
                str(obj["index"]),
                str(obj["build_id"]),
                int(obj["snapshot_id"]),
                KeyRanges.from_text(obj["ranges"]),
                int(obj["rows_per_region"]),
            )
            uuid.UUID(plan.build_id)
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInputError(f"sharded build plan {obj!r}: malformed ({exc!r})") from exc
        return plan


@dataclass(frozen=True)
class ShardResult:
    """What one successful shard attempt reports (small: an XCom)."""

    build_id: str
    shard: int
    manifest: str
    region_files: int
    entries: int

    def to_json(self) -> dict[str, Any]:
        return {
            "build_id": self.build_id,
            "shard": self.shard,
            "manifest": self.manifest,
            "region_files": self.region_files,
            "entries": self.entries,
        }

    @classmethod
    def from_json(cls, obj: Any) -> ShardResult:
        try:
            return cls(
                str(obj["build_id"]),
                int(obj["shard"]),
                str(obj["manifest"]),
                int(obj["region_files"]),
                int(obj["entries"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInputError(f"shard result {obj!r}: malformed ({exc!r})") from exc


def build_directory(metadata: IndexMetadata, build_id: str) -> str:
    return f"{metadata.location.rstrip('/')}/data/build-{build_id}"


def plan_sharded_build(table: Table, name: str, shards: int, snapshot_id: int | None = None) -> ShardedBuildPlan:
    """Split the snapshot's (default: current) key space into up to ``shards`` ranges of about equal size."""
    target = refresh_target(table, name, snapshot_id)
    plan = plan_snapshot(table, target.snapshot)
    ranges, sample = plan_key_ranges(table, plan, target.layout, shards)
    rows = target_rows(entry_bytes(sample), sample.num_rows, target.metadata.region_target_size_bytes())
    return ShardedBuildPlan(name, str(uuid.uuid4()), target.snapshot.snapshot_id, ranges, rows)


def build_shard(table: Table, build: ShardedBuildPlan, shard: int) -> ShardResult:
    """Write the region files of one key range, and their manifest, under a directory of this attempt."""
    target = refresh_target(table, build.index, build.snapshot_id)
    layout = target.layout
    plan = plan_snapshot(table, target.snapshot)
    low, high = build.ranges.first_field_span(shard)
    bounds = FirstKeyBounds(table, plan, layout)
    paths = [p for p in sorted(plan.data_files) if bounds.may_hold(p, low, high)]
    directory = f"{build_directory(target.metadata, build.build_id)}/shard-{shard:05d}-{uuid.uuid4().hex[:12]}"

    def keep(entries: pa.Table) -> pa.Table:
        return entries.filter(build.ranges.mask(shard, ordering_columns(entries, layout)))

    regions, entries = build_regions(
        table, plan, layout, paths=paths, keep=keep, rows_per_region=build.rows_per_region, directory=directory
    )
    manifest = f"{directory}/{MANIFEST_NAME}"
    try:
        write_tracking_file(table.io, manifest, layout.stats_columns, regions)
    except BaseException:
        _delete_quietly(table, [r.file_path for r in regions])
        raise
    log.info(
        "index %s build %s shard %d: %d entries from %d of %d data files in %d region files",
        build.index,
        build.build_id,
        shard,
        entries,
        len(paths),
        len(plan.data_files),
        len(regions),
    )
    return ShardResult(build.build_id, shard, manifest, len(regions), entries)


def _delete_quietly(table: Table, paths: Sequence[str]) -> None:
    for path in paths:
        try:
            table.io.delete(path)
        except Exception as exc:
            log.warning(
                "could not delete %s after a failed shard: %s (the commit or the clean-up removes it)", path, exc
            )


@dataclass(frozen=True)
class ShardedCommit:
    result: RefreshResult
    committed: bool
    deleted_files: int


def commit_sharded_build(table: Table, build: ShardedBuildPlan, results: Sequence[ShardResult]) -> ShardedCommit:
    """Commit one extract from the shards' manifests, then delete the build's unreferenced files.

    ``results`` must hold exactly one result of this build per shard. When this build or
    another extract of the snapshot is committed already, nothing new is committed.
    """
    target = refresh_target(table, build.index, build.snapshot_id)
    existing = _existing_extract(target.metadata, build)
    if existing is not None:
        # An earlier try committed (its manifests may be deleted already): only clean up.
        return _finished(table, build, existing, committed=False)
    directory = build_directory(target.metadata, build.build_id)
    by_shard = _results_by_shard(build, results)
    listed = {f.path for f in storage_for(directory, table.io.properties).list_files(directory, lambda _: True)}
    regions: list[RegionEntry] = []
    for shard in range(build.shards):
        manifest = by_shard[shard].manifest
        if manifest not in listed:
            raise MetadataReadError(f"shard {shard} manifest {manifest!r}: not found under {directory!r}")
        regions.extend(read_tracking_file(table.io, manifest))
    absent = [r.file_path for r in regions if r.file_path not in listed]
    if absent:
        raise MetadataReadError(f"build {build.build_id}: {len(absent)} region file(s) not found, first {absent[0]!r}")
    _check_index_order(regions, target.layout.stats_columns)
    tracking = tracking_file_location(target.metadata)
    progress = CommitProgress()
    try:
        size = write_tracking_file(table.io, tracking, target.layout.stats_columns, regions)
        extract = commit_extract(
            target.store,
            build.index,
            table,
            build.snapshot_id,
            tracking,
            size,
            check=lambda current: _not_indexed_yet(current, build),
            progress=progress,
            properties={BUILD_ID_PROPERTY: build.build_id},
        )
    except _AlreadyIndexed:
        _delete_quietly(table, [tracking])
        return _finished(table, build, _existing_extract(target.store.load(build.index)[0], build), committed=False)
    except BaseException:
        discard_unless_committed(table, build.index, [tracking], progress)
        raise
    return _finished(table, build, extract, committed=True)


def _finished(table: Table, build: ShardedBuildPlan, extract: Extract | None, committed: bool) -> ShardedCommit:
    if extract is None:  # expired between two reads: nothing of this build is referenced any more
        raise MetadataReadError(f"build {build.build_id}: the extract of snapshot {build.snapshot_id} vanished")
    deleted = remove_build_files(table, build.index, build.build_id)
    regions = read_tracking_file(table.io, extract.tracking_file)
    result = RefreshResult(
        build.index, extract, "full", len(regions) if committed else 0, 0, sum(r.record_count for r in regions)
    )
    return ShardedCommit(result, committed, deleted)


def _results_by_shard(build: ShardedBuildPlan, results: Sequence[ShardResult]) -> dict[int, ShardResult]:
    by_shard: dict[int, ShardResult] = {}
    for result in results:
        if result.build_id != build.build_id:
            continue  # another build's shard (a mapped task serves several indexes)
        if result.shard in by_shard and by_shard[result.shard] != result:
            raise InvalidInputError(f"build {build.build_id}: two results for shard {result.shard}")
        by_shard[result.shard] = result
    missing = sorted(set(range(build.shards)) - by_shard.keys())
    if missing:
        raise ShardResultsMissingError(
            f"build {build.build_id}: no successful result of shard(s) {missing}; nothing committed "
            f"(their files stay for a rerun of the shards, or for index remove-unreferenced)"
        )
    return by_shard


def _check_index_order(regions: Sequence[RegionEntry], columns: Sequence[Any]) -> None:
    """The concatenated regions must be in index order: ``group_max_value`` keys never decrease."""
    ordering = [c for c in columns if c.ordering]
    types = [c.arrow_type for c in ordering]
    previous = None
    for region in regions:
        key = comparable([region.stats[c.field_id].group_max_value for c in ordering], types)
        if previous is not None and key < previous:
            raise MetadataReadError(f"region {region.file_path!r}: out of index order after the previous shard's")
        previous = key


def _not_indexed_yet(current: IndexMetadata, build: ShardedBuildPlan) -> None:
    if _existing_extract(current, build) is not None:
        raise _AlreadyIndexed()


def _existing_extract(metadata: IndexMetadata, build: ShardedBuildPlan) -> Extract | None:
    """This build's extract, else another extract of the snapshot."""
    same_snapshot = metadata.extracts_for_snapshot(build.snapshot_id)
    ours = [e for e in same_snapshot if e.properties.get(BUILD_ID_PROPERTY) == build.build_id]
    found = ours or same_snapshot
    return found[-1] if found else None


def remove_build_files(
    table: Table, name: str, build_id: str, max_concurrent_deletes: int = DEFAULT_MAX_CONCURRENT_DELETES
) -> int:
    """Delete the files under the build's directory that no extract of the index references; returns the count.

    The directory is listed before the metadata is read, so a commit landing in between only
    adds references. A read error deletes nothing (S2).
    """
    store = IndexStore(table)
    metadata, _, _ = store.load(name)
    directory = build_directory(metadata, build_id)
    storage = storage_for(directory, table.io.properties)
    listed = [f.path for f in storage.list_files(directory, lambda _: True)]
    if not listed:
        return 0
    metadata, _, _ = store.load(name)
    refs = ReferencedSet(PathEquivalence())
    for batch in extract_file_batches(table, metadata):
        refs.add(batch)
    doomed = sorted(not_referenced(listed, refs))
    if not doomed:
        return 0
    outcome = storage.delete_files(doomed, max_concurrent_deletes)
    for path, error in outcome.failed:
        log.warning("could not delete %s of build %s: %s (left for index remove-unreferenced)", path, build_id, error)
    log.info("index %s build %s: deleted %d unreferenced files", name, build_id, len(outcome.deleted))
    return len(outcome.deleted)
