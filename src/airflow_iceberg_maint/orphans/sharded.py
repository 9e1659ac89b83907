"""One table's orphan scan spread over shards: plan, scan shards, match buckets, then one final step.

The same rules as the single-task run (``removal.py``; S1 to S12 of ``docs/safety.md``) hold;
the steps exchange hashes through a scratch location outside the table (``shard_files``):

1. ``plan_sharded_scan``: the checks of every run (S3, S7, S8, S12); list the first levels of
   the scan location by delimiter and deal the sub-directories out to the shards; read the
   manifest lists and deal the unique manifests out in chunks. What the plan itself read
   (metadata files, manifest lists, manifests, reference sources, and the files directly in
   the levels it listed) is written as bucketed parts.
2. ``run_shard`` (one per shard): list its directories (candidates older than the cutoff) and
   read its manifests (referenced hashes), both written as parts bucketed by hash range.
3. ``match_shard`` (one per shard): fetch its contiguous range of buckets from every part (one
   ranged read a part, kept on local disk), then for each bucket, candidates minus referenced,
   exactly as the single-task match (``match_candidates``).
4. ``finish_sharded_scan``: gather the unmatched files, keep other tables' locations (S8), then
   the single-task run's own re-check against reloaded metadata and its deletion (``settle``).

Each step reads the markers of the steps before it and fails when one is missing or belongs to
another plan (S2): a failed shard fails the run before anything is deleted. Memory per step is
bounded by ``FLUSH_ROWS`` (plan, shards), one bucket (match: about ``ROWS_PER_BUCKET`` rows, its
range on local disk), and the unmatched files themselves (final step: the orphan list the report
holds anyway).
"""

from __future__ import annotations

import logging
import math
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import chain
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table import Table

from airflow_iceberg_maint.errors import InvalidInputError, MetadataReadError
from airflow_iceberg_maint.fs.locations import PathEquivalence, Uri, local_path
from airflow_iceberg_maint.fs.storage import FileInfo, KeepComponent, Storage, require_capabilities, storage_for
from airflow_iceberg_maint.orphans.manifests import live_file_paths, unique_manifest_paths
from airflow_iceberg_maint.orphans.other_tables import TablePaths, is_listed_metadata_file
from airflow_iceberg_maint.orphans.path_hashes import EMPTY, HASH_SCHEMA, PathHasher, exact_bytes, listed_identity
from airflow_iceberg_maint.orphans.referenced import REMOTE_READERS, ReferencedSet, ReferenceWalk, metadata_level_paths
from airflow_iceberg_maint.orphans.removal import (
    OrphanOptions,
    OrphanReport,
    Phases,
    StageHook,
    keep_filter,
    match_candidates,
    partition_field_names,
    protected_locations,
    report_undecodable,
    scan_setup,
    settle,
)
from airflow_iceberg_maint.orphans.shard_files import (
    CANDIDATE_SCHEMA,
    BucketRange,
    BucketWriter,
    Scratch,
    bucket_range,
    refuse_scratch_inside,
)
from airflow_iceberg_maint.orphans.sources import ReferenceSource, source_path_batches

log = logging.getLogger(__name__)

MAX_SHARDS = 256
LIST_DEPTH = 3  # levels listed by delimiter at most, to find directories to deal out
UNITS_PER_SHARD = 4  # stop descending once there are this many directories a shard
ROWS_PER_BUCKET = 500_000  # listed or referenced rows a bucket is sized for
LIST_BATCH = 10_000  # listed files hashed and bucketed at a time
PLAN = "plan.json"
#: What the steps of a sharded scan ask of the table's store.
SCAN_CAPABILITIES = ("list_level", "list_files", "delete_files")
UNMATCHED_SCHEMA = pa.schema([("path", pa.binary()), ("size", pa.int64()), ("conflict", pa.bool_())])


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


def _shard_name(index: int) -> str:
    return f"shards/{index:04d}.json"


def _match_name(index: int) -> str:
    return f"matches/{index:04d}.json"


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
    now = now or datetime.now(UTC)
    setup = scan_setup(table, options, now)
    _refuse_unsafe_scratch(scratch, table.metadata.location)
    store = Scratch(scratch, io_properties)
    storage = storage_for(setup.root, table.io.properties)
    # Every capability the steps use, refused now rather than by a failed shard (no retry can add one).
    require_capabilities(storage, setup.root, SCAN_CAPABILITIES)
    io, remote = table.io, not Uri.parse(setup.root).is_local
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


def _plan(store: Scratch, table_uuid: str | None = None) -> dict[str, Any]:
    plan = store.read_json(PLAN)
    if table_uuid is not None and plan["table_uuid"] != table_uuid:
        raise InvalidInputError(
            f"scratch {store.uri!r}: planned for table {plan['table']} ({plan['table_uuid']}), not table {table_uuid}"
        )
    return plan


