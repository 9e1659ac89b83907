"""Applying a table change to the region files of an extract: rewrite the touched ones, reuse the rest.

A change is entries to add (new rows) and entries to drop (every entry of removed data files,
and single ``(_file, _pos)`` entries of rows deleted since). Region files hold disjoint key
ranges ``(G[i-1], G[i]]`` given by their ``group_max_value`` keys ``G``, so:

- added entries are routed to regions by binary search of their (sorted) keys over ``G``; keys
  past the last region form new regions after it (merged into the last region only when that
  one is under half the target, so appends never rewrite a full region);
- dropped single entries are located by their keys the same way; dropped files by the ``_file``
  bounds of each region;
- each touched region (with its neighbours sharing a ``group_max_value`` when keys must not
  span regions) is read, filtered, merged with its additions, sorted and cut again at the
  target size, which splits a region that grew past it. Every other region file is reused with
  its tracking entry.

The number of single entries dropped must equal the number asked for; otherwise the base
extract does not hold what it should and ``RegionRewriteMismatch`` is raised (the caller then
rebuilds fully rather than commit a wrong extract).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.io import FileIO

from airflow_iceberg_maint.errors import MaintenanceError
from airflow_iceberg_maint.index.format.extract_files import FieldStats, RegionEntry, StatsColumn, read_region_file
from airflow_iceberg_maint.index.metadata.expressions import FILE_COLUMN_ID, POS_COLUMN_ID
from airflow_iceberg_maint.index.write.build import (
    EntryLayout,
    entry_bytes,
    sort_entries,
    target_rows,
    write_sorted_regions,
)
from airflow_iceberg_maint.progress import Phase
from airflow_iceberg_maint.sorting.ordering import comparable

#: Positions are packed with the file's dictionary index into one int64 (``index << 40 | pos``).
_POS_BITS = 40

Key = tuple[tuple[Any, ...], ...]


class RegionRewriteMismatch(MaintenanceError):
    """The change cannot be applied exactly: entries to drop are missing from the base, or cannot be packed."""


@dataclass(frozen=True)
class RegionChange:
    """What a table change does to an extract's entries (both tables in the layout's region schema)."""

    additions: pa.Table
    removed_files: frozenset[str]
    removed_entries: pa.Table


@dataclass
class RegionRewrite:
    """The new extract's tracking entries in index order, and which of them were written."""

    entries: list[RegionEntry] = field(default_factory=list)
    written: list[RegionEntry] = field(default_factory=list)
    reused: list[RegionEntry] = field(default_factory=list)


@dataclass(frozen=True)
class _SortedKeys:
    """Ordering keys of sorted entries, searchable in the index order without converting them all."""

    keys: Sequence[pa.Array]
    types: Sequence[pa.DataType]

    def __len__(self) -> int:
        return len(self.keys[0]) if self.keys else 0

    def at(self, index: int) -> Key:
        return comparable([k[index].as_py() for k in self.keys], self.types)

    def bisect(self, bound: Key, right: bool) -> int:
        """The first index whose key is > ``bound`` (``right``) or >= ``bound``."""
        return (bisect_right if right else bisect_left)(range(len(self)), bound, key=self.at)


def promote_stats(entry: RegionEntry, old: Sequence[StatsColumn], new: Sequence[StatsColumn]) -> RegionEntry:
    """A reused region's tracking entry with its statistics in the new extract schema's types."""
    old_types = {c.field_id: c.arrow_type for c in old}
    stats: dict[int, FieldStats] = dict(entry.stats)
    for column in new:
        before = old_types.get(column.field_id)
        current = stats.get(column.field_id)
        if current is None or before is None or before == column.arrow_type:
            continue

        def cast(value: Any, source: pa.DataType = before, target: pa.DataType = column.arrow_type) -> Any:
            return None if value is None else pa.array([value], type=source).cast(target)[0].as_py()

        stats[column.field_id] = replace(
            current,
            lower_bound=cast(current.lower_bound),
            upper_bound=cast(current.upper_bound),
            group_max_value=cast(current.group_max_value),
        )
    return replace(entry, stats=stats)


