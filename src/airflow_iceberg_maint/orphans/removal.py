"""Orphan-file removal: list the table location, subtract every referenced file, delete the rest.

The rules S1 to S12 cited here are those of ``docs/safety.md``.

Pipeline (the dry run runs all of it but the last step):
1. refuse ``gc.enabled=false`` (S12), resolve the cutoff (S7), validate the location (S3), and
   find the other tables of the catalog that write under it (S8);
2. list storage and collect the referenced set concurrently (S1, S2);
3. match: an exact path match is referenced; a normalised match, or on local storage the same
   file under any spelling, is kept or is a conflict (S4); a name that is not UTF-8 is kept;
   other tables' locations found by the catalog or by their metadata in the listing are kept whole (S8);
4. reload the table and keep anything a snapshot committed during the scan references;
5. delete, collecting per-file failures.
"""

from __future__ import annotations

import gc
import logging
import math
import time
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import copy_context
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import chain, compress, islice
from operator import attrgetter, not_
from typing import Any

import pyarrow as pa
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata

from airflow_iceberg_maint.catalog import refresh_table
from airflow_iceberg_maint.errors import (
    CatalogListingError,
    GcDisabledError,
    IncompleteMetadataError,
    InvalidInputError,
    MetadataReadError,
    PrefixMismatchError,
)
from airflow_iceberg_maint.fs.locations import LocationSet, PathEquivalence, validate_location
from airflow_iceberg_maint.fs.storage import DeleteOutcome, FileInfo, KeepComponent, SupportsBulkDelete, storage_for
from airflow_iceberg_maint.orphans.other_tables import (
    ProtectedLocation,
    TablePaths,
    catalog_protections,
    catalog_table_paths,
    listed_metadata_files,
    listed_table_protections,
    outermost,
    protection_set,
)
from airflow_iceberg_maint.orphans.path_hashes import (
    LISTED_SCHEMA,
    inode_identities,
    int64_array,
    path_hashes128,
)
from airflow_iceberg_maint.orphans.referenced import (
    ReferencedSet,
    ReferenceWalk,
    metadata_level_paths,
)
from airflow_iceberg_maint.orphans.sources import ReferenceSource, source_path_batches
from airflow_iceberg_maint.progress import Phase

log = logging.getLogger(__name__)

DEFAULT_OLDER_THAN_DAYS = 3.0
DEFAULT_MAX_CONCURRENT_DELETES = 8
PREFIX_MISMATCH_MODES = ("error", "ignore", "delete")
KINDS = ("data", "delete", "manifest", "manifest_list", "metadata", "statistics", "other")
MATCH_CHUNK = 50_000  # listed files matched against the referenced set per step
LIST_STEP = 10_000  # listed files hashed together, and a progress update
DELETE_STEP_PER_WORKER = 5_000  # files a delete worker gets between progress updates (5 S3 requests)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class OrphanOptions:
    """What to remove. ``older_than`` (absolute) wins over ``older_than_days``."""

    older_than: datetime | None = None
    older_than_days: float | None = None
    location: str | None = None
    dry_run: bool = False
    prefix_mismatch_mode: str = "error"
    equal_schemes: Mapping[str, str] | None = None
    equal_authorities: Mapping[str, str] | None = None
    max_concurrent_deletes: int = DEFAULT_MAX_CONCURRENT_DELETES
    reader_processes: int | None = None  # manifest-decoding workers; None: one a core for large local tables
    # Other tables of the catalog (one catalog pass, shared by the tables cleaned in one run);
    # None: this run lists the table's catalog itself.
    other_tables: Sequence[TablePaths] | None = None
    # The user's word that the location holds this table only: no catalog pass (the metadata
    # folders of other tables found in the listing are still kept whole).
    only_this_table: bool = False


