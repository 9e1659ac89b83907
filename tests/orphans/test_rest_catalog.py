"""Orphan removal through SeaweedFS's Iceberg REST catalog, on its S3, as a user runs the command.

The tables live in a SeaweedFS table bucket, which accepts writes only under
``<namespace>/<table>/{metadata,data,_*}/`` (as S3 Tables does), so every planted file sits there.
Also pins the SeaweedFS behaviours that differ from moto and AWS, so a new release that changes
one is noticed (docs/airflow.md lists them).
"""

from __future__ import annotations

from typing import Any

import boto3
import botocore.exceptions
import pytest

from airflow_iceberg_maint.catalog import load_table
from airflow_iceberg_maint.errors import IncompleteMetadataError
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from airflow_iceberg_maint.orphans.sharded.scan import remove_orphan_files_sharded
from tests.orphans.catalog_cases import CatalogCase, cutoff_after_writes, older_than, whole_table
from tests.orphans.scenario import SCHEMA, Files, _history, referenced_by_oracle, rows, snapshot_row_counts
from tests.support.services import create_plain_bucket

pytestmark = pytest.mark.rest


@pytest.fixture
def case(rest_catalog_config: tuple[Any, dict[str, str]]) -> CatalogCase:
    catalog, config = rest_catalog_config
    return CatalogCase("rest", catalog, "default", config)


def test_dry_and_real_run_delete_exactly_the_orphans_and_keep_a_nested_table(case: CatalogCase) -> None:
    outer = case.catalog.create_table("db.events", schema=SCHEMA)
    # Appends, an overwrite, row deletes, a branch, a tag; two snapshots expired, whose manifest
    # lists pyiceberg leaves behind: orphans too.
    expired_lists = _history(outer)
    loc = outer.location().rstrip("/")
    # A second table inside the first one's data folder, known to the catalog.
    inner_location = f"{loc}/data/inner"
    inner = case.catalog.create_table("db.inner", schema=SCHEMA, location=inner_location)
    inner.append(rows(0, 7))
    inner.append(rows(7, 3))
    outer = whole_table(case.catalog.load_table("db.events"))
    files = Files(outer)
    orphans = expired_lists | {
        files.put(f"{loc}/data/orphan-1.parquet"),
        files.put(f"{loc}/data/deeper/orphan-2.parquet"),
        files.put(f"{loc}/metadata/orphan-3.avro"),
    }
    assert len(orphans) == 5
    kept = {
        files.put(f"{loc}/data/_temporary/hidden-1.parquet"),  # '_' folders belong to running writers
        files.put(f"{loc}/_staging/hidden-2.parquet"),
        files.put(f"{loc}_backup/data/sibling.parquet"),  # a sibling that shares the location's prefix
        files.put(f"{inner_location}/data/inner-orphan.parquet"),  # the inner table's own run decides
    }
    cutoff = cutoff_after_writes()
    kept.add(files.put(f"{loc}/data/fresh-orphan.parquet"))
    inner_files = files.all_files(inner_location)
    before = files.all_files(loc)
    referenced = referenced_by_oracle(outer)
    assert before - referenced - inner_files - kept == orphans  # the oracle agrees with the plan
    # The catalog's own (complete) answer for the inner table: SeaweedFS refuses to serve its
    # metadata files through S3 (see the behaviours test).
    rows_before = snapshot_row_counts(outer), snapshot_row_counts(case.catalog.load_table("db.inner"))

    dry = case.orphans("db.events", "--dry-run", *older_than(cutoff))
    assert sorted(dry["orphan_files"]) == sorted(orphans)
    assert dry["failed"] == [] and dry["conflicts"] == [] and dry["deleted_file_count"] == 0
    # Protected through the catalog's listing of tables (not only found by its metadata folder).
    assert [p["location"] for p in dry["protected_locations"]] == [inner_location]
    assert "table db.inner" in dry["protected_locations"][0]["reason"]
    assert files.all_files(loc) == before

    real = case.orphans("db.events", *older_than(cutoff))
    assert sorted(real["orphan_files"]) == sorted(orphans)
    assert real["deleted_file_count"] == 5 and real["failed"] == []
    assert files.all_files(loc) == before - orphans
    assert all(files.exists(path) for path in kept)
    assert files.all_files(inner_location) == inner_files
    after = snapshot_row_counts(whole_table(case.catalog.load_table("db.events")))
    assert (after, snapshot_row_counts(case.catalog.load_table("db.inner"))) == rows_before


