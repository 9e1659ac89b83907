"""Point lookups through an index, exact for any snapshot (S5).

1. The probe values are turned into ordering keys with the index's own expressions.
2. The tracking file's ``group_max_value`` keys (inclusive upper bounds, in index order) are
   binary-searched for the first region that can hold the key; following regions are read too
   while the previous one ends exactly on the key (a spanning hot key) and their bounds admit it.
3. In a region, only the row groups whose statistics admit the probe are read, and filtered.
4. Table rows are fetched by ``_file`` and ``_pos`` (only the row groups holding them).

An extract is used as is only for exactly its source snapshot. For another snapshot the lookup
is reconciled against that snapshot's files: hits in data files that are gone are dropped; hits
in data files whose deletes only grew get the new deletes applied; data files that are new (or
whose deletes shrank) are scanned with the key filter. When those files exceed
``RECONCILE_MAX_SCAN_FRACTION`` of the snapshot's data bytes, or no usable extract exists, the
lookup is a plain filtered scan instead.
"""

from __future__ import annotations

import logging
import uuid
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from itertools import pairwise
from threading import Lock
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from cachetools import LRUCache, cached
from cachetools.keys import hashkey
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.types import (
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
    UUIDType,
)

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.index.expressions import FILE_COLUMN_ID, METADATA_COLUMNS, POS_COLUMN_ID
from airflow_iceberg_maint.index.extract_files import FIELD_ID, FieldStats, RegionEntry, read_tracking_file
from airflow_iceberg_maint.index.key_scan import Probe, check_probe, probe_mask, scan_files
from airflow_iceberg_maint.index.lag import closest_extract
from airflow_iceberg_maint.index.live_rows import (
    POS_COLUMN,
    deleted_positions,
    equality_deleted_mask,
    plan_schema,
    read_rows,
)
from airflow_iceberg_maint.index.metadata.model import Extract, IndexMetadata, OrderingField
from airflow_iceberg_maint.index.ordering import comparable
from airflow_iceberg_maint.index.parquet_files import opened_parquet
from airflow_iceberg_maint.index.snapshot_files import SnapshotFiles, plan_snapshot, resolve_snapshot
from airflow_iceberg_maint.index.store import IndexStore

log = logging.getLogger(__name__)

#: Reconcile a lagging extract only while the data files to scan stay below this share of the
#: snapshot's data bytes; beyond it a plain scan is about as cheap and simpler (Hyperspace's 30%).
RECONCILE_MAX_SCAN_FRACTION = 0.3


@dataclass
class LookupResult:
    index: str
    snapshot_id: int | None
    rows: pa.Table
    mode: str  # "index", "reconciled" or "scan"
    extract_snapshot_id: int | None = None
    region_files_read: int = 0
    reconciled_files: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "snapshot_id": self.snapshot_id,
            "rows": self.rows.to_pylist(),
            "region_files_read": self.region_files_read,
            "reconciled_files": self.reconciled_files,
            "mode": self.mode,
            "extract_snapshot_id": self.extract_snapshot_id,
        }


def parse_lookup_value(text: str, column: NestedField) -> Any:
    """A command-line value as the key column's type (ISO 8601 for dates and timestamps)."""
    kind = column.field_type
    try:
        if isinstance(kind, (IntegerType, LongType)):
            bits = 32 if isinstance(kind, IntegerType) else 64
            number = int(text)
            if not -(2 ** (bits - 1)) <= number < 2 ** (bits - 1):
                raise ValueError(f"out of range for a {bits}-bit integer")
            return number
        if isinstance(kind, (FloatType, DoubleType)):
            return float(text)
        if isinstance(kind, DecimalType):
            return Decimal(text)
        if isinstance(kind, BooleanType):
            if text.lower() not in ("true", "false"):
                raise ValueError("expected true or false")
            return text.lower() == "true"
        if isinstance(kind, DateType):
            return date.fromisoformat(text)
        if isinstance(kind, (TimestampType, TimestamptzType)):
            value = datetime.fromisoformat(text.replace("Z", "+00:00"))
            if isinstance(kind, TimestamptzType):
                return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
            return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value
        if isinstance(kind, UUIDType):
            return uuid.UUID(text)
        if isinstance(kind, StringType):
            return text
    except (ValueError, InvalidOperation) as exc:
        raise InvalidInputError(f"--eq {text!r}: not a {kind} value for column {column.name!r} ({exc})") from exc
    raise InvalidInputError(f"--eq {text!r}: lookups on {kind} column {column.name!r} are not supported")


