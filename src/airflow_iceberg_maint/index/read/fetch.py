"""Fetching the table rows an index read found: batched per data file, by position, with new deletes applied."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.schema import Schema
from pyiceberg.table import Table
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
)

from airflow_iceberg_maint.index.metadata.model import IndexMetadata
from airflow_iceberg_maint.index.read.plan import ReadPlan
from airflow_iceberg_maint.index.read.regions import Tracking
from airflow_iceberg_maint.index.source.live_rows import (
    POS_COLUMN,
    deleted_positions,
    equality_deleted_mask,
    plan_schema,
    read_rows,
)
from airflow_iceberg_maint.index.source.threads import ordered_map

#: Data files a query fetches from at once.
FETCH_THREADS = 4


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


def stored_ids(metadata: IndexMetadata, tracking: Tracking, output: Schema) -> dict[int, int]:
    """Output column field ID -> the extract field holding a copy of it with the same type."""
    extract_fields = {f.field_id: f for f in tracking.schema.fields}
    stored = {}
    for column in output.fields:
        field_id = metadata.field_id_of_source(column.field_id)
        copy = extract_fields.get(field_id) if field_id is not None else None
        if copy is not None and copy.field_type == column.field_type and isinstance(column.field_type, _STORABLE):
            stored[column.field_id] = copy.field_id
    return stored


def fetch_rows(
    table: Table, plan: ReadPlan, entries: pa.Table, output: Schema, stored: Sequence[int]
) -> list[pa.Table]:
    """Output rows for the matching entries, in ``output``'s column order.

    ``stored`` are the output columns (field IDs) the entries hold, in the order of the entries'
    columns after ``_file`` and ``_pos``; only at the extract's own snapshot may there be any.
    The other columns are read from the data files by position. With no other column, no data
    file is read at all (an index-only lookup).
    """
    assert plan.source is None or not stored
    from_entries = {field_id: 2 + i for i, field_id in enumerate(stored)}
    read_schema = _other_columns(output, frozenset(from_entries))
    files = [
        (path, at)
        for path, at in sorted(by_data_file(entries).items())
        if path in plan.target.data_files and path not in plan.rescan  # else removed since the extract, or scanned
    ]

    def rows_of(file: tuple[str, tuple[list[int], list[int]]]) -> pa.Table:
        path, (positions, entry_rows) = file
        if read_schema.fields:
            rows = read_rows(table, plan.target.data_files[path].data_file, read_schema, positions)
            if plan.source is not None:
                rows = _apply_new_deletes(table, plan, path, rows, read_schema)
        return pa.Table.from_arrays(
            [
                entries.column(from_entries[f.field_id]).take(entry_rows)
                if f.field_id in from_entries
                else rows.column(f.name)
                for f in output.fields
            ],
            names=[f.name for f in output.fields],
        )

    # Files are fetched side by side: decoding pages runs outside the GIL, and on object stores
    # the reads of one file wait on the network while another's decode.
    workers = min(FETCH_THREADS, len(files)) if read_schema.fields else 1
    return list(ordered_map(rows_of, files, workers))


def _other_columns(schema: Schema, excluded: frozenset[int]) -> Schema:
    """``schema`` without the ``excluded`` columns (built once per schema: pyiceberg schemas are slow to make)."""
    return _schema_without(tuple(schema.fields), schema.schema_id, excluded)


@lru_cache(maxsize=64)
def _schema_without(fields: tuple[NestedField, ...], schema_id: int, excluded: frozenset[int]) -> Schema:
    return Schema(*[f for f in fields if f.field_id not in excluded], schema_id=schema_id)


def _apply_new_deletes(table: Table, plan: ReadPlan, path: str, rows: pa.Table, output: Schema) -> pa.Table:
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
