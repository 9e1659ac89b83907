"""Equality probes and ranges on key columns, and the plain scan of data files that index lookups fall back on.

A probe is one tuple of values for the key columns; null matches null (``--is-null``), and float
values compare with IEEE equality (``-0.0 = 0.0``). The scan reads live rows with the index's
own delete handling (pyiceberg 0.12 cannot scan equality deletes) and prunes data files with
their column bounds first.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    BooleanExpression,
    EqualTo,
    GreaterThanOrEqual,
    In,
    IsNull,
    LessThanOrEqual,
    Or,
)
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.index.source.live_rows import live_rows_of_file
from airflow_iceberg_maint.index.source.snapshot_files import SnapshotFiles
from airflow_iceberg_maint.pyiceberg_compat import bounds_may_match

Probe = tuple[Any, ...]


@dataclass(frozen=True)
class KeyRange:
    """An inclusive range of the first key column's values; a None bound is open. Nulls are in no range."""

    low: Any
    high: Any


#: What a scan keeps: rows equal to one of the probes, or rows in a range.
KeyFilter = Sequence[Probe] | KeyRange


def check_probe(probe: Probe) -> Probe:
    if any(isinstance(v, float) and math.isnan(v) for v in probe):
        raise InvalidInputError("lookup value NaN: NaN never equals anything, so it cannot be looked up")
    return probe


def probe_mask(rows: pa.Table, names: Sequence[str], probes: Iterable[Probe]) -> pa.Array:
    """Rows whose ``names`` columns equal one of the probes (nulls equal nulls)."""
    probes = list(probes)
    if len(names) == 1 and len(probes) > 1 and not pa.types.is_floating(_plain(rows.column(names[0])).type):
        return _in_mask(_plain(rows.column(names[0])), [p[0] for p in probes])
    mask = None
    for probe in probes:
        match = None
        for name, value in zip(names, probe, strict=True):
            column = rows.column(name)
            if pa.types.is_dictionary(column.type):
                column = pc.cast(column, column.type.value_type)
            if value is None:
                same = pc.is_null(column)
            else:
                same = pc.fill_null(pc.equal(column, pa.scalar(value, type=column.type)), False)
            match = same if match is None else pc.and_(match, same)
        match = _constant(rows.num_rows, True) if match is None else match
        mask = match if mask is None else pc.or_(mask, match)
    return _constant(rows.num_rows, False) if mask is None else mask


def _plain(column: pa.ChunkedArray) -> pa.ChunkedArray:
    return pc.cast(column, column.type.value_type) if pa.types.is_dictionary(column.type) else column


def _in_mask(column: pa.ChunkedArray, values: Sequence[Any]) -> pa.Array:
    """One membership test for many single-column probes (floats excluded: ``-0.0`` hashes apart from ``0.0``)."""
    present = [v for v in values if v is not None]
    found = pc.is_in(column, value_set=pa.array(present, type=column.type)) if present else None
    found = _constant(len(column), False) if found is None else pc.fill_null(found, False)
    return pc.or_(found, pc.is_null(column)) if len(present) < len(values) else found


def range_mask(rows: pa.Table, name: str, low: Any, high: Any) -> pa.Array:
    """Rows whose ``name`` column lies in the inclusive range ``[low, high]`` (None: open; nulls never)."""
    column = _plain(rows.column(name))
    mask = pc.is_valid(column)
    if low is not None:
        mask = pc.and_(mask, pc.fill_null(pc.greater_equal(column, pa.scalar(low, type=column.type)), False))
    if high is not None:
        mask = pc.and_(mask, pc.fill_null(pc.less_equal(column, pa.scalar(high, type=column.type)), False))
    return mask


def keep_mask(rows: pa.Table, names: Sequence[str], keys: KeyFilter) -> pa.Array:
    """Rows a scan keeps for ``keys`` (a range is on the first of ``names``)."""
    if isinstance(keys, KeyRange):
        return range_mask(rows, names[0], keys.low, keys.high)
    return probe_mask(rows, names, keys)


def _constant(length: int, value: bool) -> pa.Array:
    return pc.fill_null(pa.nulls(length, type=pa.bool_()), value)


def file_filter(names: Sequence[str], keys: KeyFilter) -> BooleanExpression:
    """The keys as a pyiceberg filter, for pruning data files by their column bounds."""
    # pyiceberg's constructors take (term, literal); its pydantic field declarations say otherwise.
    if isinstance(keys, KeyRange):
        expression: BooleanExpression = AlwaysTrue()
        if keys.low is not None:
            expression = And(expression, GreaterThanOrEqual(names[0], keys.low))  # type: ignore[call-arg, arg-type]
        if keys.high is not None:
            expression = And(expression, LessThanOrEqual(names[0], keys.high))  # type: ignore[call-arg, arg-type]
        return expression
    probes = keys
    if len(names) == 1 and len(probes) > 1:  # one In, not thousands of nested Ors
        present = [p[0] for p in probes if p[0] is not None]
        expression = In(names[0], present) if present else AlwaysFalse()  # type: ignore[call-arg, arg-type]
        nulls = IsNull(names[0])  # type: ignore[call-arg, arg-type]
        return Or(expression, nulls) if len(present) < len(probes) else expression
    expression = AlwaysFalse()
    for probe in probes:
        terms: list[BooleanExpression] = [
            IsNull(n) if v is None else EqualTo(n, v)  # type: ignore[call-arg, arg-type]
            for n, v in zip(names, probe, strict=True)
        ]
        conjunction = terms[0]
        for term in terms[1:]:
            conjunction = And(conjunction, term)
        expression = Or(expression, conjunction)
    return expression


def prune_files(
    plan: SnapshotFiles, paths: Iterable[str], names: Sequence[str], keys: KeyFilter, schema: Schema
) -> list[str]:
    """The data files whose column bounds may hold a key (all of them when bounds can't be used)."""
    paths = sorted(paths)
    try:
        may_match = bounds_may_match(schema, file_filter(names, keys))
    except (ValueError, TypeError):
        return paths  # a value pyiceberg cannot turn into a literal: scan without pruning
    return [p for p in paths if may_match(plan.data_files[p].data_file)]


def scan_files(
    table: Table,
    plan: SnapshotFiles,
    paths: Iterable[str],
    names: Sequence[str],
    keys: KeyFilter,
    schema: Schema,
    read_schema: Schema,
) -> tuple[list[pa.Table], int]:
    """Live rows of the files matching the keys (probes or a range), projected on ``schema``; also the
    number of files read.

    ``names`` are key columns of ``read_schema``, the schema the rows are read with.
    """
    wanted = {f.field_id for f in schema.fields} | {read_schema.find_field(n).field_id for n in names}
    projection = Schema(*[f for f in read_schema.fields if f.field_id in wanted], schema_id=read_schema.schema_id)
    parts = []
    files = prune_files(plan, paths, names, keys, read_schema)
    for path in files:
        rows = live_rows_of_file(table, plan, path, projection)
        rows = rows.filter(keep_mask(rows, names, keys))
        parts.append(rows.select([f.name for f in schema.fields]))
    return parts, len(files)
