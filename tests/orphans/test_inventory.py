"""A listing read from an inventory (``listing=``): the same result as listing storage, and its own refusals.

Inventories are written by the tests in AWS's documented S3 Inventory format (``inventories``),
from a plain listing of the local S3 server's bucket, so they hold exactly what an inventory
taken at that moment would.
"""

from __future__ import annotations

import io
import os
from datetime import UTC, datetime, timedelta

import pytest
from pyarrow import parquet as pq
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from tests.orphans import sources
from tests.orphans.inventories import (
    CSV_CURRENT_SCHEMA,
    bucket_objects,
    inventory_time,
    s3_client_of,
    write_plain,
    write_s3_inventory,
)
from tests.orphans.scenario import SCHEMA, Files, rows

FORMATS = ["CSV", "Parquet", "ORC"]


def _scene(catalog, bucket):
    """A table with history, orphans (names that need URL encoding among them), a hidden file, and a
    file of the bucket outside the table's location; returns the table, its orphans, and the outsider."""
    table = catalog.create_table("db.inv", schema=SCHEMA)
    for start in (0, 10, 20):
        table.append(rows(start, 10))
    table.delete("id < 5")
    table = catalog.load_table("db.inv")
    files = Files(table)
    loc = table.location()
    orphans = {
        files.put(f"{loc}/data/orphan-1.parquet"),
        files.put(f"{loc}/data/with space+plus%.parquet"),
        files.put(f"{loc}/data/ünïcode/ø.parquet"),
        files.put(f"{loc}/metadata/stray.avro"),
    }
    files.put(f"{loc}/data/_temporary/hidden.parquet")  # hidden: never listed, never deleted
    outside = files.put(f"s3://{bucket}/warehouse/db/inv_backup/data/x.parquet")
    return table, orphans, outside


def _dry(table, cutoff, listing=None):
    options = OrphanOptions(older_than=cutoff, dry_run=True, listing=listing, only_this_table=True)
    return remove_orphan_files(table, options, sources=[INDEX_FILES])


@pytest.mark.parametrize("file_format", FORMATS)
def test_an_s3_inventory_gives_the_listed_result(s3_catalog, s3_bucket, file_format):
    table, orphans, outside = _scene(s3_catalog, s3_bucket)
    s3 = s3_client_of(table)
    objects = bucket_objects(s3, s3_bucket)
    # Rows an inventory of every version holds: a delete marker and an older version of a gone key.
    gone = "warehouse/db/inv/data/deleted-since.parquet"
    marker = {"Key": gone, "Size": 0, "LastModified": objects[0]["LastModified"], "IsDeleteMarker": True}
    older = {"Key": gone, "Size": 3, "LastModified": objects[0]["LastModified"], "IsLatest": False, "VersionId": "v1"}
    created = inventory_time()
    manifest = write_s3_inventory(s3, s3_bucket, s3_bucket, [*objects, marker, older], file_format, created, per_file=7)
    cutoff = created

    listed = _dry(table, cutoff)
    inventoried = _dry(table, cutoff, manifest)
    assert set(listed.orphan_files) == orphans
    assert sorted(inventoried.orphan_files) == sorted(listed.orphan_files)
    assert inventoried.files_listed == listed.files_listed
    # No LIST of the table's files; one of <folder>/metadata/ for each folder below the root holding an
    # orphan (data, data/ünïcode, metadata): whether another table lives there now (S8).
    assert inventoried.list_calls == 3 and listed.list_calls > 3

    real = remove_orphan_files(
        table,
        OrphanOptions(older_than=cutoff, listing=manifest, only_this_table=True),
        sources=[INDEX_FILES],
    )
    assert real.deleted_file_count == len(orphans) and real.failed == []
    files = Files(table)
    assert not any(files.exists(o) for o in orphans)
    assert files.exists(outside) and files.exists(f"{table.location()}/data/_temporary/hidden.parquet")
    assert len(s3_catalog.load_table("db.inv").scan().to_arrow()) == 25


