"""One table's orphan scan spread over shards: plan, scan shards, match buckets, then one final step.

The same rules as the single-task run (``removal.py``; the rules of ``docs/safety.md``) hold;
the steps exchange hashes through a scratch location outside the table (``files``):

1. ``plan_sharded_scan``: the checks of every run (S3, S7, S8, S12); list the first levels of
   the scan location by delimiter and deal the sub-directories out to the shards; read the
   manifest lists and deal the unique manifests out in chunks. What the plan itself read
   (metadata files, manifest lists, manifests, reference sources, and the files directly in
   the levels it listed) is written as bucketed parts.
2. ``run_shard`` (one per shard): list its directories (candidates older than the cutoff) and
   read its manifests (referenced hashes), both written as parts bucketed by hash range.
3. ``match_shard`` (one per shard, ``match``): fetch its contiguous range of buckets from every part (one
   ranged read a part, kept on local disk), then for each bucket, candidates minus referenced,
   exactly as the single-task match (``match_candidates``).
4. ``finish_sharded_scan`` (``finish``): gather the unmatched files, keep other tables'
   locations (S8), then the single-task run's own re-check against reloaded metadata and its
   deletion (``settling``).

Each step reads the plan and the markers of the steps before it (``plan``) and fails when
one is missing or belongs to another plan (S2): a failed shard fails the run before anything is
deleted. Memory per step is bounded by ``FLUSH_ROWS`` (plan, shards), one bucket (match: about
``ROWS_PER_BUCKET`` rows, its range on local disk), and the unmatched files themselves (final
step: the orphan list the report holds anyway).
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import chain
from typing import Any

import pyarrow as pa
from pyiceberg.table import Table

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.fs.backends import storage_for
from airflow_iceberg_maint.fs.locations import Uri
from airflow_iceberg_maint.fs.storage import FileInfo, KeepComponent, Storage, require_capabilities
from airflow_iceberg_maint.orphans.listing.candidates import keep_filter, partition_field_names
from airflow_iceberg_maint.orphans.options import OrphanOptions, scan_setup
from airflow_iceberg_maint.orphans.report import OrphanReport
from airflow_iceberg_maint.orphans.sharded.files import (
    CANDIDATE_SCHEMA,
    BucketWriter,
    Scratch,
    refuse_scratch_inside,
)
from airflow_iceberg_maint.orphans.sharded.finish import finish_sharded_scan
from airflow_iceberg_maint.orphans.sharded.match import match_shard
from airflow_iceberg_maint.orphans.sharded.plan import (
    PLAN,
    check_shard_index,
    plan_equivalence,
    read_plan,
    shard_marker_name,
)
from airflow_iceberg_maint.reachability.digests import through_cache
from airflow_iceberg_maint.reachability.manifests import live_file_paths, unique_manifest_paths
from airflow_iceberg_maint.reachability.other_tables import is_listed_metadata_file
from airflow_iceberg_maint.reachability.path_hashes import HASH_SCHEMA, PathHasher, exact_bytes
from airflow_iceberg_maint.reachability.reference_walk import REMOTE_READERS, metadata_level_paths
from airflow_iceberg_maint.reachability.sources import ReferenceSource, source_path_batches

log = logging.getLogger(__name__)

MAX_SHARDS = 256
LIST_DEPTH = 3  # levels listed by delimiter at most, to find directories to deal out
UNITS_PER_SHARD = 4  # stop descending once there are this many directories a shard
ROWS_PER_BUCKET = 500_000  # listed or referenced rows a bucket is sized for
LIST_BATCH = 10_000  # listed files hashed and bucketed at a time
#: What the steps of a sharded scan ask of the table's store.
SCAN_CAPABILITIES = ("list_level", "list_files", "delete_files")


@dataclass(frozen=True)
class ShardedScan:
    """What the Airflow tasks pass on: the scratch URI and counts (small enough for XCom)."""

    scratch: str
    shards: int
    buckets: int
    manifests: int
    directories: int

    def to_json(self) -> dict[str, Any]:
        return {
            "scratch": self.scratch,
            "shards": self.shards,
            "buckets": self.buckets,
            "manifests": self.manifests,
            "directories": self.directories,
        }


def _refuse_unsafe_scratch(scratch: str, table_location: str) -> None:
    segments = Uri.parse(scratch).path.split("/")
    if "." in segments or ".." in segments:
        raise InvalidInputError(f"scratch location {scratch!r}: has '.' or '..' segments")
    refuse_scratch_inside(scratch, table_location)


def _candidates(infos: Sequence[FileInfo], hasher: PathHasher) -> tuple[pa.Table, pa.Array]:
    table = pa.table(
        [pa.array([exact_bytes(i.path) for i in infos], pa.binary()), pa.array([i.size for i in infos], pa.int64())],
        schema=CANDIDATE_SCHEMA,
    )
    return table, pa.array([hasher.key(i.path) for i in infos], pa.int64())


class _Lister:
    """Counts listed files, keeps listed metadata files, and writes candidates older than the cutoff."""

    def __init__(self, writer: BucketWriter, hasher: PathHasher, cutoff: datetime) -> None:
        self.writer, self.hasher, self.cutoff = writer, hasher, cutoff
        self.listed = 0
        self.metadata_files: list[str] = []
        self._held: list[FileInfo] = []

    def add(self, files: Iterable[FileInfo]) -> None:
        for info in files:
            self.listed += 1
            if info.mtime is not None and info.mtime < self.cutoff:  # no modification time: never a candidate
                self._held.append(info)
                if len(self._held) >= LIST_BATCH:
                    self._bucket()
            if is_listed_metadata_file(info.path):
                self.metadata_files.append(info.path)

    def _bucket(self) -> None:
        """Hand the held files to the writer, which writes parts once it holds ``FLUSH_ROWS`` rows."""
        if self._held:
            self.writer.add(*_candidates(self._held, self.hasher))
            self._held = []

    def flush(self) -> None:
        self._bucket()
        self.writer.flush()


def _directories(storage: Storage, root: str, keep: KeepComponent, shards: int, lister: _Lister) -> list[str]:
    """List the first levels by delimiter; the directories below them, each to be listed whole by one shard."""
    level, leaves = [root.rstrip("/")], list[str]()
    for _ in range(LIST_DEPTH):
        if len(level) >= shards * UNITS_PER_SHARD:
            break
        deeper: list[str] = []
        for directory in level:
            files, names = storage.list_level(directory, keep)
            if "" in names:  # an S3 prefix ending in '//': list this directory whole, as the single run does
                leaves.append(directory)
                continue
            lister.add(files)
            deeper.extend(f"{directory}/{name}" for name in names)
        level = deeper
    return leaves + level


def _bucket_count(table: Table, manifests: int, shards: int) -> int:
    """Buckets sized for ``ROWS_PER_BUCKET``: listed files are about twice the live files of the largest snapshot."""
    largest = max(
        (
            sum(int(s.summary.get(k) or 0) for k in ("total-data-files", "total-delete-files"))
            for s in table.metadata.snapshots
            if s.summary is not None
        ),
        default=0,
    )
    estimate = 2 * max(largest, manifests)
    return max(shards, math.ceil(estimate / ROWS_PER_BUCKET))


def _add_paths(writer: BucketWriter, hasher: PathHasher, paths: Sequence[str]) -> None:
    if paths:
        batch = hasher.batch(paths)
        writer.add(batch, batch.column("key"))


def plan_sharded_scan(
    table: Table,
    options: OrphanOptions,
    *,
    shards: int,
    scratch: str,
    io_properties: Mapping[str, str],
    sources: Sequence[ReferenceSource],
    now: datetime | None = None,
) -> ShardedScan:
    """Check the run like a single-task run, then plan its shards and write the plan under ``scratch``."""
    started = time.perf_counter()
    if not 1 <= shards <= MAX_SHARDS:
        raise InvalidInputError(f"shards {shards}: expected 1 to {MAX_SHARDS}")
    if options.listing is not None:  # the shards list their own folders; an inventory is read by one task
        raise InvalidInputError(
            f"listing {options.listing}: a sharded scan lists storage; read an inventory in one task"
        )
    now = now or datetime.now(UTC)
    setup = scan_setup(table, options, now)
    _refuse_unsafe_scratch(scratch, table.metadata.location)
    store = Scratch(scratch, io_properties)
    storage = storage_for(setup.root, table.io.properties)
    # Every capability the steps use, refused now rather than by a failed shard (no retry can add one).
    require_capabilities(storage, setup.root, SCAN_CAPABILITIES)
    io, remote = through_cache(table.io, options.cache), not Uri.parse(setup.root).is_local
    with ThreadPoolExecutor(max_workers=REMOTE_READERS if remote else 1) as pool:
        lists = [s.manifest_list for s in table.metadata.snapshots if s.manifest_list]
        manifests = unique_manifest_paths(io, lists, pool.map)
    buckets = _bucket_count(table, len(manifests), shards)
    hasher = PathHasher(setup.equivalence)
    plan_id = uuid.uuid4().hex  # before any part: every part of this plan carries it
    refs = BucketWriter(store, "refs", "plan", buckets, HASH_SCHEMA, plan_id)
    metadata_paths = metadata_level_paths(table.metadata, table.metadata_location)
    for paths in chain([metadata_paths, lists, manifests], source_path_batches(table, sources)):
        _add_paths(refs, hasher, paths)
    refs.flush()
    fields = partition_field_names(table)
    lister = _Lister(BucketWriter(store, "listed", "plan", buckets, CANDIDATE_SCHEMA, plan_id), hasher, setup.cutoff)
    directories = _directories(storage, setup.root, keep_filter(fields), shards, lister)
    lister.flush()
    store.write_json(
        PLAN,
        {
            "plan_id": plan_id,
            "table": ".".join(table.name()),
            "table_uuid": str(table.metadata.table_uuid),
            "root": setup.root,
            "cutoff": setup.cutoff.isoformat(),
            "options": {
                "dry_run": options.dry_run,
                "prefix_mismatch_mode": options.prefix_mismatch_mode,
                "equal_schemes": dict(options.equal_schemes or {}),
                "equal_authorities": dict(options.equal_authorities or {}),
                "max_concurrent_deletes": options.max_concurrent_deletes,
                "memory_budget_mb": options.memory_budget_mb,  # each match task's
                "cache": options.cache,  # the scan tasks' digest cache (S22): a folder on each worker's disk
            },
            "others": [t.to_json() for t in setup.others],
            "partition_fields": fields,
            "known_snapshots": [s.snapshot_id for s in table.metadata.snapshots],
            "metadata_paths": metadata_paths,
            "shards": shards,
            "buckets": buckets,
            "directories": [directories[i::shards] for i in range(shards)],
            "manifests": [manifests[i::shards] for i in range(shards)],
            "parts": {"refs": refs.parts, "listed": lister.writer.parts},
            "files_listed": lister.listed,
            "list_calls": storage.list_calls,
            "metadata_files": lister.metadata_files,
            "snapshots": len(table.metadata.snapshots),
            "seconds": round(time.perf_counter() - started, 3),
        },
    )
    log.info(
        "table %s: sharded scan of %s planned in %s: %d shards, %d buckets, %d directories, %d manifests",
        ".".join(table.name()),
        setup.root,
        scratch,
        shards,
        buckets,
        len(directories),
        len(manifests),
    )
    return ShardedScan(store.uri, shards, buckets, len(manifests), len(directories))


def run_shard(table: Table, scratch: str, index: int, io_properties: Mapping[str, str]) -> dict[str, int]:
    """List shard ``index``'s directories and read its manifests; any failure raises and writes no marker."""
    started = time.perf_counter()
    store = Scratch(scratch, io_properties)
    plan = read_plan(store, str(table.metadata.table_uuid))
    check_shard_index(plan, index)
    buckets, owner, plan_id = plan["buckets"], f"s{index:04d}", plan["plan_id"]
    hasher = PathHasher(plan_equivalence(plan))
    storage = storage_for(plan["root"], table.io.properties)
    require_capabilities(storage, plan["root"], SCAN_CAPABILITIES)
    keep = keep_filter(plan["partition_fields"])
    lister = _Lister(
        BucketWriter(store, "listed", owner, buckets, CANDIDATE_SCHEMA, plan_id),
        hasher,
        datetime.fromisoformat(plan["cutoff"]),
    )
    for directory in plan["directories"][index]:
        lister.add(storage.list_files(directory, keep))
    lister.flush()
    refs = BucketWriter(store, "refs", owner, buckets, HASH_SCHEMA, plan_id)
    manifests = plan["manifests"][index]
    io, remote = through_cache(table.io, plan["options"].get("cache")), not Uri.parse(plan["root"]).is_local
    with ThreadPoolExecutor(max_workers=REMOTE_READERS if remote else 1) as pool:
        for paths in pool.map(lambda m: live_file_paths(io, m), manifests):
            _add_paths(refs, hasher, paths)
    refs.flush()
    marker = {
        "plan_id": plan["plan_id"],
        "files_listed": lister.listed,
        "list_calls": storage.list_calls,
        "metadata_files": lister.metadata_files,
        "manifests_read": len(manifests),
        "parts": {"refs": refs.parts, "listed": lister.writer.parts},
        "seconds": round(time.perf_counter() - started, 3),
    }
    store.write_json(shard_marker_name(index), marker)
    log.info(
        "shard %d: %d files listed in %d calls, %d manifests read (%d referenced paths)",
        index,
        lister.listed,
        storage.list_calls,
        len(manifests),
        refs.rows,
    )
    return {"files_listed": lister.listed, "manifests_read": len(manifests), "referenced_paths": refs.rows}


def remove_orphan_files_sharded(
    table: Table,
    options: OrphanOptions,
    *,
    shards: int,
    scratch: str,
    io_properties: Mapping[str, str],
    sources: Sequence[ReferenceSource],
    now: datetime | None = None,
) -> OrphanReport:
    """Every step of a sharded scan in this process, one after the other (the command line's and tests' form)."""
    plan = plan_sharded_scan(
        table, options, shards=shards, scratch=scratch, io_properties=io_properties, sources=sources, now=now
    )
    for index in range(plan.shards):
        run_shard(table, plan.scratch, index, io_properties)
    for index in range(plan.shards):
        match_shard(plan.scratch, index, io_properties)
    return finish_sharded_scan(table, plan.scratch, io_properties, sources=sources)
