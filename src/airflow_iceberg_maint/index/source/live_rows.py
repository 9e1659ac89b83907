"""Rows of data files with their true positions, and the deletes that remove some of them.

``_pos`` is the ordinal of a row in its data file counted before any delete is applied, so
data files are read here directly (row groups in file order) rather than through a pyiceberg
scan, which drops deleted rows and does not expose positions. Columns are resolved by field ID
against the snapshot's schema with pyiceberg's own projection (renames, promotions, columns
missing from old files, identity partition values).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from functools import lru_cache
from threading import Lock
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from cachetools import LRUCache, cached
from cachetools.keys import hashkey
from pyiceberg.io.pyarrow import pyarrow_to_schema
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema, prune_columns
from pyiceberg.table import Table
from pyiceberg.types import ListType, MapType, NestedField

from airflow_iceberg_maint.errors import MetadataReadError
from airflow_iceberg_maint.index.source import page_reads
from airflow_iceberg_maint.index.source.parquet_files import ParquetHandle, opened_parquet
from airflow_iceberg_maint.index.source.position_deletes import deleted_positions_by_file
from airflow_iceberg_maint.index.source.snapshot_files import SnapshotFiles
from airflow_iceberg_maint.pyiceberg_compat import missing_column_values, project_batch

#: Names under which the row location travels next to the projected columns.
FILE_COLUMN = "_file"
POS_COLUMN = "_pos"
_CACHE_SIZE = 256


def arange(start: int, stop: int) -> pa.Array:
    """``start, start+1, ..., stop-1`` as int64."""
    return pa.array(np.arange(start, max(start, stop), dtype=np.int64))


def _read_positions(handle: ParquetHandle, path: str, positions: Sequence[int], columns: list[str]) -> pa.Table:
    """The rows at ``positions`` (sorted, unique): only the pages holding them when the file has an
    offset index, else each row group decoded only up to the last one needed.

    Without an offset index a row group is decoded as one batch ending at its last wanted row:
    Parquet pages decode lazily, so the rows after it are never decompressed. The columns decode
    in parallel on Arrow's thread pool (a fetch is mostly one row group's dictionary pages).
    """
    wanted: dict[int, list[int]] = {}
    for position in positions:
        group = bisect_right(handle.starts, position) - 1
        wanted.setdefault(group, []).append(position - handle.starts[group])
    paged = page_reads.read_positions(handle, path, wanted, columns)
    if paged is not None:
        return paged
    pieces: list[pa.RecordBatch] = []
    for group, local in sorted(wanted.items()):
        offset = 0  # Arrow may still cut the batch short (a chunk of over 2 GB of strings)
        for batch in handle.file.iter_batches(
            batch_size=local[-1] + 1, row_groups=[group], columns=columns, use_threads=True
        ):
            end = offset + batch.num_rows
            at = [i - offset for i in local if offset <= i < end]
            if at:
                pieces.append(batch.slice(at[0], 1) if len(at) == 1 else batch.take(pa.array(at, type=pa.int64())))
            offset = end
            if offset > local[-1]:
                break
    if not pieces:
        return handle.file.schema_arrow.empty_table().select(columns)
    return pa.Table.from_batches(pieces)


def _arrow_schema_key(schema: pa.Schema) -> bytes:
    """A key that tells Arrow schemas apart by their field metadata too (field IDs), which ``==`` ignores."""
    return bytes(schema.serialize())


def _projection_key(table: Table, path: str, parquet: pq.ParquetFile, field_ids: frozenset[int]) -> tuple[Any, ...]:
    metadata = table.metadata
    mapping = metadata.properties.get("schema.name-mapping.default")
    return hashkey(_arrow_schema_key(parquet.schema_arrow), field_ids, metadata.format_version, mapping)


@cached(LRUCache(maxsize=_CACHE_SIZE), lock=Lock(), key=_projection_key)
def _file_projection(table: Table, path: str, parquet: pq.ParquetFile, field_ids: frozenset[int]) -> Schema:
    """The Iceberg schema of a data file's columns among ``field_ids``, cached per file schema and projection
    (its only inputs besides the table's format version and name mapping): the many files of one writer share it.

    Columns are identified by their Parquet field IDs, or through the table's name mapping.
    """
    metadata = table.metadata
    file_schema = pyarrow_to_schema(
        parquet.schema_arrow,
        metadata.name_mapping(),
        downcast_ns_timestamp_to_us=metadata.format_version <= 2,
        format_version=metadata.format_version,
    )
    return prune_columns(file_schema, set(field_ids), select_full_types=False)


class _Fields:
    """A schema's fields as a cache key whose hash is computed once (a pydantic field hashes recursively,
    which cost more than decoding a small file's rows when done for every file)."""

    __slots__ = ("_hash", "fields")

    def __init__(self, fields: tuple[NestedField, ...]) -> None:
        self.fields = fields
        self._hash = hash(fields)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Fields) and (self.fields is other.fields or self.fields == other.fields)