@dataclass
class OrphanReport:
    table: str
    table_uuid: str
    location: str
    older_than: datetime
    dry_run: bool
    orphan_files: list[str] = field(default_factory=list)
    orphan_bytes: int = 0
    deleted_file_count: int = 0
    failed: list[dict[str, str]] = field(default_factory=list)
    conflicts: list[dict[str, str]] = field(default_factory=list)
    by_kind: dict[str, dict[str, int]] = field(default_factory=lambda: {k: {"count": 0, "bytes": 0} for k in KINDS})
    files_listed: int = 0
    list_calls: int = 0
    delete_requests: int = 0
    referenced_files: int = 0
    snapshots: int = 0
    manifests_read: int = 0
    kept_equivalent: int = 0
    kept_by_recheck: int = 0
    kept_undecodable: list[str] = field(default_factory=list)
    protected_locations: list[dict[str, str]] = field(default_factory=list)
    kept_protected: int = 0
    phase_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def orphan_file_count(self) -> int:
        return len(self.orphan_files)

    def summary(self) -> dict[str, Any]:
        """Everything but the orphan list: small enough for an XCom."""
        return {
            "table": self.table,
            "table_uuid": self.table_uuid,
            "location": self.location,
            "older_than": self.older_than.isoformat(),
            "dry_run": self.dry_run,
            "orphan_file_count": self.orphan_file_count,
            "orphan_bytes": self.orphan_bytes,
            "deleted_file_count": self.deleted_file_count,
            "failed": self.failed,
            "conflicts": self.conflicts,
            "by_kind": self.by_kind,
            "files_listed": self.files_listed,
            "list_calls": self.list_calls,
            "delete_requests": self.delete_requests,
            "referenced_files": self.referenced_files,
            "snapshots": self.snapshots,
            "manifests_read": self.manifests_read,
            "kept_equivalent": self.kept_equivalent,
            "kept_by_recheck": self.kept_by_recheck,
            "kept_undecodable": self.kept_undecodable,
            "protected_locations": self.protected_locations,
            "kept_protected": self.kept_protected,
            "phase_seconds": self.phase_seconds,
        }

    def to_json(self) -> dict[str, Any]:
        """The ``orphans --json`` object of docs/cli.md."""
        return {**self.summary(), "orphan_files": self.orphan_files}


def cutoff_for_days(days: float, now: datetime, what: str = "older_than_days") -> datetime:
    """``now`` minus ``days``; refuses what is not a finite number of days >= 0 reaching back to 1970 at most."""
    if not math.isfinite(days) or days < 0:
        raise InvalidInputError(f"{what} {days}: expected a finite number of days >= 0")
    try:
        cutoff = now - timedelta(days=days)
    except OverflowError:
        cutoff = datetime.min.replace(tzinfo=UTC)  # out of range either way: refused just below
    if cutoff < EPOCH:
        raise InvalidInputError(f"{what} {days:g}: expected at most {(now - EPOCH).days} days (back to 1970-01-01)")
    return cutoff


def resolve_cutoff(older_than_days: float | None, older_than: datetime | None, now: datetime) -> datetime:
    """The absolute cutoff: files must be strictly older. A future cutoff is refused."""
    if older_than is not None:
        cutoff = older_than if older_than.tzinfo else older_than.replace(tzinfo=UTC)
        if cutoff > now:
            raise InvalidInputError(f"older_than {cutoff.isoformat()}: is in the future (now is {now.isoformat()})")
        return cutoff.astimezone(UTC)
    days = DEFAULT_OLDER_THAN_DAYS if older_than_days is None else older_than_days
    cutoff = cutoff_for_days(days, now)
    if days == 0:
        log.warning("older_than_days is 0: every unreferenced file is eligible, including files of in-flight writes")
    return cutoff


def file_kind(path: str) -> str:
    """A best guess from the name, for the report only."""
    name = path.rsplit("/", 1)[-1]
    in_metadata = "/metadata/" in path
    if name.endswith((".metadata.json", ".metadata.json.gz")) or name == "version-hint.text":
        return "metadata"
    if in_metadata and name.startswith("snap-") and name.endswith(".avro"):
        return "manifest_list"
    if in_metadata and name.endswith(".avro"):
        return "manifest"
    if in_metadata and name.endswith((".puffin", ".stats")):
        return "statistics"
    if "delete" in name or name.endswith(".puffin"):
        return "delete"
    if name.endswith((".parquet", ".orc", ".avro")):
        return "data"
    return "other"


