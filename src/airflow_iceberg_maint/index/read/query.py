"""Index queries for engines and users: many keys at once, or a range, answered as Arrow.

``lookup_keys`` and ``lookup_range`` return the matching rows of a snapshot, in index order;
``plan_keys`` and ``plan_range`` return, without reading a data file, where those rows are: the
data files and row positions the index points at, the delete files added since the extract that
still apply to them, and the data files the index does not cover (its lag), to be scanned with
the same filter. Both answer exactly as ``index lookup --eq`` does (docs/safety.md S5).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import pyarrow as pa
from pyiceberg.expressions import BooleanExpression
from pyiceberg.table import Table

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.index.metadata.expressions import Apply
from airflow_iceberg_maint.index.metadata.model import IndexMetadata
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.index.read.fetch import by_data_file
from airflow_iceberg_maint.index.read.key_scan import KeyFilter, KeyRange, Probe, file_filter, prune_files
from airflow_iceberg_maint.index.read.keys import checked_probes, key_columns
from airflow_iceberg_maint.index.read.lookup import Located, LookupResult, locate, read_located
from airflow_iceberg_maint.index.read.plan import current_metadata
from airflow_iceberg_maint.sorting.ordering import sort_indices

#: Keys: one value per row for an index on one column, or a table with a column per key column.
Keys: TypeAlias = pa.Array | pa.ChunkedArray | pa.Table


def lookup_keys(
    table: Table, index: str, keys: Keys, snapshot_id: int | None = None, columns: Sequence[str] | None = None
) -> pa.Table:
    """The rows of the snapshot (default: current) whose key equals one of ``keys``, each once, in index order."""
    return query_keys(table, index, keys, snapshot_id, columns).rows


def lookup_range(
    table: Table,
    index: str,
    low: Any = None,
    high: Any = None,
    snapshot_id: int | None = None,
    columns: Sequence[str] | None = None,
) -> pa.Table:
    """The rows whose first key column lies in ``[low, high]`` (inclusive; None: open), in index order."""
    return query_range(table, index, low, high, snapshot_id, columns).rows


def query_keys(
    table: Table,
    index: str,
    keys: Keys | Sequence[Probe],
    snapshot_id: int | None = None,
    columns: Sequence[str] | None = None,
    store: IndexStore | None = None,
) -> LookupResult:
    """``lookup_keys`` with the lookup's accounting (mode, region files read, files scanned)."""
    metadata = current_metadata(store or IndexStore(table), index)
    probes = checked_probes(metadata, index, _probes(metadata, index, keys))
    return _ordered(table, index, metadata, probes, snapshot_id, columns)


def query_range(
    table: Table,
    index: str,
    low: Any = None,
    high: Any = None,
    snapshot_id: int | None = None,
    columns: Sequence[str] | None = None,
    store: IndexStore | None = None,
) -> LookupResult:
    """``lookup_range`` with the lookup's accounting."""
    metadata = current_metadata(store or IndexStore(table), index)
    return _ordered(table, index, metadata, checked_range(metadata, index, low, high), snapshot_id, columns)


@dataclass(frozen=True)
class PlannedFile:
    """A data file holding matches at ``positions`` (live at the extract's snapshot, ascending).

    ``delete_files`` were added since the extract's snapshot and may remove some of those rows:
    apply them (position deletes, deletion vectors, equality deletes) before using the rows.
    """

    path: str
    positions: list[int]
    delete_files: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class QueryPlan:
    """Where a query's rows are: ``files`` by position, and ``scan_files`` to scan with ``filter``
    (their live rows, after their deletes) because the index does not cover them."""

    snapshot_id: int | None
    mode: str
    files: list[PlannedFile]
    scan_files: list[str]
    filter: BooleanExpression
    region_files_read: int = 0


def plan_keys(table: Table, index: str, keys: Keys, snapshot_id: int | None = None) -> QueryPlan:
    """Where the rows of ``keys`` are, found without reading a data file."""
    metadata = current_metadata(IndexStore(table), index)
    probes = checked_probes(metadata, index, _probes(metadata, index, keys))
    return _plan(table, locate(table, index, metadata, probes, snapshot_id, []), probes)


def plan_range(
    table: Table, index: str, low: Any = None, high: Any = None, snapshot_id: int | None = None
) -> QueryPlan:
    """Where the rows of the range are, found without reading a data file."""
    metadata = current_metadata(IndexStore(table), index)
    wanted = checked_range(metadata, index, low, high)
    return _plan(table, locate(table, index, metadata, wanted, snapshot_id, []), wanted)