_fields_keys: LRUCache[int, tuple[Schema, _Fields]] = LRUCache(maxsize=_CACHE_SIZE)
_fields_keys_lock = Lock()


def _fields_of(schema: Schema) -> _Fields:
    """``schema``'s fields as a key, made once per schema object (the same object is asked for every file)."""
    with _fields_keys_lock:
        hit = _fields_keys.get(id(schema))
        if hit is not None and hit[0] is schema:
            return hit[1]
        key = _Fields(tuple(schema.fields))
        _fields_keys[id(schema)] = (schema, key)  # the schema is held, so its id is not reused meanwhile
        return key


@lru_cache(maxsize=256)
def _projected_ids(fields: _Fields) -> frozenset[int]:
    """The field IDs to project for these columns: lists and maps are projected through their
    element, key and value IDs (pyiceberg refuses them explicitly, as its scans do)."""
    schema = Schema(*fields.fields)
    return frozenset(i for i in schema.field_ids if not isinstance(schema.find_type(i), ListType | MapType))


def read_rows(table: Table, data_file: DataFile, schema: Schema, positions: Sequence[int] | None = None) -> pa.Table:
    """Rows of one data file projected on ``schema``, with a ``_pos`` column.

    With ``positions`` (sorted, unique, in range) only those rows are returned, decoding only
    the row groups holding them; without, every row is returned in file order.
    """
    if data_file.file_format != FileFormat.PARQUET:
        raise MetadataReadError(f"data file {data_file.file_path!r}: format {data_file.file_format} is not supported")
    metadata = table.metadata
    downcast = metadata.format_version <= 2
    path = data_file.file_path
    if positions is None:
        with table.io.new_input(path).open() as stream:
            parquet = pq.ParquetFile(stream)
            file_project_schema = _file_projection(table, path, parquet, _projected_ids(_fields_of(schema)))
            raw = parquet.read(columns=[c.name for c in file_project_schema.columns], use_threads=False)
        row_positions = arange(0, raw.num_rows)
    else:
        with opened_parquet(table.io, path) as handle:
            file_project_schema = _file_projection(table, path, handle.file, _projected_ids(_fields_of(schema)))
            raw = _read_positions(handle, path, positions, [c.name for c in file_project_schema.columns])
        row_positions = pa.array(positions, type=pa.int64())
    missing = missing_column_values(
        data_file, schema, metadata.schema(), metadata.specs().get(data_file.spec_id), file_project_schema.field_ids
    )
    raw = raw.combine_chunks()
    batch = raw.to_batches()[0] if raw.num_rows else pa.RecordBatch.from_pylist([], schema=raw.schema)
    batch = _project(path, schema, file_project_schema, batch, downcast, missing)
    return pa.Table.from_batches([batch]).append_column(POS_COLUMN, row_positions)


def iter_rows(table: Table, data_file: DataFile, schema: Schema, batch_rows: int) -> Iterator[pa.Table]:
    """The rows of ``read_rows`` (every row, file order), at most ``batch_rows`` at a time."""
    if data_file.file_format != FileFormat.PARQUET:
        raise MetadataReadError(f"data file {data_file.file_path!r}: format {data_file.file_format} is not supported")
    metadata = table.metadata
    path = data_file.file_path
    with table.io.new_input(path).open() as stream:
        parquet = pq.ParquetFile(stream)
        file_project_schema = _file_projection(table, path, parquet, _projected_ids(_fields_of(schema)))
        missing = missing_column_values(
            data_file, schema, metadata.schema(), metadata.specs().get(data_file.spec_id), file_project_schema.field_ids
        )
        start = 0
        columns = [c.name for c in file_project_schema.columns]
        for raw in parquet.iter_batches(batch_size=batch_rows, columns=columns, use_threads=False):
            batch = _project(path, schema, file_project_schema, raw, metadata.format_version <= 2, missing)
            yield pa.Table.from_batches([batch]).append_column(POS_COLUMN, arange(start, start + raw.num_rows))
            start += raw.num_rows


_relabels: LRUCache[tuple[Any, ...], pa.Schema] = LRUCache(maxsize=_CACHE_SIZE)
_relabels_lock = Lock()


