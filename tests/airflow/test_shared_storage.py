"""Under an executor that is not local, nothing one task hands another sits on a worker's local disk.

Each operator that writes what another task, a retry on another worker or the api-server reads (a
report, the sharded scan's scratch, the shared catalog pass, the cleanup state and leases) refuses a
local location with one line naming it and the executor, before it reads or deletes anything; under
the local executor the same arguments still work (the rest of tests/airflow runs that way).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.airflow.hooks.maintenance import IcebergMaintenanceHook
from airflow_iceberg_maint.airflow.operators.expiry import IcebergExpireSnapshotsOperator
from airflow_iceberg_maint.airflow.operators.orphan_planning import IcebergOrphanPolicyExpansionOperator
from airflow_iceberg_maint.airflow.operators.orphan_shards import IcebergPlanOrphanShardsOperator
from airflow_iceberg_maint.airflow.operators.orphans import IcebergRemoveOrphanFilesOperator
from airflow_iceberg_maint.airflow.shared_storage import distributed_executor, is_local_uri
from airflow_iceberg_maint.airflow.table_lease import lease_store_for
from airflow_iceberg_maint.errors import InvalidInputError
from tests.support.airflow_dags import DAGS

CELERY = "airflow.providers.celery.executors.celery_executor.CeleryExecutor"


@pytest.mark.parametrize(
    ("configured", "expected"),
    [
        ("LocalExecutor", None),
        ("", None),
        ("SequentialExecutor", None),
        ("CeleryExecutor", "CeleryExecutor"),
        (CELERY, "CeleryExecutor"),
        ("KubernetesExecutor", "KubernetesExecutor"),
        ("LocalExecutor, KubernetesExecutor", "KubernetesExecutor"),
        (
            "fast:LocalExecutor,k8s:airflow.providers.cncf.kubernetes.executors.kubernetes_executor.KubernetesExecutor",
            "KubernetesExecutor",
        ),
        ("CeleryKubernetesExecutor", "CeleryKubernetesExecutor"),
        ("my_company.executors.EdgeExecutor", "EdgeExecutor"),
    ],
)
def test_which_configured_executors_run_a_runs_tasks_on_other_hosts(configured: str, expected: str | None) -> None:
    assert distributed_executor(configured) == expected


@pytest.mark.parametrize(
    ("uri", "local"),
    [
        ("/var/reports", True),
        ("reports", True),
        ("file:///var/reports", True),
        ("FILE:/var/reports", True),
        (" file:///x ", True),
        ("s3://ops/reports", False),
        ("s3a://ops/reports", False),
        ("gs://ops/reports", False),
        ("abfss://c@a.dfs.core.windows.net/r", False),
    ],
)
def test_a_local_uri_is_a_path_or_file_scheme(uri: str, local: bool) -> None:
    assert is_local_uri(uri) is local


@pytest.fixture
def on_celery(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", CELERY)


def _operators(tmp_path: Path, report_location: str | None) -> dict[str, Any]:
    """Every operator that writes under the report location, with that location (None: the default)."""
    where = {"report_location": report_location} if report_location else {}
    job: dict[str, Any] = {"table": "demo.orders", "older_than_days": 3, **where}
    return {
        "orphan removal report": IcebergRemoveOrphanFilesOperator(task_id="remove", dry_run=False, **job),
        "sharded scan scratch": IcebergPlanOrphanShardsOperator(task_id="plan_shards", shards=2, dry_run=False, **job),
        "expiry report": IcebergExpireSnapshotsOperator(task_id="expire", table="demo.orders", **where),
        "shared catalog pass": IcebergOrphanPolicyExpansionOperator(
            task_id="plan", policy_file=str(DAGS / "iceberg_maint_policies.yaml"), **where
        ),
    }


@pytest.mark.parametrize(
    "what", ["orphan removal report", "sharded scan scratch", "expiry report", "shared catalog pass"]
)
@pytest.mark.parametrize("location", ["default", "file", "path"])
def test_on_celery_each_task_refuses_a_local_report_location_and_deletes_nothing(
    what: str, location: str, on_celery: None, demo_tables: dict, context: Context, tmp_path: Path
) -> None:
    given = {"default": None, "file": f"file://{tmp_path}/reports", "path": str(tmp_path / "reports")}[location]
    operator = _operators(tmp_path, given)[what]
    with pytest.raises(AirflowFailException) as refused:
        operator.execute(context)
    message = str(refused.value)
    assert "on this worker's local disk, but the executor CeleryExecutor runs a run's tasks on other hosts" in message
    assert "report_location" in message and "\n" not in message
    assert demo_tables["demo.orders"]["old"].exists()  # nothing deleted
    assert not (tmp_path / "reports").exists()  # nothing written


def test_on_the_local_executor_the_same_local_report_location_works(
    demo_tables: dict, context: Context, tmp_path: Path, state_url: str
) -> None:
    operator = IcebergRemoveOrphanFilesOperator(
        task_id="remove",
        table="demo.orders",
        older_than_days=3,
        dry_run=False,
        report_location=f"file://{tmp_path}/reports",
        state_url=state_url,
    )
    summary = operator.execute(context)
    assert summary["deleted_file_count"] == 1 and not demo_tables["demo.orders"]["old"].exists()
    assert Path(summary["report"].removeprefix("file://")).exists()


@pytest.mark.parametrize("url", ["sqlite:////var/lib/state.db", "sqlite+pysqlite:///state.db", "SQLITE:///x.db"])
def test_on_celery_a_sqlite_state_url_is_refused_for_the_state_the_records_and_the_leases(
    url: str, on_celery: None, catalog: SqlCatalog
) -> None:
    hook = IcebergMaintenanceHook(state_url=url)
    for reach in (lambda: hook.state_store, lambda: hook.record_store, lambda: lease_store_for(url)):
        with pytest.raises(InvalidInputError, match=r"^state_url '.*': a SQLite file on this worker's local disk"):
            reach()


def test_on_celery_the_configured_sqlite_state_url_fails_the_removal_task_before_it_deletes(
    on_celery: None, demo_tables: dict, context: Context, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__ICEBERG_MAINT__STATE_URL", f"sqlite:///{tmp_path}/state.db")
    operator = IcebergRemoveOrphanFilesOperator(
        task_id="remove", table="demo.orders", older_than_days=3, dry_run=False, report_location="s3://ops/reports"
    )
    with pytest.raises(AirflowFailException, match="a SQLite file on this worker's local disk"):
        operator.execute(context)
    assert demo_tables["demo.orders"]["old"].exists()


def test_on_the_local_executor_a_sqlite_state_url_still_works(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    hook = IcebergMaintenanceHook(state_url=url)
    assert hook.state_store is not None and lease_store_for(url) is not None
