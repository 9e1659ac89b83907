"""Tables on the local S3 server for the Celery scenarios: made, planted with orphans, and their live files."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from tests.s3_helpers import s3_test_client


@dataclass
class PlantedTable:
    table: Table
    planted: list[str]  # the orphans, sorted
    live: set[str]  # every file its metadata reaches
    cutoff: str  # an ``older_than`` after every file of both


SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("kind", pa.string())])


def rows(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table({"id": ids, "kind": [("a", "b", "c")[i % 3] for i in ids]}, schema=SCHEMA)


def make_table(catalog: Catalog, name: str, appends: int = 6, per_append: int = 50) -> Table:
    """A table of ``appends`` commits (a data file, a manifest and a manifest list each)."""
    catalog.create_namespace_if_not_exists(name.split(".")[0])
    table = catalog.create_table(name, SCHEMA)
    for i in range(appends):
        table.append(rows(i * per_append, per_append))
    return catalog.load_table(name)


def _split(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


def plant_orphans(endpoint: str, table: Table, count: int, tag: str) -> list[str]:
    """``count`` files no snapshot references, spread over data/ and metadata/ of the table."""
    s3 = s3_test_client(endpoint)
    planted = []
    for i in range(count):
        folder = ("data", "metadata", f"data/kind={i}")[i % 3]
        uri = f"{table.location().rstrip('/')}/{folder}/orphan-{tag}-{i}.parquet"
        bucket, key = _split(uri)
        s3.put_object(Bucket=bucket, Key=key, Body=b"orphan" * (i + 1))
        planted.append(uri)
    return sorted(planted)


def planted_table(catalog: Catalog, endpoint: str, name: str, orphans: int, appends: int = 8) -> PlantedTable:
    """A table of ``appends`` commits with ``orphans`` planted files, its live files, and a cutoff after both."""
    table = make_table(catalog, name, appends=appends)
    planted = plant_orphans(endpoint, table, orphans, name.replace(".", "-"))
    return PlantedTable(table, planted, live_files(table), cutoff_after_writes())


def cutoff_after_writes() -> str:
    """Now, once the clock has passed the last second the S3 server may have stamped a file with."""
    start = datetime.now(UTC)
    while datetime.now(UTC).replace(microsecond=0) <= start.replace(microsecond=0):
        time.sleep(0.05)
    return datetime.now(UTC).isoformat()


def live_files(table: Table) -> set[str]:
    """Every file the table's metadata reaches: data files, manifests, manifest lists, metadata files."""
    files = set(table.inspect.all_files()["file_path"].to_pylist())
    files |= set(table.inspect.all_manifests()["path"].to_pylist())
    files |= {s.manifest_list for s in table.metadata.snapshots}
    files |= {log.metadata_file for log in table.metadata.metadata_log}
    files.add(table.metadata_location)
    return files


def exists(endpoint: str, uri: str) -> bool:
    bucket, key = _split(uri)
    found = s3_test_client(endpoint).list_objects_v2(Bucket=bucket, Prefix=key).get("KeyCount", 0)
    return bool(found)


def read_json(endpoint: str, uri: str) -> Any:
    bucket, key = _split(uri)
    return json.loads(s3_test_client(endpoint).get_object(Bucket=bucket, Key=key)["Body"].read())


def gate_key(run_id: str, map_index: int) -> str:
    """Where a gated shard (``kill_on``, tests/celery/dags/celery_dags.py) says it waits to be killed."""
    return f"gates/{run_id}/{map_index}"


def partitioned_table(catalog: Catalog, name: str, partitions: int, appends: int, per_file: int) -> Table:
    """A table partitioned by ``kind`` (identity) whose every append writes one small file in each of
    ``partitions`` partitions: ``partitions * appends`` data files, ``per_file`` rows each."""
    from pyiceberg.transforms import IdentityTransform

    catalog.create_namespace_if_not_exists(name.split(".")[0])
    table = catalog.create_table(name, SCHEMA, properties={"format-version": "2"})
    with table.update_spec() as spec:
        spec.add_field("kind", IdentityTransform(), "kind")
    batch = partitions * per_file
    for i in range(appends):
        ids = list(range(i * batch, (i + 1) * batch))
        table.append(pa.table({"id": ids, "kind": [f"p{n % partitions}" for n in ids]}, schema=SCHEMA))
    return catalog.load_table(name)
