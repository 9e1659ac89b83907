"""A key S3's bulk delete cannot name (a control character) never blocks the rest of its batch (issue 21, case 5).

``DeleteObjects`` names keys in an XML body, which cannot carry ``\\x01``: AWS refuses the whole request
(400 MalformedXML), the local S3 server answers 500, and every key of the batch used to be reported
failed on every run. Such a key is now deleted with ``DeleteObject``, whose URL names it exactly, and
the rest of the batch goes in one bulk request. The object store is moto's real server.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import boto3
import pytest

from airflow_iceberg_maint.fs.s3 import S3Storage, bulk_safe
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from tests.orphans.scenario import SCHEMA, Files, rows
from tests.support.services import S3_PROPS

ODD = "c\x01d.parquet"


def _client(endpoint: str):
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **_keys())


def _keys() -> dict[str, str]:
    return {
        "aws_access_key_id": S3_PROPS["s3.access-key-id"],
        "aws_secret_access_key": S3_PROPS["s3.secret-access-key"],
    }


def test_which_keys_a_bulk_delete_can_name() -> None:
    assert [bulk_safe(k) for k in ("a.parquet", "a b\tc\nd\re.parquet", "München/ü.parquet")] == [True] * 3
    assert [bulk_safe(k) for k in (ODD, "a\x00", "a\x1f", "a\x0b", "a\udcff", "a\uffff")] == [False] * 6


def test_the_local_server_refuses_a_bulk_delete_naming_a_control_character(s3_endpoint, s3_bucket, monkeypatch):
    """What the odd key did to its batch: the whole request refused, nothing of it deleted."""
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # a 500 is retried by the client; once shows the refusal
    client = _client(s3_endpoint)
    for key in ("a.parquet", ODD):
        client.put_object(Bucket=s3_bucket, Key=key, Body=b"x")
    with pytest.raises(client.exceptions.ClientError) as info:
        client.delete_objects(Bucket=s3_bucket, Delete={"Objects": [{"Key": "a.parquet"}, {"Key": ODD}]})
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    assert sorted(o["Key"] for o in client.list_objects_v2(Bucket=s3_bucket)["Contents"]) == ["a.parquet", ODD]


def test_the_odd_key_is_deleted_alone_and_the_rest_of_its_batch_in_one_request(s3_endpoint, s3_bucket):
    client = _client(s3_endpoint)
    # A tab is XML; a newline is too, but the local server cannot store a key holding one.
    keys = [f"d/{i:02d}.parquet" for i in range(5)] + [f"d/{ODD}", "d/tab\tand space.parquet"]
    for key in keys:
        client.put_object(Bucket=s3_bucket, Key=key, Body=b"x")
    storage = S3Storage(
        boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1", **_keys()), backoff_seconds=0
    )
    paths = [f"s3://{s3_bucket}/{k}" for k in keys]
    outcome = storage.delete_files(paths, max_concurrency=1)
    assert (sorted(outcome.deleted), outcome.failed) == (sorted(paths), [])
    assert outcome.requests == 2  # one DeleteObjects of six keys, one DeleteObject
    assert client.list_objects_v2(Bucket=s3_bucket).get("Contents", []) == []


def test_orphan_run_deletes_every_orphan_of_a_batch_holding_a_control_character(s3_catalog):
    table = s3_catalog.create_table("db.odd", schema=SCHEMA)
    table.append(rows(0, 3))
    files = Files(table)
    loc = table.location()
    orphans = {files.put(f"{loc}/data/{name}") for name in ("a.parquet", ODD, "b.parquet")}
    time.sleep(1.2)  # S3 times have one-second resolution: the planted files are older than the cutoff
    report = remove_orphan_files(table, OrphanOptions(older_than=datetime.now(UTC)), sources=[INDEX_FILES])
    assert set(report.orphan_files) == orphans
    assert (report.deleted_file_count, report.failed, report.delete_requests) == (3, [], 2)
    assert {p for p in files.all_files(f"{loc}/data") if p in orphans} == set()
    assert len(s3_catalog.load_table("db.odd").scan().to_arrow()) == 3
    again = remove_orphan_files(table, OrphanOptions(older_than=datetime.now(UTC)), sources=[INDEX_FILES])
    assert again.orphan_files == []