def _project(
    path: str, schema: Schema, file_schema: Schema, batch: pa.RecordBatch, downcast: bool, missing: dict[int, Any]
) -> pa.RecordBatch:
    """pyiceberg's projection of a batch of the data file ``path`` on ``schema``.

    pyiceberg's visitor costs about 0.15 ms a call, most of a point lookup's fetch overhead. When
    it has been seen to only rename top-level primitive columns in place (same field IDs in the
    same order, same Arrow types), its output schema is reused for the same batch schema (field
    IDs included), file schema and schema: every file a writer wrote alike.
    """
    key = (
        hashkey(_arrow_schema_key(batch.schema), _fields_of(file_schema), _fields_of(schema), downcast)
        if not missing
        else None
    )
    with _relabels_lock:
        relabel = _relabels.get(key) if key is not None else None
    if relabel is not None:
        return pa.RecordBatch.from_arrays(batch.columns, schema=relabel)
    projected = project_batch(
        schema, file_schema, batch, downcast_ns_timestamp_to_us=downcast, projected_missing_fields=missing
    )
    if key is not None and _only_renames(schema, file_schema, batch.schema, projected.schema):
        with _relabels_lock:
            _relabels[key] = projected.schema
    return projected


def _only_renames(schema: Schema, file_schema: Schema, before: pa.Schema, after: pa.Schema) -> bool:
    same_fields = [f.field_id for f in schema.fields] == [f.field_id for f in file_schema.fields]
    return (
        same_fields
        and len(before) == len(after)
        and all(not pa.types.is_nested(b.type) and b.type == a.type for b, a in zip(before, after, strict=True))
    )


#: Decoded delete files kept per process (delete files never change).
_DELETES_CACHE_SIZE = 64


@cached(LRUCache(maxsize=_DELETES_CACHE_SIZE), lock=Lock(), key=lambda table, delete: hashkey(delete.file_path))
def _read_position_deletes(table: Table, delete: DataFile) -> dict[str, pa.ChunkedArray]:
    """Data file path -> deleted positions, from a position delete file or a Puffin deletion vector."""
    try:
        return deleted_positions_by_file(table.io, delete)
    except Exception as exc:
        raise MetadataReadError(f"delete file {delete.file_path!r}: cannot be read ({exc})") from exc


def deleted_positions(table: Table, delete_files: Iterable[DataFile], data_path: str) -> pa.Array:
    """Positions of ``data_path`` removed by position delete files and deletion vectors."""
    parts: list[pa.Array] = []
    for delete in delete_files:
        if delete.content != DataFileContent.POSITION_DELETES:
            continue
        by_file = _read_position_deletes(table, delete)
        if data_path in by_file:
            parts.extend(by_file[data_path].cast(pa.int64()).chunks)
    return pc.unique(pa.chunked_array(parts, type=pa.int64())) if parts else pa.array([], pa.int64())


def equality_deleted_mask(table: Table, rows: pa.Table, schema: Schema, delete_files: Iterable[DataFile]) -> pa.Array:
    """A boolean mask of ``rows`` removed by equality delete files (null-safe equality on the IDs)."""
    mask = pc.fill_null(pa.nulls(rows.num_rows, type=pa.bool_()), False)
    for delete in delete_files:
        if delete.content != DataFileContent.EQUALITY_DELETES or rows.num_rows == 0:
            continue
        ids = list(delete.equality_ids or [])
        key_schema = prune_columns(schema, set(ids), select_full_types=False)
        deleted = _equality_delete_rows(table, delete, key_schema)
        names = [schema.find_column_name(i) or str(i) for i in ids]
        mask = pc.or_(mask, _null_safe_matches(rows, deleted, names))
    return mask


@cached(
    LRUCache(maxsize=_DELETES_CACHE_SIZE),
    lock=Lock(),
    key=lambda table, delete, key_schema: hashkey(delete.file_path, tuple(key_schema.fields)),
)
def _equality_delete_rows(table: Table, delete: DataFile, key_schema: Schema) -> pa.Table:
    """The key columns of an equality delete file's rows."""
    return read_rows(table, delete, key_schema).drop_columns([POS_COLUMN])


def _join_keys(left: pa.ChunkedArray, right: pa.ChunkedArray) -> list[tuple[pa.Array, pa.Array]]:
    """Key columns that compare nulls as equal: a validity flag plus the value with nulls filled."""
    if left.null_count == 0 and right.null_count == 0:
        return [(left, right)]
    flags = (pc.is_valid(left), pc.is_valid(right))
    sample = pc.drop_null(pa.chunked_array(left.chunks + right.chunks, type=left.type))
    if len(sample) == 0:
        return [flags]
    fill = sample[0]
    return [flags, (pc.fill_null(left, fill), pc.fill_null(right, fill))]


