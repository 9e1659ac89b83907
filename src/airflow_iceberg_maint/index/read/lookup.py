"""Point lookups through an index, exact for any snapshot (S5).

1. The probe values are turned into ordering keys with the index's own expressions.
2. The tracking file's ``group_max_value`` keys (inclusive upper bounds, in index order) are
   binary-searched for the first region that can hold the key; following regions are read too
   while the previous one ends exactly on the key (a spanning hot key) and their bounds admit it.
3. In a region, only the row groups whose statistics admit the probe are read, and filtered.
4. Table rows are fetched by ``_file`` and ``_pos`` (only the row groups holding them).

Which extract and which data files a lookup reads, and how it is reconciled with a snapshot the
extract was not built for, is ``plan``; the key values are ``keys``; the fetching is ``fetch``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.index.metadata.model import IndexMetadata
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.index.read.fetch import fetch_rows, stored_ids
from airflow_iceberg_maint.index.read.key_scan import KeyFilter, KeyRange, Probe, scan_files
from airflow_iceberg_maint.index.read.keys import checked_probes, key_columns
from airflow_iceberg_maint.index.read.plan import ReadPlan, choose_plan, current_metadata
from airflow_iceberg_maint.index.read.regions import arrow_schema, probe_entries, range_entries, usable_tracking
from airflow_iceberg_maint.index.source.live_rows import plan_schema
from airflow_iceberg_maint.index.source.snapshot_files import resolve_snapshot


@dataclass
class LookupResult:
    index: str
    snapshot_id: int | None
    rows: pa.Table
    mode: str  # "index", "reconciled" or "scan"
    extract_snapshot_id: int | None = None
    region_files_read: int = 0
    reconciled_files: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "snapshot_id": self.snapshot_id,
            "rows": self.rows.to_pylist(),
            "region_files_read": self.region_files_read,
            "reconciled_files": self.reconciled_files,
            "mode": self.mode,
            "extract_snapshot_id": self.extract_snapshot_id,
        }


@dataclass
class Located:
    """Where a query's rows are, found without reading a data file.

    ``entries`` (``_file``, ``_pos``, then copies of the ``stored`` output columns) are the index
    hits; ``plan.rescan`` the data files to scan with the filter instead (the index's lag). With no
    usable extract (``mode`` ``scan``) every data file of the snapshot is a scan candidate.
    """

    name: str
    snapshot_id: int | None
    mode: str
    output: Schema
    table_schema: Schema
    table_names: list[str]
    plan: ReadPlan | None = None
    entries: pa.Table | None = None
    stored: list[int] = field(default_factory=list)
    regions_read: int = 0


def lookup(
    table: Table,
    name: str,
    probes: Sequence[Probe],
    snapshot_id: int | None = None,
    columns: Sequence[str] | None = None,
    store: IndexStore | None = None,
) -> LookupResult:
    """Rows of the snapshot (default: current) whose key columns equal one of the probes."""
    metadata = current_metadata(store or IndexStore(table), name)
    wanted = checked_probes(metadata, name, probes)
    return read_located(table, locate(table, name, metadata, wanted, snapshot_id, columns), wanted)


def locate(
    table: Table,
    name: str,
    metadata: IndexMetadata,
    wanted: KeyFilter,
    snapshot_id: int | None = None,
    columns: Sequence[str] | None = None,
    with_keys: bool = False,
) -> Located:
    """The index hits and the files to scan for ``wanted`` (probes, or a range on the first key column).

    ``with_keys`` adds the key columns to ``columns`` (a caller sorting by the key needs them).
    """
    snapshot = resolve_snapshot(table, snapshot_id)
    keys = key_columns(metadata)
    if snapshot is None:
        return Located(name, None, "scan", _output_schema(table.schema(), columns), table.schema(), [])
    plan = choose_plan(table, metadata, snapshot)
    # Like a pyiceberg scan: the current schema for the current snapshot, else the snapshot's own.
    table_schema = table.schema() if snapshot_id is None else plan_schema(table, plan.target)
    names = [_table_name(table_schema, metadata.source_id_of(k.field_id)) for k in keys]
    if with_keys and columns:
        columns = [*columns, *(n for n in names if n not in columns)]
    output = _output_schema(table_schema, columns)
    tracking = usable_tracking(table.io, metadata, plan.extract) if plan.extract else None
    if plan.extract is None or tracking is None:
        return Located(name, snapshot.snapshot_id, "scan", output, table_schema, names, ReadPlan(plan.target))
    # At the extract's own snapshot its entries are the live rows: columns it stores need no fetch.
    stored = stored_ids(metadata, tracking, output) if plan.source is None else {}
    if isinstance(wanted, KeyRange):
        entries, regions = range_entries(table.io, metadata, tracking, keys[0], wanted, list(stored.values()))
    else:
        entries, regions = probe_entries(table.io, metadata, tracking, keys, wanted, list(stored.values()))
    mode = "index" if plan.source is None else "reconciled"
    return Located(name, snapshot.snapshot_id, mode, output, table_schema, names, plan, entries, list(stored), regions)


def read_located(table: Table, located: Located, wanted: KeyFilter) -> LookupResult:
    """The rows ``located`` points at: index hits fetched by position (batched per data file), lag scanned."""
    plan, output = located.plan, located.output
    if plan is None:
        return LookupResult(located.name, None, _concat([], output), "scan")
    parts = [] if located.entries is None else fetch_rows(table, plan, located.entries, output, located.stored)
    scan_paths = plan.target.data_files if located.mode == "scan" else plan.rescan
    scanned_parts, scanned = (
        scan_files(table, plan.target, scan_paths, located.table_names, wanted, output, located.table_schema)
        if scan_paths
        else ([], 0)
    )
    return LookupResult(
        located.name,
        located.snapshot_id,
        _concat(parts + scanned_parts, output),
        located.mode,
        plan.extract.source_table_snapshot_id if plan.extract else None,
        located.regions_read,
        scanned,
    )


def _table_name(schema: Schema, source_id: int) -> str:
    name = schema.find_column_name(source_id)
    if name is None:
        raise InvalidInputError(f"index key column {source_id}: not in the table schema (dropped)")
    return name


def _output_schema(schema: Schema, columns: Sequence[str] | None) -> Schema:
    if not columns:
        return schema
    by_name = {f.name: f for f in schema.fields}
    unknown = [c for c in columns if c not in by_name]
    if unknown:
        raise InvalidInputError(f"--columns: the table has no column(s) {', '.join(map(repr, unknown))}")
    repeated = sorted({c for c in columns if columns.count(c) > 1})
    if repeated:
        raise InvalidInputError(f"--columns: column(s) {', '.join(map(repr, repeated))} given more than once")
    return Schema(*[by_name[c] for c in columns], schema_id=schema.schema_id)


def _concat(parts: list[pa.Table], schema: Schema) -> pa.Table:
    """The parts (columns in ``schema`` order) as one table of pyiceberg's Arrow types for ``schema``,
    whichever way each part was read."""
    arrow = arrow_schema(tuple(schema.fields))
    # from_arrays casts each column to the schema's type (string to large_string, ...).
    conformed = [
        part if part.schema == arrow else pa.Table.from_arrays(part.columns, schema=arrow)
        for part in parts
        if part.num_rows
    ]
    if len(conformed) == 1:
        return conformed[0]
    return pa.concat_tables(conformed) if conformed else arrow.empty_table()
