"""Tables for the health tests, and what they hold, found without the code under test (pyiceberg's ``inspect``
tables and the files on disk)."""

from __future__ import annotations

import os
import random
import string

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from airflow_iceberg_maint.fs.locations import local_path

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "region", StringType(), required=False),
    NestedField(3, "payload", StringType(), required=False),
)
SPEC = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="region"))


def batch(region: str, start: int, count: int, payload_bytes: int = 4) -> pa.Table:
    """Rows of one region; a long random ``payload`` makes the file large (random text barely compresses)."""
    rng = random.Random(start)
    return pa.table(
        {
            "id": pa.array(range(start, start + count), pa.int64()),
            "region": pa.array([region] * count, pa.string()),
            "payload": pa.array(
                ["".join(rng.choices(string.ascii_letters, k=payload_bytes)) for _ in range(count)], pa.string()
            ),
        }
    )


def partitioned_table(catalog: Catalog, name: str = "db.parts") -> Table:
    """Partition ``a``: two small files (3 and 2 rows); ``b``: one small file (3 rows); ``c``: one file of
    about 300 KiB (2,000 rows of 150 random letters)."""
    table = catalog.create_table(name, schema=SCHEMA, partition_spec=SPEC, properties={"format-version": "2"})
    table.append(pa.concat_tables([batch("a", 0, 3), batch("b", 3, 3)]))
    table.append(batch("a", 6, 2))
    table.append(batch("c", 8, 2000, payload_bytes=150))
    return table


def live_data_files(table: Table) -> dict[str, int]:
    """Path -> size on disk of the current snapshot's data files (pyiceberg's inspect, then ``os.stat``)."""
    files = table.inspect.data_files().to_pylist()
    return {f["file_path"]: os.path.getsize(local_path(f["file_path"])) for f in files}


def manifests_on_record(table: Table) -> dict[str, int]:
    """Path -> length of the current snapshot's manifests, from pyiceberg's inspect."""
    return {m["path"]: m["length"] for m in table.inspect.manifests().to_pylist()}


def metadata_files_on_disk(table: Table) -> int:
    folder = local_path(f"{table.location()}/metadata")
    return sum(1 for name in os.listdir(folder) if name.endswith(".metadata.json"))
