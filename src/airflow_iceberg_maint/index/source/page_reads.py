"""Rows of a Parquet file read page by page through its offset index.

Without it, a point fetch decodes its row group's column chunks up to the row: with 1M-row or
128 MB row groups that is most of a lookup. The offset index (the Parquet page index, written by
parquet-mr since 1.11 and by pyarrow with ``write_page_index``) gives each data page's place and
first row, so only the pages holding the rows are read, plus a column's dictionary page when one
of them is dictionary-encoded.

pyarrow 26 reads whole column chunks only: it exposes neither the offset index nor a page-level
read. So the selected pages are copied unchanged, with the dictionary page, into a small Parquet
file in memory whose one column chunk is those pages, and pyarrow decodes that: nothing here
decodes a page. The Thrift structures (footer, offset index, page headers) are read and written
with fastparquet's Thrift codec.

Only flat columns are read this way (a top-level primitive column is one leaf whose pages start
on rows). A file whose requested columns are nested, or lack an offset index, or are encrypted,
gets None: the caller reads it the usual way.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from threading import Lock
from typing import cast

import pyarrow as pa
import pyarrow.parquet as pq
from cachetools import LRUCache, cached
from cachetools.keys import hashkey
from fastparquet.cencoding import ThriftObject, from_buffer
from fastparquet.parquet_thrift import Encoding, FieldRepetitionType

from airflow_iceberg_maint.index.source import dictionary_pages
from airflow_iceberg_maint.index.source.parquet_files import ParquetHandle

#: Data page encodings whose values are indexes into the column chunk's dictionary page.
_DICTIONARY_ENCODINGS = frozenset({Encoding.PLAIN_DICTIONARY, Encoding.RLE_DICTIONARY})
#: Files whose parsed footer, and column chunks whose offset index, are kept per process.
_CACHE_SIZE = 256
_MAGIC = b"PAR1"


class _Unreadable(Exception):
    """Pages this module leaves to the usual reader."""


@dataclass(frozen=True)
class _Layout:
    """A file's footer as Thrift, and its flat columns: name -> (leaf index, schema element index)."""

    footer: ThriftObject
    flat: dict[str, tuple[int, int]]


@dataclass(frozen=True)
class _Pages:
    """A column chunk's data pages: byte offsets, compressed sizes and first rows (row group relative)."""

    offsets: list[int]
    sizes: list[int]
    first_rows: list[int]


def _subtree(schema: Sequence[ThriftObject], index: int) -> tuple[int, int]:
    """The schema element index after the subtree at ``index``, and the number of leaves in it."""
    children = schema[index].num_children or 0
    if not children:
        return index + 1, 1
    after, leaves = index + 1, 0
    for _ in range(children):
        after, count = _subtree(schema, after)
        leaves += count
    return after, leaves


@cached(LRUCache(maxsize=_CACHE_SIZE), lock=Lock(), key=lambda handle, path: hashkey(path))
def _layout(handle: ParquetHandle, path: str) -> _Layout:
    """The footer pyarrow already read, as Thrift (serialised from pyarrow's copy: no read)."""
    sink = pa.BufferOutputStream()
    handle.file.metadata.write_metadata_file(sink)
    footer = from_buffer(sink.getvalue().to_pybytes()[len(_MAGIC) : -8], "FileMetaData")
    schema = footer.schema
    flat: dict[str, tuple[int, int]] = {}
    index, leaf = 1, 0
    for _ in range(schema[0].num_children or 0):
        element = schema[index]
        after, leaves = _subtree(schema, index)
        if leaves == 1 and after == index + 1 and element.repetition_type != FieldRepetitionType.REPEATED:
            flat[element.name.decode()] = (leaf, index)
        index, leaf = after, leaf + leaves
    return _Layout(footer, flat)


def _read(handle: ParquetHandle, offset: int, length: int) -> bytes:
    source = handle.source
    if hasattr(source, "read_at"):  # pyarrow's files: one positioned read (one ranged GET on S3)
        return cast(bytes, source.read_at(length, offset))
    source.seek(offset)
    return cast(bytes, source.read(length))


@cached(
    LRUCache(maxsize=_CACHE_SIZE * 8),
    lock=Lock(),
    key=lambda handle, path, chunk, group, leaf: hashkey(path, group, leaf),
)
def _pages(handle: ParquetHandle, path: str, chunk: ThriftObject, group: int, leaf: int) -> _Pages:
    index = from_buffer(_read(handle, chunk.offset_index_offset, chunk.offset_index_length), "OffsetIndex")
    locations = index.page_locations
    return _Pages(
        [p.offset for p in locations],
        [p.compressed_page_size for p in locations],
        [p.first_row_index for p in locations],
    )


