"""The row order of the sort and z-order strategies: indices over a file group's key columns.

Sort: the columns given (``col``, ``col desc``, ``col asc nulls last``...), else the table's sort
order (identity fields only). Z-order: each column's values ranked (dense) and scaled
to the same number of bits (nulls last), whose bits are then interleaved into one unsigned 64-bit key: rows
close in every column get close keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table import Table
from pyiceberg.table.sorting import NullOrder, SortDirection
from pyiceberg.transforms import IdentityTransform

from airflow_iceberg_maint.errors import InvalidInputError


@dataclass(frozen=True)
class SortKey:
    column: str
    descending: bool = False
    nulls_last: bool = False


def parse_sort(columns: Sequence[str]) -> tuple[SortKey, ...]:
    """``["a", "b desc", "c asc nulls last"]`` as sort keys."""
    keys = []
    for text in columns:
        words = text.split()
        lowered = [w.lower() for w in words[1:]]
        if not words or lowered not in ([], ["asc"], ["desc"], *_null_words()):
            raise InvalidInputError(f"sort {text!r}: expected 'column [asc|desc] [nulls first|nulls last]'")
        keys.append(SortKey(words[0], "desc" in lowered, lowered[-2:] == ["nulls", "last"]))
    return tuple(keys)


def _null_words() -> list[list[str]]:
    return [[*d, "nulls", n] for d in ([], ["asc"], ["desc"]) for n in ("first", "last")]


def table_sort_keys(table: Table) -> tuple[SortKey, ...]:
    """The table's sort order as sort keys; a transform other than identity is refused."""
    order = table.sort_order()
    if order.is_unsorted:
        raise InvalidInputError("strategy sort: the table has no sort order; give the columns (--sort a,b)")
    schema = table.schema()
    keys = []
    for field in order.fields:
        if not isinstance(field.transform, IdentityTransform):
            raise InvalidInputError(
                f"strategy sort: the table's sort order uses {field.transform}; give --sort columns"
            )
        keys.append(
            SortKey(
                schema.find_column_name(field.source_id) or str(field.source_id),
                field.direction == SortDirection.DESC,
                field.null_order == NullOrder.NULLS_LAST,
            )
        )
    return tuple(keys)


def check_columns(table: Table, columns: Sequence[str], what: str) -> None:
    names = set(table.schema().column_names)
    for column in columns:
        if column not in names:
            raise InvalidInputError(f"{what} {column!r}: the table has no such column")


def sort_order(rows: pa.Table, keys: Sequence[SortKey]) -> pa.Array:
    """Stable indices that put ``rows`` (the key columns suffice) in the order of ``keys``."""
    order = [
        (k.column, "descending" if k.descending else "ascending", "at_end" if k.nulls_last else "at_start")
        for k in keys
    ]
    return pc.sort_indices(rows, sort_keys=order)


def _scaled_rank(column: pa.ChunkedArray, bits: int) -> pa.Array:
    ranks = pc.rank(column, sort_keys="ascending", tiebreaker="dense")  # nulls rank last
    top = pc.max(ranks).as_py() or 1
    if top <= 1:
        return pc.cast(pc.subtract(ranks, 1), pa.uint64())
    scale = ((1 << bits) - 1) / (top - 1)
    return pc.cast(pc.floor(pc.multiply(pc.subtract(ranks, 1).cast(pa.float64()), scale)), pa.uint64())


def zorder_order(rows: pa.Table, columns: Sequence[str]) -> pa.Array:
    """Stable indices that put ``rows`` in z-order of ``columns``. The ranks are over every row given:
    ``rows`` is the whole group (its key columns only, see ``rewriter``)."""
    if rows.num_rows <= 1:
        return pa.array(range(rows.num_rows), pa.uint64())
    bits = min(21, 64 // len(columns))
    values = [_scaled_rank(rows.column(c), bits) for c in columns]
    key = pc.fill_null(pa.nulls(rows.num_rows, pa.uint64()), 0)
    one = pa.scalar(1, pa.uint64())
    for bit in range(bits):
        for index, value in enumerate(values):
            part = pc.bit_wise_and(pc.shift_right(value, pa.scalar(bit, pa.uint64())), one)
            shift = pa.scalar(bit * len(values) + index, pa.uint64())
            key = pc.bit_wise_or(key, pc.shift_left(part, shift))
    return pc.sort_indices(key)
