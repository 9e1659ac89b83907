"""Matching listed candidates against the referenced set (S4), and finding other tables' locations (S8).

An exact path match is referenced; a normalised match, or on local storage the same file under
any spelling, is kept or is a conflict; a name that is not UTF-8 is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, compress
from operator import attrgetter, not_

import numpy as np
import pyarrow as pa
from pyiceberg.table import Table

from airflow_iceberg_maint.fs.locations import PathEquivalence
from airflow_iceberg_maint.fs.storage import FileInfo
from airflow_iceberg_maint.orphans.exact_match import bits_at, referenced_bits
from airflow_iceberg_maint.orphans.listing.listed_rows import (
    ROWS_SCHEMA,
    ListedRows,
    comparable,
    file_infos_of,
    inodes_of,
    paths_of,
)
from airflow_iceberg_maint.orphans.listing.spilled_batches import SpilledBatches
from airflow_iceberg_maint.orphans.options import table_name
from airflow_iceberg_maint.reachability.other_tables import (
    ProtectedLocation,
    TablePaths,
    catalog_protections,
    listed_table_protections,
    outermost,
)
from airflow_iceberg_maint.reachability.path_hashes import path_hashes128
from airflow_iceberg_maint.reachability.reference_walk import ReferenceWalk, metadata_level_paths
from airflow_iceberg_maint.reachability.referenced import ReferencedSet
from airflow_iceberg_maint.reachability.sources import ReferenceSource, source_path_batches

MATCH_CHUNK = 50_000  # listed files matched against the referenced set per step
_UNMATCHED_PREFIX = "iceberg-orphan-unmatched-"
ORPHANS_PREFIX = "iceberg-orphan-found-"

_PATH = attrgetter("path")
_ROWS, _NBYTES = attrgetter("num_rows"), attrgetter("nbytes")


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
    undecodable = [] if all(map(str.isascii, paths)) else [c for c in candidates if not comparable(c.path)]
    if undecodable:
        kept = {id(c) for c in undecodable}
        hashes = [h for c, h in zip(candidates, hashes, strict=True) if id(c) not in kept]
        candidates = [c for c in candidates if id(c) not in kept]
    for start in range(0, len(candidates), MATCH_CHUNK):
        chunk = candidates[start : start + MATCH_CHUNK]
        exact = refs.contains_hashes(hashes[start : start + MATCH_CHUNK])
        equivalent += _classify(list(compress(chunk, map(not_, exact))), refs, orphans, conflicts)
    return orphans, conflicts, equivalent, undecodable


def _classify(
    unmatched: list[FileInfo], refs: ReferencedSet, orphans: list[FileInfo], conflicts: list[FileInfo]
) -> int:
    """Add files no referenced hash matched to ``orphans`` or ``conflicts``; returns how many are equivalent."""
    verdicts = refs.classify_unmatched([c.path for c in unmatched], [c.inode for c in unmatched])
    equivalent = 0
    for info in unmatched:
        verdict = verdicts.get(info.path)
        if verdict is None:
            orphans.append(info)
        elif verdict == "conflict":
            conflicts.append(info)
        else:
            equivalent += 1
    return equivalent


@dataclass(frozen=True)
class Matched:
    """What matching a listing leaves: the orphans' rows (``ROWS_SCHEMA``, in listing order), the files that
    collide with a referenced path in another spelling, how many are equivalent spellings, and the names
    kept as not UTF-8."""

    orphans: SpilledBatches
    conflicts: list[FileInfo]
    equivalent: int
    undecodable: list[FileInfo]


def match_listed(rows: ListedRows, refs: ReferencedSet) -> Matched:
    """``match_candidates`` of a listing's candidates held as ``ListedRows``, with the same result.

    The exact match is one merged pass over the candidates' and the referenced hashes in hash
    order (a bit a candidate); the rows of a batch are read back (from disk, when spilled) only
    for the candidates that match no referenced hash. Those rows, and the orphans among them,
    stay Arrow rows within the listed rows' budget, and go to local disk past it. They are
    classified a group at a time (a group's rows within that budget too), each group against
    the small set a spilled referenced set narrows to for it: one pass over the set a group.
    """
    orphans = SpilledBatches(ROWS_SCHEMA, rows.budget_bytes, rows.spill_dir, ORPHANS_PREFIX, "orphans")
    conflicts: list[FileInfo] = []
    equivalent = 0
    with _unmatched(rows, refs) as unmatched:
        for group in _groups(unmatched.batches(), rows.budget_bytes):
            narrowed = refs.narrowed_for_parts((paths_of(s), inodes_of(s)) for s in _in_steps(group))
            # Classified MATCH_CHUNK at a time: each call scans the referenced keys.
            for step in _in_steps(group):
                paths = paths_of(step)
                verdicts = narrowed.classify_unmatched(paths, inodes_of(step))
                kinds = list(map(verdicts.get, paths))
                for batch in kept(step, [k is None for k in kinds]).to_batches():
                    orphans.add(batch)
                conflicts.extend(file_infos_of(step.filter(pa.array([k == "conflict" for k in kinds]))))
                equivalent += kinds.count("equivalent")
    orphans.finish()
    return Matched(orphans, conflicts, equivalent, rows.rows(rows.undecodable))


def _unmatched(rows: ListedRows, refs: ReferencedSet) -> SpilledBatches:
    """The rows of the candidates no referenced hash matches exactly, names that are not UTF-8 left out."""
    referenced = referenced_bits(rows.sorted_hashes(), refs.sorted_exact(), len(rows))
    undecodable = np.array(rows.undecodable, np.int64)
    unmatched = SpilledBatches(ROWS_SCHEMA, rows.budget_bytes, rows.spill_dir, _UNMATCHED_PREFIX, "unmatched files")
    for number, start in rows.chunks():
        count = rows.batch_rows(number)
        wanted = ~bits_at(referenced, start, count)
        wanted[undecodable[(undecodable >= start) & (undecodable < start + count)] - start] = False
        if wanted.any():
            unmatched.add(rows.batch(number).filter(pa.array(wanted)))
    unmatched.finish()
    return unmatched


def kept(rows: pa.Table, mask: list[bool]) -> pa.Table:
    """The rows the mask keeps; all of them without a copy."""
    return rows if all(mask) else rows.filter(pa.array(mask, pa.bool_()))


def _in_steps(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.Table]:
    """The batches as steps of MATCH_CHUNK rows or more."""
    return map(pa.Table.from_batches, _gathered(batches, MATCH_CHUNK, _ROWS))


def _groups(batches: Iterable[pa.RecordBatch], budget_bytes: int) -> Iterator[list[pa.RecordBatch]]:
    """Consecutive batches, as groups of about ``budget_bytes`` (a batch at least)."""
    return _gathered(batches, budget_bytes, _NBYTES)


def _gathered(
    batches: Iterable[pa.RecordBatch], limit: int, size: Callable[[pa.RecordBatch], int]
) -> Iterator[list[pa.RecordBatch]]:
    """Consecutive batches, in groups whose ``size`` reaches ``limit`` (the last may be smaller)."""
    group: list[pa.RecordBatch] = []
    total = 0
    for batch in batches:
        group.append(batch)
        total += size(batch)
        if total >= limit:
            yield group
            group, total = [], 0
    if group:
        yield group


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


def _referenced(paths: list[str], refs: ReferencedSet) -> list[bool]:
    """Whether each path is referenced exactly or is the same file under another spelling."""
    refs = refs.narrowed_for(paths)
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
    found = catalog_protections(others, uuid, table_name(table), root, equivalence)
    metadata_files = [p for p in listed_metadata_files if comparable(p)]
    referenced = _referenced(metadata_files, refs)
    found += listed_table_protections(metadata_files, referenced, table.io, uuid, location, equivalence)
    return outermost(found)
