"""Which region files an index query reads, and the entries in them that match.

The tracking file's ``group_max_value`` keys (inclusive upper bounds, in index order) are
binary-searched for the first region that can hold a key; following regions are read too while
the previous one ends exactly on the key (a spanning hot key) and their bounds admit it. A range
on the first ordering field's source value reads the regions whose bounds for that field overlap
the range's keys (order-preserving expressions only). Each region file is read once per query,
for all the keys it may hold.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache, partial
from itertools import pairwise
from threading import Lock
from typing import Any

import pyarrow as pa
from cachetools import LRUCache, cached
from cachetools.keys import hashkey
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema
from pyiceberg.types import NestedField

from airflow_iceberg_maint.index.format.extract_files import FieldStats, RegionEntry, read_tracking_file
from airflow_iceberg_maint.index.metadata.expressions import FILE_COLUMN_ID, POS_COLUMN_ID
from airflow_iceberg_maint.index.metadata.model import Extract, IndexMetadata, OrderingField
from airflow_iceberg_maint.index.read.key_scan import KeyRange, Probe
from airflow_iceberg_maint.index.read.region_reads import read_region_matches, read_region_range
from airflow_iceberg_maint.index.source.threads import ordered_map
from airflow_iceberg_maint.sorting.ordering import comparable

log = logging.getLogger(__name__)
#: Region files a query reads at once.
READ_THREADS = 4


@lru_cache(maxsize=64)
def arrow_schema(fields: tuple[NestedField, ...]) -> pa.Schema:
    return schema_to_pyarrow(Schema(*fields), include_field_ids=False)


def _probe_keys(tracking: Tracking, keys: Sequence[NestedField], probes: Sequence[Probe]) -> list[tuple[Any, ...]]:
    """The ordering key of each probe, evaluated with the index's own expressions (one call per
    expression for all probes)."""
    arrow = arrow_schema(tuple(keys))
    columns = [pa.array([p[i] for p in probes], type=t) for i, t in enumerate(arrow.types)]
    rows = pa.table(columns, schema=arrow)
    evaluated = [o.expression.evaluate(rows, tracking.schema).to_pylist() for o in tracking.ordering]
    return list(zip(*evaluated, strict=True)) if evaluated else [() for _ in probes]


@dataclass(frozen=True)
class _FieldRange:
    """What a region's statistics say of one ordering field, as comparable values (``comparable``)."""

    low: tuple[Any, ...] | None  # None: bounds unknown
    high: tuple[Any, ...] | None
    nulls: bool  # may hold nulls
    unbounded_values: bool  # may hold values although its bounds are unknown


def _field_range(stats: FieldStats | None, arrow_type: pa.DataType) -> _FieldRange | None:
    """The region's range for one field (None: no statistics, anything may be there)."""
    if stats is None:
        return None
    nulls = stats.null_value_count is None or stats.null_value_count > 0
    if stats.lower_bound is None or stats.upper_bound is None:
        # bounds are null only when the region has no such value
        return _FieldRange(None, None, nulls, stats.null_value_count is None)
    low, high = (comparable([v], [arrow_type])[0] for v in (stats.lower_bound, stats.upper_bound))
    return _FieldRange(low, high, nulls, True)


def _admits(field: _FieldRange | None, wanted: tuple[Any, ...]) -> bool:
    """Whether a region's range for one field may include the comparable value (unknown: yes)."""
    if field is None:
        return True
    if wanted == (0,):  # null
        return field.nulls
    if field.low is None or field.high is None:
        return field.unbounded_values
    return field.low <= wanted <= field.high


@dataclass(frozen=True)
class Tracking:
    """A tracking file ready for lookups: entries with their ``group_max_value`` keys in index order."""

    schema: Schema
    ordering: list[OrderingField]
    entries: list[RegionEntry]
    bounds: list[tuple[tuple[Any, ...], ...]]
    types: list[pa.DataType]
    #: Per entry, per ordering field: its range, compared without converting again per key.
    ranges: list[list[_FieldRange | None]]


@cached(
    LRUCache(maxsize=64),
    lock=Lock(),
    key=lambda io, metadata, extract: hashkey(
        metadata.resolve_location(extract.tracking_file), extract.extract_schema_id
    ),
)
def usable_tracking(io: FileIO, metadata: IndexMetadata, extract: Extract) -> Tracking | None:
    """The extract's tracking file, or None when it cannot answer lookups exactly (cached: both are immutable).

    That is when an entry lacks ``group_max_value`` for an ordering field, or the entries are not
    in index order: binary search would then be unsound, so the lookup scans instead.
    """
    schema = metadata.extract_schema(extract)
    entries = read_tracking_file(io, metadata.resolve_location(extract.tracking_file), metadata.location)
    ordering = metadata.ordering_fields(schema)
    types = [schema_to_pyarrow(o.data_type) for o in ordering]
    if any(not (s := e.stats.get(o.field_id)) or not s.has_group_max_value for e in entries for o in ordering):
        log.warning("tracking file %s: an entry has no group_max_value; scanning instead", extract.tracking_file)
        return None
    bounds = [comparable([e.stats[o.field_id].group_max_value for o in ordering], types) for e in entries]
    if any(a > b for a, b in pairwise(bounds)):
        log.warning("tracking file %s: entries are not in index order; scanning instead", extract.tracking_file)
        return None
    ranges = [[_field_range(e.stats.get(o.field_id), t) for o, t in zip(ordering, types, strict=True)] for e in entries]
    return Tracking(schema, ordering, entries, bounds, types, ranges)