def region_bounds(regions: Sequence[RegionEntry], layout: EntryLayout) -> list[Key] | None:
    """The ``group_max_value`` key of each region, or None when they cannot route entries exactly."""
    types = _ordering_types(layout)
    bounds: list[Key] = []
    for region in regions:
        stats = [region.stats.get(o.field_id) for o in layout.ordering]
        if any(s is None or not s.has_group_max_value for s in stats):
            return None
        bounds.append(comparable([s.group_max_value for s in stats if s is not None], types))
    if any(a > b for a, b in pairwise(bounds)):
        return None
    return bounds


def _ordering_types(layout: EntryLayout) -> list[pa.DataType]:
    by_id = {c.field_id: c.arrow_type for c in layout.stats_columns}
    return [by_id[o.field_id] for o in layout.ordering]


def _column_name(layout: EntryLayout, source_id: int) -> str:
    sources = layout.source_ids
    return next(f.name for f in layout.extract_schema.fields if sources[f.field_id] == source_id)


def _units(bounds: Sequence[Key], allow_key_spanning: bool) -> list[list[int]]:
    """Regions rewritten together: runs sharing a ``group_max_value`` when keys must stay in one region."""
    units: list[list[int]] = []
    for index, bound in enumerate(bounds):
        if units and not allow_key_spanning and bounds[units[-1][-1]] == bound:
            units[-1].append(index)
        else:
            units.append([index])
    return units


def _addition_cuts(additions: _SortedKeys, bounds: Sequence[Key]) -> list[int]:
    """``cuts[i]``: additions before it go to regions <= i (a key equal to a shared bound goes to the last)."""
    cuts = []
    for index, bound in enumerate(bounds):
        shared = index + 1 < len(bounds) and bounds[index + 1] == bound
        cuts.append(additions.bisect(bound, right=not shared))
    return cuts


def _removal_hits(removals: _SortedKeys, bounds: Sequence[Key]) -> list[bool]:
    """Whether region i may hold a removed key: one in ``[G[i-1], G[i]]`` (a spanning key may start at G[i-1])."""
    hits = []
    for index, bound in enumerate(bounds):
        low = removals.bisect(bounds[index - 1], right=False) if index else 0
        hits.append(removals.bisect(bound, right=True) > low)
    return hits


def _file_hits(regions: Sequence[RegionEntry], file_field: int, removed: Sequence[str]) -> list[bool]:
    """Whether each region's ``_file`` bounds admit a removed data file (unknown bounds: yes)."""
    hits = []
    for region in regions:
        stats = region.stats.get(file_field)
        if stats is None or stats.lower_bound is None or stats.upper_bound is None:
            hits.append(bool(removed))
            continue
        at = bisect_left(removed, stats.lower_bound)
        hits.append(at < len(removed) and removed[at] <= stats.upper_bound)
    return hits


class _Dropper:
    """Filters removed entries out of region entries, counting the single entries it drops."""

    def __init__(self, layout: EntryLayout, change: RegionChange) -> None:
        self.file_name = _column_name(layout, FILE_COLUMN_ID)
        self.pos_name = _column_name(layout, POS_COLUMN_ID)
        self.removed_files = change.removed_files
        self.positions: dict[str, pa.Array] = {}
        removed = change.removed_entries
        if removed.num_rows:
            files = pc.cast(removed.column(self.file_name), pa.string())
            for path in pc.unique(files).to_pylist():
                chosen = removed.filter(pc.equal(files, path)).column(self.pos_name)
                self.positions[path] = pc.unique(chosen.combine_chunks().cast(pa.int64()))
        self.expected = sum(len(p) for p in self.positions.values())
        self.dropped_entries = 0

    def __call__(self, entries: pa.Table) -> pa.Table:
        if entries.num_rows == 0:
            return entries
        entries = entries.unify_dictionaries()
        files = entries.column(self.file_name).combine_chunks()
        dictionary = files.dictionary.to_pylist()
        indices = files.indices.cast(pa.int64())
        if len(dictionary) >= 1 << (63 - _POS_BITS):
            raise RegionRewriteMismatch(f"a region holds entries of {len(dictionary)} data files: too many to pack")
        whole = [i for i, path in enumerate(dictionary) if path in self.removed_files]
        packed_removed: list[pa.Array] = []
        for i, path in enumerate(dictionary):
            if path in self.positions and path not in self.removed_files:
                positions = self.positions[path]
                if len(positions) and pc.max(positions).as_py() >= 1 << _POS_BITS:
                    raise RegionRewriteMismatch(f"data file {path}: a row position exceeds 2**{_POS_BITS}")
                packed_removed.append(pc.add(positions, i << _POS_BITS))
        drop = pc.is_in(indices, value_set=pa.array(whole, pa.int64()))
        if packed_removed:
            positions = entries.column(self.pos_name).combine_chunks().cast(pa.int64())
            packed = pc.add(pc.shift_left(indices, _POS_BITS), positions)
            single = pc.is_in(packed, value_set=pa.concat_arrays(packed_removed))
            self.dropped_entries += pc.sum(pc.and_(single, pc.invert(drop))).as_py() or 0
            drop = pc.or_(drop, single)
        return entries.filter(pc.invert(drop))


