"""The score's deductions on real tables: each names its cause and remedy, and the points add up to 100 - score."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint import table_health
from airflow_iceberg_maint.state.cleanup import SqlStateStore, record_orphan_run
from tests.expiry.history import build_history
from tests.health.tables import SCHEMA, batch
from tests.support.health import Ran


def _points(body: dict) -> dict[str, int]:
    assert sum(d["points"] for d in body["deductions"]) == 100 - body["score"]
    return {d["remedy"]: d["points"] for d in body["deductions"]}


def test_small_files_deletes_and_expirable_bytes(sqlite_catalog: SqlCatalog) -> None:
    history = build_history(sqlite_catalog)
    with history.table.transaction() as tx:
        tx.set_properties({"history.expire.max-snapshot-age-ms": "1"})
    body = table_health(history.table).to_json()
    live = body["data_bytes"] + body["delete_bytes"] + body["manifest_bytes"]
    expected_expirable = min(20, int(40 * body["expirable_bytes"] / (live + body["expirable_bytes"]) + 0.5))
    assert body["deductions"][0] == {
        "cause": "5 of 5 data files are small and share a partition",
        "points": 25,
        "remedy": "rewrite-data-files",
    }
    # 4 of 35 rows deleted: 50 x 4/35 = 5.7 -> 6.
    assert {"cause": "delete files remove 4 of 35 rows", "points": 6, "remedy": "rewrite-data-files"} in body[
        "deductions"
    ]
    assert {
        "cause": f"8 expirable snapshots hold {body['expirable_bytes']} bytes",
        "points": expected_expirable,
        "remedy": "expire-snapshots",
    } in body["deductions"]
    assert expected_expirable > 0
    assert body["score"] == 100 - 25 - 6 - expected_expirable
    _points(body)


def test_surplus_manifests_cost_a_point_each_ten(sqlite_catalog: SqlCatalog) -> None:
    table = sqlite_catalog.create_table("db.appends", schema=SCHEMA)
    for i in range(23):
        table.append(batch("a", i, 1))
    body = table_health(table, target_file_size_bytes=1).to_json()  # no file is small: only the manifests count
    # 23 data manifests of a few KiB: one would do under the 8 MiB target, 22 are surplus.
    assert (body["manifests"], body["surplus_manifests"]) == (23, 22)
    assert body["deductions"] == [
        {"cause": "22 manifests more than the target manifest size needs", "points": 2, "remedy": "rewrite-manifests"}
    ]
    assert body["score"] == 98


def test_the_last_orphan_runs_findings_come_from_the_state_store(
    sqlite_catalog: SqlCatalog, cli: Callable[..., Ran]
) -> None:
    table = sqlite_catalog.create_table("db.t", schema=SCHEMA)
    table.append(batch("a", 0, 10, payload_bytes=50))
    uuid = str(table.metadata.table_uuid)
    assert cli("health", "db.t", "--json").json["last_orphan_run"] is None  # none recorded: null, never a guess
    before = cli("health", "db.t", "--json").json
    live = before["data_bytes"] + before["manifest_bytes"]
    orphan_bytes = 3 * live  # three quarters of the storage: 30 x 0.75 = 22.5, capped at 15
    at = datetime.now(UTC) - timedelta(days=2)
    summary = {
        "table_uuid": uuid,
        "table": "db.t",
        "dry_run": True,
        "orphan_file_count": 3,
        "orphan_bytes": orphan_bytes,
        "deleted_file_count": 0,
        "failed": [],
    }
    record_orphan_run(SqlStateStore(), summary, at)

    body = cli("health", "db.t", "--json").json
    findings = body["last_orphan_run"]
    assert findings["at"] == at.isoformat() and findings["dry_run"] is True
    assert (findings["orphan_files"], findings["orphan_bytes"], findings["orphan_bytes_left"]) == (
        3,
        orphan_bytes,
        orphan_bytes,
    )
    assert 1.99 < findings["age_days"] < 2.01
    orphans = {"cause": f"the last orphan run found {orphan_bytes} orphan bytes", "points": 15, "remedy": "orphans"}
    assert orphans in body["deductions"]
    assert body["score"] == 100 - 15

    # A real run that deleted them all leaves nothing to deduct.
    done = {**summary, "dry_run": False, "deleted_file_count": 3}
    record_orphan_run(SqlStateStore(), done, datetime.now(UTC))
    after = cli("health", "db.t", "--json").json
    assert after["last_orphan_run"]["orphan_bytes_left"] == 0
    assert "orphans" not in _points(after)
    # The Python API takes the record the state store gives.
    api = table_health("db.t", catalog=sqlite_catalog, last_orphan_run=SqlStateStore().get(uuid)).to_json()
    assert api["last_orphan_run"]["deleted_files"] == 3


def test_an_unpartitioned_lone_small_file_costs_nothing(sqlite_catalog: SqlCatalog) -> None:
    table = sqlite_catalog.create_table("db.one", schema=SCHEMA)
    table.append(pa.concat_tables([batch("a", 0, 5)]))
    body = table_health(table).to_json()
    assert body["small_data_files"] == 1 and (body["score"], body["deductions"]) == (100, [])
