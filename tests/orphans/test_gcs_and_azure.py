"""GCS and Azure specifics: batch sizes, hierarchical-namespace folder markers, and the schemes refused."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime

import pytest

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.fs.adls import MAX_BLOBS_PER_BATCH, AzureStorage
from airflow_iceberg_maint.fs.gcs import MAX_CALLS_PER_BATCH, GcsStorage
from airflow_iceberg_maint.fs.locations import Uri
from airflow_iceberg_maint.fs.storage import storage_for
from airflow_iceberg_maint.index.references import INDEX_FILES
from airflow_iceberg_maint.orphans.removal import OrphanOptions, remove_orphan_files
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