def checked_range(metadata: IndexMetadata, index: str, low: Any, high: Any) -> KeyRange:
    """The range, refused when both bounds are missing or the first ordering expression does not preserve order."""
    if low is None and high is None:
        raise InvalidInputError(f"--from/--to: index {index!r}: give --from, --to or both")
    if any(isinstance(v, float) and math.isnan(v) for v in (low, high)):
        raise InvalidInputError("--from/--to: NaN is not a bound (it is in no range)")
    schema = metadata.current_schema()
    first = metadata.ordering_fields(schema)[0].expression
    text = first.to_text(schema)
    if isinstance(first, Apply) and not first.transform.preserves_order:
        raise InvalidInputError(
            f"--from/--to: index {index!r} is ordered by {text}, which does not preserve order: a range cannot use it"
        )
    if first.source_ids != (key_columns(metadata)[0].field_id,):
        raise InvalidInputError(f"--from/--to: index {index!r} is ordered first by {text}, not by a table column")
    return KeyRange(low, high)


def _probes(metadata: IndexMetadata, index: str, keys: Keys | Sequence[Probe]) -> list[Probe]:
    """Keys as probes: an array for one key column, a table whose columns are named after the key columns."""
    if isinstance(keys, pa.Table):
        names = [k.name for k in key_columns(metadata)]
        if sorted(keys.column_names) != sorted(names):
            raise InvalidInputError(
                f"keys: index {index!r} needs columns ({', '.join(names)}), got ({', '.join(keys.column_names)})"
            )
        return list(zip(*(keys.column(n).to_pylist() for n in names), strict=True))
    if isinstance(keys, pa.Array | pa.ChunkedArray):
        return [(v,) for v in keys.to_pylist()]
    return [tuple(p) for p in keys]


def _ordered(
    table: Table,
    index: str,
    metadata: IndexMetadata,
    wanted: KeyFilter,
    snapshot_id: int | None,
    columns: Sequence[str] | None,
) -> LookupResult:
    """The query's rows sorted by the ordering key, read with the key columns even when not asked for."""
    located = locate(table, index, metadata, wanted, snapshot_id, columns, with_keys=True)
    result = read_located(table, located, wanted)
    if result.rows.num_rows:
        result.rows = result.rows.take(_index_order(metadata, result.rows, located.table_names))
    if columns:
        result.rows = result.rows.select(list(columns))
    return result


def _index_order(metadata: IndexMetadata, rows: pa.Table, names: Sequence[str]) -> pa.Array:
    """Row indices sorting ``rows`` by the ordering-key fields computed from the key columns ``names``."""
    schema = metadata.current_schema()
    keys = key_columns(metadata)
    batch = pa.table([rows.column(n) for n in names], names=[k.name for k in keys])
    key_ids = {k.field_id for k in keys}
    fields = []
    for ordering in metadata.ordering_fields(schema):
        if not set(ordering.expression.source_ids) <= key_ids:
            break  # e.g. ordered next by _file or _pos: the rows are already grouped by key
        fields.append(ordering.expression.evaluate(batch, schema))
    return sort_indices(fields) if fields else pa.array(range(rows.num_rows), type=pa.int64())


def _plan(table: Table, located: Located, wanted: KeyFilter) -> QueryPlan:
    plan = located.plan
    filter_ = file_filter(located.table_names, wanted)
    if plan is None:
        return QueryPlan(located.snapshot_id, located.mode, [], [], filter_)
    scan = plan.target.data_files if located.mode == "scan" else plan.rescan
    scan_files = prune_files(plan.target, scan, located.table_names, wanted, located.table_schema) if scan else []
    files = []
    for path, (positions, _) in sorted(by_data_file(located.entries).items() if located.entries is not None else []):
        if path not in plan.target.data_files or path in plan.rescan:
            continue  # removed since the extract, or scanned instead
        before = {d.file_path for d in plan.source.deletes_for(path)} if plan.source else set()
        added = sorted(d.file_path for d in plan.target.deletes_for(path) if d.file_path not in before)
        files.append(PlannedFile(path, positions, added if plan.source else []))
    return QueryPlan(located.snapshot_id, located.mode, files, scan_files, filter_, located.regions_read)
