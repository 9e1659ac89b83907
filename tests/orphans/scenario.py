"""A table history with every kind of file, and planted files around it, on any backend.

Expected orphans come from an independent oracle: pyiceberg's own ``inspect`` tables plus the
metadata log, against a plain listing of storage (the "naive" approach, read with full
manifest decoding), so a bug in the engine's fast path cannot hide in the expectation.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import boto3
import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from airflow_iceberg_maint.fs.locations import Uri

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "category", StringType(), required=False),
)
# Partition values that need URL encoding in paths: '/', ' ', '%', ':', '+', non-ASCII.
CATEGORIES = ["a/b", "c d", "x%y", "k:v", "p+q", "München"]


def rows(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "category": pa.array([CATEGORIES[i % len(CATEGORIES)] for i in ids], pa.string()),
        }
    )


class Files:
    """Plant and list files on the table's storage (local, S3, GCS, Azure) with plain clients, not the engine's."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.uri = Uri.parse(table.location())
        props = table.io.properties
        self.s3 = None
        if self.uri.scheme in ("s3", "s3a", "s3n"):
            self.s3 = boto3.client(
                "s3",
                endpoint_url=props["s3.endpoint"],
                aws_access_key_id=props["s3.access-key-id"],
                aws_secret_access_key=props["s3.secret-access-key"],
                region_name=props.get("s3.region", "us-east-1"),
            )
        self.store: _Store | None = None
        if self.uri.scheme == "gs":
            self.store = _Gcs(props["gcs.service.host"])
        elif self.uri.scheme in ("abfs", "abfss", "wasb", "wasbs"):
            self.store = _Azure(props["adls.connection-string"])

    def put(self, path: str, data: bytes = b"orphan") -> str:
        uri = Uri.parse(path)
        if self.store is not None:
            self.store.put(uri.authority, uri.path.lstrip("/"), data)
        elif self.s3 is None:
            os.makedirs(os.path.dirname(uri.path), exist_ok=True)
            with open(uri.path, "wb") as fh:
                fh.write(data)
        else:
            self.s3.put_object(Bucket=uri.authority, Key=uri.path.lstrip("/"), Body=data)
        return path

    def exists(self, path: str) -> bool:
        uri = Uri.parse(path)
        if self.store is not None:
            return uri.path.lstrip("/") in self.store.keys(uri.authority, uri.path.lstrip("/"))
        if self.s3 is None:
            return os.path.lexists(uri.path)
        return "Contents" in self.s3.list_objects_v2(Bucket=uri.authority, Prefix=uri.path.lstrip("/"), MaxKeys=1)

    def all_files(self, root: str) -> set[str]:
        uri = Uri.parse(root.rstrip("/"))
        head = f"{uri.scheme}://{uri.authority}/"
        if self.store is not None:
            return {head + k for k in self.store.keys(uri.authority, uri.path.lstrip("/") + "/")}
        if self.s3 is None:
            found: set[str] = set()
            for dirpath, _, names in os.walk(uri.path):
                found.update(f"{root.rstrip('/')}{dirpath[len(uri.path) :]}/{n}" for n in names)
            return found
        paginator = self.s3.get_paginator("list_objects_v2")
        pages = paginator.paginate(Bucket=uri.authority, Prefix=uri.path.lstrip("/") + "/")
        return {head + o["Key"] for page in pages for o in page.get("Contents", [])}


class _Store(Protocol):
    def put(self, authority: str, key: str, data: bytes, **options: Any) -> None: ...

    def keys(self, authority: str, prefix: str) -> set[str]: ...


class _Gcs:
    def __init__(self, endpoint: str) -> None:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        self.client = storage.Client(
            project="test", credentials=AnonymousCredentials(), client_options={"api_endpoint": endpoint}
        )

    def put(self, authority: str, key: str, data: bytes, **options: Any) -> None:
        self.client.bucket(authority).blob(key).upload_from_string(data)

    def keys(self, authority: str, prefix: str) -> set[str]:
        return {b.name for b in self.client.list_blobs(authority, prefix=prefix)}


class _Azure:
    def __init__(self, connection_string: str) -> None:
        from azure.storage.blob import BlobServiceClient

        self.service = BlobServiceClient.from_connection_string(connection_string)

    def put(self, authority: str, key: str, data: bytes, **options: Any) -> None:
        """``options`` go to upload_blob (``metadata=`` plants a hierarchical-namespace folder marker)."""
        self.service.get_container_client(authority.partition("@")[0]).upload_blob(key, data, **options)

    def keys(self, authority: str, prefix: str) -> set[str]:
        container = self.service.get_container_client(authority.partition("@")[0])
        return {b.name for b in container.list_blobs(name_starts_with=prefix)}


