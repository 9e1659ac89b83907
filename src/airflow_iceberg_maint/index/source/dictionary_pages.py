"""Decoded dictionary pages kept per file, so that a fetch decodes its data pages only.

A string column's dictionary page holds up to 1 MB of values; decoding it on every fetch made
a row in a dictionary-encoded page cost several times one in a plain page (the p95 of a lookup).
Here a column chunk's dictionary is decoded once and kept (bounded by bytes), and a run of
dictionary-encoded pages is decoded by pyarrow against a stand-in dictionary whose values are
the numbers ``0..N-1`` (int32), which yields each row's dictionary index; the rows are then
taken from the kept dictionary. Both stand-ins are built from Parquet's own structures: the
dictionary page's payload is PLAIN-encoded values, which is also what a PLAIN data page of a
required column holds.
"""

from __future__ import annotations

from functools import lru_cache
from threading import Lock
from typing import cast

import pyarrow as pa
from cachetools import LRUCache
from fastparquet.cencoding import ThriftObject, from_buffer
from fastparquet.parquet_thrift import CompressionCodec, Encoding, FieldRepetitionType, PageType, Type

#: Bytes of decoded dictionaries kept per process.
MAX_CACHED_BYTES = 64 << 20
#: Parquet codecs whose bytes pyarrow's codecs produce (Hadoop-framed LZ4 is not one of them).
_CODECS = {
    CompressionCodec.UNCOMPRESSED: None,
    CompressionCodec.SNAPPY: "snappy",
    CompressionCodec.GZIP: "gzip",
    CompressionCodec.BROTLI: "brotli",
    CompressionCodec.ZSTD: "zstd",
    CompressionCodec.LZ4_RAW: "lz4_raw",
}
#: SchemaElement fields that describe the values' type (type_length, converted_type, scale,
#: precision, logicalType): dropped when the stand-in column holds int32 indexes.
_TYPE_FIELDS = (2, 6, 7, 8, 10)

_dictionaries: LRUCache[tuple[str, int, int], pa.Array] = LRUCache(
    maxsize=MAX_CACHED_BYTES, getsizeof=lambda values: max(values.nbytes, 1)
)
_lock = Lock()


def cached(path: str, group: int, leaf: int) -> pa.Array | None:
    """The decoded dictionary of a column chunk, if kept."""
    with _lock:
        return _dictionaries.get((path, group, leaf))


def keep(path: str, group: int, leaf: int, values: pa.Array) -> None:
    if values.nbytes <= MAX_CACHED_BYTES // 4:  # one huge dictionary must not evict all the others
        with _lock:
            _dictionaries[(path, group, leaf)] = values


def supported(column_type: int, codec: int) -> bool:
    """Whether a column chunk's dictionary is worth keeping and its pages can be re-labelled."""
    return column_type == Type.BYTE_ARRAY and codec in _CODECS


def values_page(dictionary: bytes) -> tuple[bytes, int]:
    """The dictionary page re-labelled as a PLAIN data page of its values (the payload unchanged),
    and the number of values."""
    header = from_buffer(memoryview(dictionary), "PageHeader")
    payload = dictionary[len(dictionary) - header.compressed_page_size :]
    data = ThriftObject.from_fields(
        "DataPageHeader",
        i32=True,
        num_values=header.dictionary_page_header.num_values,
        encoding=Encoding.PLAIN,
        definition_level_encoding=Encoding.RLE,
        repetition_level_encoding=Encoding.RLE,
    )
    page = ThriftObject.from_fields(
        "PageHeader",
        i32=True,  # every integer of a page header is an i32 (pyarrow refuses i64s)
        type=PageType.DATA_PAGE,
        uncompressed_page_size=header.uncompressed_page_size,
        compressed_page_size=header.compressed_page_size,
        data_page_header=data,
    )
    return bytes(page.to_bytes()) + payload, header.dictionary_page_header.num_values


def required(element: ThriftObject) -> ThriftObject:
    """The schema element of the dictionary's values: the same type, never null."""
    copy = element.copy()
    copy.repetition_type = FieldRepetitionType.REQUIRED
    return copy


def as_indexes(element: ThriftObject) -> ThriftObject:
    """The schema element of a stand-in column of int32 dictionary indexes (same name and nullability)."""
    copy = element.copy()
    for field_id in _TYPE_FIELDS:
        copy.contents.pop(field_id, None)
    copy.type = Type.INT32
    return copy


@lru_cache(maxsize=64)
def index_dictionary(size: int, codec: int) -> bytes:
    """A dictionary page of the int32 values ``0..size-1``, compressed with the chunk's codec."""
    payload = pa.array(range(size), type=pa.int32()).buffers()[1].to_pybytes()[: 4 * size]
    name = _CODECS[codec]
    compressed = payload if name is None else pa.compress(payload, codec=name, asbytes=True)
    header = ThriftObject.from_fields(
        "PageHeader",
        i32=True,
        type=PageType.DICTIONARY_PAGE,
        uncompressed_page_size=len(payload),
        compressed_page_size=len(compressed),
        dictionary_page_header=ThriftObject.from_fields(
            "DictionaryPageHeader", i32=True, num_values=size, encoding=Encoding.PLAIN
        ),
    )
    return bytes(header.to_bytes()) + cast(bytes, compressed)
