"""``listing=`` on the orphan operator: a templated inventory, read instead of listing the table's S3 location."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.airflow.operators.orphans import IcebergRemoveOrphanFilesOperator
from tests.orphans.inventories import bucket_objects, inventory_time, s3_client_of, write_s3_inventory
from tests.orphans.scenario import SCHEMA, Files, rows
from tests.support.airflow_dags import remover
from tests.support.services import S3_PROPS


@pytest.fixture
def s3_table(tmp_path: Path, s3_endpoint: str, s3_bucket: str, monkeypatch: pytest.MonkeyPatch):
    """A table on the local S3 server behind the ``iceberg_default`` connection, with two orphans."""
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"s3://{s3_bucket}/warehouse"}
    props.update({"s3.endpoint": s3_endpoint, **S3_PROPS})
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_DEFAULT", json.dumps({"conn_type": "iceberg", "extra": props}))
    catalog = SqlCatalog("iceberg_default", **{k: v for k, v in props.items() if k != "type"})
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=SCHEMA)
    table.append(rows(0, 5))
    files = Files(table)
    orphans = {files.put(f"{table.location()}/data/orphan-{i}.parquet") for i in range(2)}
    return table, orphans


def test_listing_is_templated() -> None:
    assert "listing" in IcebergRemoveOrphanFilesOperator.template_fields


def test_the_operator_reads_an_inventory_and_deletes_exactly_the_orphans(
    s3_table, s3_bucket: str, state_url: str, tmp_path: Path, context: Context
) -> None:
    table, orphans = s3_table
    s3 = s3_client_of(table)
    created = inventory_time()
    manifest = write_s3_inventory(s3, s3_bucket, s3_bucket, bucket_objects(s3, s3_bucket), "Parquet", created)
    operator = remover(
        state_url, tmp_path, table="db.t", listing=manifest, older_than=created.isoformat(), allow_recent_files=True
    )
    summary = operator.execute(context)
    # One LIST: data/metadata/, the metadata folder of the one folder holding orphans (S8).
    assert summary["deleted_file_count"] == 2 and summary["list_calls"] == 1
    report = json.loads(Path(summary["report"].removeprefix("file://")).read_text())
    assert set(report["orphan_files"]) == orphans
    assert not any(Files(table).exists(o) for o in orphans)


def test_a_cutoff_later_than_the_inventory_fails_the_task_and_deletes_nothing(
    s3_table, s3_bucket: str, state_url: str, tmp_path: Path, context: Context
) -> None:
    table, orphans = s3_table
    s3 = s3_client_of(table)
    manifest = write_s3_inventory(
        s3, s3_bucket, s3_bucket, bucket_objects(s3, s3_bucket), "CSV", inventory_time() - timedelta(days=4)
    )
    with pytest.raises(AirflowFailException, match=r"listing s3://.*manifest\.json: taken at .* before the cutoff"):
        remover(state_url, tmp_path, table="db.t", listing=manifest).execute(context)
    assert all(Files(table).exists(o) for o in orphans)