def _null_safe_matches(rows: pa.Table, deleted: pa.Table, names: Sequence[str]) -> pa.Array:
    rows_index = arange(0, rows.num_rows)
    left_cols: dict[str, pa.Array] = {"__row": rows_index}
    right_cols: dict[str, pa.Array] = {}
    for index, name in enumerate(names):
        left = _column(rows, name)
        right = _column(deleted, name).cast(left.type)
        for part, (lcol, rcol) in enumerate(_join_keys(left, right)):
            left_cols[f"k{index}_{part}"] = lcol
            right_cols[f"k{index}_{part}"] = rcol
    keys = [k for k in left_cols if k != "__row"]
    matched = pa.table(left_cols).join(pa.table(right_cols).group_by(keys).aggregate([]), keys, join_type="left semi")
    return pc.is_in(rows_index, value_set=matched.column("__row").combine_chunks())


def _column(rows: pa.Table, dotted: str) -> pa.ChunkedArray:
    """A possibly nested column, by its dotted schema name."""
    head, *rest = dotted.split(".")
    column = rows.column(head)
    for part in rest:
        column = pc.struct_field(column, part)
    return column


def live_rows_of_file(table: Table, plan: SnapshotFiles, path: str, schema: Schema) -> pa.Table:
    """The live rows of one data file of ``plan``, projected on ``schema``, with ``_file`` and ``_pos``.

    ``schema`` is usually the snapshot's own, but may be another schema of the table (a lookup on
    the current snapshot reads with the current schema, as a pyiceberg scan does).
    """
    deletes = plan.deletes_for(path)
    read_schema = _with_equality_columns(table, plan, deletes, schema)
    rows = _live(
        table, path, deletes, read_schema, schema, read_rows(table, plan.data_files[path].data_file, read_schema)
    )
    zeros = pa.array(np.zeros(rows.num_rows, dtype=np.int32))
    file_column = pa.DictionaryArray.from_arrays(zeros, pa.array([path]))
    return rows.add_column(rows.num_columns - 1, FILE_COLUMN, file_column)


def live_row_batches(
    table: Table, plan: SnapshotFiles, path: str, schema: Schema, batch_rows: int
) -> Iterator[pa.Table]:
    """The live rows of ``live_rows_of_file`` (without ``_file``), read ``batch_rows`` rows of the file at a time:
    a file larger than memory streams through."""
    deletes = plan.deletes_for(path)
    read_schema = _with_equality_columns(table, plan, deletes, schema)
    for rows in iter_rows(table, plan.data_files[path].data_file, read_schema, batch_rows):
        yield _live(table, path, deletes, read_schema, schema, rows)


def _with_equality_columns(table: Table, plan: SnapshotFiles, deletes: list[DataFile], schema: Schema) -> Schema:
    """``schema`` plus the columns the equality deletes compare that it lacks."""
    equality_ids = {i for d in deletes if d.content == DataFileContent.EQUALITY_DELETES for i in d.equality_ids or []}
    if equality_ids <= set(schema.field_ids):
        return schema
    missing = frozenset(equality_ids - set(schema.field_ids))
    return _extended(_fields_of(schema), _fields_of(plan_schema(table, plan)), missing, schema.schema_id)


@lru_cache(maxsize=_CACHE_SIZE)
def _extended(schema: _Fields, source: _Fields, missing: frozenset[int], schema_id: int) -> Schema:
    """One schema object for each extension (the files of a table share it, and with it the keys made of it)."""
    extra = prune_columns(Schema(*source.fields), set(missing), select_full_types=False)
    return Schema(*schema.fields, *extra.fields, schema_id=schema_id)


def _live(
    table: Table, path: str, deletes: list[DataFile], read_schema: Schema, schema: Schema, rows: pa.Table
) -> pa.Table:
    """``rows`` of ``path`` (with ``_pos``) without those its deletes remove, projected on ``schema``."""
    if deletes:
        kept = pc.invert(pc.is_in(rows.column(POS_COLUMN), value_set=deleted_positions(table, deletes, path)))
        if any(d.content == DataFileContent.EQUALITY_DELETES for d in deletes):
            kept = pc.and_(kept, pc.invert(equality_deleted_mask(table, rows, read_schema, deletes)))
        rows = rows.filter(kept)
    return rows.select([f.name for f in schema.fields] + [POS_COLUMN])


def plan_schema(table: Table, plan: SnapshotFiles) -> Schema:
    """The schema of the planned snapshot (the current schema when the snapshot has none)."""
    if plan.schema_id is not None:
        schema = table.metadata.schema_by_id(plan.schema_id)
        if schema is not None:
            return schema
    return table.metadata.schema()
