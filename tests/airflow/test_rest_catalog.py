"""The due sensor and the orphan-removal operator through an ``iceberg`` connection of type ``rest``
to SeaweedFS's Iceberg REST catalog (host = catalog URI, login and password = the OAuth2 client),
with the catalog property ``snapshot-loading-mode=refs``: the operator still sees every snapshot."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_iceberg_maint.airflow.sensors.due import IcebergTableDueSensor
from airflow_iceberg_maint.policy.state import SqlStateStore, record_attempt
from tests.airflow.conftest import remover
from tests.orphans.catalog_cases import cutoff_after_writes, hiding_history, whole_table
from tests.orphans.scenario import SCHEMA, Files, snapshot_row_counts

pytestmark = pytest.mark.rest


@pytest.fixture
def rest_conn(rest_catalog_config: tuple[Any, dict[str, str]], monkeypatch: pytest.MonkeyPatch) -> Any:
    """Connection ``rest_maint``: the catalog's URI as host, its OAuth2 client as login and password."""
    catalog, config = rest_catalog_config
    login, password = config["credential"].split(":")
    extra = {k: v for k, v in config.items() if k not in ("uri", "credential")}
    connection = {
        "conn_type": "iceberg",
        "host": config["uri"],
        "login": login,
        "password": password,
        "extra": {**extra, "snapshot-loading-mode": "refs"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_REST_MAINT", json.dumps(connection))
    return catalog


def test_due_sensor_on_a_rest_table(rest_conn: Any, tmp_path: Path, context: dict) -> None:
    table = rest_conn.create_table("db.orders", schema=SCHEMA)
    hiding_history(table)
    policy_file = tmp_path / "policies.yaml"
    policy_file.write_text(
        "name: weekly\ntype: system_iceberg_orphan_file_removal\nminIntervalDays: 7\ntables: ['db.*']\n"
    )
    state_url = f"sqlite:///{tmp_path}/state.db"

    def poke() -> Any:
        return IcebergTableDueSensor(
            task_id="due",
            table="db.orders",
            policy_file=str(policy_file),
            state_url=state_url,
            iceberg_conn_id="rest_maint",
        ).poke(context)

    first = poke()
    assert first.is_done is True and first.xcom_value["reason"] == "never cleaned: due"
    record_attempt(
        SqlStateStore(state_url),
        table_uuid=str(table.metadata.table_uuid),
        table="db.orders",
        at=datetime.now(UTC) - timedelta(days=2),
        dry_run=False,
        succeeded=True,
    )
    second = poke()
    assert second.is_done is False
    assert second.xcom_value["reason"] == "last cleaned 2 days ago, interval 7 days: not due"


def test_operator_removes_exactly_the_orphans_of_a_rest_table_seen_with_refs_only(
    rest_conn: Any, tmp_path: Path, context: dict
) -> None:
    table = rest_conn.create_table("db.orders", schema=SCHEMA)
    hiding_history(table)
    whole = whole_table(table)
    files = Files(whole)
    loc = whole.location().rstrip("/")
    planted = {files.put(f"{loc}/data/orphan-1.parquet"), files.put(f"{loc}/metadata/orphan-2.avro")}
    cutoff = cutoff_after_writes()
    before = files.all_files(loc)
    rows_before = snapshot_row_counts(whole)
    state_url = f"sqlite:///{tmp_path}/state.db"

    def run(dry_run: bool) -> dict[str, Any]:
        operator = remover(
            state_url,
            tmp_path,
            table="db.orders",
            iceberg_conn_id="rest_maint",
            older_than=cutoff.isoformat(),
            allow_recent_files=True,
            dry_run=dry_run,
        )
        summary: dict[str, Any] = operator.execute(context)
        return summary

    dry = run(dry_run=True)
    assert (dry["orphan_file_count"], dry["deleted_file_count"], dry["failed_count"]) == (2, 0, 0)
    report = json.loads(Path(dry["report"].removeprefix("file://")).read_text())
    assert sorted(report["orphan_files"]) == sorted(planted)
    assert files.all_files(loc) == before

    real = run(dry_run=False)
    assert (real["orphan_file_count"], real["deleted_file_count"], real["failed_count"]) == (2, 2, 0)
    assert files.all_files(loc) == before - planted
    assert snapshot_row_counts(whole_table(table)) == rows_before
