"""Matching by exact path, protection by equivalent spellings, conflicts, and S3 deletes."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime

import pytest
from botocore.exceptions import ClientError

from airflow_iceberg_maint.errors import PrefixMismatchError
from airflow_iceberg_maint.fs.locations import PathEquivalence
from airflow_iceberg_maint.fs.s3 import S3Storage
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from airflow_iceberg_maint.reachability.referenced import ReferencedSet
from tests.orphans.scenario import SCHEMA, Files, rows


def test_referenced_set_matches_exactly_and_classifies_the_rest():
    refs = ReferencedSet(PathEquivalence())
    refs.add(
        [
            "s3a://b/t/data/a.parquet",
            "s3://b/t/data//b.parquet",
            "s3://other/t/data/c.parquet",
            "/t/data/d.parquet",
            "s3://b/t/data/e%2Fx.parquet",
        ]
    )
    listed = [
        "s3://b/t/data/a.parquet",
        "s3://b/t/data/b.parquet",
        "s3://b/t/data/c.parquet",
        "s3://b/t/data/d.parquet",
        "s3://b/t/data/e/x.parquet",
        "s3://b/t/data/e%2Fx.parquet",
        "s3://b/t/data/z.parquet",
    ]
    assert refs.contains_exact(listed) == [False, False, False, False, False, True, False]
    assert refs.classify_unmatched(listed[:5] + listed[6:]) == {
        "s3://b/t/data/a.parquet": "equivalent",  # scheme alias
        "s3://b/t/data/b.parquet": "equivalent",  # collapsed slashes
        "s3://b/t/data/c.parquet": "conflict",  # same path, other bucket
        "s3://b/t/data/d.parquet": "equivalent",  # unqualified reference matches any
        "s3://b/t/data/e/x.parquet": "equivalent",  # the percent-decoded spelling of e%2Fx: kept
    }  # z: nothing
    assert len(refs) == 5
    assert refs.nbytes <= 64 * 5


@pytest.mark.parametrize("backend", ["s3_catalog", "seaweed_s3_catalog"])
def test_s3_deletes_in_batches_of_1000(request, backend):
    s3_catalog = request.getfixturevalue(backend)
    table = s3_catalog.create_table("db.many", schema=SCHEMA)
    table.append(rows(0, 10))
    files = Files(table)
    loc = table.location()
    orphans = {files.put(f"{loc}/data/orphan-{i:05d}.parquet") for i in range(1001)}
    time.sleep(1.2)
    report = remove_orphan_files(table, OrphanOptions(older_than=datetime.now(UTC)), sources=[INDEX_FILES])
    assert set(report.orphan_files) == orphans
    assert report.deleted_file_count == 1001
    assert report.delete_requests == math.ceil(1001 / 1000)
    assert report.list_calls >= 2  # paginated: more than 1000 keys under data/
    assert not any(files.exists(p) for p in list(orphans)[:20])
    assert len(s3_catalog.load_table("db.many").scan().to_arrow()) == 10


def _conflicted_table(s3_catalog, s3_endpoint):
    """A table whose metadata names a file in another bucket at the very key of a listed file."""
    table = s3_catalog.create_table("db.moved", schema=SCHEMA)
    table.append(rows(0, 10))
    table = s3_catalog.load_table("db.moved")
    files = Files(table)
    data_file = next(iter(table.inspect.files()["file_path"].to_pylist()))
    bucket = data_file.split("/")[2]
    twin_bucket = bucket + "-twin"
    files.s3.create_bucket(Bucket=twin_bucket)
    key = data_file.split("/", 3)[3].replace(".parquet", "-copy.parquet")
    body = files.s3.get_object(Bucket=bucket, Key=data_file.split("/", 3)[3])["Body"].read()
    files.s3.put_object(Bucket=twin_bucket, Key=key, Body=body)
    files.s3.put_object(Bucket=bucket, Key=key, Body=body)  # same key in the table's own bucket
    table.add_files([f"s3://{twin_bucket}/{key}"])
    time.sleep(1.2)
    return s3_catalog.load_table("db.moved"), f"s3://{bucket}/{key}", f"s3://{twin_bucket}/{key}", twin_bucket


def test_conflicts_follow_prefix_mismatch_mode(s3_catalog, s3_endpoint):
    table, listed, referenced, twin = _conflicted_table(s3_catalog, s3_endpoint)
    files = Files(table)
    cutoff = datetime.now(UTC)

    with pytest.raises(PrefixMismatchError, match="nothing was deleted") as info:
        remove_orphan_files(table, OrphanOptions(older_than=cutoff), sources=[INDEX_FILES])
    assert info.value.conflicts == [(listed, referenced)]
    assert files.exists(listed)

    ignored = remove_orphan_files(
        table, OrphanOptions(older_than=cutoff, prefix_mismatch_mode="ignore"), sources=[INDEX_FILES]
    )
    assert ignored.conflicts == [{"listed": listed, "referenced": referenced}]
    assert ignored.orphan_files == [] and files.exists(listed)

    aliased = remove_orphan_files(
        table, OrphanOptions(older_than=cutoff, equal_authorities={twin: listed.split("/")[2]}), sources=[INDEX_FILES]
    )
    assert aliased.conflicts == [] and aliased.orphan_files == [] and aliased.kept_equivalent == 1

    deleted = remove_orphan_files(
        table, OrphanOptions(older_than=cutoff, prefix_mismatch_mode="delete"), sources=[INDEX_FILES]
    )
    assert deleted.orphan_files == [listed] and not files.exists(listed)
    assert files.exists(referenced)
    assert len(s3_catalog.load_table("db.moved").scan().to_arrow()) == 20


class _ThrottlingClient:
    """Stands in for S3 throttling, which the local S3 server cannot produce (the one mock here)."""

    def __init__(self, slow_downs: int) -> None:
        self.slow_downs = slow_downs
        self.calls: list[list[str]] = []

    def delete_objects(self, Bucket, Delete):
        keys = [o["Key"] for o in Delete["Objects"]]
        self.calls.append(keys)
        if self.slow_downs == 2:  # first: the whole request is throttled
            self.slow_downs -= 1
            raise ClientError(
                {"Error": {"Code": "SlowDown"}, "ResponseMetadata": {"HTTPStatusCode": 503}}, "DeleteObjects"
            )
        errors = [{"Key": k, "Code": "AccessDenied", "Message": "no"} for k in keys if k.endswith("denied")]
        if self.slow_downs == 1:  # then: one key is throttled inside a successful response
            self.slow_downs -= 1
            errors.append({"Key": keys[0], "Code": "SlowDown", "Message": "Reduce your request rate"})
        return {"Errors": errors}


def test_s3_deletes_retry_throttling_and_collect_per_key_errors():
    # A whole request throttled is botocore's to retry (tests/reliability/test_s3_faults.py, through a real
    # proxy); only keys throttled inside a successful reply are retried here.
    client = _ThrottlingClient(slow_downs=1)
    storage = S3Storage(client, backoff_seconds=0)
    outcome = storage.delete_files(["s3://b/k1", "s3://b/k2", "s3://b/denied"], max_concurrency=2)
    assert sorted(outcome.deleted) == ["s3://b/k1", "s3://b/k2"]
    assert outcome.failed == [("s3://b/denied", "AccessDenied: no")]
    assert outcome.requests == 2
    assert client.calls == [["k1", "k2", "denied"], ["k1"]]