def _usable(layout: _Layout, groups: Sequence[int], columns: Sequence[str]) -> bool:
    if layout.footer.encryption_algorithm is not None or any(c not in layout.flat for c in columns):
        return False
    for group in groups:
        chunks = layout.footer.row_groups[group].columns
        for name in columns:
            chunk = chunks[layout.flat[name][0]]
            if chunk.offset_index_offset is None or chunk.crypto_metadata is not None or chunk.file_path:
                return False
    return True


def read_positions(
    handle: ParquetHandle, path: str, wanted: Mapping[int, Sequence[int]], columns: Sequence[str]
) -> pa.Table | None:
    """``columns`` of the rows at ``wanted`` (row group -> sorted, unique positions in it), read
    page by page; None when the file cannot be read so (see the module's description).

    The columns have the Arrow types pyarrow gives them when reading the whole file.
    """
    layout = _layout(handle, path)
    if not columns or not _usable(layout, list(wanted), columns):
        return None
    fields = [handle.file.schema_arrow.field(name) for name in columns]
    try:
        arrays = [_column(handle, path, layout, wanted, name, f.type) for name, f in zip(columns, fields, strict=True)]
    except _Unreadable:
        return None
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _column(
    handle: ParquetHandle,
    path: str,
    layout: _Layout,
    wanted: Mapping[int, Sequence[int]],
    name: str,
    arrow_type: pa.DataType,
) -> pa.Array:
    leaf, element = layout.flat[name]
    pieces = []
    for group, local in sorted(wanted.items()):
        chunk = layout.footer.row_groups[group].columns[leaf]
        pieces.extend(_column_rows(handle, path, layout, group, leaf, element, chunk, local))
    try:
        # Pieces decoded from a small file have the Parquet schema's own types; a chunk read whole
        # has the file's Arrow types already.
        pieces = [piece if piece.type == arrow_type else piece.cast(arrow_type) for piece in pieces]
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise _Unreadable from exc  # a type only the whole file's Arrow schema gives
    return pa.chunked_array(pieces, type=arrow_type).combine_chunks()


def _column_rows(
    handle: ParquetHandle,
    path: str,
    layout: _Layout,
    group: int,
    leaf: int,
    element: int,
    chunk: ThriftObject,
    local: Sequence[int],
) -> list[pa.Array]:
    """One column's values at ``local`` in a row group: each run of consecutive pages holding some
    of them is read once and decoded as one small file."""
    pages = _pages(handle, path, chunk, group, leaf)
    group_rows = layout.footer.row_groups[group].num_rows
    needed = sorted({bisect_right(pages.first_rows, row) - 1 for row in local})
    if len(needed) == len(pages.offsets) > 1:
        # Every page holds a row (many keys, a wide range): pyarrow reads the chunk itself, without
        # copying its pages into a small file first.
        name = layout.footer.schema[element].name.decode()
        whole = handle.file.read_row_group(group, columns=[name], use_threads=False).column(0)
        return [whole.take(pa.array(local, type=pa.int64())).combine_chunks()]
    runs: list[list[int]] = []
    for page in needed:
        if runs and runs[-1][-1] == page - 1:
            runs[-1].append(page)
        else:
            runs.append([page])
    pieces = []
    for run in runs:
        first, last = run[0], run[-1]
        start = pages.offsets[first]
        data = _read(handle, start, pages.offsets[last] + pages.sizes[last] - start)
        low = pages.first_rows[first]
        high = pages.first_rows[last + 1] if last + 1 < len(pages.first_rows) else group_rows
        encoded = [_dictionary_encoded(data, pages.offsets[p] - start) for p in run]
        values = None
        if all(encoded) and dictionary_pages.supported(chunk.meta_data.type, chunk.meta_data.codec):
            values = _decode_by_index(handle, path, layout, (group, leaf, element), chunk, pages, data, high - low)
        if values is None:
            dictionary = _dictionary_page(handle, chunk, pages) if any(encoded) else b""
            values = _decode(layout, group, leaf, element, dictionary, data, high - low)
        at = [row - low for row in local if low <= row < high]
        pieces.append(values.slice(at[0], 1) if len(at) == 1 else values.take(pa.array(at, type=pa.int64())))
    return pieces


