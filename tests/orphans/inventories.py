"""S3 Inventory reports written as AWS documents them, from a plain listing of the bucket (boto3), for tests and bench.

Layout: ``<prefix>/<source bucket>/<config>/data/<n>.<ext>`` and
``<prefix>/<source bucket>/<config>/<YYYY-MM-DDTHH-MMZ>/manifest.json``. CSV data files are gzipped,
have no header, follow ``fileSchema`` and URL-encode keys (a space as '+'); ORC and Parquet files
carry snake-case columns and plain keys.
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote_plus

import boto3
import pyarrow as pa
from pyarrow import csv, orc
from pyarrow import parquet as pq

CSV_SCHEMA = "Bucket, Key, VersionId, IsLatest, IsDeleteMarker, Size, LastModifiedDate, ETag, StorageClass"
#: The columns of an inventory of current versions only: no version fields.
CSV_CURRENT_SCHEMA = "Bucket, Key, Size, LastModifiedDate, ETag, StorageClass"
PARQUET_SCHEMA = (
    "message s3.inventory { required binary bucket (UTF8); required binary key (UTF8); "
    "optional binary version_id (UTF8); optional boolean is_latest; optional boolean is_delete_marker; "
    "optional int64 size; optional int64 last_modified_date (TIMESTAMP_MILLIS); optional binary e_tag (UTF8); "
    "optional binary storage_class (UTF8);}"
)
ORC_SCHEMA = (
    "struct<bucket:string,key:string,version_id:string,is_latest:boolean,is_delete_marker:boolean,"
    "size:bigint,last_modified_date:timestamp,e_tag:string,storage_class:string>"
)


def s3_client_of(table: Any) -> Any:
    """A plain boto3 client with the table's S3 settings."""
    props = table.io.properties
    return boto3.client(
        "s3",
        endpoint_url=props["s3.endpoint"],
        aws_access_key_id=props["s3.access-key-id"],
        aws_secret_access_key=props["s3.secret-access-key"],
        region_name=props.get("s3.region", "us-east-1"),
    )


def inventory_time() -> datetime:
    """An inventory's time taken now, in milliseconds as its manifest holds it: after every write so far
    (S3 times are whole seconds)."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def bucket_objects(s3: Any, bucket: str, prefix: str = "") -> list[dict[str, Any]]:
    """Every object of a bucket, as an inventory would record it (one LIST per 1,000 keys)."""
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [
        {"Key": o["Key"], "Size": o["Size"], "LastModified": o["LastModified"], "ETag": o["ETag"].strip('"')}
        for page in pages
        for o in page.get("Contents", [])
    ]


def _rows(bucket: str, objects: Sequence[dict[str, Any]]) -> dict[str, list[Any]]:
    return {
        "bucket": [bucket] * len(objects),
        "key": [o["Key"] for o in objects],
        "version_id": pa.array([o.get("VersionId") for o in objects], pa.string()),
        "is_latest": [o.get("IsLatest", True) for o in objects],
        "is_delete_marker": [o.get("IsDeleteMarker", False) for o in objects],
        "size": [o["Size"] for o in objects],
        "last_modified_date": [o["LastModified"].astimezone(UTC) for o in objects],
        "e_tag": [o.get("ETag", "") for o in objects],
        "storage_class": ["STANDARD"] * len(objects),
    }


def _csv(bucket: str, objects: Sequence[dict[str, Any]], schema: str) -> bytes:
    lines = []
    for o in objects:
        modified = o["LastModified"].astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + "000Z"
        fields = {
            "Bucket": bucket,
            "Key": quote_plus(o["Key"], safe="/"),
            "VersionId": o.get("VersionId") or "",
            "IsLatest": "true" if o.get("IsLatest", True) else "false",
            "IsDeleteMarker": "true" if o.get("IsDeleteMarker", False) else "false",
            "Size": "" if o.get("IsDeleteMarker") else str(o["Size"]),
            "LastModifiedDate": modified,
            "ETag": o.get("ETag", ""),
            "StorageClass": "STANDARD",
        }
        lines.append(",".join(f'"{fields[name.strip()]}"' for name in schema.split(",")))
    return gzip.compress(("\n".join(lines) + "\n").encode())


def _columnar(kind: str, bucket: str, objects: Sequence[dict[str, Any]]) -> bytes:
    table = pa.table(_rows(bucket, objects))
    table = table.set_column(5, "size", table["size"].cast(pa.int64()))
    sink = io.BytesIO()
    if kind == "Parquet":
        stamp = table["last_modified_date"].cast(pa.timestamp("ms", tz="UTC"))
        pq.write_table(table.set_column(6, "last_modified_date", stamp), sink)
    else:  # ORC's ``timestamp``: a time without a zone, UTC
        stamp = table["last_modified_date"].cast(pa.timestamp("ms"))
        orc.write_table(table.set_column(6, "last_modified_date", stamp), sink)
    return sink.getvalue()


EXTENSIONS = {"CSV": "csv.gz", "Parquet": "parquet", "ORC": "orc"}
SCHEMAS = {"CSV": CSV_SCHEMA, "Parquet": PARQUET_SCHEMA, "ORC": ORC_SCHEMA}


def write_s3_inventory(
    s3: Any,
    destination: str,
    source: str,
    objects: Sequence[dict[str, Any]],
    file_format: str,
    created: datetime,
    *,
    prefix: str = "inventory",
    per_file: int = 1000,
    csv_schema: str = CSV_SCHEMA,
) -> str:
    """Write an inventory of ``objects`` (of bucket ``source``) into bucket ``destination``; its manifest's URI."""
    config = f"{prefix}/{source}/daily"
    files = []
    for n, start in enumerate(range(0, max(len(objects), 1), per_file)):
        part = objects[start : start + per_file]
        body = _csv(source, part, csv_schema) if file_format == "CSV" else _columnar(file_format, source, part)
        key = f"{config}/data/{n:04d}.{EXTENSIONS[file_format]}"
        s3.put_object(Bucket=destination, Key=key, Body=body)
        files.append({"key": key, "size": len(body), "MD5checksum": ""})
    manifest = {
        "sourceBucket": source,
        "destinationBucket": f"arn:aws:s3:::{destination}",
        "version": "2016-11-30",
        "creationTimestamp": str(int(created.timestamp() * 1000)),
        "fileFormat": file_format,
        "fileSchema": csv_schema if file_format == "CSV" else SCHEMAS[file_format],
        "files": files,
    }
    key = f"{config}/{created.strftime('%Y-%m-%dT%H-%MZ')}/manifest.json"
    s3.put_object(Bucket=destination, Key=key, Body=json.dumps(manifest).encode())
    return f"s3://{destination}/{key}"


def write_plain(path: str, rows: Sequence[tuple[str, int, datetime]]) -> str:
    """A plain listing file of ``path, size, last_modified`` on local disk (.parquet, else CSV with a header)."""
    table = pa.table(
        {
            "path": [r[0] for r in rows],
            "size": pa.array([r[1] for r in rows], pa.int64()),
            "last_modified": pa.array([r[2] for r in rows], pa.timestamp("ms", tz="UTC")),
        }
    )
    if path.endswith(".parquet"):
        pq.write_table(table, path)
    else:
        csv.write_csv(table, path)
    return path
