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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from threading import Lock
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from cachetools import LRUCache
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
from airflow_iceberg_maint.index.key_scan import KeyFilter, KeyRange, Probe, check_probe, scan_files
from airflow_iceberg_maint.index.lag import closest_extract
from airflow_iceberg_maint.index.live_rows import (
    POS_COLUMN,
    deleted_positions,
    equality_deleted_mask,
    plan_schema,
    read_rows,
)
from airflow_iceberg_maint.index.metadata.model import Extract, IndexMetadata
from airflow_iceberg_maint.index.regions import Tracking, arrow_schema, probe_entries, range_entries, usable_tracking
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


def parse_lookup_value(text: str, column: NestedField, option: str = "--eq") -> Any:
    """A command-line value as the key column's type (ISO 8601 for dates and timestamps); errors name ``option``."""
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
        raise InvalidInputError(f"{option} {text!r}: not a {kind} value for column {column.name!r} ({exc})") from exc
    raise InvalidInputError(f"{option} {text!r}: lookups on {kind} column {column.name!r} are not supported")


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


@dataclass
class Located:
    """Where a query's rows are, found without reading a data file.

    ``entries`` (``_file``, ``_pos``, then copies of the ``stored`` output columns) are the index
    hits; ``plan.rescan`` the data files to scan with the filter instead (the index's lag). With no
    usable extract (``mode`` ``scan``) every data file of the snapshot is a scan candidate.
    """

    name: str
    snapshot_id: int | None
    mode: str
    output: Schema
    table_schema: Schema
    table_names: list[str]
    plan: _Plan | None = None
    entries: pa.Table | None = None
    stored: list[int] = field(default_factory=list)
    regions_read: int = 0


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
    wanted = checked_probes(metadata, name, probes)
    return read_located(table, locate(table, name, metadata, wanted, snapshot_id, columns), wanted)


def checked_probes(metadata: IndexMetadata, name: str, probes: Iterable[Probe]) -> list[Probe]:
    """The distinct probes, each with one value per key column (NaN refused)."""
    keys = key_columns(metadata)
    unique = list(dict.fromkeys(check_probe(tuple(p)) for p in probes))
    if not unique or any(len(p) != len(keys) for p in unique):
        raise InvalidInputError(
            f"lookup values: index {name!r} needs one value per key column ({', '.join(f.name for f in keys)})"
        )
    return unique


def locate(
    table: Table,
    name: str,
    metadata: IndexMetadata,
    wanted: KeyFilter,
    snapshot_id: int | None = None,
    columns: Sequence[str] | None = None,
    with_keys: bool = False,
) -> Located:
    """The index hits and the files to scan for ``wanted`` (probes, or a range on the first key column).

    ``with_keys`` adds the key columns to ``columns`` (a caller sorting by the key needs them).
    """
    snapshot = resolve_snapshot(table, snapshot_id)
    keys = key_columns(metadata)
    if snapshot is None:
        return Located(name, None, "scan", _output_schema(table.schema(), columns), table.schema(), [])
    plan = _choose(table, metadata, snapshot)
    # Like a pyiceberg scan: the current schema for the current snapshot, else the snapshot's own.
    table_schema = table.schema() if snapshot_id is None else plan_schema(table, plan.target)
    names = [_table_name(table_schema, metadata.source_id_of(k.field_id)) for k in keys]
    if with_keys and columns:
        columns = [*columns, *(n for n in names if n not in columns)]
    output = _output_schema(table_schema, columns)
    tracking = usable_tracking(table.io, metadata, plan.extract) if plan.extract else None
    if plan.extract is None or tracking is None:
        return Located(name, snapshot.snapshot_id, "scan", output, table_schema, names, _Plan(plan.target))
    # At the extract's own snapshot its entries are the live rows: columns it stores need no fetch.
    stored = _stored_ids(metadata, tracking, output) if plan.source is None else {}
    if isinstance(wanted, KeyRange):
        entries, regions = range_entries(table.io, metadata, tracking, keys[0], wanted, list(stored.values()))
    else:
        entries, regions = probe_entries(table.io, metadata, tracking, keys, wanted, list(stored.values()))
    mode = "index" if plan.source is None else "reconciled"
    return Located(name, snapshot.snapshot_id, mode, output, table_schema, names, plan, entries, list(stored), regions)


def read_located(table: Table, located: Located, wanted: KeyFilter) -> LookupResult:
    """The rows ``located`` points at: index hits fetched by position (batched per data file), lag scanned."""
    plan, output = located.plan, located.output
    if plan is None:
        return LookupResult(located.name, None, _concat([], output), "scan")
    parts = [] if located.entries is None else _fetch(table, plan, located.entries, output, located.stored)
    scan_paths = plan.target.data_files if located.mode == "scan" else plan.rescan
    scanned_parts, scanned = (
        scan_files(table, plan.target, scan_paths, located.table_names, wanted, output, located.table_schema)
        if scan_paths
        else ([], 0)
    )
    return LookupResult(
        located.name,
        located.snapshot_id,
        _concat(parts + scanned_parts, output),
        located.mode,
        plan.extract.source_table_snapshot_id if plan.extract else None,
        located.regions_read,
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
    arrow = arrow_schema(tuple(schema.fields))
    # from_arrays casts each column to the schema's type (string to large_string, ...).
    conformed = [
        part if part.schema == arrow else pa.Table.from_arrays(part.columns, schema=arrow)
        for part in parts
        if part.num_rows
    ]
    if len(conformed) == 1:
        return conformed[0]
    return pa.concat_tables(conformed) if conformed else arrow.empty_table()


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


def by_data_file(entries: pa.Table) -> dict[str, tuple[list[int], list[int]]]:
    """Data file -> its entries' positions in ascending order, and the entries' row numbers."""
    files = entries.column(0)
    if pa.types.is_dictionary(files.type):
        files = files.cast(files.type.value_type)  # region files store _file dictionary-encoded
    keyed = pa.table({"file": files, "pos": entries.column(1)})
    order = pc.sort_indices(keyed, sort_keys=[("file", "ascending"), ("pos", "ascending")])
    files, positions = (keyed.column(c).take(order).to_pylist() for c in ("file", "pos"))
    found: dict[str, tuple[list[int], list[int]]] = {}
    for file, position, row in zip(files, positions, order.to_pylist(), strict=True):
        at, rows = found.setdefault(file, ([], []))
        if not at or at[-1] != position:  # positions are unique within a file; be sure
            at.append(position)
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


def _stored_ids(metadata: IndexMetadata, tracking: Tracking, output: Schema) -> dict[int, int]:
    """Output column field ID -> the extract field holding a copy of it with the same type."""
    extract_fields = {f.field_id: f for f in tracking.schema.fields}
    stored = {}
    for column in output.fields:
        field_id = metadata.field_id_of_source(column.field_id)
        copy = extract_fields.get(field_id) if field_id is not None else None
        if copy is not None and copy.field_type == column.field_type and isinstance(column.field_type, _STORABLE):
            stored[column.field_id] = copy.field_id
    return stored


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
    for path, (positions, entry_rows) in sorted(by_data_file(entries).items()):
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
