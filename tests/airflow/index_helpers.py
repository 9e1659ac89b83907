"""Helpers for the index maintenance tests: the demo table of ``dags/iceberg_indexes.yaml`` and exact lookups."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.index.read.lookup import lookup

TABLE = "demo.events"
KINDS = ("click", "view", "purchase", "signup")
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("kind", pa.string())])


def rows(start: int, count: int) -> pa.Table:
    """Rows as the demo writer DAG appends them: ids from ``start``, kinds in turn."""
    ids = list(range(start, start + count))
    return pa.table({"id": ids, "kind": [KINDS[i % len(KINDS)] for i in ids]}, schema=SCHEMA)


def events_table(catalog: Catalog, count: int = 40) -> Table:
    catalog.create_namespace_if_not_exists("demo")
    table = catalog.create_table(TABLE, SCHEMA)
    table.append(rows(0, count))
    return table


def append(catalog: Catalog, count: int) -> Table:
    """Append ``count`` rows continuing the ids; returns the reloaded table."""
    table = catalog.load_table(TABLE)
    start = int(table.current_snapshot().summary["total-records"])
    table.append(rows(start, count))
    return catalog.load_table(TABLE)


def extract_snapshots(catalog: Catalog, index: str) -> list[int]:
    metadata, _, _ = IndexStore(catalog.load_table(TABLE)).load(index)
    return [e.source_table_snapshot_id for e in metadata.extracts]


def extract_ids(catalog: Catalog, index: str) -> list[int]:
    metadata, _, _ = IndexStore(catalog.load_table(TABLE)).load(index)
    return [e.extract_id for e in metadata.extracts]


def assert_lookups_exact(catalog: Catalog, index: str, column: str, values: list) -> None:
    """Through the index (no fallback scan), each value finds exactly the rows a table scan finds."""
    table = catalog.load_table(TABLE)
    everything = table.scan().to_arrow()
    for value in values:
        result = lookup(table, index, [(value,)])
        assert result.mode == "index", (index, value, result.mode)
        expected = everything.filter(pc.equal(everything[column], value)).sort_by("id").to_pylist()
        assert result.rows.sort_by("id").to_pylist() == expected, (index, value)
