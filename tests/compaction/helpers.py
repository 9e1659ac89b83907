"""Tables for the compaction tests, and reads of their rows that do not go through the rewrite."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import IntegerType, LongType, NestedField, StringType

from airflow_iceberg_maint.index.source.live_rows import FILE_COLUMN, POS_COLUMN, live_rows_of_file
from airflow_iceberg_maint.index.source.snapshot_files import plan_snapshot

MB = 1024 * 1024
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "day", IntegerType(), required=False),
    NestedField(3, "payload", StringType(), required=False),
)
ARROW = pa.schema([("id", pa.int64()), ("day", pa.int32()), ("payload", pa.string())])
BY_DAY = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="day"))


def create(catalog: Catalog, name: str, partitioned: bool, target: int | None = None) -> Table:
    properties = {"write.target-file-size-bytes": str(target)} if target else {}
    spec = BY_DAY if partitioned else PartitionSpec()
    return catalog.create_table(f"db.{name}", schema=SCHEMA, partition_spec=spec, properties=properties)


def batch(rng: random.Random, start: int, count: int, days: list[int | None]) -> pa.Table:
    """Rows with unique ids, some null days and payloads, and payloads that compress only partly."""
    return pa.Table.from_pylist(
        [
            {
                "id": start + i,
                "day": rng.choice(days),
                "payload": None if rng.random() < 0.05 else f"{rng.getrandbits(48):x}-{start + i}",
            }
            for i in range(count)
        ],
        schema=ARROW,
    )


def append_files(table: Table, rng: random.Random, files: int, rows: int, days: list[int | None]) -> Table:
    start = _next_id(table)
    for n in range(files):
        table.append(batch(rng, start + n * rows, rows, days))
    return table


def _next_id(table: Table) -> int:
    if table.current_snapshot() is None:
        return 0
    ids = table.scan(selected_fields=("id",)).to_arrow().column("id")
    return (pa.compute.max(ids).as_py() or 0) + 1 if len(ids) else 0


def scanned(table: Table, snapshot_id: int | None = None) -> Counter[tuple[Any, ...]]:
    """The rows of a snapshot as pyiceberg's own scan reads them (it applies position deletes and DVs)."""
    rows = table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist()
    return Counter(tuple(sorted(r.items())) for r in rows)


def read_live(table: Table, snapshot_id: int | None = None) -> Counter[tuple[Any, ...]]:
    """The rows of a snapshot through the index engine's readers, for snapshots pyiceberg cannot scan
    (equality deletes); compared with an oracle kept in Python."""
    snapshot = table.current_snapshot() if snapshot_id is None else table.snapshot_by_id(snapshot_id)
    assert snapshot is not None
    plan = plan_snapshot(table, snapshot)
    schema = table.schema()
    rows: Counter[tuple[Any, ...]] = Counter()
    for path in plan.data_files:
        read = live_rows_of_file(table, plan, path, schema).drop_columns([FILE_COLUMN, POS_COLUMN])
        rows.update(tuple(sorted(r.items())) for r in read.to_pylist())
    return rows


def data_files(table: Table) -> list[dict[str, Any]]:
    files = table.inspect.files()
    return [f for f in files.to_pylist() if f["content"] == 0]


def delete_files(table: Table) -> list[dict[str, Any]]:
    return [f for f in table.inspect.files().to_pylist() if f["content"] != 0]