def rewrite_regions(
    io: FileIO,
    layout: EntryLayout,
    regions: Sequence[RegionEntry],
    bounds: Sequence[Key],
    change: RegionChange,
    result: RegionRewrite,
    progress: Phase | None = None,
) -> None:
    """Fill ``result`` with the regions of the new extract: touched units rewritten, the others reused.

    ``result`` is the caller's, so the files already written can be deleted if this raises.
    ``progress`` advances by the base regions of each unit as it is taken up.
    """
    metadata = layout.metadata
    spanning = metadata.allow_key_spanning()
    types = _ordering_types(layout)
    additions, addition_keys = sort_entries(change.additions, layout)
    added = _SortedKeys(addition_keys, types)
    removed_entries, removed_keys = sort_entries(change.removed_entries, layout)
    cuts = _addition_cuts(added, bounds)
    key_hits = _removal_hits(_SortedKeys(removed_keys, types), bounds)
    file_field = next(f for f, s in layout.source_ids.items() if s == FILE_COLUMN_ID)
    file_hits = _file_hits(regions, file_field, sorted(change.removed_files))
    drop = _Dropper(layout, RegionChange(additions, change.removed_files, removed_entries))
    target = target_rows(entry_bytes(additions), additions.num_rows, metadata.region_target_size_bytes())

    units = _units(bounds, spanning)
    tail_start = cuts[-1] if cuts else 0
    merge_tail = (
        bool(units)
        and tail_start < additions.num_rows
        and sum(regions[i].record_count for i in units[-1]) < target // 2
    )
    for position, unit in enumerate(units):
        if progress is not None:
            progress.advance(len(unit))
        start = cuts[unit[0] - 1] if unit[0] else 0
        stop = additions.num_rows if merge_tail and position == len(units) - 1 else cuts[unit[-1]]
        touched = stop > start or any(key_hits[i] or file_hits[i] for i in unit)
        if not touched:
            _reuse(result, [regions[i] for i in unit])
            continue
        parts = [read_region_file(io, regions[i].file_path, layout.region_schema) for i in unit]
        existing = pa.concat_tables(parts)
        kept = drop(existing)
        if kept.num_rows == existing.num_rows and stop == start:
            _reuse(result, [regions[i] for i in unit])  # a candidate that held none of the removed entries
            continue
        _write(io, layout, pa.concat_tables([kept, additions.slice(start, stop - start)]), result)
    if not merge_tail and tail_start < additions.num_rows:
        _write(io, layout, additions.slice(tail_start), result)
    if drop.dropped_entries != drop.expected:
        raise RegionRewriteMismatch(
            f"{drop.expected} deleted rows should have had entries in the base extract, found {drop.dropped_entries}"
        )


def _reuse(result: RegionRewrite, regions: Sequence[RegionEntry]) -> None:
    result.entries.extend(regions)
    result.reused.extend(regions)


def _write(io: FileIO, layout: EntryLayout, entries: pa.Table, result: RegionRewrite) -> None:
    # Sorted and cut within the memory budget, like a full build: a large unit spills sorted runs.
    written, _ = write_sorted_regions(io, layout, [entries])
    result.entries.extend(written)
    result.written.extend(written)
