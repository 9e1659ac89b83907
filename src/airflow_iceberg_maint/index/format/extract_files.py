"""Region files and tracking files of an extract: Parquet with field IDs, read and written by ID.

A tracking file holds one entry per region file, in index order: ``100 file_path``,
``101 file_format``, ``103 record_count``, ``104 file_size_in_bytes`` and the required
``146 content_stats``. Each stats struct sits at ``10000 + 200 * field-id`` and holds
``lower_bound`` (+1), ``upper_bound`` (+2), ``null_value_count`` (+5) and, for ordering-key
fields, ``group_max_value`` (+8). Bounds are exact (never truncated) and exclude nulls and NaN;
a bound is null when the region holds no such value. Locations are written absolute.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from threading import Lock
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from cachetools import LRUCache, cached
from cachetools.keys import hashkey
from pyiceberg.io import FileIO

from airflow_iceberg_maint.errors import MetadataReadError
from airflow_iceberg_maint.index.metadata.spec import (
    GROUP_MAX_VALUE,
    LOWER_BOUND,
    NULL_VALUE_COUNT,
    UPPER_BOUND,
    stats_base_id,
)
from airflow_iceberg_maint.sorting.ordering import sortable

FIELD_ID = b"PARQUET:field_id"
FILE_PATH_ID, FILE_FORMAT_ID, RECORD_COUNT_ID, FILE_SIZE_ID, CONTENT_STATS_ID = 100, 101, 103, 104, 146
#: Rows per Parquet row group in region files: small, so a lookup reads little past the footer.
REGION_ROW_GROUP_ROWS = 4_096
_CACHE_SIZE = 64


@dataclass(frozen=True)
class StatsColumn:
    """An index field that gets a stats struct; ordering-key fields also get ``group_max_value``."""

    field_id: int
    name: str
    arrow_type: pa.DataType
    ordering: bool


@dataclass(frozen=True)
class FieldStats:
    lower_bound: Any
    upper_bound: Any
    null_value_count: int | None
    group_max_value: Any = None
    #: A null ``group_max_value`` is a null key; this tells it apart from an absent metric.
    has_group_max_value: bool = False


@dataclass(frozen=True)
class RegionEntry:
    """One tracking-file entry: a region file and its statistics, keyed by index field ID."""

    file_path: str
    file_format: str
    record_count: int
    file_size_in_bytes: int
    stats: dict[int, FieldStats]


def _field(name: str, arrow_type: pa.DataType, field_id: int, nullable: bool = True) -> pa.Field:
    return pa.field(name, arrow_type, nullable=nullable, metadata={FIELD_ID: str(field_id).encode()})


def _stats_struct(column: StatsColumn) -> pa.Field:
    base = stats_base_id(column.field_id)
    children = [
        _field("lower_bound", column.arrow_type, base + LOWER_BOUND),
        _field("upper_bound", column.arrow_type, base + UPPER_BOUND),
        _field("null_value_count", pa.int64(), base + NULL_VALUE_COUNT),
    ]
    if column.ordering:
        children.append(_field("group_max_value", column.arrow_type, base + GROUP_MAX_VALUE))
    return _field(column.name, pa.struct(children), base)


def tracking_schema(columns: Sequence[StatsColumn]) -> pa.Schema:
    return pa.schema(
        [
            _field("file_path", pa.string(), FILE_PATH_ID, nullable=False),
            _field("file_format", pa.string(), FILE_FORMAT_ID, nullable=False),
            _field("record_count", pa.int64(), RECORD_COUNT_ID, nullable=False),
            _field("file_size_in_bytes", pa.int64(), FILE_SIZE_ID, nullable=False),
            _field("content_stats", pa.struct([_stats_struct(c) for c in columns]), CONTENT_STATS_ID, nullable=False),
        ]
    )


def _bounds(column: pa.ChunkedArray | pa.Array) -> tuple[Any, Any]:
    """Exact min and max in the index order, ignoring nulls and NaN; None when there is none."""
    if pa.types.is_dictionary(column.type):
        column = _used_dictionary_values(column)
    if pa.types.is_floating(column.type):
        column = pc.filter(column, pc.invert(pc.is_nan(column)))
    column = pc.drop_null(column)
    if len(column) == 0:
        return None, None
    order = sortable(column)
    extremes = pc.min_max(order)
    low = pc.index(order, extremes["min"]).as_py()
    high = pc.index(order, extremes["max"]).as_py()
    return column[low].as_py(), column[high].as_py()


def _used_dictionary_values(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """The distinct values a dictionary column uses (cheaper than decoding every entry)."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    parts = [c.dictionary.take(pc.drop_null(pc.unique(c.indices))) for c in chunks]
    return pa.concat_arrays(parts) if parts else pa.array([], type=column.type.value_type)