def key_columns(metadata: IndexMetadata) -> list[NestedField]:
    """The table columns a lookup gives values for: identity columns the ordering key reads, in order."""
    schema = metadata.current_schema()
    seen: list[int] = []
    for ordering in metadata.ordering_fields(schema):
        seen.extend(i for i in ordering.expression.source_ids if i not in seen)
    by_id = {f.field_id: f for f in schema.fields}
    return [by_id[i] for i in seen if metadata.source_id_of(i) not in METADATA_COLUMNS]


_metadata_cache: LRUCache[tuple[str, str], IndexMetadata] = LRUCache(maxsize=64)
_metadata_lock = Lock()


def current_metadata(store: IndexStore, name: str) -> IndexMetadata:
    """The index's current metadata; a file already loaded and checked against this table state is reused.

    Metadata files are immutable and named by version, so listing the versions is enough to know
    whether the newest one is already known.
    """
    versions = store.versions(name)
    table_state = store.table.metadata_location
    if versions:
        key = (versions[max(versions)], table_state)
        with _metadata_lock:
            known = _metadata_cache.get(key)
        if known is not None:
            return known
    metadata, location, _ = store.load(name)
    with _metadata_lock:
        _metadata_cache[(location, table_state)] = metadata
    return metadata


@dataclass
class _Plan:
    """What a lookup reads: the extract, the snapshot and, for reconciliation, both file sets."""

    target: SnapshotFiles
    extract: Extract | None = None
    source: SnapshotFiles | None = None
    rescan: set[str] = field(default_factory=set)


def lookup(
    table: Table,
    name: str,
    probes: Sequence[Probe],
    snapshot_id: int | None = None,
    columns: Sequence[str] | None = None,
    store: IndexStore | None = None,
) -> LookupResult:
    """Rows of the snapshot (default: current) whose key columns equal one of the probes."""
    metadata = current_metadata(store or IndexStore(table), name)
    keys = key_columns(metadata)
    unique = list(dict.fromkeys(check_probe(tuple(p)) for p in probes))
    if not unique or any(len(p) != len(keys) for p in unique):
        raise InvalidInputError(
            f"lookup values: index {name!r} needs one value per key column ({', '.join(f.name for f in keys)})"
        )
    snapshot = resolve_snapshot(table, snapshot_id)
    if snapshot is None:
        return LookupResult(name, None, _concat([], _output_schema(table.schema(), columns)), "scan")
    plan = _choose(table, metadata, snapshot)
    # Like a pyiceberg scan: the current schema for the current snapshot, else the snapshot's own.
    table_schema = table.schema() if snapshot_id is None else plan_schema(table, plan.target)
    output = _output_schema(table_schema, columns)
    table_names = [_table_name(table_schema, metadata.source_id_of(k.field_id)) for k in keys]
    tracking = _usable_tracking(table.io, metadata, plan.extract) if plan.extract else None
    if plan.extract is None or tracking is None:
        parts, scanned = scan_files(
            table, plan.target, plan.target.data_files, table_names, unique, output, table_schema
        )
        return LookupResult(name, snapshot.snapshot_id, _concat(parts, output), "scan", reconciled_files=scanned)
    # At the extract's own snapshot its entries are the live rows: columns it stores need no fetch.
    stored = _stored_ids(metadata, tracking, output) if plan.source is None else {}
    entries, regions_read = _index_entries(table.io, metadata, tracking, keys, unique, list(stored.values()))
    parts = _fetch(table, plan, entries, output, list(stored))
    scanned_parts, scanned = (
        ([], 0)
        if not plan.rescan
        else scan_files(table, plan.target, plan.rescan, table_names, unique, output, table_schema)
    )
    mode = "index" if plan.source is None else "reconciled"
    return LookupResult(
        name,
        snapshot.snapshot_id,
        _concat(parts + scanned_parts, output),
        mode,
        plan.extract.source_table_snapshot_id,
        regions_read,
        scanned,
    )


def _table_name(schema: Schema, source_id: int) -> str:
    name = schema.find_column_name(source_id)
    if name is None:
        raise InvalidInputError(f"index key column {source_id}: not in the table schema (dropped)")
    return name