def partition_field_names(table: Table) -> list[str]:
    """Names of the fields of every partition spec: their ``field=value`` directories are listed."""
    return sorted({f.name for spec in table.metadata.partition_specs for f in spec.fields})


def hidden_filter(table: Table) -> KeepComponent:
    return keep_filter(partition_field_names(table))


def keep_filter(partition_fields: Sequence[str]) -> KeepComponent:
    """Skip names starting with ``_`` or ``.``, except ``field=value`` directories of the partition fields."""
    fields = frozenset(partition_fields)

    def keep(name: str) -> bool:
        if not name.startswith(("_", ".")):
            return True
        field_name, eq, _ = name.partition("=")
        return bool(eq) and field_name in fields

    return keep


def refuse_gc_disabled(table: Table) -> None:
    if str(table.properties.get("gc.enabled", "true")).strip().lower() == "false":
        raise GcDisabledError(
            f"table {_name(table)}: gc.enabled=false, so its files may be shared with other tables "
            "(for example branches in a Nessie catalog or a table registered twice); "
            "orphan removal would delete them and is refused"
        )


def _name(table: Table) -> str:
    return ".".join(table.name())


def check_options(options: OrphanOptions) -> None:
    if options.prefix_mismatch_mode not in PREFIX_MISMATCH_MODES:
        raise InvalidInputError(
            f"prefix_mismatch_mode {options.prefix_mismatch_mode!r}: expected one of {', '.join(PREFIX_MISMATCH_MODES)}"
        )
    if options.max_concurrent_deletes < 1:
        raise InvalidInputError(f"max_concurrent_deletes {options.max_concurrent_deletes}: expected at least 1")


class Phases:
    def __init__(self, report: OrphanReport) -> None:
        self.report = report
        self.started = time.perf_counter()

    def done(self, name: str) -> None:
        now = time.perf_counter()
        self.report.phase_seconds[name] = round(now - self.started, 3)
        self.started = now


@dataclass
class _Listing:
    candidates: list[FileInfo]  # strictly older than the cutoff; a file with no modification time never is
    candidate_hashes: array[int]  # ``path_hash`` of each candidate, computed here, beside the reads
    listed: int
    metadata_files: list[str]  # table metadata files in any ``metadata`` folder, whatever their age
    on_disk: pa.Table  # 128-bit hash and identity of every listed local file (LISTED_SCHEMA)


_PATH, _MTIME, _INODE = attrgetter("path"), attrgetter("mtime"), attrgetter("inode")


def _take_listed(chunk: list[FileInfo], cutoff: datetime, listing: _Listing, on_disk: list[pa.Table]) -> None:
    """Add a chunk of listed files: each step runs over the whole chunk in C, not a file at a time in Python."""
    listing.listed += len(chunk)
    paths = list(map(_PATH, chunk))
    mtimes = list(map(_MTIME, chunk))
    # ``cutoff > m`` is ``m < cutoff``; a file with no modification time is never a candidate.
    old = list(map(cutoff.__gt__, mtimes)) if None not in mtimes else [m is not None and m < cutoff for m in mtimes]
    listing.candidates.extend(compress(chunk, old))
    first, second = path_hashes128(paths)
    listing.candidate_hashes.extend(compress(first, old))
    listing.metadata_files.extend(listed_metadata_files(paths))
    inodes = list(map(_INODE, chunk))
    if None in inodes:  # only files on local disks have one
        local = [i is not None for i in inodes]
        first, second = array("q", compress(first, local)), array("q", compress(second, local))
        inodes = list(compress(inodes, local))
    if inodes:
        columns = [int64_array(first), int64_array(second), inode_identities(inodes)]
        on_disk.append(pa.Table.from_arrays(columns, schema=LISTED_SCHEMA))


def _list_candidates(
    storage: Any, root: str, keep: KeepComponent, cutoff: datetime, after_chunk: Callable[[], None] = lambda: None
) -> _Listing:
    """List ``root``; ``after_chunk`` runs after each chunk of listed files is taken."""
    result = _Listing([], array("q"), 0, [], LISTED_SCHEMA.empty_table())
    on_disk: list[pa.Table] = []
    files = storage.list_files(root, keep)
    with Phase("listing") as listing:
        for chunk in iter(lambda: list(islice(files, LIST_STEP)), []):
            _take_listed(chunk, cutoff, result, on_disk)
            after_chunk()
            listing.advance(len(chunk))
            if result.listed % 100_000 < LIST_STEP:
                log.info("listed %d files under %s", result.listed, root)
    if on_disk:
        result.on_disk = pa.concat_tables(on_disk)
    return result