def _index(plan: dict[str, Any], index: int) -> None:
    if not 0 <= index < plan["shards"]:
        raise InvalidInputError(f"shard {index}: expected 0 to {plan['shards'] - 1}")


def _equivalence(plan: dict[str, Any]) -> PathEquivalence:
    options = plan["options"]
    return PathEquivalence(options["equal_schemes"], options["equal_authorities"])


def run_shard(table: Table, scratch: str, index: int, io_properties: Mapping[str, str]) -> dict[str, int]:
    """List shard ``index``'s directories and read its manifests; any failure raises and writes no marker."""
    started = time.perf_counter()
    store = Scratch(scratch, io_properties)
    plan = _plan(store, str(table.metadata.table_uuid))
    _index(plan, index)
    buckets, owner, plan_id = plan["buckets"], f"s{index:04d}", plan["plan_id"]
    hasher = PathHasher(_equivalence(plan))
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
    io, remote = table.io, not Uri.parse(plan["root"]).is_local
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
    store.write_json(_shard_name(index), marker)
    log.info(
        "shard %d: %d files listed in %d calls, %d manifests read (%d referenced paths)",
        index,
        lister.listed,
        storage.list_calls,
        len(manifests),
        refs.rows,
    )
    return {"files_listed": lister.listed, "manifests_read": len(manifests), "referenced_paths": refs.rows}


def _markers(store: Scratch, plan: dict[str, Any], name: Any) -> list[dict[str, Any]]:
    """Every shard's (or match's) marker; a missing one, or one of another plan, fails the step (S2)."""
    markers = []
    for i in range(plan["shards"]):
        marker = store.read_json(name(i))
        if marker.get("plan_id") != plan["plan_id"]:
            raise MetadataReadError(f"scratch file {store.location(name(i))!r}: belongs to another plan")
        markers.append(marker)
    return markers


def _parts(plan: dict[str, Any], shards: list[dict[str, Any]], kind: str) -> list[str]:
    return [name for parts in chain([plan["parts"][kind]], (s["parts"][kind] for s in shards)) for name in parts]


def _infos(table: pa.Table | pa.RecordBatch) -> list[FileInfo]:
    paths = table.column("path").to_pylist()
    return [
        FileInfo(p.decode("utf-8", "surrogateescape"), s, None)
        for p, s in zip(paths, table.column("size").to_pylist(), strict=True)
    ]


def match_shard(scratch: str, index: int, io_properties: Mapping[str, str]) -> dict[str, int]:
    """Match shard ``index``'s contiguous range of buckets: candidates minus referenced, one bucket at a time."""
    started = time.perf_counter()
    store = Scratch(scratch, io_properties)
    plan = _plan(store)
    _index(plan, index)
    shards = _markers(store, plan, _shard_name)
    wanted = bucket_range(index, plan["shards"], plan["buckets"])
    equivalence = _equivalence(plan)
    unmatched: list[pa.Table] = []
    equivalent = referenced = 0
    undecodable: list[str] = []
    with tempfile.TemporaryDirectory(prefix="orphan-match-") as local:
        refs_range = BucketRange(store, HASH_SCHEMA, wanted, f"{local}/refs", plan["plan_id"])
        refs_range.fetch(_parts(plan, shards, "refs"))
        listed_range = BucketRange(store, CANDIDATE_SCHEMA, wanted, f"{local}/listed", plan["plan_id"])
        listed_range.fetch(_parts(plan, shards, "listed"))
        for bucket in wanted:
            refs = ReferencedSet(equivalence)
            for batch in refs_range.batches(bucket):
                refs.add_hashes(batch)
            referenced += len(refs)
            candidates = [i for batch in listed_range.batches(bucket) for i in _infos(batch)]
            orphans, conflicts, kept, odd = match_candidates(candidates, refs)
            equivalent += kept
            undecodable.extend(i.path for i in odd)
            rows = [(i, False) for i in orphans] + [(i, True) for i in conflicts]
            unmatched.append(
                pa.table(
                    [
                        pa.array([exact_bytes(i.path) for i, _ in rows], pa.binary()),
                        pa.array([i.size for i, _ in rows], pa.int64()),
                        pa.array([c for _, c in rows], pa.bool_()),
                    ],
                    schema=UNMATCHED_SCHEMA,
                )
            )
    name = f"unmatched/{plan['plan_id']}-{index:04d}.parquet"
    rows = pa.concat_tables(unmatched) if unmatched else UNMATCHED_SCHEMA.empty_table()
    store.write_table(name, rows, plan["plan_id"])
    counts = {
        "referenced_files": referenced,
        "kept_equivalent": equivalent,
        "unmatched": sum(len(t) for t in unmatched),
    }
    store.write_json(
        _match_name(index),
        {
            "plan_id": plan["plan_id"],
            **counts,
            "unmatched_part": name,
            "buckets": [wanted.start, wanted.stop],
            # Names that are not UTF-8, as bytes made printable one to one, for the report.
            "kept_undecodable": [exact_bytes(p).hex() for p in undecodable],
            "seconds": round(time.perf_counter() - started, 3),
        },
    )
    return counts