def test_a_sharded_scan_deletes_what_the_single_run_does(case: CatalogCase) -> None:
    table = case.catalog.create_table("db.events", schema=SCHEMA)
    expired_lists = _history(table)
    loc = table.location().rstrip("/")
    inner = case.catalog.create_table("db.inner", schema=SCHEMA, location=f"{loc}/data/inner")
    inner.append(rows(0, 5))
    whole = load_table(case.catalog, "db.events")
    files = Files(whole)
    orphans = expired_lists | {files.put(f"{loc}/data/a/orphan-1.parquet"), files.put(f"{loc}/metadata/orphan-2.avro")}
    inner_files = files.all_files(f"{loc}/data/inner")
    rows_before = snapshot_row_counts(whole)
    cutoff = cutoff_after_writes()
    # The scratch folder in a plain bucket: the table bucket takes no file outside a table's folders.
    scratch = f"s3://{create_plain_bucket()}/scratch"
    io = dict(whole.io.properties)
    dry = OrphanOptions(older_than=cutoff, dry_run=True)
    single = remove_orphan_files(whole, dry, sources=[INDEX_FILES])
    assert sorted(single.orphan_files) == sorted(orphans)
    sharded = remove_orphan_files_sharded(
        whole, dry, shards=3, scratch=f"{scratch}/dry", io_properties=io, sources=[INDEX_FILES]
    )
    assert sharded.orphan_files == sorted(orphans) and sharded.protected_locations == single.protected_locations
    assert [p["location"] for p in sharded.protected_locations] == [f"{loc}/data/inner"]
    real = remove_orphan_files_sharded(
        whole,
        OrphanOptions(older_than=cutoff),
        shards=3,
        scratch=f"{scratch}/real",
        io_properties=io,
        sources=[INDEX_FILES],
    )
    assert (real.deleted_file_count, real.failed) == (len(orphans), [])
    assert not any(files.exists(p) for p in orphans)
    assert files.all_files(f"{loc}/data/inner") == inner_files
    assert snapshot_row_counts(load_table(case.catalog, "db.events")) == rows_before


def test_a_table_whose_metadata_file_cannot_be_read_is_refused(case: CatalogCase) -> None:
    outer = case.catalog.create_table("db.outer", schema=SCHEMA)
    inner = case.catalog.create_table("db.inner", schema=SCHEMA, location=f"{outer.location()}/data/inner")
    inner.append(rows(0, 4))
    # SeaweedFS answers 403 to a read of a '*.metadata.json' below another table's folder: the
    # catalog loads the table, but its whole metadata cannot be had, so nothing runs on it.
    result = case.run("orphans", "db.inner", "--dry-run", "--json")
    assert result.returncode != 0 and result.stdout == ""
    assert f"table 'db.inner': its metadata file {inner.metadata_location} cannot be read (OSError: " in result.stderr
    assert "ACCESS_DENIED" in result.stderr and "a catalog's answer may leave snapshots out" in result.stderr
    with pytest.raises(IncompleteMetadataError, match="cannot be read"):
        load_table(case.catalog, "db.inner")


def _client(case: CatalogCase) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=case.config["s3.endpoint"],
        aws_access_key_id=case.config["s3.access-key-id"],
        aws_secret_access_key=case.config["s3.secret-access-key"],
        region_name="us-east-1",
    )


def _refusal(client: Any, bucket: str, key: str) -> tuple[str, int] | None:
    try:
        client.put_object(Bucket=bucket, Key=key, Body=b"x")
    except botocore.exceptions.ClientError as exc:
        return exc.response["Error"]["Code"], exc.response["ResponseMetadata"]["HTTPStatusCode"]
    return None


def test_seaweedfs_table_bucket_behaviours(case: CatalogCase) -> None:
    table = case.catalog.create_table("db.t", schema=SCHEMA)
    table.append(rows(0, 3))
    bucket = case.config["warehouse"].removeprefix("s3://").rstrip("/")
    s3 = _client(case)
    base = "db/t"
    # The layout of S3 Tables: metadata/, data/ and '_' folders of a table; nothing else.
    assert _refusal(s3, bucket, f"{base}/data/a.parquet") is None
    assert _refusal(s3, bucket, f"{base}/_tmp/a") is None
    assert _refusal(s3, bucket, f"{base}/misc/a.txt") == ("AccessDenied", 403)
    assert _refusal(s3, bucket, f"{base}/index/a.json") == ("AccessDenied", 403)  # no indexes in the table
    assert _refusal(s3, bucket, f"{base}/a.txt") == ("AccessDenied", 403)
    assert _refusal(s3, bucket, "db/a.txt") == ("AccessDenied", 403)
    # Segments a partition value may produce are refused too: '.' first, '%', non-ASCII.
    assert _refusal(s3, bucket, f"{base}/data/.staging/a.parquet") == ("AccessDenied", 403)
    assert _refusal(s3, bucket, f"{base}/data/x%2Fy/a.parquet") == ("AccessDenied", 403)
    assert _refusal(s3, bucket, f"{base}/data/München/a.parquet") == ("AccessDenied", 403)
    # '.' and '..' segments are refused as malformed; '//' is folded to '/' (S3 and moto keep it).
    assert _refusal(s3, bucket, f"{base}/data/./a.parquet") == ("InvalidRequest", 400)
    assert _refusal(s3, bucket, f"{base}/data/../a.parquet") == ("InvalidRequest", 400)
    assert _refusal(s3, bucket, f"{base}/data//double.parquet") is None
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=f"{base}/data/")["Contents"]}
    assert f"{base}/data/double.parquet" in keys and f"{base}/data//double.parquet" not in keys
    # Last-Modified in whole seconds.
    head = s3.head_object(Bucket=bucket, Key=f"{base}/data/a.parquet")
    assert head["LastModified"].microsecond == 0
    # A folder emptied by a delete lingers in delimiter listings (AWS drops it).
    assert _refusal(s3, bucket, f"{base}/data/gone/a.parquet") is None
    s3.delete_object(Bucket=bucket, Key=f"{base}/data/gone/a.parquet")
    listing = s3.list_objects_v2(Bucket=bucket, Prefix=f"{base}/data/", Delimiter="/")
    assert f"{base}/data/gone/" in [p["Prefix"] for p in listing.get("CommonPrefixes", [])]
    assert not any(o["Key"].startswith(f"{base}/data/gone/") for o in listing.get("Contents", []))