def test_a_copy_on_local_disk_of_an_inventory_of_current_versions(s3_catalog, s3_bucket, tmp_path):
    """A report copied down as it lies in the bucket: ``<config>/<date>/manifest.json`` beside ``<config>/data/``."""
    table, orphans, _ = _scene(s3_catalog, s3_bucket)
    s3 = s3_client_of(table)
    created = inventory_time()
    objects = bucket_objects(s3, s3_bucket)
    manifest = write_s3_inventory(s3, s3_bucket, s3_bucket, objects, "CSV", created, csv_schema=CSV_CURRENT_SCHEMA)
    for o in bucket_objects(s3, s3_bucket, "inventory/"):
        local = tmp_path / "copy" / o["Key"]
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(s3.get_object(Bucket=s3_bucket, Key=o["Key"])["Body"].read())
    copied = str(tmp_path / "copy" / manifest.split(f"s3://{s3_bucket}/", 1)[1])
    assert set(_dry(table, created, copied).orphan_files) == orphans


def test_a_file_missing_from_the_inventory_is_kept(s3_catalog, s3_bucket):
    table, orphans, _ = _scene(s3_catalog, s3_bucket)
    s3 = s3_client_of(table)
    objects = bucket_objects(s3, s3_bucket)
    left_out = f"{table.location()}/data/orphan-1.parquet"
    objects = [o for o in objects if not left_out.endswith("/" + o["Key"])]
    created = inventory_time()
    manifest = write_s3_inventory(s3, s3_bucket, s3_bucket, objects, "CSV", created)
    report = remove_orphan_files(
        table, OrphanOptions(older_than=created, listing=manifest, only_this_table=True), sources=[INDEX_FILES]
    )
    assert set(report.orphan_files) == orphans - {left_out}
    assert Files(table).exists(left_out)


def test_a_listed_file_gone_when_deleting_counts_as_deleted(s3_catalog, s3_bucket):
    table, orphans, _ = _scene(s3_catalog, s3_bucket)
    s3 = s3_client_of(table)
    created = inventory_time()
    manifest = write_s3_inventory(s3, s3_bucket, s3_bucket, bucket_objects(s3, s3_bucket), "Parquet", created)
    gone = f"{table.location()}/data/orphan-1.parquet"
    s3.delete_object(Bucket=s3_bucket, Key=gone.split(f"{s3_bucket}/", 1)[1])
    report = remove_orphan_files(
        table, OrphanOptions(older_than=created, listing=manifest, only_this_table=True), sources=[INDEX_FILES]
    )
    assert set(report.orphan_files) == orphans
    assert report.deleted_file_count == len(orphans) and report.failed == []


def test_a_file_committed_after_the_inventory_is_kept(s3_catalog, s3_bucket):
    table, orphans, _ = _scene(s3_catalog, s3_bucket)
    s3 = s3_client_of(table)
    created = inventory_time()
    manifest = write_s3_inventory(s3, s3_bucket, s3_bucket, bucket_objects(s3, s3_bucket), "CSV", created)
    table.append(rows(100, 1))  # its manifests and data are not in the inventory: never candidates
    before = table.inspect.files().column("file_path").to_pylist()
    report = remove_orphan_files(
        s3_catalog.load_table("db.inv"),
        OrphanOptions(older_than=created, listing=manifest, only_this_table=True),
        sources=[INDEX_FILES],
    )
    assert set(report.orphan_files) == orphans
    assert all(Files(table).exists(p) for p in before)
    assert len(s3_catalog.load_table("db.inv").scan().to_arrow()) == 26


def test_a_listed_file_a_commit_during_the_scan_references_is_kept_by_the_re_check(s3_catalog, s3_bucket):
    table, orphans, _ = _scene(s3_catalog, s3_bucket)
    late = f"{table.location()}/data/late.parquet"  # the name sources.COMMIT_LATE_FILE commits
    sink = io.BytesIO()
    pq.write_table(rows(100, 5).cast(SCHEMA.as_arrow()), sink)
    Files(table).put(late, sink.getvalue())
    s3 = s3_client_of(table)
    created = inventory_time()
    manifest = write_s3_inventory(s3, s3_bucket, s3_bucket, bucket_objects(s3, s3_bucket), "Parquet", created)
    report = remove_orphan_files(
        table,
        OrphanOptions(older_than=created, listing=manifest, only_this_table=True),
        sources=[INDEX_FILES, sources.COMMIT_LATE_FILE],
    )
    assert report.kept_by_recheck == 1
    assert set(report.orphan_files) == orphans and report.deleted_file_count == len(orphans)
    assert Files(table).exists(late)
    assert len(s3_catalog.load_table("db.inv").scan().to_arrow()) == 30