def _same_file_as_referenced(orphans: list[FileInfo], store: Scratch, refs_parts: list[str], plan_id: str) -> set[str]:
    """Local orphans that are a referenced file under a spelling of another bucket (S4: same device and inode)."""
    identities: dict[int, list[str]] = {}
    for info in orphans:
        if Uri.parse(info.path).is_local:
            identity = listed_identity(local_path(info.path))
            if identity != EMPTY:
                identities.setdefault(identity, []).append(info.path)
    if not identities:
        return set()
    wanted = pa.array(list(identities), pa.int64())
    found: set[str] = set()
    for name in refs_parts:
        referenced = store.read_table(name, HASH_SCHEMA, plan_id).column("identity")
        hits = wanted.filter(pc.is_in(wanted, value_set=referenced))
        for identity in hits.to_pylist():
            found.update(identities[identity])
    return found


def finish_sharded_scan(
    table: Table,
    scratch: str,
    io_properties: Mapping[str, str],
    *,
    sources: Sequence[ReferenceSource],
    on_stage: StageHook | None = None,
) -> OrphanReport:
    """Gather the shards' unmatched files, then re-check against reloaded metadata and delete, as a single run does."""
    store = Scratch(scratch, io_properties)
    plan = _plan(store, str(table.metadata.table_uuid))
    shards = _markers(store, plan, _shard_name)
    matches = _markers(store, plan, _match_name)
    options = OrphanOptions(**plan["options"])
    equivalence, root = _equivalence(plan), plan["root"]
    report = OrphanReport(
        plan["table"], plan["table_uuid"], root, datetime.fromisoformat(plan["cutoff"]), options.dry_run
    )
    report.phase_seconds = {
        "plan": plan["seconds"],
        "shard_max": max(s["seconds"] for s in shards),
        "match_max": max(m["seconds"] for m in matches),
    }
    phases = Phases(report)
    report.files_listed = plan["files_listed"] + sum(s["files_listed"] for s in shards)
    report.list_calls = plan["list_calls"] + sum(s["list_calls"] for s in shards)
    report.referenced_files = sum(m["referenced_files"] for m in matches)
    report.kept_equivalent = sum(m["kept_equivalent"] for m in matches)
    report.snapshots = plan["snapshots"]
    report.manifests_read = sum(s["manifests_read"] for s in shards)
    report_undecodable(
        report,
        sorted(bytes.fromhex(h).decode("utf-8", "surrogateescape") for m in matches for h in m["kept_undecodable"]),
    )
    orphans: list[FileInfo] = []
    conflicts: list[FileInfo] = []
    for match in matches:
        rows = store.read_table(match["unmatched_part"], UNMATCHED_SCHEMA, plan["plan_id"])
        for info, conflict in zip(_infos(rows), rows.column("conflict").to_pylist(), strict=True):
            (conflicts if conflict else orphans).append(info)
    orphans.sort(key=lambda i: i.path)
    conflicts.sort(key=lambda i: i.path)
    same = _same_file_as_referenced(orphans, store, _parts(plan, shards, "refs"), plan["plan_id"])
    if same:
        report.kept_equivalent += len(same)
        orphans = [o for o in orphans if o.path not in same]

    with ReferenceWalk(table, equivalence) as walk:
        walk.seen.update(m for chunk in plan["manifests"] for m in chunk)  # read by the shards
        listed_metadata = plan["metadata_files"] + [p for s in shards for p in s["metadata_files"]]
        # Which listed metadata files are this table's: its metadata log at plan time and now.
        own = ReferencedSet(equivalence)
        own.add(plan["metadata_paths"] + metadata_level_paths(table.metadata, table.metadata_location))
        others = [TablePaths.from_json(t) for t in plan["others"]]
        protected = protected_locations(table, root, listed_metadata, own, others, equivalence)
        storage = storage_for(root, table.io.properties)
        settle(
            report,
            storage,
            options,
            walk,
            sources,
            (orphans, conflicts),
            protected,
            phases,
            known=frozenset(plan["known_snapshots"]),
            on_stage=on_stage,
        )
    return report


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
