"""``IcebergMaintenanceHook`` on a real SQLite catalog connection, and the ``[iceberg_maint]`` options it reads."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook
from airflow.providers_manager import ProvidersManager
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.airflow import config
from airflow_iceberg_maint.airflow.hooks.maintenance import IcebergMaintenanceHook
from airflow_iceberg_maint.airflow.sensors.due import IcebergTableDueSensor
from airflow_iceberg_maint.airflow.variable_store import VariableRecords, VariableStateStore
from airflow_iceberg_maint.errors import InvalidInputError, TableNotFoundError
from airflow_iceberg_maint.policy.lag_threshold import LagThreshold
from airflow_iceberg_maint.policy.policies import parse_policies
from airflow_iceberg_maint.provider_info import CONFIG_OPTIONS, CONFIG_SECTION
from airflow_iceberg_maint.state.cleanup import SqlStateStore, record_attempt
from airflow_iceberg_maint.state.status_records import RunRecord, SqlRecords, index_lag_key, runs_key

LOG = logging.getLogger(__name__)
WEEKLY = parse_policies(
    [{"name": "weekly", "type": "system_iceberg_orphan_file_removal", "minIntervalDays": 7, "tables": ["demo.*"]}]
)


@pytest.fixture
def orders(catalog: SqlCatalog) -> str:
    catalog.create_namespace("demo")
    table = catalog.create_table("demo.orders", pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [1, 2, 3]}))
    return str(table.metadata.table_uuid)


def test_catalog_and_tables_of_the_connection(catalog: SqlCatalog, orders: str) -> None:
    hook = IcebergMaintenanceHook()
    assert isinstance(hook, IcebergHook) and hook.conn_id == "iceberg_default"
    assert hook.catalog is hook.get_conn() and hook.catalog.name == "iceberg_default"
    assert str(hook.load_table("demo.orders").metadata.table_uuid) == orders
    with pytest.raises(TableNotFoundError, match=r"table 'demo\.nope': not found in catalog 'iceberg_default'"):
        hook.load_table("demo.nope")


def test_catalog_name_extra_names_the_catalog(tmp_path: Path, warehouse: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A SQL catalog sees only its own name's tables: ``catalog_name`` reaches those registered as ``prod``."""
    uri = f"sqlite:///{tmp_path}/prod.db"
    prod = SqlCatalog("prod", uri=uri, warehouse=f"file://{warehouse}")
    prod.create_namespace("db")
    prod.create_table("db.t", pa.schema([("id", pa.int64())]))
    extra = {"type": "sql", "uri": uri, "warehouse": f"file://{warehouse}", "catalog_name": "prod"}
    monkeypatch.setenv("AIRFLOW_CONN_PROD_CONN", json.dumps({"conn_type": "iceberg", "extra": extra}))
    hook = IcebergMaintenanceHook("prod_conn")
    assert hook.catalog.name == "prod"
    assert hook.load_table("db.t").name() == ("db", "t")
    monkeypatch.setenv(
        "AIRFLOW_CONN_PROD_CONN", json.dumps({"conn_type": "iceberg", "extra": {**extra, "catalog_name": ""}})
    )
    with pytest.raises(InvalidInputError, match="extra 'catalog_name' must be a non-empty string, got ''"):
        _ = IcebergMaintenanceHook("prod_conn").catalog


def test_an_undefined_connection_says_what_to_set() -> None:
    with pytest.raises(InvalidInputError, match="connection 'nowhere' is not defined: set AIRFLOW_CONN_NOWHERE to"):
        _ = IcebergMaintenanceHook("nowhere").catalog


