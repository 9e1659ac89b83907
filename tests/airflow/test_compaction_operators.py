"""The compaction operators, the sharded rewrite's TaskGroup and the scheduled flow's compaction steps, against
real SQLite catalogs and the session's Airflow metadata database.

The tests of the data-files rewrite call the real ``rewrite_data_files`` and ``plan_data_rewrite``
(``airflow_iceberg_maint.api.compaction``); they are skipped until that core is in the tree.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk import DAG, Context
from airflow.sdk.definitions.mappedoperator import MappedOperator
from airflow.sdk.exceptions import AirflowException, AirflowSkipException
from hypothesis import given
from hypothesis import strategies as st
from pyiceberg.catalog.sql import SqlCatalog

import airflow_iceberg_maint.api.compaction as compaction_api
from airflow_iceberg_maint.airflow.compaction_task_group import compaction_task_group
from airflow_iceberg_maint.airflow.operators.compaction import (
    IcebergRewriteDataFilesOperator,
    IcebergRewriteManifestsOperator,
)
from airflow_iceberg_maint.airflow.operators.compaction_planning import IcebergPlanDataRewriteOperator, split_shares
from airflow_iceberg_maint.airflow.operators.maintenance_planning import IcebergMaintenancePlanOperator
from airflow_iceberg_maint.policy.policies import DATA_COMPACTION
from airflow_iceberg_maint.state.cleanup import MANIFEST_REWRITE, SqlStateStore
from airflow_iceberg_maint.state.leases import Lease
from airflow_iceberg_maint.state.sql_leases import SqlLeases
from airflow_iceberg_maint.state.status_records import SqlRecords, runs_key
from tests.airflow.helpers import TaskContextTI, pushed, task_states, xcom
from tests.airflow.test_maintenance_dag import RUN_HISTORIES, no_run_history, variable  # noqa: F401 (a fixture)
from tests.compaction.test_rewrite_manifests import make_table
from tests.expiry.history import snapshot_rows
from tests.lease_helpers import hold
from tests.orphans.scenario import rows
from tests.support.airflow_dags import DAGS, TEST_DAGS

needs_the_core = pytest.mark.skipif(
    not hasattr(compaction_api, "rewrite_data_files"),
    reason="awaits the rewrite-data-files core (api.compaction.rewrite_data_files, plan_data_rewrite)",
)


def operator(kind: type, state_url: str, tmp_path: Path, **kwargs: Any) -> Any:
    return kind(task_id="compact", state_url=state_url, report_location=f"file://{tmp_path}/reports", **kwargs)


@pytest.fixture
def table(catalog: SqlCatalog) -> Any:
    catalog.create_namespace("db")
    return make_table(catalog, partitioned=True, equality=True)


def current_rows(catalog: SqlCatalog, name: str) -> list[int]:
    loaded = catalog.load_table(name)
    return snapshot_rows(loaded)[f"snapshot:{loaded.metadata.current_snapshot_id}"]


def test_the_manifest_rewrite_operator_commits_records_and_pushes_counts(
    table: Any,
    catalog: SqlCatalog,
    state_url: str,
    tmp_path: Path,
    context: Context,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = ".".join(table.name())
    before = current_rows(catalog, name)
    dry = operator(IcebergRewriteManifestsOperator, state_url, tmp_path, table=name, dry_run="true").execute(context)
    assert catalog.load_table(name).metadata_location == table.metadata_location
    summary = operator(IcebergRewriteManifestsOperator, state_url, tmp_path, table=name, policy="p").execute(context)
    after = catalog.load_table(name)
    assert summary == {
        "table": name,
        "dry_run": False,
        "rewritten_manifests": dry["rewritten_manifests"],
        "added_manifests": summary["added_manifests"],
        "commit_count": 1,
        "policy": "p",
        "report": f"file://{tmp_path}/reports/unit/manual__unit/{name}.manifests.json",
    }
    assert summary["added_manifests"] > 0 and dry["commit_count"] == 0 and dry["dry_run"] is True
    assert after.current_snapshot().summary.operation.value == "replace"
    assert current_rows(catalog, name) == before
    report = json.loads(Path(summary["report"].removeprefix("file://")).read_text())
    assert report["stage"] == "done" and report["commits"] == [after.metadata.current_snapshot_id]
    state = SqlStateStore(state_url).get(str(after.metadata.table_uuid), MANIFEST_REWRITE)
    assert state is not None and state.last_attempt_counts == {
        "rewritten_manifests": summary["rewritten_manifests"],
        "added_manifests": summary["added_manifests"],
        "commit_count": 1,
    }
    history = SqlRecords(state_url).get(runs_key(name))
    assert history is not None and [(r["kind"], r["dry_run"]) for r in history["runs"]] == [
        ("manifests", True),
        ("manifests", False),
    ]
    out = capsys.readouterr().out
    assert f"table {name}: rewrote {summary['rewritten_manifests']} manifests into {summary['added_manifests']}" in out


def test_the_manifest_rewrite_operator_runs_only_under_the_lease_and_when_due(
    table: Any, catalog: SqlCatalog, state_url: str, tmp_path: Path
) -> None:
    name = ".".join(table.name())
    location = table.metadata_location
    with pytest.raises(AirflowSkipException, match=f"table {name}: not due for manifest rewrite"):
        operator(IcebergRewriteManifestsOperator, state_url, tmp_path, table=name, enabled=False).execute(
            {"ti": TaskContextTI()}
        )
    store = SqlLeases(state_url)
    holder: Lease = hold(store, name, "manual/run_1/expire_snapshots/-1")
    with pytest.raises(AirflowException, match="another maintenance task holds its lease"):
        operator(IcebergRewriteManifestsOperator, state_url, tmp_path, table=name, lease_timeout=0).execute(
            {"ti": TaskContextTI()}
        )
    store.release(holder)
    with pytest.raises(AirflowException, match="argument target_manifest_size_mb: expected a number of MB > 0"):
        operator(IcebergRewriteManifestsOperator, state_url, tmp_path, table=name, target_manifest_size_mb=0).execute(
            {"ti": TaskContextTI()}
        )
    assert catalog.load_table(name).metadata_location == location  # nothing committed by any of them
    assert store.holder(name) is None


@given(st.lists(st.integers(min_value=0, max_value=10**9), max_size=40), st.integers(min_value=1, max_value=8))
def test_shares_hold_every_group_once_in_plan_order_and_balance_the_bytes(sizes: list[int], count: int) -> None:
    groups = [(f"g{i}", size) for i, size in enumerate(sizes)]
    shares = split_shares(groups, count)
    assert len(shares) == min(count, len(groups)) and all(shares)
    assert sorted(g for share in shares for g in share) == sorted(g for g, _ in groups)
    order = [g for g, _ in groups]
    assert all(share == sorted(share, key=order.index) for share in shares)
    # Largest first, each to the lightest share: no share exceeds the lightest by more than one group's bytes.
    loads = [sum(dict(groups)[g] for g in share) for share in shares]
    if loads:
        assert max(loads) - min(loads) <= max(sizes)


def test_the_task_group_plans_then_maps_one_rewrite_per_share() -> None:
    with DAG(dag_id="compaction_group", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        compaction_task_group(
            table="db.t", shares=3, strategy="sort", dry_run=True, task_arguments={"retries": 2, "pool": "p"}
        )
        with pytest.raises(ValueError, match="group_ids come from the plan"):
            compaction_task_group(table="db.t", shares=3, group_id="other", group_ids=["a"])
    assert {t.task_id: set(t.upstream_task_ids) for t in dag.tasks} == {
        "plan_data_rewrite": set(),
        "rewrite_data_file_groups": {"plan_data_rewrite"},
    }
    plan, rewrite = dag.get_task("plan_data_rewrite"), dag.get_task("rewrite_data_file_groups")
    assert isinstance(plan, IcebergPlanDataRewriteOperator) and isinstance(rewrite, MappedOperator)
    assert (plan.table, plan.shares, plan.strategy, plan.retries, plan.pool) == ("db.t", 3, "sort", 2, "p")
    assert rewrite.partial_kwargs["table"] == "db.t" and rewrite.partial_kwargs["dry_run"] is True
    assert rewrite.partial_kwargs["strategy"] == "sort" and rewrite.partial_kwargs["retries"] == 2


def test_the_maintenance_plan_carries_each_due_tables_compaction(
    demo_tables: dict, state_url: str, tmp_path: Path, context: Context
) -> None:
    policies = tmp_path / "policies.yaml"
    policies.write_text(
        "- {name: compact, type: system_iceberg_data_compaction, minIntervalDays: 1, tables: ['demo.orders'],\n"
        "   content: {targetFileSizeMb: 64, minInputFiles: 2, strategy: sort, dryRun: true}}\n"
        "- {name: expire, type: system_iceberg_snapshot_expiry, tables: ['demo.events']}\n"
    )
    items = IcebergMaintenancePlanOperator(task_id="plan", policy_file=str(policies), state_url=state_url).execute(
        context
    )
    by_table = {i["table"]: i for i in items}
    assert {k: by_table["demo.orders"][k] for k in ("compact", "expire", "remove_orphans")} == {
        "compact": True,
        "expire": False,
        "remove_orphans": False,
    }
    assert {k: by_table["demo.orders"][k] for k in ("target_file_size_mb", "min_input_files", "strategy")} == {
        "target_file_size_mb": 64.0,
        "min_input_files": 2,
        "strategy": "sort",
    }
    assert (by_table["demo.orders"]["compact_dry_run"], by_table["demo.orders"]["compact_policy"]) == (True, "compact")
    events = by_table["demo.events"]
    assert (events["compact"], events["compact_policy"], events["expire"]) == (False, None, True)
    reasons = {e["table"]: e["reason"] for e in pushed(context)["compaction_evaluations"]}
    assert reasons == {"demo.orders": "never compacted: due"}


def small_files_table(catalog: SqlCatalog) -> Any:
    """Eight appends of three rows each: one file group of eight small files."""
    catalog.create_namespace("db")
    table = catalog.create_table("db.small", schema=rows(0, 1).schema)
    for start in range(0, 24, 3):
        table.append(rows(start, 3))
    return catalog.load_table("db.small")


@needs_the_core
def test_the_data_rewrite_operator_compacts_records_the_clock_and_pushes_counts(
    catalog: SqlCatalog, state_url: str, tmp_path: Path, context: Context
) -> None:
    table = small_files_table(catalog)
    before = sorted(table.scan().to_arrow()["id"].to_pylist())
    summary = operator(IcebergRewriteDataFilesOperator, state_url, tmp_path, table="db.small", policy="c").execute(
        context
    )
    after = catalog.load_table("db.small")
    assert sorted(after.scan().to_arrow()["id"].to_pylist()) == before
    assert (summary["rewritten_data_files"], summary["added_data_files"], summary["commit_count"]) == (8, 1, 1)
    assert (summary["policy"], summary["failed_group_count"], summary["dry_run"]) == ("c", 0, False)
    assert after.current_snapshot().summary.operation.value == "replace"
    state = SqlStateStore(state_url).get(str(after.metadata.table_uuid), DATA_COMPACTION)
    assert state is not None and state.last_success_at is not None
    report = json.loads(Path(summary["report"].removeprefix("file://")).read_text())
    assert report["stage"] == "done" and report["rewritten_data_files"] == 8


@needs_the_core
def test_the_sharded_rewrite_commits_each_shares_groups(
    catalog: SqlCatalog, state_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tests/airflow/dags/sharded_compaction.py: the plan's six groups (one a partition) in three shares, one
    mapped rewrite task each; every row is there after, in one file a partition."""
    catalog.create_namespace("db")
    table = catalog.create_table("db.parts", schema=rows(0, 1).schema, properties={"format-version": "2"})
    from pyiceberg.transforms import IdentityTransform

    with table.update_spec() as spec:
        spec.add_field("category", IdentityTransform(), "category")
    for start in range(0, 60, 6):  # each append: one small file in each of six partitions
        table.append(rows(start, 6))
    before = sorted(catalog.load_table("db.parts").scan().to_arrow()["id"].to_pylist())
    monkeypatch.setenv("ICEBERG_MAINT_TEST_STATE_URL", state_url)
    monkeypatch.setenv("ICEBERG_MAINT_TEST_REPORTS", f"file://{tmp_path}/reports")
    run = DagBag(dag_folder=str(TEST_DAGS / "sharded_compaction.py")).dags["sharded_compaction"].test()
    assert run.state == "success"
    shares = xcom("sharded_compaction", run.run_id, "plan_data_rewrite")
    assert len(shares) == 3 and sum(len(s["group_ids"]) for s in shares) == 6
    states = task_states("sharded_compaction", run.run_id)
    assert sorted(states.values()) == ["success"] * 4
    summaries = [xcom("sharded_compaction", run.run_id, "rewrite_data_file_groups", map_index=i) for i in range(3)]
    assert sum(s["rewritten_data_files"] for s in summaries) == 60 and all(s["commit_count"] >= 1 for s in summaries)
    after = catalog.load_table("db.parts")
    assert sorted(after.scan().to_arrow()["id"].to_pylist()) == before
    assert len(after.inspect.files()) == 6