def referenced_by_oracle(table: Table) -> set[str]:
    md = table.metadata
    refs = {table.metadata_location, f"{md.location}/metadata/version-hint.text"}
    refs |= {e.metadata_file for e in md.metadata_log}
    refs |= {s.statistics_path for s in md.statistics} | {s.statistics_path for s in md.partition_statistics}
    refs |= {s.manifest_list for s in md.snapshots}
    refs |= set(table.inspect.all_manifests()["path"].to_pylist())
    refs |= set(table.inspect.all_files()["file_path"].to_pylist())
    return refs


def snapshot_row_counts(table: Table) -> dict[str, int]:
    """Rows read through every snapshot and every branch and tag head: fails if a file is missing."""
    counts = {
        f"snapshot:{s.snapshot_id}": len(table.scan(snapshot_id=s.snapshot_id).to_arrow())
        for s in table.metadata.snapshots
    }
    counts |= {
        f"ref:{name}": len(table.scan(snapshot_id=ref.snapshot_id).to_arrow())
        for name, ref in table.metadata.refs.items()
    }
    return counts


@dataclass
class Scenario:
    table: Table
    files: Files
    cutoff: datetime
    old_orphans: set[str] = field(default_factory=set)
    kept_planted: set[str] = field(default_factory=set)
    expired_manifest_lists: set[str] = field(default_factory=set)
    row_counts: dict[str, int] = field(default_factory=dict)
    expected_orphans: set[str] = field(default_factory=set)


def _history(table: Table) -> set[str]:
    """Appends, an overwrite, row deletes, a branch and a tag; then expire two snapshots."""
    for i in range(4):
        table.append(rows(i * 12, 12))
    table.overwrite(rows(100, 6), overwrite_filter="id < 6")
    table.delete("id = 20")
    first = table.metadata.snapshots[0].snapshot_id
    second = table.metadata.snapshots[1].snapshot_id
    head = table.metadata.current_snapshot_id
    table.manage_snapshots().create_tag(head, "release").create_branch(head, "audit").commit()
    table.append(rows(500, 6), branch="audit")
    table.append(rows(600, 6))
    expired = {s.manifest_list for s in table.metadata.snapshots if s.snapshot_id in (first, second)}
    table.maintenance.expire_snapshots().by_ids([first, second]).commit()
    return expired


def build(
    catalog: Catalog,
    name: str = "db.events",
    partitioned: bool = True,
    plant_extra: Callable[[Scenario], None] | None = None,
) -> Scenario:
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "category")) if partitioned else PartitionSpec()
    table = catalog.create_table(
        name,
        schema=SCHEMA,
        partition_spec=spec,
        properties={"write.metadata.previous-versions-max": "3"},
    )
    expired = _history(table)
    table = catalog.load_table(name)
    files = Files(table)
    loc = table.location().rstrip("/")
    scenario = Scenario(table, files, cutoff=datetime.now(UTC), expired_manifest_lists=expired)
    scenario.old_orphans = {
        files.put(f"{loc}/data/orphan-1.parquet"),
        files.put(f"{loc}/data/category=a%2Fb/orphan-2.parquet"),
        files.put(f"{loc}/metadata/orphan-3.avro"),
        files.put(f"{loc}/misc/orphan-4.txt"),
    }
    scenario.kept_planted = {
        files.put(f"{loc}/data/_temporary/hidden-1.parquet"),
        files.put(f"{loc}/data/.staging/hidden-2.parquet"),
        files.put(f"{loc}/metadata/.hidden-3.crc"),
        files.put(f"{loc}_backup/data/sibling.parquet"),
    }
    if plant_extra:
        plant_extra(scenario)
    time.sleep(1.2)  # S3 and Azure times have one-second resolution: separate old from fresh files
    scenario.cutoff = datetime.now(UTC)
    time.sleep(1.2)
    scenario.kept_planted |= {files.put(f"{loc}/data/fresh-orphan.parquet")}
    scenario.row_counts = snapshot_row_counts(table)
    listed = {
        p for p in files.all_files(loc) if not any(part.startswith(("_", ".")) for part in p[len(loc) :].split("/"))
    }
    scenario.expected_orphans = listed - referenced_by_oracle(table) - {f"{loc}/data/fresh-orphan.parquet"}
    return scenario
