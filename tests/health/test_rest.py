"""Health on SeaweedFS's Iceberg REST catalog and S3: the statistics, the expiry's agreement and the fleet scan,
with the manifests read from the object store on threads."""

from __future__ import annotations

from typing import Any

from airflow_iceberg_maint import expire_snapshots, fleet_health, table_health
from tests.health.tables import SCHEMA, batch


def test_health_and_the_fleet_scan_on_a_rest_catalog(rest_catalog: Any) -> None:
    smalls = rest_catalog.create_table("db.smalls", schema=SCHEMA, properties={"format-version": "2"})
    for i in range(3):
        smalls.append(batch("a", i, 2))
    rest_catalog.create_table("db.one", schema=SCHEMA).append(batch("a", 0, 3))
    with smalls.transaction() as tx:
        tx.set_properties({"history.expire.max-snapshot-age-ms": "1"})

    body = table_health("db.smalls", catalog=rest_catalog).to_json()
    files = smalls.inspect.data_files().to_pylist()
    manifests = smalls.inspect.manifests().to_pylist()
    assert (body["data_files"], body["data_bytes"]) == (3, sum(f["file_size_in_bytes"] for f in files))
    assert (body["manifests"], body["manifest_bytes"]) == (3, sum(m["length"] for m in manifests))
    assert body["snapshots"] == 3 and body["small_data_files"] == 3
    dry = expire_snapshots("db.smalls", catalog=rest_catalog)  # a dry run with the table's defaults
    assert body["expirable_snapshot_ids"] == dry.expired_snapshot_ids and len(dry.expired_snapshot_ids) == 2
    assert body["expirable_bytes"] == dry.deleted_bytes > 0

    reports = fleet_health(rest_catalog, namespace="db", parallelism=2)
    assert [r.table for r in reports] == ["db.smalls", "db.one"] and not reports.failed
    assert reports[0].score < reports[1].score == 100