def _comparable(path: str) -> bool:
    """Whether a listed name can be compared exactly with metadata, which holds UTF-8 only."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:  # a surrogate-escaped byte of a local name that is not UTF-8
        return False
    return True


def printable(path: str) -> str:
    """A listed path for reports and logs; bytes that are not UTF-8 appear as ``\\xNN``."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def other_tables(table: Table, options: OrphanOptions) -> Sequence[TablePaths]:
    if options.only_this_table:
        return ()
    if options.other_tables is not None:
        return options.other_tables
    try:
        return catalog_table_paths(table.catalog)
    except CatalogListingError as exc:
        raise CatalogListingError(
            f"table {_name(table)}: {exc}; nothing was deleted. If the location holds this table only, "
            "say so with only_this_table (--only-this-table)"
        ) from exc


def _referenced(paths: list[str], refs: ReferencedSet) -> list[bool]:
    """Whether each path is referenced exactly or is the same file under another spelling."""
    exact = refs.contains_exact(paths)
    others = refs.classify_unmatched([p for p, hit in zip(paths, exact, strict=True) if not hit])
    return [hit or others.get(p) == "equivalent" for p, hit in zip(paths, exact, strict=True)]


def protected_locations(
    table: Table,
    root: str,
    listed_metadata_files: Sequence[str],
    refs: ReferencedSet,
    others: Sequence[TablePaths],
    equivalence: PathEquivalence,
) -> list[ProtectedLocation]:
    """Other tables' locations under ``root`` (S8). ``refs`` says which listed metadata files are this table's;
    a subset of the referenced set only makes more metadata files read, never fewer locations kept."""
    uuid, location = str(table.metadata.table_uuid), table.metadata.location
    found = catalog_protections(others, uuid, _name(table), root, equivalence)
    metadata_files = [p for p in listed_metadata_files if _comparable(p)]
    referenced = _referenced(metadata_files, refs)
    found += listed_table_protections(metadata_files, referenced, table.io, uuid, location, equivalence)
    return outermost(found)


def _outside(files: list[FileInfo], kept: LocationSet) -> list[FileInfo]:
    """The files that lie under no kept location, in any spelling of either (S8)."""
    return [f for f in files if not kept.covers(f.path)]


def _collect(
    refs: ReferencedSet,
    walk: ReferenceWalk,
    sources: Sequence[ReferenceSource],
    skip: frozenset[int] = frozenset(),
    listed_under: str | None = None,
) -> None:
    """Add everything the table's current metadata references (snapshots in ``skip`` excepted).

    With ``listed_under``, identities of local paths below it wait for ``refs.resolve``.
    """
    table = walk.table
    collect_referenced(refs, walk, sources, table.metadata, table.metadata_location, skip, listed_under)


def collect_referenced(
    refs: ReferencedSet,
    walk: ReferenceWalk,
    sources: Sequence[ReferenceSource],
    metadata: TableMetadata,
    metadata_location: str,
    skip: frozenset[int] = frozenset(),
    listed_under: str | None = None,
) -> None:
    """``_collect`` for given metadata of the walk's table (snapshot expiry passes the metadata it commits)."""
    refs.add(metadata_level_paths(metadata, metadata_location))
    for batch, reread in walk.hash_batches(metadata, skip, listed_under):
        refs.add_hashes(batch, reread)
    for paths in source_path_batches(walk.table, sources):
        refs.add(paths)