def _output_schema(schema: Schema, columns: Sequence[str] | None) -> Schema:
    if not columns:
        return schema
    by_name = {f.name: f for f in schema.fields}
    unknown = [c for c in columns if c not in by_name]
    if unknown:
        raise InvalidInputError(f"--columns: the table has no column(s) {', '.join(map(repr, unknown))}")
    repeated = sorted({c for c in columns if columns.count(c) > 1})
    if repeated:
        raise InvalidInputError(f"--columns: column(s) {', '.join(map(repr, repeated))} given more than once")
    return Schema(*[by_name[c] for c in columns], schema_id=schema.schema_id)


def _concat(parts: list[pa.Table], schema: Schema) -> pa.Table:
    """The parts (columns in ``schema`` order) as one table of pyiceberg's Arrow types for ``schema``,
    whichever way each part was read."""
    arrow = _arrow_schema(tuple(schema.fields))
    # from_arrays casts each column to the schema's type (string to large_string, ...).
    conformed = [
        part if part.schema == arrow else pa.Table.from_arrays(part.columns, schema=arrow)
        for part in parts
        if part.num_rows
    ]
    if len(conformed) == 1:
        return conformed[0]
    return pa.concat_tables(conformed) if conformed else arrow.empty_table()


@lru_cache(maxsize=64)
def _arrow_schema(fields: tuple[NestedField, ...]) -> pa.Schema:
    return schema_to_pyarrow(Schema(*fields), include_field_ids=False)


def _has_row_location(metadata: IndexMetadata) -> bool:
    sources = {f.source_id for f in metadata.identity_fields}
    return FILE_COLUMN_ID in sources and POS_COLUMN_ID in sources


def _choose(table: Table, metadata: IndexMetadata, snapshot: Snapshot) -> _Plan:
    target = plan_snapshot(table, snapshot)
    extract = None
    if _has_row_location(metadata):
        # Encrypted extracts (a key-id) cannot be read here.
        extract = closest_extract(table, metadata, snapshot, usable=lambda e: e.key_id is None)
    source_snapshot = table.snapshot_by_id(extract.source_table_snapshot_id) if extract else None
    if extract is None or source_snapshot is None:
        return _Plan(target)  # no readable extract, or its snapshot expired: its files are unknown
    if source_snapshot.snapshot_id == snapshot.snapshot_id:
        return _Plan(target, extract)
    source = plan_snapshot(table, source_snapshot)
    rescan = {p for p in target.data_files if p not in source.data_files or not _deletes_only_grew(source, target, p)}
    rescan_bytes = sum(target.data_files[p].data_file.file_size_in_bytes for p in rescan)
    if rescan_bytes > RECONCILE_MAX_SCAN_FRACTION * max(target.data_bytes(), 1):
        return _Plan(target)
    return _Plan(target, extract, source, rescan)


def _deletes_only_grew(source: SnapshotFiles, target: SnapshotFiles, path: str) -> bool:
    """Whether every delete applied to the file in the extract's snapshot still applies (rows can't revive)."""
    before = {d.file_path for d in source.deletes_for(path)}
    return before <= {d.file_path for d in target.deletes_for(path)}


# Reading the index


def _key_tuple(tracking: _Tracking, keys: Sequence[NestedField], probe: Probe) -> tuple[Any, ...]:
    """The ordering key of one probe, evaluated with the index's own expressions."""
    arrow = _arrow_schema(tuple(keys))
    row = pa.table([pa.array([v], type=t) for v, t in zip(probe, arrow.types, strict=True)], schema=arrow)
    return tuple(o.expression.evaluate(row, tracking.schema)[0].as_py() for o in tracking.ordering)


def _admits(stats: FieldStats | None, value: Any, arrow_type: pa.DataType) -> bool:
    """Whether a region's bounds for one ordering field may include the value (unknown: yes)."""
    if stats is None:
        return True
    if value is None:
        return stats.null_value_count is None or stats.null_value_count > 0
    if stats.lower_bound is None or stats.upper_bound is None:
        return stats.null_value_count is None  # bounds are null only when the region has no such value
    low = comparable([stats.lower_bound], [arrow_type])
    high = comparable([stats.upper_bound], [arrow_type])
    return low <= comparable([value], [arrow_type]) <= high


@dataclass(frozen=True)
class _Tracking:
    """A tracking file ready for lookups: entries with their ``group_max_value`` keys in index order."""

    schema: Schema
    ordering: list[OrderingField]
    entries: list[RegionEntry]
    bounds: list[tuple[tuple[Any, ...], ...]]
    types: list[pa.DataType]