def _decode_by_index(
    handle: ParquetHandle,
    path: str,
    layout: _Layout,
    place: tuple[int, int, int],
    chunk: ThriftObject,
    pages: _Pages,
    data: bytes,
    rows: int,
) -> pa.Array | None:
    """Dictionary-encoded pages as rows of the column chunk's kept dictionary (decoded on first use);
    None when pyarrow refuses the stand-in pages (then the pages are decoded as usual)."""
    group, leaf, element = place
    schema_element = layout.footer.schema[element]
    try:
        known = dictionary_pages.cached(path, group, leaf)
        if known is None:
            page, size = dictionary_pages.values_page(_dictionary_page(handle, chunk, pages))
            required = dictionary_pages.required(schema_element)
            known = _decode(layout, group, leaf, element, b"", page, size, required)
            dictionary_pages.keep(path, group, leaf, known)
        stand_in = dictionary_pages.index_dictionary(len(known), chunk.meta_data.codec)
        indexes = _decode(
            layout, group, leaf, element, stand_in, data, rows, dictionary_pages.as_indexes(schema_element)
        )
        return known.take(indexes)
    except (pa.ArrowException, OSError, IndexError, ValueError):
        return None


def _dictionary_encoded(data: bytes, at: int) -> bool:
    header = from_buffer(memoryview(data)[at:], "PageHeader")
    page = header.data_page_header or header.data_page_header_v2
    return page is not None and page.encoding in _DICTIONARY_ENCODINGS


def _dictionary_page(handle: ParquetHandle, chunk: ThriftObject, pages: _Pages) -> bytes:
    """The column chunk's dictionary page: the bytes before its first data page."""
    metadata = chunk.meta_data
    start = metadata.dictionary_page_offset
    if start is None or start >= pages.offsets[0]:  # some writers leave it out: the chunk's start
        start = min(metadata.data_page_offset, pages.offsets[0])
    if start >= pages.offsets[0]:
        raise _Unreadable  # dictionary-encoded pages, but no room for a dictionary before them
    return _read(handle, start, pages.offsets[0] - start)


#: Thrift field IDs (parquet.thrift) of what no longer describes the copied pages: statistics,
#: encoding stats, bloom filter, index page and size statistics of ColumnMetaData; page index
#: locations of ColumnChunk; offsets, ordinal and sort order of RowGroup. By ID, because
#: fastparquet's field names stop at older versions of the format.
_STALE_METADATA = (10, 12, 13, 14, 15, 16, 17)
_STALE_CHUNK = (4, 5, 6, 7)
_STALE_ROW_GROUP = (4, 5, 6, 7)


def _without(struct: ThriftObject, field_ids: Sequence[int]) -> ThriftObject:
    copy = struct.copy()
    for field_id in field_ids:
        copy.contents.pop(field_id, None)
    return copy


def _decode(
    layout: _Layout,
    group: int,
    leaf: int,
    element: int,
    dictionary: bytes,
    data: bytes,
    rows: int,
    schema_element: ThriftObject | None = None,
) -> pa.Array:
    """Decode pages with pyarrow, as the one column chunk of a one-row-group file (whose column is
    ``schema_element`` when given: a stand-in's type or nullability)."""
    footer = layout.footer
    original = footer.row_groups[group].columns[leaf]
    metadata = _without(original.meta_data, _STALE_METADATA)
    schema_element = schema_element or footer.schema[element]
    metadata.type = schema_element.type
    position = len(_MAGIC)
    metadata.dictionary_page_offset = position if dictionary else None
    metadata.data_page_offset = position + len(dictionary)
    size = len(dictionary) + len(data)
    metadata.total_compressed_size = size
    metadata.total_uncompressed_size = size
    metadata.num_values = rows  # a flat column has one value (or null) per row
    chunk = _without(original, _STALE_CHUNK)
    chunk.meta_data = metadata.contents  # fastparquet's setter takes a nested struct's contents
    chunk.file_offset = position
    row_group = _without(footer.row_groups[group], _STALE_ROW_GROUP)
    row_group.columns = [chunk]
    row_group.num_rows = rows
    row_group.total_byte_size = size
    root = footer.schema[0].copy()
    root.num_children = 1
    small = footer.copy()
    small.schema = [root, schema_element]
    small.num_rows = rows
    small.row_groups = [row_group]
    small.key_value_metadata = None
    if footer.column_orders:
        small.column_orders = [footer.column_orders[leaf]]
    serialized = bytes(small.to_bytes())
    content = b"".join([_MAGIC, dictionary, data, serialized, len(serialized).to_bytes(4, "little"), _MAGIC])
    table = pq.ParquetFile(pa.BufferReader(content)).read_row_group(0, use_threads=False)
    return table.column(0).combine_chunks()