def match_candidates(
    candidates: list[FileInfo], refs: ReferencedSet, hashes: Sequence[int] | None = None
) -> tuple[list[FileInfo], list[FileInfo], int, list[FileInfo]]:
    """Split candidates into orphans, conflicts, a count of equivalent spellings, and names kept as not UTF-8.

    ``hashes``: the ``path_hash`` of each candidate, when the listing computed them.
    """
    orphans: list[FileInfo] = []
    conflicts: list[FileInfo] = []
    equivalent = 0
    paths = list(map(_PATH, candidates))
    if hashes is None:
        hashes = path_hashes128(paths)[0]
    undecodable = [] if all(map(str.isascii, paths)) else [c for c in candidates if not _comparable(c.path)]
    if undecodable:
        kept = {id(c) for c in undecodable}
        hashes = [h for c, h in zip(candidates, hashes, strict=True) if id(c) not in kept]
        candidates = [c for c in candidates if id(c) not in kept]
    for start in range(0, len(candidates), MATCH_CHUNK):
        chunk = candidates[start : start + MATCH_CHUNK]
        exact = refs.contains_hashes(hashes[start : start + MATCH_CHUNK])
        unmatched = list(compress(chunk, map(not_, exact)))
        verdicts = refs.classify_unmatched([c.path for c in unmatched], [c.inode for c in unmatched])
        for info in unmatched:
            verdict = verdicts.get(info.path)
            if verdict is None:
                orphans.append(info)
            elif verdict == "conflict":
                conflicts.append(info)
            else:
                equivalent += 1
    return orphans, conflicts, equivalent, undecodable


def conflict_pairs(
    conflicts: list[FileInfo], walk: ReferenceWalk, sources: Sequence[ReferenceSource]
) -> list[dict[str, str]]:
    """Pair each conflicting listed file with the referenced paths it collides with (a second pass)."""
    equivalence = walk.equivalence
    by_key: dict[str, list[str]] = {}
    for info in conflicts:
        by_key.setdefault(equivalence.path_key(info.path), []).append(info.path)
    table = walk.table
    batches = chain(
        [metadata_level_paths(table.metadata, table.metadata_location)],
        walk.path_batches(table.metadata),
        source_path_batches(table, sources),
    )
    pairs: list[dict[str, str]] = []
    for batch in batches:
        for ref in batch:
            for listed in by_key.get(equivalence.path_key(ref), ()):
                if not equivalence.equivalent(listed, ref):
                    pairs.append({"listed": listed, "referenced": ref})
    return pairs


def recheck(
    orphans: list[FileInfo],
    walk: ReferenceWalk,
    sources: Sequence[ReferenceSource],
    known: frozenset[int] | None = None,
) -> list[FileInfo]:
    """Reload the table and keep any orphan that metadata committed during the scan references.

    ``known``: the snapshots the scan read (default: those of the table before the reload);
    ``walk.seen``: the manifests it read. Only what is new since is read again.
    """
    table = walk.table
    if known is None:
        known = frozenset(s.snapshot_id for s in table.metadata.snapshots)
    try:
        # Through refresh_table, not table.refresh(): the reload must hold every snapshot too.
        refresh_table(table)
    except IncompleteMetadataError:
        raise
    except Exception as exc:  # a metadata file the catalog names is missing, the catalog is down...
        raise MetadataReadError(
            f"table {_name(table)}: cannot be reloaded for the re-check before deleting ({type(exc).__name__}: "
            f"{exc}); nothing was deleted"
        ) from exc
    refuse_gc_disabled(table)
    late = ReferencedSet(walk.equivalence)
    _collect(late, walk, sources, skip=known)
    exact = late.contains_exact([o.path for o in orphans])
    survivors = [o for o, hit in zip(orphans, exact, strict=True) if not hit]
    protected = late.classify_unmatched([o.path for o in survivors], [o.inode for o in survivors])
    return [o for o in survivors if o.path not in protected]


def report_undecodable(report: OrphanReport, paths: Sequence[str]) -> None:
    report.kept_undecodable = [printable(p) for p in paths]
    if paths:
        log.warning(
            "%d listed files are kept: their names are not UTF-8, so no metadata path can name them "
            "exactly (first: %s)",
            len(paths),
            report.kept_undecodable[0],
        )


#: Called with the report and a stage: ``matched`` (orphans before the re-check) and ``planned``
#: (the final list, just before anything is deleted), so a caller can save what a run would delete
#: before a later failure or a crash can lose it.
StageHook = Callable[[OrphanReport, str], None]


