"""GCS and Azure specifics: batch sizes, deletes refused in a batch, hierarchical-namespace folder markers, and
the schemes refused."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.fs.adls import MAX_BLOBS_PER_BATCH, AzureStorage
from airflow_iceberg_maint.fs.backends import storage_for
from airflow_iceberg_maint.fs.gcs import MAX_CALLS_PER_BATCH, GcsStorage
from airflow_iceberg_maint.fs.locations import Uri
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from tests.fs.batch_faults import GCS_REFUSALS, BatchFaults, gcs_refusal
from tests.fs.test_batch_failures import LEASED
from tests.orphans.scenario import SCHEMA, Files, rows


@pytest.mark.parametrize(
    ("backend", "limit"), [("gcs_catalog", MAX_CALLS_PER_BATCH), ("azure_catalog", MAX_BLOBS_PER_BATCH)]
)
def test_deletes_in_batches_of_the_store_limit(request, backend, limit):
    catalog = request.getfixturevalue(backend)
    table = catalog.create_table("db.many", schema=SCHEMA)
    table.append(rows(0, 10))
    files = Files(table)
    loc = table.location()
    orphans = {files.put(f"{loc}/data/orphan-{i:05d}.parquet") for i in range(limit + 1)}
    time.sleep(1.2)
    report = remove_orphan_files(table, OrphanOptions(older_than=datetime.now(UTC)), sources=[INDEX_FILES])
    assert set(report.orphan_files) == orphans
    assert report.deleted_file_count == limit + 1
    assert report.delete_requests == math.ceil((limit + 1) / limit) == 2
    assert files.all_files(f"{loc}/data") & orphans == set()
    assert len(catalog.load_table("db.many").scan().to_arrow()) == 10


def _table_with_orphans(catalog, name, *orphans):
    """A table ``name`` of three rows, its ``Files``, and the paths of ``data/<orphan>.parquet`` planted under it."""
    table = catalog.create_table(name, schema=SCHEMA)
    table.append(rows(0, 3))
    files = Files(table)
    return files, [files.put(f"{table.location()}/data/{orphan}.parquet") for orphan in orphans]


def _remove_orphans(table):
    time.sleep(1.2)  # the planted files are older than the cutoff
    return remove_orphan_files(table, OrphanOptions(older_than=datetime.now(UTC)), sources=[INDEX_FILES])


def test_azure_run_reports_an_orphan_under_a_lease_failed_and_deletes_the_others(azure_catalog_config):
    from azure.storage.blob import BlobServiceClient

    catalog, config = azure_catalog_config
    files, (a, leased, b) = _table_with_orphans(catalog, "db.leased", "a", "leased", "b")
    uri = Uri.parse(leased)
    service = BlobServiceClient.from_connection_string(config["adls.connection-string"])
    blob = service.get_blob_client(uri.authority.partition("@")[0], uri.path.lstrip("/"))
    blob.acquire_lease(-1)  # an infinite lease: Azurite refuses the delete, as Azure does
    report = _remove_orphans(files.table)
    assert set(report.orphan_files) == {a, leased, b}
    assert report.failed == [{"path": leased, "error": LEASED}]
    assert (report.deleted_file_count, report.delete_requests) == (2, 1)
    assert [path for path in (a, leased, b) if files.exists(path)] == [leased]
    assert len(catalog.load_table("db.leased").scan().to_arrow()) == 3


def test_gcs_run_reports_a_refused_orphan_failed_and_deletes_the_others(gcs_catalog_config):
    catalog, config = gcs_catalog_config
    files, (a, denied, busy) = _table_with_orphans(catalog, "db.refused", "a", "denied", "busy")
    # No GCS emulator refuses a delete: a proxy refuses one for good (403) and throttles another once (429).
    faults = {"denied.parquet": [403], "busy.parquet": [429]}
    with BatchFaults(config["gcs.service.host"], faults, gcs_refusal) as proxy:
        report = _remove_orphans(
            SqlCatalog("default", **{**config, "gcs.service.host": proxy.url}).load_table("db.refused")
        )
    assert set(report.orphan_files) == {a, denied, busy}
    assert report.failed == [{"path": denied, "error": f"403: {GCS_REFUSALS[403]}"}]
    assert (report.deleted_file_count, report.delete_requests) == (2, 2)
    assert [sorted(names) for names in proxy.batches] == [
        ["a.parquet", "busy.parquet", "denied.parquet"],
        ["busy.parquet"],
    ]
    assert [path for path in (a, denied, busy) if files.exists(path)] == [denied]
    assert len(catalog.load_table("db.refused").scan().to_arrow()) == 3


def test_azure_folder_markers_of_a_hierarchical_namespace_are_never_listed(azure_catalog):
    table = azure_catalog.create_table("db.hns", schema=SCHEMA)
    table.append(rows(0, 3))
    files = Files(table)
    loc = table.location()
    marker = f"{loc}/data/folder"
    files.store.put(
        Uri.parse(marker).authority, Uri.parse(marker).path.lstrip("/"), b"", metadata={"hdi_isfolder": "true"}
    )
    orphan = files.put(f"{loc}/data/folder/orphan.parquet")
    time.sleep(1.2)
    report = remove_orphan_files(table, OrphanOptions(older_than=datetime.now(UTC)), sources=[INDEX_FILES])
    assert report.orphan_files == [orphan]
    assert files.exists(marker) and not files.exists(orphan)


def test_backends_by_scheme_and_unsupported_schemes_refused():
    gcs = {"gcs.service.host": "http://127.0.0.1:1", "gcs.oauth2.token": "anon"}
    assert isinstance(storage_for("gs://b/t", gcs), GcsStorage)
    conn = {"adls.account-name": "acct", "adls.account-key": "a2V5"}
    for scheme in ("abfs", "abfss", "wasb", "wasbs"):
        storage = storage_for(f"{scheme}://c@acct.dfs.core.windows.net/t", conn)
        assert isinstance(storage, AzureStorage)
        assert storage.service.url == "https://acct.blob.core.windows.net/"
    with pytest.raises(InvalidInputError) as info:
        storage_for("hdfs://nn:8020/wh/t", {})
    assert str(info.value) == (
        "location 'hdfs://nn:8020/wh/t': scheme 'hdfs' is not supported "
        "(expected file, s3, s3a, s3n, gs, gcs, abfs, abfss, wasb or wasbs)"
    )
