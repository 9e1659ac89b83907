"""The due sensor, the orphan-removal operator, the manual sample DAG (one task, then sharded) and the
scheduled table-maintenance DAG (expire, then remove orphans)
through an ``iceberg`` connection of type ``rest`` to SeaweedFS's Iceberg REST catalog (host = catalog
URI, login and password = the OAuth2 client), with the catalog property ``snapshot-loading-mode=refs``:
every run still sees every snapshot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk import Context

from airflow_iceberg_maint.airflow.operators.index import IcebergCommitIndexExtractOperator
from airflow_iceberg_maint.airflow.operators.index_definitions import IcebergCreateMissingIndexesOperator
from airflow_iceberg_maint.catalog import load_table
from airflow_iceberg_maint.expiry.settings import MAX_SNAPSHOT_AGE
from airflow_iceberg_maint.index.metadata.spec import INDEX_PATH_PROPERTY
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.index.read.lookup import lookup
from tests.airflow.helpers import check_due_sensor, task_states, xcom
from tests.expiry.history import reachable
from tests.orphans.catalog_cases import cutoff_after_writes, hiding_history, whole_table
from tests.orphans.scenario import SCHEMA, Files, snapshot_row_counts
from tests.support.airflow_dags import DAGS, remover
from tests.support.services import create_plain_bucket

pytestmark = pytest.mark.rest
MANUAL = "iceberg_orphan_cleanup_manual"
SCHEDULED = "iceberg_table_maintenance_scheduled"


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
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_DEFAULT", json.dumps(connection))  # the sample DAGs' connection
    return catalog


def test_due_sensor_on_a_rest_table(rest_conn: Any, tmp_path: Path, context: Context) -> None:
    table = rest_conn.create_table("db.orders", schema=SCHEMA)
    hiding_history(table)
    check_due_sensor("rest_maint", table, "db.orders", tmp_path, context)


def test_operator_removes_exactly_the_orphans_of_a_rest_table_seen_with_refs_only(
    rest_conn: Any, tmp_path: Path, context: Context
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


def test_manual_dag_single_and_sharded_on_a_rest_table(rest_conn: Any) -> None:
    table = rest_conn.create_table("db.orders", schema=SCHEMA)
    hiding_history(table)
    whole = whole_table(table)
    files = Files(whole)
    loc = whole.location().rstrip("/")
    planted = {files.put(f"{loc}/data/orphan-1.parquet"), files.put(f"{loc}/metadata/orphan-2.avro")}
    rows_before = snapshot_row_counts(whole)
    before = files.all_files(loc)
    cutoff_after_writes()  # older_than_days 0 is the run's start: later than every write (whole seconds)
    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    dag = bag.dags[MANUAL]
    conf = {"table": "db.orders", "older_than_days": 0, "allow_recent_files": True}

    preview = dag.test(run_conf=conf)
    assert preview.state == "success"
    dry = xcom(MANUAL, preview.run_id, "remove_orphan_files")
    assert (dry["orphan_file_count"], dry["deleted_file_count"], dry["failed_count"]) == (2, 0, 0)
    report = json.loads(Path(dry["report"].removeprefix("file://")).read_text())
    assert sorted(report["orphan_files"]) == sorted(planted)
    assert files.all_files(loc) == before

    real = dag.test(run_conf={**conf, "dry_run": False, "shards": 2})
    assert real.state == "success"
    states = task_states(MANUAL, real.run_id)
    assert {k: v for k, v in states.items() if k[0] == "scan_orphan_shard"} == {
        ("scan_orphan_shard", 0): "success",
        ("scan_orphan_shard", 1): "success",
    }
    summary = xcom(MANUAL, real.run_id, "finish_orphan_shards")
    assert (summary["orphan_file_count"], summary["deleted_file_count"], summary["failed_count"]) == (2, 2, 0)
    assert files.all_files(loc) == before - planted
    assert snapshot_row_counts(whole_table(rest_conn.load_table("db.orders"))) == rows_before


def test_index_operators_with_an_index_location_on_a_rest_table(
    rest_conn: Any, tmp_path: Path, context: Context
) -> None:
    table = rest_conn.create_table("db.orders", schema=SCHEMA)
    hiding_history(table)
    root = f"s3://{create_plain_bucket()}/indexes/orders"
    definitions = tmp_path / "indexes.yaml"
    definitions.write_text(
        f"- table: db.orders\n  index_location: {root}\n  indexes:\n"
        "    - name: by_id\n      ordering: id\n      with_row_location: true\n"
    )

    def create() -> Any:
        operator = IcebergCreateMissingIndexesOperator(
            task_id="create", definitions_file=str(definitions), iceberg_conn_id="rest_maint"
        )
        return operator.execute(context)

    assert create() == [{"table": "db.orders", "index": "by_id", "created": True}]
    assert rest_conn.load_table("db.orders").properties[INDEX_PATH_PROPERTY] == root
    assert create() == [{"table": "db.orders", "index": "by_id", "created": False}]
    IcebergCommitIndexExtractOperator(
        task_id="commit", table="db.orders", index="by_id", iceberg_conn_id="rest_maint"
    ).execute(context)
    loaded = load_table(rest_conn, "db.orders")
    metadata, location, _ = IndexStore(loaded).load("by_id")
    assert location == f"{root}/by_id/metadata/00002.metadata.json" and len(metadata.extracts) == 1
    found = lookup(loaded, "by_id", [(201,)])
    assert (found.rows.column("id").to_pylist(), found.mode) == ([201], "index")


def test_scheduled_maintenance_dag_on_a_rest_table_expires_what_only_hidden_snapshots_reached(rest_conn: Any) -> None:
    """``iceberg_table_maintenance_scheduled`` (its policies attach to ``demo.*``) through the connection,
    in refs mode: the expiry sees the seven snapshots the catalog hides, removes them and exactly the files
    only they reached; the orphan scan after it keeps a planted orphan younger than the policy's 3 days."""
    rest_conn.create_namespace("demo")
    table = rest_conn.create_table("demo.orders", schema=SCHEMA)
    hiding_history(table)
    with table.transaction() as tx:  # every snapshot but main's head is past its age
        tx.set_properties({MAX_SNAPSHOT_AGE: "0"})
    whole = whole_table(rest_conn.load_table("demo.orders"))
    files = Files(whole)
    loc = whole.location().rstrip("/")
    fresh = files.put(f"{loc}/data/orphan-fresh.parquet")
    before, reached_before = files.all_files(loc), reachable(whole)
    head = whole.metadata.current_snapshot_id
    rows_before = snapshot_row_counts(whole)[f"snapshot:{head}"]
    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}

    run = bag.dags[SCHEDULED].test()

    assert run.state == "success"
    assert task_states(SCHEDULED, run.run_id) == {
        ("plan_due_tables", -1): "success",
        ("maintain_table.rewrite_data_files", 0): "skipped",  # the sample's compaction policy is disabled
        ("maintain_table.rewrite_manifests", 0): "skipped",
        ("maintain_table.expire_snapshots", 0): "success",
        ("maintain_table.remove_orphan_files", 0): "success",
    }
    after_table = whole_table(rest_conn.load_table("demo.orders"))
    assert [s.snapshot_id for s in after_table.metadata.snapshots] == [head]
    after, reached_after = files.all_files(loc), reachable(after_table)
    assert before - after == reached_before - reached_after  # exactly what only the expired snapshots reached
    assert reached_after <= after and fresh in after
    assert snapshot_row_counts(after_table) == {f"snapshot:{head}": rows_before, "ref:main": rows_before}
    expired = xcom(SCHEDULED, run.run_id, "maintain_table.expire_snapshots", map_index=0)
    assert (expired["expired_snapshot_count"], expired["deleted_file_count"]) == (7, len(before - after))
    removed = xcom(SCHEDULED, run.run_id, "maintain_table.remove_orphan_files", map_index=0)
    assert (removed["orphan_file_count"], removed["deleted_file_count"]) == (0, 0)