def test_state_and_records_follow_state_url(
    catalog: SqlCatalog, orders: str, state_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(f"AIRFLOW__{CONFIG_SECTION.upper()}__STATE_URL", raising=False)
    default = IcebergMaintenanceHook()
    assert isinstance(default.state_store, VariableStateStore) and isinstance(default.record_store, VariableRecords)
    hook = IcebergMaintenanceHook(state_url=state_url)
    assert isinstance(hook.state_store, SqlStateStore) and hook.state_store is hook.state_store
    monkeypatch.setenv(f"AIRFLOW__{CONFIG_SECTION.upper()}__STATE_URL", state_url)
    assert isinstance(IcebergMaintenanceHook().state_store, SqlStateStore)

    # Due evaluation reads the table's UUID and its state through the same hook.
    assert hook.evaluate_due("demo.orders", WEEKLY, "policies.yaml").reason == "never cleaned: due"
    cleaned = datetime.now(UTC) - timedelta(days=2)
    record_attempt(hook.state_store, table_uuid=orders, table="demo.orders", at=cleaned, dry_run=False, succeeded=True)
    evaluation = hook.evaluate_due("demo.orders", WEEKLY, "policies.yaml")
    assert (evaluation.due, evaluation.last_cleanup_at) == (False, cleaned)

    run = RunRecord(
        "orphans", cleaned.isoformat(), False, "success", {"deleted_file_count": 2}, phase_seconds={"list": 1.5}
    )
    hook.record_run("demo.orders", run, LOG)
    assert SqlRecords(state_url).get(runs_key("demo.orders")) == {"table": "demo.orders", "runs": [run.to_json()]}


def test_index_lags_are_read_checked_and_recorded(catalog: SqlCatalog, orders: str, state_url: str) -> None:
    from airflow_iceberg_maint.index.metadata.builders import new_index_metadata
    from airflow_iceberg_maint.index.metadata.store import IndexStore

    hook = IcebergMaintenanceHook(state_url=state_url)
    table = hook.load_table("demo.orders")
    IndexStore(table).create(new_index_metadata(table, "by_id", ["id"], [], True, {}), "by_id")
    assert hook.index_lags("demo.orders", ["missing"], missing_ok=True) == []
    (checked,) = hook.check_index_lags("demo.orders", None, LagThreshold(snapshots=0))
    assert (checked.lag.index, checked.lag.snapshots_behind, checked.reasons) == ("by_id", 1, ["no extract yet"])
    for _ in range(2):
        hook.record_index_lags("demo.orders", [checked.to_json()], LOG)
    stored = SqlRecords(state_url).get(index_lag_key("demo.orders"))
    assert stored is not None and stored["indexes"]["by_id"]["lagging"] is True
    assert [(p["snapshots_behind"], p["lagging"]) for p in stored["history"]["by_id"]] == [(1, True), (1, True)]


def test_operators_and_sensors_use_one_cached_hook(state_url: str) -> None:
    sensor = IcebergTableDueSensor(task_id="due", table="demo.orders", iceberg_conn_id="other", state_url=state_url)
    assert sensor.hook is sensor.hook
    assert (sensor.hook.conn_id, sensor.hook.state_url) == ("other", state_url)


#: Each ``[iceberg_maint]`` option, the function of ``airflow.config`` that reads it, and a value to set.
READERS: dict[str, tuple[Callable[[], object], str]] = {
    "report_location": (config.report_location, "s3://ops/reports"),
    "report_conn_id": (config.report_conn_id, "ops_catalog"),
    "policy_file": (lambda: str(config.policy_file()), "/etc/policies.yaml"),
    "index_definitions_file": (lambda: str(config.index_definitions_file()), "/etc/indexes.yaml"),
    "manual_dag_id": (config.manual_dag_id, "my_manual_dag"),
    "state_url": (config.state_url, "sqlite:////tmp/state.db"),
    "catalog_conn_ids": (lambda: ",".join(config.catalog_conn_ids()), "lake,ops_catalog"),
    "digest_cache_location": (config.digest_cache_location, "/var/cache/iceberg-maint/digests"),
}


@pytest.mark.parametrize("option", sorted(READERS))
def test_each_declared_option_is_read(option: str, monkeypatch: pytest.MonkeyPatch) -> None:
    reader, value = READERS[option]
    monkeypatch.setenv(f"AIRFLOW__{CONFIG_SECTION.upper()}__{option.upper()}", value)
    assert reader() == value


def test_the_options_read_are_those_declared_in_the_provider_info() -> None:
    info = ProvidersManager().providers["airflow-iceberg-maint"].data
    assert set(info["config"][CONFIG_SECTION]["options"]) == set(CONFIG_OPTIONS) == set(READERS)
    assert "airflow_iceberg_maint.airflow.hooks.maintenance" in info["hooks"][0]["python-modules"]


def test_the_due_sensors_evaluation_reads_a_policys_trigger(catalog: SqlCatalog, orders: str, state_url: str) -> None:
    hook = IcebergMaintenanceHook(state_url=state_url)
    body = {"name": "weekly", "type": "system_iceberg_orphan_file_removal", "minIntervalDays": 7, "tables": ["demo.*"]}
    quiet = parse_policies([{**body, "trigger": "data_files > 1"}])  # demo.orders has one data file
    evaluation = hook.evaluate_due("demo.orders", quiet, "policies.yaml")
    assert (evaluation.due, evaluation.trigger_value, evaluation.trigger_values) == (False, False, {"data_files": 1})
    busy = parse_policies([{**body, "trigger": "data_files >= 1", "score": "data_rows"}])
    evaluation = hook.evaluate_due("demo.orders", busy, "policies.yaml")
    assert (evaluation.due, evaluation.score) == (True, 3.0)
