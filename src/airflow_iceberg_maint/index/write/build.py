"""Building index data: entries for a set of data files, index order, region cuts, region files.

The pieces are separate so the incremental refresh can reuse them: ``entries_for_files`` turns
live rows into entries (identity columns of the extract schema), ``ordering_columns`` evaluates
the ordering key, ``sort_entries`` puts entries in index order, ``cut_regions`` chooses region
boundaries, and ``write_region`` writes one region file and returns its tracking entry.

``write_sorted_regions`` does all of it within the index's memory budget: entries go through
``SortedRuns`` (spilled to local disk when they exceed the budget), and ``regions_of`` cuts the
merged stream into regions exactly where ``cut_regions`` would cut all entries at once.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from functools import partial
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema, prune_columns
from pyiceberg.table import Table

from airflow_iceberg_maint.index.format.extract_files import RegionEntry, StatsColumn, region_stats, write_region_file
from airflow_iceberg_maint.index.metadata.expressions import FILE_COLUMN_ID, METADATA_COLUMNS
from airflow_iceberg_maint.index.metadata.model import IndexMetadata, OrderingField
from airflow_iceberg_maint.index.source.live_rows import live_rows_of_file, plan_schema
from airflow_iceberg_maint.index.source.snapshot_files import SnapshotFiles
from airflow_iceberg_maint.index.source.threads import ordered_map
from airflow_iceberg_maint.progress import Phase
from airflow_iceberg_maint.sorting.ordering import key_changes
from airflow_iceberg_maint.sorting.sorted_runs import Sorted, SortedRuns, joined, release_unused, sort_table

#: Threads reading data files and writing region files (Parquet work runs outside the GIL).
IO_THREADS = 2
#: Regions' worth of entries held while regions are cut and written: about one and a half being
#: cut, and a merged piece (``regions_of``), and one a thread writing (``in_order``).
REGIONS_HELD = 2 + IO_THREADS
_T = TypeVar("_T")
_R = TypeVar("_R")
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
    for arrow_field, field in zip(
        schema_to_pyarrow(extract_schema, include_field_ids=True), extract_schema.fields, strict=True
    ):
        # _file repeats few distinct values: keep it dictionary-encoded in memory and in region files.
        is_file = file_field is not None and field.field_id == file_field.field_id
        region_fields.append(arrow_field.with_type(pa.dictionary(pa.int32(), pa.string())) if is_file else arrow_field)
    names = {f.field_id: f.name for f in extract_schema.fields}
    columns = [
        StatsColumn(
            o.field_id,
            names.get(o.field_id) or o.expression.to_text(extract_schema),
            schema_to_pyarrow(o.data_type),
            ordering=True,
        )
        for o in ordering
    ]
    for stats_field in metadata.stats_fields:
        if stats_field.field_id not in metadata.ordering_key:
            # Stats-only fields outside the ordering key still require bounds (spec: content statistics).
            columns.append(
                StatsColumn(
                    stats_field.field_id,
                    stats_field.expr.to_text(extract_schema),
                    schema_to_pyarrow(stats_field.data_type),
                    ordering=False,
                )
            )
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
    table: Table,
    plan: SnapshotFiles,
    paths: Iterable[str],
    layout: EntryLayout,
    table_schema: Schema | None = None,
    keep: Callable[[pa.Table], pa.Table] | None = None,
    progress: Phase | None = None,
) -> pa.Table:
    """Entries (extract schema columns, by name) for the live rows of the given data files of ``plan``.

    Rows are read with ``table_schema`` (default: the plan's snapshot schema); an incremental
    refresh reads an older snapshot's rows with the newer snapshot's (possibly promoted) types.
    ``keep`` filters each file's entries as soon as they are read (a sharded build keeps one key range).
    ``progress`` advances by one a file read.
    """
    parts = list(entries_by_file(table, plan, paths, layout, table_schema, keep, progress))
    if not parts:
        return layout.region_schema.empty_table()
    return pa.concat_tables(parts).unify_dictionaries()


def entries_by_file(
    table: Table,
    plan: SnapshotFiles,
    paths: Iterable[str],
    layout: EntryLayout,
    table_schema: Schema | None = None,
    keep: Callable[[pa.Table], pa.Table] | None = None,
    progress: Phase | None = None,
) -> Iterator[pa.Table]:
    """The entries of each data file in ``paths``, in path order (see ``entries_for_files``)."""
    table_schema = table_schema or plan_schema(table, plan)
    table_ids = {s for s in layout.source_ids.values() if s not in _METADATA_COLUMN_NAMES}
    read_schema = prune_columns(table_schema, table_ids, select_full_types=False)

    def entries(path: str) -> pa.Table:
        found = _entries_of_rows(live_rows_of_file(table, plan, path, read_schema), read_schema, layout)
        return found if keep is None else keep(found)

    # Decoding Parquet releases the GIL: files are read side by side.
    for part in in_order(entries, paths):
        if progress is not None:
            progress.advance()
        yield part


def in_order(function: Callable[[_T], _R], items: Iterable[_T]) -> Iterator[_R]:
    """``function`` of each item on ``IO_THREADS`` threads, results in item order, so that at
    most ``IO_THREADS`` items (regions to write) are held at once (``ordered_map``)."""
    return ordered_map(function, items, IO_THREADS)


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
    return sort_table(entries, partial(ordering_columns, layout=layout))


def _next_change(changes: pa.Array, at: int) -> int:
    """The first index >= ``at`` where the key changes (the length when none), searched in growing windows."""
    window = 4096
    while at < len(changes):
        found: int = pc.index(changes.slice(at, window), True).as_py()
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


def entry_bytes(entries: pa.Table) -> float:
    """The size of the entries' values, from their types and lengths only.

    Unlike Arrow's ``nbytes`` it does not depend on how the entries are chunked or laid out, so
    entries counted file by file add up to what the same entries count at once. Dictionary
    columns (``_file``) count their indices only: their few values are shared by every entry.
    """
    size = 0.0
    for column in entries.columns:
        kind = column.type
        if pa.types.is_dictionary(kind):
            size += kind.index_type.bit_width / 8 * len(column)
        elif pa.types.is_string(kind) or pa.types.is_binary(kind):
            size += 4 * len(column) + (pc.sum(pc.binary_length(column)).as_py() or 0)
        elif pa.types.is_large_string(kind) or pa.types.is_large_binary(kind):
            size += 8 * len(column) + (pc.sum(pc.binary_length(column)).as_py() or 0)
        else:
            size += kind.bit_width / 8 * len(column)
    return size


def target_rows(size: float, rows: int, target_bytes: int) -> int:
    """Entries per region for a target size, given the ``entry_bytes`` of ``rows`` entries."""
    if rows == 0:
        return 1
    per_entry = max(size / rows, 1.0)
    return max(int(target_bytes / per_entry), 1)


def write_region(
    io: FileIO,
    layout: EntryLayout,
    rows: pa.Table,
    keys: Sequence[pa.Array],
    directory: str | None = None,
) -> RegionEntry:
    """Write one region file of sorted entries (with their ordering-key columns); returns its tracking entry.

    The file goes to ``directory`` (default: the index's ``data/`` directory).
    """
    values = {o.field_id: k for o, k in zip(layout.ordering, keys, strict=True)}
    expressions = {f.field_id: f.expr for f in layout.metadata.stats_fields}
    stored = {f.field_id: f.name for f in layout.extract_schema.fields}
    for column in layout.stats_columns:
        if column.field_id in expressions and column.field_id not in values:
            values[column.field_id] = expressions[column.field_id].evaluate(rows, layout.extract_schema)
        elif column.field_id not in values:
            values[column.field_id] = rows.column(stored[column.field_id])
    directory = (directory or f"{layout.metadata.location.rstrip('/')}/data").rstrip("/")
    path = f"{directory}/region-{uuid.uuid4()}.parquet"
    size = write_region_file(io, path, rows, layout.region_schema)
    return RegionEntry(path, "parquet", rows.num_rows, size, region_stats(layout.stats_columns, values))


def regions_of(pieces: Iterable[Sorted], target: int, spanning: bool) -> Iterator[Sorted]:
    """Regions of sorted entries arriving in pieces, cut exactly as ``cut_regions`` cuts them all at once.

    Only the last region found may still grow with the next piece; the others are final (their
    end is a key change, or the hot-key cut, seen in the entries held). The entries held are cut
    again each time half a region more has arrived, so about one and a half regions' entries are
    held, unless a hot key that may not span regions is longer.
    """
    held: list[Sorted] = []
    rows = 0
    enough = max(target // 2, 1)
    for piece in pieces:
        if piece[0].num_rows == 0:
            continue
        held.append(piece)
        rows += piece[0].num_rows
        if rows < enough:
            continue
        entries, keys = joined(held)
        regions = cut_regions(keys, target, spanning)
        release_unused()  # the merge's pieces and the key copies of the cut, freed since the last cut
        for start, stop in regions[:-1]:
            yield entries.slice(start, stop - start), [k.slice(start, stop - start) for k in keys]
        start = regions[-1][0]
        held = [(entries.slice(start), [k.slice(start) for k in keys])]
        del entries, keys  # the regions passed on are not kept until the next cut
        rows = held[0][0].num_rows
        # Half a region more; a region longer than its target (a hot key) waits for as many
        # entries again as it has beyond it, so cutting it again and again stays linear.
        enough = rows + max(target // 2, rows - target, 1)
    if rows:
        entries, keys = joined(held)
        for start, stop in cut_regions(keys, target, spanning):
            yield entries.slice(start, stop - start), [k.slice(start, stop - start) for k in keys]


def write_sorted_regions(
    io: FileIO,
    layout: EntryLayout,
    entries: Iterable[pa.Table],
    *,
    rows_per_region: int | None = None,
    directory: str | None = None,
    spill_dir: str | None = None,
    progress: Phase | None = None,
) -> tuple[list[RegionEntry], int]:
    """Region files of all ``entries`` (tables in input order) within the index's memory budget.

    Entries beyond the budget are spilled to ``spill_dir`` as sorted runs and merged back; the
    regions equal those of one in-memory sort of every entry. Returns their tracking entries in
    index order, and the entry count. Regions hold ``rows_per_region`` entries (default: the
    region target size over the entries' ``entry_bytes``) and go to ``directory`` (see
    ``write_region``). A shard of a build passes the entries of its key range. ``progress``
    starts once every entry is in, and advances by one a region file written.
    """
    metadata = layout.metadata
    size = 0.0
    budget = metadata.build_memory_budget_bytes()
    # While runs merge, up to about four regions' entries are held (``REGIONS_HELD``).
    reserved = REGIONS_HELD * metadata.region_target_size_bytes()
    with SortedRuns(partial(ordering_columns, layout=layout), budget, spill_dir, reserved) as runs:
        for part in entries:
            size += entry_bytes(part)
            runs.add(part)
        target = rows_per_region or target_rows(size, runs.rows, metadata.region_target_size_bytes())
        written = []
        with progress or nullcontext():
            regions = regions_of(runs.sorted(), target, metadata.allow_key_spanning())
            for entry in in_order(lambda region: write_region(io, layout, *region, directory), regions):
                written.append(entry)
                release_unused()
                if progress is not None:
                    progress.advance()
        return written, runs.rows


def build_regions(
    table: Table,
    plan: SnapshotFiles,
    layout: EntryLayout,
    *,
    paths: Sequence[str] | None = None,
    keep: Callable[[pa.Table], pa.Table] | None = None,
    rows_per_region: int | None = None,
    directory: str | None = None,
    spill_dir: str | None = None,
) -> tuple[list[RegionEntry], int]:
    """Region files of a full extract of ``plan``'s snapshot, within the memory budget; returns
    their entries and the entry count.

    A sharded build passes one key range: the data files that may hold it (``paths``), the filter
    keeping its entries (``keep``), the region size planned for every shard, and its own directory.
    """
    files = sorted(plan.data_files) if paths is None else paths

    def entries() -> Iterator[pa.Table]:
        with Phase("reading data files", total=len(files)) as reading:  # ends once the last file is read
            yield from entries_by_file(table, plan, files, layout, keep=keep, progress=reading)

    return write_sorted_regions(
        table.io,
        layout,
        entries(),
        rows_per_region=rows_per_region,
        directory=directory,
        spill_dir=spill_dir,
        progress=Phase("building regions"),
    )
