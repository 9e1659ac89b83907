"""The index order: ordering-key tuples compared field by field, nulls first, floats in total order.

Floats are compared through their IEEE bits mapped to signed integers so that
``-NaN < -Infinity < ... < -0.0 < 0.0 < ... < Infinity < NaN`` (the table spec's sort order):
-0.0 and 0.0 are distinct keys. Strings compare by UTF-8 bytes (Unicode code point order).
The same order is used on Arrow columns (sorting, cutting regions) and on Python tuples
(binary search over ``group_max_value`` keys).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

_INT64_MAGNITUDE = 0x7FFF_FFFF_FFFF_FFFF
_INT32_MAGNITUDE = 0x7FFF_FFFF


def sortable(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A column whose ascending Arrow order is the index order (floats become total-order ints)."""
    if pa.types.is_floating(column.type):
        width = pa.int64() if column.type.bit_width == 64 else pa.int32()
        magnitude = _INT64_MAGNITUDE if column.type.bit_width == 64 else _INT32_MAGNITUDE
        if column.type.bit_width == 16:
            column = pc.cast(column, pa.float32())
        bits = _view(column, width)
        # Negative floats sort in reverse bit order: flip every bit but the sign.
        flip = pc.if_else(pc.less(bits, pa.scalar(0, width)), pa.scalar(magnitude, width), pa.scalar(0, width))
        return pc.bit_wise_xor(bits, flip)
    if pa.types.is_dictionary(column.type):
        return pc.cast(column, column.type.value_type)
    return column


def _view(column: pa.Array | pa.ChunkedArray, width: pa.DataType) -> pa.Array | pa.ChunkedArray:
    if isinstance(column, pa.ChunkedArray):
        return pa.chunked_array([chunk.view(width) for chunk in column.chunks], type=width)
    return column.view(width)


def sort_indices(keys: Sequence[pa.Array | pa.ChunkedArray]) -> pa.Array:
    """Stable indices that put rows in index order of the given key columns."""
    if len(keys) == 1:
        return pc.array_sort_indices(sortable(keys[0]), order="ascending", null_placement="at_start")
    table = pa.table({f"k{i}": sortable(k) for i, k in enumerate(keys)})
    return pc.sort_indices(table, sort_keys=[(f"k{i}", "ascending", "at_start") for i in range(len(keys))])


def key_changes(keys: Sequence[pa.Array]) -> pa.Array:
    """``changes[i]`` is true where row ``i``'s key differs from row ``i - 1`` (row 0 is true)."""
    length = len(keys[0])
    if length == 0:
        return pa.array([], type=pa.bool_())
    changed = pa.array([False] * (length - 1), type=pa.bool_())
    for key in keys:
        column = sortable(key)
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        current, previous = column.slice(1), column.slice(0, length - 1)
        same = pc.or_(
            pc.fill_null(pc.equal(current, previous), False),
            pc.and_(pc.is_null(current), pc.is_null(previous)),
        )
        changed = pc.or_(changed, pc.invert(same))
    return pa.concat_arrays([pa.array([True]), changed])


def _float_rank(value: float, bit_width: int) -> int:
    bits: int
    if bit_width == 64:
        (bits,) = struct.unpack(">q", struct.pack(">d", value))
        return bits ^ _INT64_MAGNITUDE if bits < 0 else bits
    (bits,) = struct.unpack(">i", struct.pack(">f", value))
    return bits ^ _INT32_MAGNITUDE if bits < 0 else bits


def comparable(key: Sequence[Any], types: Sequence[pa.DataType]) -> tuple[tuple[Any, ...], ...]:
    """A Python tuple ordering like the index order: ``(0,)`` for null, ``(1, value)`` otherwise."""
    parts: list[tuple[Any, ...]] = []
    for value, arrow_type in zip(key, types, strict=True):
        if value is None:
            parts.append((0,))
        elif pa.types.is_floating(arrow_type):
            parts.append((1, _float_rank(float(value), 64 if arrow_type.bit_width == 64 else 32)))
        else:
            parts.append((1, value))
    return tuple(parts)