def _tally(report: OrphanReport, orphans: list[FileInfo]) -> None:
    report.orphan_files = [o.path for o in orphans]
    report.orphan_bytes = 0
    report.by_kind = {k: {"count": 0, "bytes": 0} for k in KINDS}
    for info in orphans:
        kind = report.by_kind[file_kind(info.path)]
        kind["count"] += 1
        kind["bytes"] += info.size
        report.orphan_bytes += info.size


@dataclass(frozen=True)
class ScanSetup:
    """What every run checks and resolves before listing anything (S3, S7, S8, S12)."""

    cutoff: datetime
    equivalence: PathEquivalence
    root: str
    others: Sequence[TablePaths]


def delete_in_steps(storage: SupportsBulkDelete, paths: list[str], max_concurrency: int) -> DeleteOutcome:
    """Delete in steps that keep every worker busy, reporting progress after each."""
    outcome = DeleteOutcome()
    step = max_concurrency * DELETE_STEP_PER_WORKER
    with Phase("deleting", total=len(paths)) as deleting:
        for start in range(0, len(paths), step):
            chunk = paths[start : start + step]
            part = storage.delete_files(chunk, max_concurrency)
            outcome.deleted += part.deleted
            outcome.failed += part.failed
            outcome.requests += part.requests
            deleting.advance(len(chunk))
    return outcome


def scan_setup(table: Table, options: OrphanOptions, now: datetime) -> ScanSetup:
    check_options(options)
    cutoff = resolve_cutoff(options.older_than_days, options.older_than, now)
    refuse_gc_disabled(table)
    equivalence = PathEquivalence(options.equal_schemes or {}, options.equal_authorities or {})
    root = validate_location(options.location, table.metadata.location, equivalence)
    return ScanSetup(cutoff, equivalence, root, other_tables(table, options))


def settle(
    report: OrphanReport,
    storage: SupportsBulkDelete,
    options: OrphanOptions,
    walk: ReferenceWalk,
    sources: Sequence[ReferenceSource],
    matched: tuple[list[FileInfo], list[FileInfo]],
    protected: list[ProtectedLocation],
    phases: Phases,
    known: frozenset[int] | None = None,
    on_stage: StageHook | None = None,
) -> None:
    """After matching: keep other tables' locations, report conflicts, re-check, then delete (or not).

    ``matched`` is (orphans, conflicts); ``known`` and ``walk`` are as for ``recheck``.
    """
    orphans, conflicts = matched
    if protected:
        report.protected_locations = [p.to_json() for p in protected]
        before = len(orphans) + len(conflicts)
        kept = protection_set(protected, walk.equivalence)
        orphans, conflicts = _outside(orphans, kept), _outside(conflicts, kept)
        report.kept_protected = before - len(orphans) - len(conflicts)
        log.warning(
            "kept whole, as other tables' locations: %s", "; ".join(f"{p.location} ({p.reason})" for p in protected)
        )
    if conflicts:
        report.conflicts = conflict_pairs(conflicts, walk, sources)
        log.warning("%d listed files match referenced paths under another scheme or authority", len(conflicts))
        if options.prefix_mismatch_mode == "delete":
            orphans = orphans + conflicts
    phases.done("match")
    if on_stage:
        _tally(report, orphans)
        on_stage(report, "matched")

    before = len(orphans)
    orphans = recheck(orphans, walk, sources, known)
    report.kept_by_recheck = before - len(orphans)
    report.snapshots += walk.snapshots  # the walk's own reads, the re-check's included
    report.manifests_read += walk.manifests_read
    _tally(report, orphans)
    phases.done("recheck")
    log.info(
        "%d orphan files, %d bytes%s",
        report.orphan_file_count,
        report.orphan_bytes,
        f"; {report.kept_by_recheck} kept because a commit during the scan references them"
        if report.kept_by_recheck
        else "",
    )

    if conflicts and options.prefix_mismatch_mode == "error":
        raise PrefixMismatchError(
            f"table {report.table}: {len(conflicts)} listed files match referenced files by path but not by "
            f"scheme or authority (first: {report.conflicts[0]['listed']!r} vs "
            f"{report.conflicts[0]['referenced']!r}); nothing was deleted. Map them with equal_schemes / "
            "equal_authorities, or choose prefix_mismatch_mode ignore or delete",
            [(c["listed"], c["referenced"]) for c in report.conflicts],
            report,
        )
    if on_stage:
        on_stage(report, "planned")
    if not options.dry_run and orphans:
        outcome = delete_in_steps(storage, report.orphan_files, options.max_concurrent_deletes)
        report.deleted_file_count = len(outcome.deleted)
        report.failed = [{"path": p, "error": e} for p, e in outcome.failed]
        report.delete_requests = outcome.requests
        log.info(
            "deleted %d files in %d requests, %d failed",
            report.deleted_file_count,
            outcome.requests,
            len(report.failed),
        )
    phases.done("delete")