@cached(
    LRUCache(maxsize=64),
    lock=Lock(),
    key=lambda io, metadata, extract: hashkey(
        metadata.resolve_location(extract.tracking_file), extract.extract_schema_id
    ),
)
def _usable_tracking(io: FileIO, metadata: IndexMetadata, extract: Extract) -> _Tracking | None:
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
    return _Tracking(schema, ordering, entries, bounds, types)


def candidate_regions(tracking: _Tracking, key: tuple[Any, ...]) -> list[RegionEntry]:
    """The region files that can hold entries with this ordering key, in index order."""
    wanted = comparable(key, tracking.types)
    found: list[RegionEntry] = []
    index = bisect_left(tracking.bounds, wanted)  # the first region whose inclusive upper bound >= key
    while index < len(tracking.entries):
        entry = tracking.entries[index]
        if all(
            _admits(entry.stats.get(o.field_id), v, t)
            for o, v, t in zip(tracking.ordering, key, tracking.types, strict=True)
        ):
            found.append(entry)
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


def _index_entries(
    io: FileIO,
    metadata: IndexMetadata,
    tracking: _Tracking,
    keys: Sequence[NestedField],
    probes: Sequence[Probe],
    stored_ids: Sequence[int],
) -> tuple[pa.Table, int]:
    """The ``_file``, ``_pos`` and ``stored_ids`` columns of the entries matching a probe; and the
    number of region files read."""
    regions: dict[str, list[Probe]] = defaultdict(list)
    for probe in probes:
        for variant in _key_variants(probe):
            key = _key_tuple(tracking, keys, variant)
            for region in candidate_regions(tracking, key):
                if probe not in regions[region.file_path]:
                    regions[region.file_path].append(probe)
    file_id = next(f.field_id for f in metadata.identity_fields if f.source_id == FILE_COLUMN_ID)
    pos_id = next(f.field_id for f in metadata.identity_fields if f.source_id == POS_COLUMN_ID)
    output_ids = [file_id, pos_id, *stored_ids]
    names = [f"c{i}" for i in range(len(output_ids))]
    parts = [
        read_region_matches(io, path, [k.field_id for k in keys], output_ids, region_probes).rename_columns(names)
        for path, region_probes in regions.items()
    ]
    if not parts:
        types = dict(
            zip(
                [f.field_id for f in tracking.schema.fields],
                _arrow_schema(tuple(tracking.schema.fields)).types,
                strict=True,
            )
        )
        return pa.schema([(n, types[i]) for n, i in zip(names, output_ids, strict=True)]).empty_table(), 0
    # Reused region files keep the types they were written with (int beside long after a promotion).
    return pa.concat_tables(parts, promote_options="permissive"), len(regions)


def _by_data_file(entries: pa.Table) -> dict[str, tuple[list[int], list[int]]]:
    """Data file -> its entries' positions in ascending order, and the entries' row numbers."""
    files, positions = entries.column(0).to_pylist(), entries.column(1).to_pylist()
    found: dict[str, tuple[list[int], list[int]]] = {}
    for row in sorted(range(len(files)), key=lambda r: (files[r], positions[r])):
        at, rows = found.setdefault(files[row], ([], []))
        if not at or at[-1] != positions[row]:  # positions are unique within a file; be sure
            at.append(positions[row])
            rows.append(row)
    return found


#: Column types a lookup may take from the extract's copies instead of the data files.
_STORABLE = (
    BooleanType,
    IntegerType,
    LongType,
    FloatType,
    DoubleType,
    DecimalType,
    DateType,
    TimestampType,
    TimestamptzType,
    StringType,
)


def _stored_ids(metadata: IndexMetadata, tracking: _Tracking, output: Schema) -> dict[int, int]:
    """Output column field ID -> the extract field holding a copy of it with the same type."""
    extract_fields = {f.field_id: f for f in tracking.schema.fields}
    stored = {}
    for column in output.fields:
        field_id = metadata.field_id_of_source(column.field_id)
        copy = extract_fields.get(field_id) if field_id is not None else None
        if copy is not None and copy.field_type == column.field_type and isinstance(column.field_type, _STORABLE):
            stored[column.field_id] = copy.field_id
    return stored


