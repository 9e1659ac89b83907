"""Equality probes on key columns, and the plain scan of data files that index lookups fall back on.

A probe is one tuple of values for the key columns; null matches null (``--is-null``), and float
values compare with IEEE equality (``-0.0 = 0.0``). The scan reads live rows with the index's
own delete handling (pyiceberg 0.12 cannot scan equality deletes) and prunes data files with
their column bounds first.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import AlwaysFalse, And, BooleanExpression, EqualTo, IsNull, Or
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.index.live_rows import live_rows_of_file
from airflow_iceberg_maint.index.snapshot_files import SnapshotFiles
from airflow_iceberg_maint.pyiceberg_compat import bounds_may_match

Probe = tuple[Any, ...]


def check_probe(probe: Probe) -> Probe:
    if any(isinstance(v, float) and math.isnan(v) for v in probe):
        raise InvalidInputError("lookup value NaN: NaN never equals anything, so it cannot be looked up")
    return probe


def probe_mask(rows: pa.Table, names: Sequence[str], probes: Iterable[Probe]) -> pa.Array:
    """Rows whose ``names`` columns equal one of the probes (nulls equal nulls)."""
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


def _constant(length: int, value: bool) -> pa.Array:
    return pc.fill_null(pa.nulls(length, type=pa.bool_()), value)


def _file_filter(names: Sequence[str], probes: Sequence[Probe]) -> BooleanExpression:
    expression: BooleanExpression = AlwaysFalse()
    for probe in probes:
        # pyiceberg's constructors take (term, literal); its pydantic field declarations say otherwise.
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
    plan: SnapshotFiles, paths: Iterable[str], names: Sequence[str], probes: Sequence[Probe], schema: Schema
) -> list[str]:
    """The data files whose column bounds may hold a probe (all of them when bounds can't be used)."""
    paths = sorted(paths)
    try:
        may_match = bounds_may_match(schema, _file_filter(names, probes))
    except (ValueError, TypeError):
        return paths  # a value pyiceberg cannot turn into a literal: scan without pruning
    return [p for p in paths if may_match(plan.data_files[p].data_file)]


def scan_files(
    table: Table,
    plan: SnapshotFiles,
    paths: Iterable[str],
    names: Sequence[str],
    probes: Sequence[Probe],
    schema: Schema,
    read_schema: Schema,
) -> tuple[list[pa.Table], int]:
    """Live rows of the files matching a probe, projected on ``schema``; also the number of files read.

    ``names`` are key columns of ``read_schema``, the schema the rows are read with.
    """
    wanted = {f.field_id for f in schema.fields} | {read_schema.find_field(n).field_id for n in names}
    projection = Schema(*[f for f in read_schema.fields if f.field_id in wanted], schema_id=read_schema.schema_id)
    parts = []
    files = prune_files(plan, paths, names, probes, read_schema)
    for path in files:
        rows = live_rows_of_file(table, plan, path, projection)
        rows = rows.filter(probe_mask(rows, names, probes))
        parts.append(rows.select([f.name for f in schema.fields]))
    return parts, len(files)