@contextmanager
def _older_objects_frozen() -> Iterator[Callable[[], None]]:
    """Keep the objects that existed before the scan out of the garbage collector's full passes.

    A scan allocates an object or more a listed file, so full collections run again and again,
    and each one walks the whole heap (the table's metadata included): about 0.3 CPU seconds
    of 1.5 per 100,000 files, on the core the listing needs. ``gc.freeze`` exempts the older
    objects until ``gc.unfreeze``: any of them that become cyclic garbage meanwhile are
    collected after the scan instead of during it. It yields ``gc.freeze`` for the listing to
    call after each chunk, so the listed files it keeps are not walked again and again either
    (0.03 to 0.1 s per 100,000 files).
    """
    gc.freeze()
    try:
        yield gc.freeze
    finally:
        gc.unfreeze()


def remove_orphan_files(
    table: Table,
    options: OrphanOptions | None = None,
    *,
    sources: Sequence[ReferenceSource],
    now: datetime | None = None,
    on_stage: StageHook | None = None,
) -> OrphanReport:
    """Find the files under the table location that nothing references, and delete them unless dry-run.

    ``sources`` keep the files the rest of the project stores under the table (its indexes:
    ``airflow_iceberg_maint.index.lifecycle.references.INDEX_FILES``); it has no default, so that no caller
    drops them by accident.
    """
    options = options or OrphanOptions()
    now = now or datetime.now(UTC)
    setup = scan_setup(table, options, now)
    root, equivalence = setup.root, setup.equivalence
    report = OrphanReport(_name(table), str(table.metadata.table_uuid), root, setup.cutoff, options.dry_run)
    phases = Phases(report)
    storage = storage_for(root, table.io.properties)
    log.info(
        "table %s: scanning %s for files older than %s%s",
        report.table,
        root,
        setup.cutoff.isoformat(),
        " (dry run)" if options.dry_run else "",
    )

    refs = ReferencedSet(equivalence)
    with _older_objects_frozen() as freeze, ReferenceWalk(table, equivalence, options.reader_processes) as walk:
        with ThreadPoolExecutor(max_workers=1) as lister:
            # In a copy of this context, so the listing reports to this run's progress reporter.
            listing = lister.submit(
                copy_context().run, _list_candidates, storage, root, hidden_filter(table), setup.cutoff, freeze
            )
            _collect(refs, walk, sources, listed_under=root)
            listed = listing.result()
        stated = refs.resolve(listed.on_disk)
        if stated:
            log.info(
                "%d referenced paths under %s are not listed files: their identities were read on disk", stated, root
            )
        candidates, report.files_listed = listed.candidates, listed.listed
        report.list_calls = storage.list_calls
        report.referenced_files = len(refs)
        log.info(
            "listed %d files (%d older than the cutoff) in %d list calls; %d referenced files from %d "
            "snapshots, %d manifests",
            report.files_listed,
            len(candidates),
            report.list_calls,
            report.referenced_files,
            walk.snapshots,
            walk.manifests_read,
        )
        phases.done("list_and_reference")

        orphans, conflicts, report.kept_equivalent, undecodable = match_candidates(
            candidates, refs, listed.candidate_hashes
        )
        report_undecodable(report, [u.path for u in undecodable])
        protected = protected_locations(table, root, listed.metadata_files, refs, setup.others, equivalence)
        del candidates, refs
        settle(report, storage, options, walk, sources, (orphans, conflicts), protected, phases, on_stage=on_stage)
    return report