@dataclass(frozen=True)
class _GroupStats:
    """Per row group statistics of one column, as arrays (null where a row group has none)."""

    low: pa.Array
    high: pa.Array
    nulls: pa.Array
    #: When the bounds ascend with the row groups, as they do for the ordering key's leading
    #: column, a value's row groups are one run, found by binary search: the number of leading
    #: row groups holding only nulls (nulls sort first), then the later groups' lower and upper
    #: bounds as Python lists. None otherwise (and for floats, whose order differs).
    ascending: tuple[int, list[Any], list[Any]] | None = None


#: Region files whose column layout and row-group statistics are kept per process.
_REGION_CACHE_SIZE = 1024


@cached(
    LRUCache(maxsize=_REGION_CACHE_SIZE),
    lock=Lock(),
    key=lambda parquet, path, column, arrow_field: hashkey(path, column),
)
def _column_group_stats(parquet: pq.ParquetFile, path: str, column: int, arrow_field: pa.Field) -> _GroupStats:
    """Min, max and null count of a column in each row group (cached: region files never change)."""
    lows, highs, nulls, only_nulls = [], [], [], []
    for g in range(parquet.metadata.num_row_groups):
        group = parquet.metadata.row_group(g)
        stats = group.column(column).statistics
        known = stats is not None and stats.has_min_max
        lows.append(stats.min if known else None)
        highs.append(stats.max if known else None)
        nulls.append(stats.null_count if stats is not None and stats.has_null_count else None)
        only_nulls.append(not known and nulls[-1] == group.num_rows)
    arrow_type = arrow_field.type
    value_type = arrow_type.value_type if pa.types.is_dictionary(arrow_type) else arrow_type
    try:
        low, high = pa.array(lows, type=value_type), pa.array(highs, type=value_type)
    except (pa.ArrowException, TypeError, ValueError):
        low = high = pa.nulls(len(lows), type=value_type)  # unusable statistics: no pruning
        return _GroupStats(low, high, pa.array(nulls, type=pa.int64()))
    ascending = None if pa.types.is_floating(value_type) else _ascending(lows, highs, only_nulls)
    return _GroupStats(low, high, pa.array(nulls, type=pa.int64()), ascending)


def _ascending(lows: list[Any], highs: list[Any], only_nulls: list[bool]) -> tuple[int, list[Any], list[Any]] | None:
    skip = next((i for i, empty in enumerate(only_nulls) if not empty), len(only_nulls))
    lows, highs = lows[skip:], highs[skip:]
    if None in lows or None in highs:
        return None  # a row group without bounds after the first values
    try:
        ordered = all(a <= b for a, b in pairwise(lows)) and all(a <= b for a, b in pairwise(highs))
        return (skip, lows, highs) if ordered and all(a <= b for a, b in zip(lows, highs, strict=True)) else None
    except TypeError:
        return None  # values Python cannot order


def _groups_admitting(stats: _GroupStats, value: Any) -> Iterable[int]:
    """The row groups that may hold the value (unknown statistics: yes)."""
    if value is not None and stats.ascending is not None:
        skip, lows, highs = stats.ascending
        try:
            first = bisect_left(highs, value)
            return range(skip + first, skip + max(first, bisect_right(lows, value)))
        except TypeError:
            pass  # a value of another kind than the statistics: compare in Arrow instead
    if value is None:
        admits = pc.fill_null(pc.greater(stats.nulls, 0), True)
    else:
        try:
            scalar = pa.scalar(value, type=stats.low.type)
        except (pa.ArrowException, TypeError, ValueError):
            return range(len(stats.low))
        admits = pc.fill_null(pc.and_(pc.less_equal(stats.low, scalar), pc.greater_equal(stats.high, scalar)), True)
    return cast("list[int]", pc.indices_nonzero(admits).to_pylist())


def _admitted_groups(key_stats: Sequence[_GroupStats], probes: Sequence[Probe], groups: int) -> list[int]:
    """The row groups whose statistics may hold one of the probes."""
    admitted: set[int] = set()
    for probe in probes:
        matches: set[int] | None = None
        for stats, value in zip(key_stats, probe, strict=True):
            admits = set(_groups_admitting(stats, value))
            matches = admits if matches is None else matches & admits
        if matches is None:
            return list(range(groups))  # a probe over no column matches everything
        admitted |= matches
    return sorted(admitted)