@pytest.mark.parametrize("suffix", ["parquet", "csv"])
def test_a_plain_file_of_path_size_time_gives_the_listed_result(s3_catalog, s3_bucket, tmp_path, suffix):
    table, orphans, outside = _scene(s3_catalog, s3_bucket)
    objects = bucket_objects(s3_client_of(table), s3_bucket)
    # s3a:// spells the same objects; another bucket's file is outside the scan location.
    plain = [(f"s3a://{s3_bucket}/{o['Key']}", o["Size"], o["LastModified"]) for o in objects]
    plain.append(("s3://other-bucket/warehouse/db/inv/data/orphan-1.parquet", 1, objects[0]["LastModified"]))
    listing = write_plain(str(tmp_path / f"listing.{suffix}"), plain)
    # A plain file's time is its modification time (the file system's clock may lag the process's by a tick).
    cutoff = datetime.fromtimestamp(os.stat(listing).st_mtime, UTC)
    listed = _dry(table, cutoff)
    inventoried = _dry(table, cutoff, listing)
    assert set(inventoried.orphan_files) == orphans
    assert sorted(inventoried.orphan_files) == sorted(listed.orphan_files) and inventoried.list_calls == 3
    assert Files(table).exists(outside)


def test_a_cutoff_later_than_the_inventory_is_refused_and_nothing_changes(s3_catalog, s3_bucket):
    table, orphans, _ = _scene(s3_catalog, s3_bucket)
    s3 = s3_client_of(table)
    created = inventory_time() - timedelta(days=5)
    manifest = write_s3_inventory(s3, s3_bucket, s3_bucket, bucket_objects(s3, s3_bucket), "CSV", created)
    with pytest.raises(InvalidInputError, match=r"listing s3://.*manifest\.json: taken at .* before the cutoff"):
        remove_orphan_files(table, OrphanOptions(listing=manifest, older_than_days=3), sources=[INDEX_FILES])
    assert all(Files(table).exists(o) for o in orphans)
    earlier = remove_orphan_files(
        table,
        OrphanOptions(listing=manifest, older_than=created, only_this_table=True),
        sources=[INDEX_FILES],
    )
    assert earlier.orphan_files == [] and earlier.deleted_file_count == 0  # every file is newer than 5 days


def test_bad_listings_are_refused_naming_the_input(s3_catalog, s3_bucket, tmp_path):
    table, orphans, _ = _scene(s3_catalog, s3_bucket)
    s3 = s3_client_of(table)
    now = datetime.now(UTC)

    def refused(listing, match, on=table):
        with pytest.raises(InvalidInputError, match=match):
            remove_orphan_files(on, OrphanOptions(listing=listing, older_than=now), sources=[INDEX_FILES])

    s3.put_object(Bucket=s3_bucket, Key="inv/manifest.json", Body=b'{"fileFormat": "JSON", "files": []}')
    refused(f"s3://{s3_bucket}/inv/manifest.json", "fileFormat 'JSON': expected one of CSV, ORC, Parquet")
    s3.put_object(Bucket=s3_bucket, Key="inv/m2/manifest.json", Body=b'{"fileFormat": "CSV", "fileSchema": "Key"}')
    refused(f"s3://{s3_bucket}/inv/m2/manifest.json", "fileSchema lacks Bucket, Size, LastModifiedDate")
    refused(f"s3://{s3_bucket}/inv/none/manifest.json", "does not exist")
    refused(str(tmp_path / "listing.txt"), r"expected an S3 Inventory manifest\.json, a \.parquet file")
    (tmp_path / "bad.csv").write_text("name,bytes\nx,1\n")
    refused(str(tmp_path / "bad.csv"), "not a CSV file with a header path,size,last_modified")
    refused("", "listing: must not be empty")
    local = SqlCatalog("local", uri=f"sqlite:///{tmp_path}/local.db", warehouse=f"file://{tmp_path}/wh")
    local.create_namespace("db")
    local_table = local.create_table("db.local", schema=SCHEMA)
    refused(str(tmp_path / "bad.csv"), "is on local disk, which is listed directly", on=local_table)
    assert all(Files(table).exists(o) for o in orphans)