def region_stats(
    columns: Sequence[StatsColumn], values: dict[int, pa.ChunkedArray | pa.Array]
) -> dict[int, FieldStats]:
    """Statistics of one region's entries (``values`` by field ID, in index order)."""
    stats: dict[int, FieldStats] = {}
    for column in columns:
        data = values[column.field_id]
        lower, upper = _bounds(data)
        last = data[len(data) - 1].as_py() if column.ordering and len(data) else None
        stats[column.field_id] = FieldStats(lower, upper, data.null_count, last, column.ordering)
    return stats


def write_region_file(io: FileIO, path: str, rows: pa.Table, schema: pa.Schema) -> int:
    """Write one region file (columns by field ID from ``schema``); returns its size in bytes.

    The file is streamed to storage a row group at a time, not assembled in memory first: a
    region is as large as ``write.region.target-file-size-bytes`` (64 MB by default), and the
    build's memory budget counts on holding only its entries. A failed write may leave a
    partial file; like a region of a build that fails to commit, no tracking file names it.
    """
    # Entries are small, mostly high-entropy values: dictionary-encode only dictionary columns
    # (_file) and leave pages uncompressed, which writes and decodes several times faster.
    dictionary = [f.name for f in schema if pa.types.is_dictionary(f.type)]
    with io.new_output(path).create(overwrite=False) as stream:
        with pq.ParquetWriter(
            stream, schema, write_statistics=True, use_dictionary=dictionary, compression="none"
        ) as writer:
            writer.write_table(rows.cast(schema), row_group_size=REGION_ROW_GROUP_ROWS)
        return int(stream.tell())


def read_region_file(io: FileIO, path: str, schema: pa.Schema) -> pa.Table:
    """All entries of a region file as ``schema`` (columns matched by field ID, named as in ``schema``)."""
    try:
        with io.new_input(path).open() as stream:
            table = pq.read_table(stream)
    except Exception as exc:
        raise MetadataReadError(f"region file {path!r}: cannot be read ({exc})") from exc
    columns = _by_id(table.schema)
    wanted = {f.name: _field_id(f) for f in schema}
    found = {name: columns[fid] for name, fid in wanted.items() if fid is not None and fid in columns}
    missing = [fid for name, fid in wanted.items() if name not in found]
    if missing:
        raise MetadataReadError(f"region file {path!r}: no column with field ID(s) {missing}")
    return pa.Table.from_arrays([table.column(found[name]) for name in wanted], names=list(wanted)).cast(schema)


def _put(io: FileIO, path: str, data: pa.Buffer) -> int:
    with io.new_output(path).create(overwrite=False) as stream:
        stream.write(data)  # a pa.Buffer is a bytes-like object: no copy
    return int(data.size)


def write_tracking_file(io: FileIO, path: str, columns: Sequence[StatsColumn], entries: Sequence[RegionEntry]) -> int:
    """Write the tracking file of an extract (entries already in index order); returns its size."""
    rows = [
        {
            "file_path": e.file_path,
            "file_format": e.file_format,
            "record_count": e.record_count,
            "file_size_in_bytes": e.file_size_in_bytes,
            "content_stats": {c.name: _stats_row(c, e.stats.get(c.field_id)) for c in columns},
        }
        for e in entries
    ]
    schema = tracking_schema(columns)
    buffer = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), buffer)
    return _put(io, path, buffer.getvalue())


def _stats_row(column: StatsColumn, stats: FieldStats | None) -> dict[str, Any] | None:
    if stats is None:
        return None
    row = {
        "lower_bound": stats.lower_bound,
        "upper_bound": stats.upper_bound,
        "null_value_count": stats.null_value_count,
    }
    if column.ordering:
        row["group_max_value"] = stats.group_max_value
    return row


def _field_id(field: pa.Field) -> int | None:
    raw = (field.metadata or {}).get(FIELD_ID)
    return int(raw) if raw is not None else None