@cached(LRUCache(maxsize=_REGION_CACHE_SIZE), lock=Lock(), key=lambda parquet, path: hashkey(path))
def _columns_by_id(parquet: pq.ParquetFile, path: str) -> dict[int, tuple[int, pa.Field]]:
    """Field ID -> column index and Arrow field of a region file (cached: region files never change)."""
    return {
        int(f.metadata[FIELD_ID]): (i, f)
        for i, f in enumerate(parquet.schema_arrow)
        if f.metadata and FIELD_ID in f.metadata
    }


def read_region_matches(
    io: FileIO, path: str, key_ids: Sequence[int], output_ids: Sequence[int], probes: Sequence[Probe]
) -> pa.Table:
    """The ``output_ids`` columns of a region file's entries whose ``key_ids`` columns equal a probe."""
    with opened_parquet(io, path) as handle:
        parquet = handle.file
        columns = _columns_by_id(parquet, path)
        missing = [i for i in (*key_ids, *output_ids) if i not in columns]
        if missing:
            raise InvalidInputError(f"region file {path}: no column with field ID(s) {missing}")
        key_stats = [_column_group_stats(parquet, path, *columns[k]) for k in key_ids]
        groups = _admitted_groups(key_stats, probes, parquet.metadata.num_row_groups)
        names = [columns[i][1].name for i in (*key_ids, *output_ids)]
        rows = parquet.read_row_groups(groups, columns=list(dict.fromkeys(names)), use_threads=False)
    rows = rows.filter(probe_mask(rows, names[: len(key_ids)], probes))
    return rows.select(names[len(key_ids) :])


# Fetching table rows


def _fetch(table: Table, plan: _Plan, entries: pa.Table, output: Schema, stored: Sequence[int]) -> list[pa.Table]:
    """Output rows for the matching entries, in ``output``'s column order.

    ``stored`` are the output columns (field IDs) the entries hold, in the order of the entries'
    columns after ``_file`` and ``_pos``; only at the extract's own snapshot may there be any.
    The other columns are read from the data files by position. With no other column, no data
    file is read at all (an index-only lookup).
    """
    assert plan.source is None or not stored
    from_entries = {field_id: 2 + i for i, field_id in enumerate(stored)}
    read_schema = _other_columns(output, frozenset(from_entries))
    parts = []
    for path, (positions, entry_rows) in sorted(_by_data_file(entries).items()):
        if path not in plan.target.data_files or path in plan.rescan:
            continue  # removed since the extract, or scanned instead
        if read_schema.fields:
            rows = read_rows(table, plan.target.data_files[path].data_file, read_schema, positions)
            if plan.source is not None:
                rows = _apply_new_deletes(table, plan, path, rows, read_schema)
        parts.append(
            pa.Table.from_arrays(
                [
                    entries.column(from_entries[f.field_id]).take(entry_rows)
                    if f.field_id in from_entries
                    else rows.column(f.name)
                    for f in output.fields
                ],
                names=[f.name for f in output.fields],
            )
        )
    return parts


def _other_columns(schema: Schema, excluded: frozenset[int]) -> Schema:
    """``schema`` without the ``excluded`` columns (built once per schema: pyiceberg schemas are slow to make)."""
    return _schema_without(tuple(schema.fields), schema.schema_id, excluded)


@lru_cache(maxsize=64)
def _schema_without(fields: tuple[NestedField, ...], schema_id: int, excluded: frozenset[int]) -> Schema:
    return Schema(*[f for f in fields if f.field_id not in excluded], schema_id=schema_id)


def _apply_new_deletes(table: Table, plan: _Plan, path: str, rows: pa.Table, output: Schema) -> pa.Table:
    """Drop fetched rows removed by delete files added since the extract's snapshot."""
    assert plan.source is not None
    before = {d.file_path for d in plan.source.deletes_for(path)}
    added = [d for d in plan.target.deletes_for(path) if d.file_path not in before]
    if not added:
        return rows
    removed = pc.is_in(rows.column(POS_COLUMN), value_set=deleted_positions(table, added, path))
    equality_ids = {i for d in added for i in d.equality_ids or []}
    if equality_ids:
        schema = plan_schema(table, plan.target)
        key_schema = Schema(*[f for f in schema.fields if f.field_id in equality_ids], schema_id=schema.schema_id)
        keyed = read_rows(
            table, plan.target.data_files[path].data_file, key_schema, rows.column(POS_COLUMN).to_pylist()
        )
        removed = pc.or_(removed, equality_deleted_mask(table, keyed, key_schema, added))
    return rows.filter(pc.invert(removed))
