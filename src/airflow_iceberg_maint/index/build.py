"""Building index data: entries for a set of data files, index order, region cuts, region files.

The pieces are separate so the incremental refresh can reuse them: ``entries_for_files`` turns
live rows into entries (identity columns of the extract schema), ``ordering_columns`` evaluates
the ordering key, ``sort_entries`` puts entries in index order, ``cut_regions`` chooses region
boundaries, and ``write_regions`` writes region files and returns their tracking entries.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema, prune_columns
from pyiceberg.table import Table

from airflow_iceberg_maint.index.expressions import FILE_COLUMN_ID, METADATA_COLUMNS
from airflow_iceberg_maint.index.extract_files import RegionEntry, StatsColumn, region_stats, write_region_file
from airflow_iceberg_maint.index.live_rows import live_rows_of_file, plan_schema
from airflow_iceberg_maint.index.metadata.model import IndexMetadata, OrderingField
from airflow_iceberg_maint.index.ordering import key_changes, sort_indices
from airflow_iceberg_maint.index.snapshot_files import SnapshotFiles
from airflow_iceberg_maint.progress import Phase

#: Threads reading data files and writing region files (Parquet work runs outside the GIL).
IO_THREADS = 2
_METADATA_COLUMN_NAMES = {source_id: field.name for source_id, field in METADATA_COLUMNS.items()}


@dataclass(frozen=True)
class EntryLayout:
    """How entries of one extract schema are built, ordered and described in tracking files."""

    metadata: IndexMetadata
    extract_schema: Schema
    region_schema: pa.Schema
    ordering: tuple[OrderingField, ...]
    stats_columns: tuple[StatsColumn, ...]

    @property
    def source_ids(self) -> dict[int, int]:
        """Extract field ID -> source field ID."""
        return {f.field_id: f.source_id for f in self.metadata.identity_fields}


def entry_layout(metadata: IndexMetadata, extract_schema: Schema) -> EntryLayout:
    ordering = tuple(metadata.ordering_fields(extract_schema))
    sources = {f.field_id: f.source_id for f in metadata.identity_fields}
    file_field = next((f for f in extract_schema.fields if sources[f.field_id] == FILE_COLUMN_ID), None)
    region_fields = []
    for arrow_field, field in zip(schema_to_pyarrow(extract_schema, include_field_ids=True), extract_schema.fields,
                                  strict=True):
        # _file repeats few distinct values: keep it dictionary-encoded in memory and in region files.
        is_file = file_field is not None and field.field_id == file_field.field_id
        region_fields.append(arrow_field.with_type(pa.dictionary(pa.int32(), pa.string())) if is_file else arrow_field)
    names = {f.field_id: f.name for f in extract_schema.fields}
    columns = [
        StatsColumn(o.field_id, names.get(o.field_id) or o.expression.to_text(extract_schema),
                    schema_to_pyarrow(o.data_type), ordering=True)
        for o in ordering
    ]
    for stats_field in metadata.stats_fields:
        if stats_field.field_id not in metadata.ordering_key:
            # Stats-only fields outside the ordering key still require bounds (spec: content statistics).
            columns.append(StatsColumn(stats_field.field_id, stats_field.expr.to_text(extract_schema),
                                       schema_to_pyarrow(stats_field.data_type), ordering=False))
    if file_field is not None and file_field.field_id not in metadata.ordering_key:
        # Bounds on _file let maintenance find the regions holding a data file's entries.
        columns.append(StatsColumn(file_field.field_id, file_field.name, pa.string(), ordering=False))
    return EntryLayout(metadata, extract_schema, pa.schema(region_fields), ordering, _unique_names(columns))


def _unique_names(columns: list[StatsColumn]) -> tuple[StatsColumn, ...]:
    """Stats struct names are informational but must not repeat: a repeated one gets its field ID appended."""
    seen: set[str] = set()
    unique = []
    for column in columns:
        name = column.name if column.name not in seen else f"{column.name}#{column.field_id}"
        seen.add(name)
        unique.append(replace(column, name=name))
    return tuple(unique)


def entries_for_files(
    table: Table, plan: SnapshotFiles, paths: Iterable[str], layout: EntryLayout, table_schema: Schema | None = None,
    keep: Callable[[pa.Table], pa.Table] | None = None,
    progress: Phase | None = None,
) -> pa.Table:
    """Entries (extract schema columns, by name) for the live rows of the given data files of ``plan``.

    Rows are read with ``table_schema`` (default: the plan's snapshot schema); an incremental
    refresh reads an older snapshot's rows with the newer snapshot's (possibly promoted) types.
    ``keep`` filters each file's entries as soon as they are read (a sharded build keeps one key range).
    ``progress`` advances by one a file read.
    """
    table_schema = table_schema or plan_schema(table, plan)
    table_ids = {s for s in layout.source_ids.values() if s not in _METADATA_COLUMN_NAMES}
    read_schema = prune_columns(table_schema, table_ids, select_full_types=False)
    def entries(path: str) -> pa.Table:
        found = _entries_of_rows(live_rows_of_file(table, plan, path, read_schema), read_schema, layout)
        return found if keep is None else keep(found)

    # Decoding Parquet releases the GIL: files are read side by side, results kept in path order.
    parts = []
    with ThreadPoolExecutor(max_workers=IO_THREADS) as pool:
        for part in pool.map(entries, paths):
            parts.append(part)
            if progress is not None:
                progress.advance()
    if not parts:
        return layout.region_schema.empty_table()
    return pa.concat_tables(parts).unify_dictionaries()


def _entries_of_rows(rows: pa.Table, read_schema: Schema, layout: EntryLayout) -> pa.Table:
    columns = []
    for field in layout.extract_schema.fields:
        source_id = layout.source_ids[field.field_id]
        if source_id in _METADATA_COLUMN_NAMES:
            columns.append(rows.column(_METADATA_COLUMN_NAMES[source_id]))
        else:
            columns.append(rows.column(read_schema.find_column_name(source_id) or ""))
    return pa.Table.from_arrays(columns, schema=layout.region_schema)


def ordering_columns(entries: pa.Table, layout: EntryLayout) -> list[pa.Array]:
    """The ordering-key values of each entry, one array per ordering-key field."""
    return [o.expression.evaluate(entries, layout.extract_schema) for o in layout.ordering]


def sort_entries(entries: pa.Table, layout: EntryLayout) -> tuple[pa.Table, list[pa.Array]]:
    """Entries in index order, with their ordering-key columns in the same order."""
    keys = ordering_columns(entries, layout)
    order = sort_indices(keys)
    return entries.take(order), [k.take(order) for k in keys]


def _next_change(changes: pa.Array, at: int) -> int:
    """The first index >= ``at`` where the key changes (the length when none), searched in growing windows."""
    window = 4096
    while at < len(changes):
        found = pc.index(changes.slice(at, window), True).as_py()
        if found >= 0:
            return at + found
        at += window
        window *= 2
    return len(changes)


def _key_start(changes: pa.Array, index: int, floor: int) -> int:
    """Where the key at ``index`` begins (not before ``floor``)."""
    window = 4096
    while True:
        low = max(floor, index + 1 - window)
        starts = pc.indices_nonzero(changes.slice(low, index + 1 - low))
        if len(starts) or low == floor:
            return low + starts[-1].as_py() if len(starts) else floor
        window *= 2


def cut_regions(keys: Sequence[pa.Array], target_rows: int, allow_key_spanning: bool) -> list[tuple[int, int]]:
    """Region boundaries ``[(start, stop), ...]`` over sorted entries.

    A region ends at the first key change at or after ``target_rows`` entries, so a key never
    spans two regions. With ``allow_key_spanning`` a run of one key longer than twice the target
    is cut every ``target_rows`` entries instead (readers follow equal ``group_max_value`` keys).
    """
    length = len(keys[0]) if keys else 0
    if length == 0:
        return []
    changes = key_changes(keys)
    regions: list[tuple[int, int]] = []
    start = 0
    while start < length:
        want = start + max(target_rows, 1)
        stop = length if want >= length else _next_change(changes, want)
        if allow_key_spanning and stop - start > 2 * target_rows:
            # Only a hot key (a run longer than the target) overshoots this far: end the region
            # before it, or, when the region starts inside it, cut it into target-sized pieces.
            key_start = _key_start(changes, want - 1, start)
            stop = key_start if key_start > start else want
        regions.append((start, stop))
        start = stop
    return regions


def target_rows(entries: pa.Table, target_bytes: int) -> int:
    """Entries per region for a target size, from the in-memory size of the stored columns."""
    if entries.num_rows == 0:
        return 1
    per_entry = max(entries.nbytes / entries.num_rows, 1.0)
    return max(int(target_bytes / per_entry), 1)


def target_rows_without_dictionaries(entries: pa.Table, target_bytes: int) -> int:
    """Entries per region for a target size, like ``target_rows`` but not counting dictionary values.

    A full build amortises the few ``_file`` paths over every entry; a part of the entries (one
    rewritten region, one shard's sample) would not, and would be cut smaller than a full build.
    """
    if entries.num_rows == 0:
        return 1
    size = 0
    for column in entries.columns:
        if pa.types.is_dictionary(column.type):
            size += sum(chunk.indices.nbytes for chunk in column.chunks)
        else:
            size += column.nbytes
    return max(int(target_bytes / max(size / entries.num_rows, 1.0)), 1)


def write_regions(
    io: FileIO, location: str, entries: pa.Table, keys: Sequence[pa.Array], regions: Sequence[tuple[int, int]],
    layout: EntryLayout, directory: str | None = None, progress: Phase | None = None,
) -> list[RegionEntry]:
    """Write one region file per ``(start, stop)`` of sorted entries; tracking entries in index order.

    Files go to ``directory`` (default: the index's ``data/`` directory under ``location``);
    ``progress`` advances by one a region file written.
    """
    directory = (directory or f"{location.rstrip('/')}/data").rstrip("/")
    stats_values = {o.field_id: k for o, k in zip(layout.ordering, keys, strict=True)}

    def write(bounds: tuple[int, int]) -> RegionEntry:
        start, stop = bounds
        rows = entries.slice(start, stop - start)
        values = {fid: v.slice(start, stop - start) for fid, v in stats_values.items()}
        expressions = {f.field_id: f.expr for f in layout.metadata.stats_fields}
        stored = {f.field_id: f.name for f in layout.extract_schema.fields}
        for column in layout.stats_columns:
            if column.field_id in expressions and column.field_id not in values:
                values[column.field_id] = expressions[column.field_id].evaluate(rows, layout.extract_schema)
            elif column.field_id not in values:
                values[column.field_id] = rows.column(stored[column.field_id])
        path = f"{directory}/region-{uuid.uuid4()}.parquet"
        size = write_region_file(io, path, rows, layout.region_schema)
        return RegionEntry(path, "parquet", rows.num_rows, size, region_stats(layout.stats_columns, values))

    # Parquet encoding releases the GIL: regions are written side by side, results kept in order.
    written = []
    with ThreadPoolExecutor(max_workers=IO_THREADS) as pool:
        for entry in pool.map(write, regions):
            written.append(entry)
            if progress is not None:
                progress.advance()
    return written


def build_regions(
    table: Table, plan: SnapshotFiles, layout: EntryLayout, *, paths: Sequence[str] | None = None,
    keep: Callable[[pa.Table], pa.Table] | None = None, rows_per_region: int | None = None,
    directory: str | None = None,
) -> tuple[list[RegionEntry], int]:
    """Region files of a full extract of ``plan``'s snapshot; returns their entries and the entry count.

    A sharded build passes one key range: the data files that may hold it (``paths``), the filter
    keeping its entries (``keep``), the region size planned for every shard, and its own directory.
    """
    files = sorted(plan.data_files) if paths is None else paths
    with Phase("reading data files", total=len(files)) as reading:
        entries = entries_for_files(table, plan, files, layout, keep=keep, progress=reading)
    with Phase("building regions") as building:  # sorting and cutting first: its total is known after
        entries, keys = sort_entries(entries, layout)
        metadata = layout.metadata
        rows = rows_per_region or target_rows(entries, metadata.region_target_size_bytes())
        regions = cut_regions(keys, rows, metadata.allow_key_spanning())
        building.set_total(len(regions))
        written = write_regions(table.io, metadata.location, entries, keys, regions, layout, directory, building)
    return written, entries.num_rows