def _by_id(fields: Sequence[pa.Field]) -> dict[int, int]:
    return {fid: i for i, f in enumerate(fields) if (fid := _field_id(f)) is not None}


def _read_tracking_table(io: FileIO, path: str) -> pa.Table:
    try:
        with io.new_input(path).open() as stream:
            return pq.read_table(stream)
    except Exception as exc:
        raise MetadataReadError(f"tracking file {path!r}: cannot be read ({exc})") from exc


def _resolved(location: str, index_location: str | None, tracking_file: str) -> str:
    if "://" in location or location.startswith("/"):
        return location
    if index_location is None:
        raise MetadataReadError(
            f"tracking file {tracking_file!r}: relative location {location!r} without an index location"
        )
    return f"{index_location.rstrip('/')}/{location}"


def region_file_paths(io: FileIO, tracking_file: str, index_location: str | None = None) -> list[str]:
    """Locations of every region file a tracking file lists (relative ones resolved). Errors abort (S2)."""
    table = _read_tracking_table(io, tracking_file)
    ids = _by_id(table.schema)
    if FILE_PATH_ID not in ids:
        raise MetadataReadError(f"tracking file {tracking_file!r}: no field 100 file_path")
    paths = table.column(ids[FILE_PATH_ID]).to_pylist()
    return [_resolved(p, index_location, tracking_file) for p in paths]


@cached(LRUCache(maxsize=_CACHE_SIZE), key=lambda io, path, *_, **__: hashkey(path), lock=Lock())
def read_tracking_file(io: FileIO, path: str, index_location: str | None = None) -> list[RegionEntry]:
    """The entries of a tracking file, stats resolved by field ID (cached: tracking files are immutable)."""
    return _parse_tracking(_read_tracking_table(io, path), path, index_location)


def _parse_tracking(table: pa.Table, path: str, index_location: str | None) -> list[RegionEntry]:
    ids = _by_id(table.schema)
    missing = {FILE_PATH_ID, FILE_FORMAT_ID, RECORD_COUNT_ID, FILE_SIZE_ID, CONTENT_STATS_ID} - ids.keys()
    if missing:
        raise MetadataReadError(f"tracking file {path!r}: missing required fields {sorted(missing)}")
    values = {
        fid: table.column(ids[fid]).to_pylist() for fid in (FILE_PATH_ID, FILE_FORMAT_ID, RECORD_COUNT_ID, FILE_SIZE_ID)
    }
    stats = _stats_by_field(table.column(ids[CONTENT_STATS_ID]).combine_chunks())
    return [
        RegionEntry(
            file_path=_resolved(values[FILE_PATH_ID][row], index_location, path),
            file_format=values[FILE_FORMAT_ID][row],
            record_count=values[RECORD_COUNT_ID][row],
            file_size_in_bytes=values[FILE_SIZE_ID][row],
            stats={field_id: value for field_id, per_row in stats.items() if (value := per_row[row]) is not None},
        )
        for row in range(table.num_rows)
    ]


def _stats_by_field(content_stats: pa.StructArray) -> dict[int, list[FieldStats | None]]:
    """Each index field's stats, one per entry (None when unknown), resolved by field ID and offset."""
    result: dict[int, list[FieldStats | None]] = {}
    for index, field in enumerate(content_stats.type):
        base = _field_id(field)
        if base is None or base < 10_000 or (base - 10_000) % 200:
            continue  # not a field stats struct
        struct = content_stats.field(index)
        metrics = {
            fid - base: struct.field(i).to_pylist()
            for i, child in enumerate(field.type)
            if (fid := _field_id(child)) is not None
        }
        present = struct.is_valid().to_pylist()
        result[(base - 10_000) // 200] = [
            FieldStats(
                _metric(metrics, LOWER_BOUND, row),
                _metric(metrics, UPPER_BOUND, row),
                _metric(metrics, NULL_VALUE_COUNT, row),
                _metric(metrics, GROUP_MAX_VALUE, row),
                GROUP_MAX_VALUE in metrics,
            )
            if present[row]
            else None
            for row in range(len(struct))
        ]
    return result


def _metric(metrics: dict[int, list[Any]], offset: int, row: int) -> Any:
    """One metric of one entry; None when the stats struct has no field at that offset (unknown)."""
    return metrics[offset][row] if offset in metrics else None