def candidate_regions(tracking: Tracking, key: tuple[Any, ...]) -> list[RegionEntry]:
    """The region files that can hold entries with this ordering key, in index order."""
    wanted = comparable(key, tracking.types)
    found: list[RegionEntry] = []
    index = bisect_left(tracking.bounds, wanted)  # the first region whose inclusive upper bound >= key
    while index < len(tracking.entries):
        if all(_admits(f, w) for f, w in zip(tracking.ranges[index], wanted, strict=True)):
            found.append(tracking.entries[index])
        if tracking.bounds[index] != wanted:
            break  # the key cannot continue past a region that ends above it
        index += 1  # the region ends exactly on the key: a spanning key may continue in the next one
    return found


def _key_variants(probe: Probe) -> list[Probe]:
    """Probes whose keys a lookup must visit: ``0.0`` and ``-0.0`` are equal values but distinct keys."""
    variants: list[Probe] = [()]
    for value in probe:
        options = [value, -value] if isinstance(value, float) and value == 0.0 else [value]
        variants = [(*v, o) for v in variants for o in options]
    return variants


def probe_entries(
    io: FileIO,
    metadata: IndexMetadata,
    tracking: Tracking,
    keys: Sequence[NestedField],
    probes: Sequence[Probe],
    stored_ids: Sequence[int],
) -> tuple[pa.Table, int]:
    """The ``_file``, ``_pos`` and ``stored_ids`` columns of the entries matching a probe; and the
    number of region files read (each once, for all the probes it may hold)."""
    variants = [(probe, v) for probe in probes for v in _key_variants(probe)]
    regions: dict[str, dict[Probe, None]] = defaultdict(dict)  # ordered sets of probes
    for (probe, _), key in zip(variants, _probe_keys(tracking, keys, [v for _, v in variants]), strict=True):
        for region in candidate_regions(tracking, key):
            regions[region.file_path][probe] = None
    key_ids = [k.field_id for k in keys]
    return _read_entries(
        metadata,
        tracking,
        stored_ids,
        {path: partial(read_region_matches, io, path, key_ids, probes=list(p)) for path, p in regions.items()},
    )


def range_entries(
    io: FileIO,
    metadata: IndexMetadata,
    tracking: Tracking,
    key: NestedField,
    wanted: KeyRange,
    stored_ids: Sequence[int],
) -> tuple[pa.Table, int]:
    """The ``_file``, ``_pos`` and ``stored_ids`` columns of the entries whose first key column lies
    in the range; and the number of region files read."""
    first = tracking.ordering[0]
    low, high = (
        None if v is None else first.expression.evaluate_value(v, tracking.schema) for v in (wanted.low, wanted.high)
    )
    regions = [
        e.file_path for e in tracking.entries if _overlaps(e.stats.get(first.field_id), low, high, tracking.types[0])
    ]
    return _read_entries(
        metadata,
        tracking,
        stored_ids,
        {p: partial(read_region_range, io, p, key.field_id, low=wanted.low, high=wanted.high) for p in regions},
    )


def _overlaps(stats: FieldStats | None, low: Any, high: Any, arrow_type: pa.DataType) -> bool:
    """Whether a region's bounds for the first ordering field may overlap ``[low, high]`` (unknown: yes)."""
    if stats is None:
        return True
    if stats.lower_bound is None or stats.upper_bound is None:
        return stats.null_value_count is None  # only nulls, which no range holds
    types = [arrow_type]
    below_high = high is None or comparable([stats.lower_bound], types) <= comparable([high], types)
    return below_high and (low is None or comparable([stats.upper_bound], types) >= comparable([low], types))


def _read_entries(
    metadata: IndexMetadata,
    tracking: Tracking,
    stored_ids: Sequence[int],
    readers: dict[str, Callable[[list[int]], pa.Table]],
) -> tuple[pa.Table, int]:
    """Each region's matching entries (``readers``: path -> read(output field IDs)), concatenated."""
    file_id = next(f.field_id for f in metadata.identity_fields if f.source_id == FILE_COLUMN_ID)
    pos_id = next(f.field_id for f in metadata.identity_fields if f.source_id == POS_COLUMN_ID)
    output_ids = [file_id, pos_id, *stored_ids]
    names = [f"c{i}" for i in range(len(output_ids))]
    order = {e.file_path: i for i, e in enumerate(tracking.entries)}  # regions in index order
    paths = sorted(readers, key=order.__getitem__)
    # Region files are read side by side (their decoding runs outside the GIL).
    read = ordered_map(
        lambda path: readers[path](output_ids).rename_columns(names), paths, min(READ_THREADS, len(paths))
    )
    parts = list(read)
    if not parts:
        types = dict(
            zip(
                [f.field_id for f in tracking.schema.fields],
                arrow_schema(tuple(tracking.schema.fields)).types,
                strict=True,
            )
        )
        return pa.schema([(n, types[i]) for n, i in zip(names, output_ids, strict=True)]).empty_table(), 0
    # Reused region files keep the types they were written with (int beside long after a promotion).
    return pa.concat_tables(parts, promote_options="permissive"), len(parts)