@needs_the_core
@pytest.mark.usefixtures("no_run_history")
def test_the_scheduled_flow_compacts_then_expires_then_removes_orphans(
    demo_tables: dict, catalog: SqlCatalog, tmp_path: Path
) -> None:
    """``iceberg_table_maintenance_scheduled`` with the sample's compaction policy enabled (two input files
    are enough): per table, the data files are rewritten, then the manifests, then the expiry and the orphan
    removal run, in that order; every row is still there and the planted old orphan is gone."""
    sample = (DAGS / "iceberg_maint_policies.yaml").read_text(encoding="utf-8")
    policies = tmp_path / "policies.yaml"
    enabled = sample.replace("  enabled: false", "  enabled: true").replace("minInputFiles: 5", "minInputFiles: 2")
    policies.write_text(enabled, encoding="utf-8")
    dag = DagBag(dag_folder=str(DAGS)).dags["iceberg_table_maintenance_scheduled"]
    plan = dag.get_task("plan_due_tables")
    assert isinstance(plan, IcebergMaintenancePlanOperator)
    plan.policy_file = str(policies)
    run = dag.test()
    assert run.state == "success"
    steps = ("rewrite_data_files", "rewrite_manifests", "expire_snapshots", "remove_orphan_files")
    states = task_states("iceberg_table_maintenance_scheduled", run.run_id)
    assert {states[(f"maintain_table.{step}", i)] for step in steps for i in (0, 1)} == {"success"}
    for name, planted in demo_tables.items():
        table = catalog.load_table(name)
        assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]
        assert len(table.inspect.files()) == 1
        assert not planted["old"].exists() and planted["fresh"].exists()
    runs = variable(RUN_HISTORIES[0])
    assert runs is not None and [r["kind"] for r in runs["runs"]] == ["compaction", "manifests", "expiry", "orphans"]
