"""The 1-day floor of a cutoff in Airflow runs (issue 9, item 8).

The manual DAG's form once clamped ``-1`` to the param's ``minimum`` of 0, and a run at 0 deleted
a file written minutes earlier without a word. Now every Airflow path refuses a cutoff under 1 day,
as typed, unless ``allow_recent_files`` (``allowRecentFiles`` in a policy) is set, and a run under
the floor logs a warning. Real metadata database, real SQLite catalog, real files.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.airflow.operators.orphan_planning import (
    IcebergOrphanDueTablesOperator,
    IcebergOrphanPolicyExpansionOperator,
)
from tests.airflow.helpers import task_states, xcom
from tests.support.airflow_dags import DAGS, remover

MANUAL = "iceberg_orphan_cleanup_manual"
SCHEDULED = "iceberg_orphan_cleanup_scheduled"
RISK = "files younger than 1 day may belong to writes in progress"
WARNING = "under the 1-day floor; allow_recent_files is set, so files of writes still in progress may be deleted"


def refusal(typed: str) -> str:
    return (
        f"argument older_than_days: expected a number of days >= 1, got {typed} "
        f"({RISK}; set allow_recent_files to allow down to 0)"
    )


def policy_refusal(typed: str) -> str:
    return (
        f"content.olderThanDays: expected a number of days >= 1, got {typed} "
        f"({RISK}; set content.allowRecentFiles: true to allow down to 0)"
    )


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.fixture
def recent(demo_tables: dict) -> dict:
    """The planted tables, with the fresh orphan written 5 minutes ago (the case of the bug report)."""
    stamp = time.time() - 300
    for planted in demo_tables.values():
        os.utime(planted["fresh"], (stamp, stamp))
    return demo_tables


def without(files: list[str], warehouse: Path, *removed: Path) -> list[str]:
    gone = {str(path.relative_to(warehouse)) for path in removed}
    assert gone <= set(files)
    return [f for f in files if f not in gone]


def scheduled_with_policy(path: Path) -> Any:
    """The sample scheduled DAG, its planning task reading ``path`` instead of the sample policy file
    (``dag.test()`` runs the in-memory tasks)."""
    dag = DagBag(dag_folder=str(DAGS)).get_dag(SCHEDULED)
    dag.get_task("plan_due_tables").policy_file = str(path)
    return dag


def write_policy(tmp_path: Path, content: str) -> Path:
    path = tmp_path / "policies.yaml"
    path.write_text(f"name: fast\ntype: system_iceberg_orphan_file_removal\ntables: ['demo.*']\ncontent: {content}\n")
    return path


# --- The form ----------------------------------------------------------------------------------


def test_form_has_no_bound_to_clamp_to_and_keeps_what_was_typed() -> None:
    from airflow.serialization.serialized_objects import DagSerialization

    dag = DagBag(dag_folder=str(DAGS)).get_dag(MANUAL)
    assert set(dag.params.keys()) == {
        "table",
        "older_than_days",
        "allow_recent_files",
        "location",
        "only_this_table",
        "dry_run",
        "shards",
    }
    days = dag.params.get_param("older_than_days")
    # The trigger form clamps a number to its schema's minimum/maximum: there must be none.
    assert days.schema == {"type": "number", "title": "Older than (days)"}
    assert days.description.startswith("Only files older than this are removed. At least 1")
    assert [days.resolve(v) for v in (-1, 0, 0.5, 3)] == [-1, 0, 0.5, 3]
    allow = dag.params.get_param("allow_recent_files")
    assert allow.value is False and allow.schema["type"] == "boolean"
    # What the UI reads: the serialized DAG's params.
    serialized = DagSerialization.to_dict(dag)["dag"]["params"]
    schemas = {name: param["schema"] for name, param in serialized}
    assert "minimum" not in schemas["older_than_days"] and "maximum" not in schemas["older_than_days"]
    assert "exclusiveMinimum" not in schemas["older_than_days"]


# --- The manual DAG ----------------------------------------------------------------------------


@pytest.mark.parametrize(("typed", "shown"), [(-1, "-1"), (0, "0"), (0.5, "0.5")])
def test_manual_dag_refuses_a_cutoff_under_a_day_as_typed(
    recent: dict, warehouse: Path, capsys: pytest.CaptureFixture[str], typed: float, shown: str
) -> None:
    before = files_under(warehouse)
    dag = DagBag(dag_folder=str(DAGS)).get_dag(MANUAL)
    run = dag.test(run_conf={"table": "demo.orders", "dry_run": False, "older_than_days": typed})
    out = capsys.readouterr().out

    assert run.state == "failed"
    assert {k: v for k, v in task_states(MANUAL, run.run_id).items() if v != "skipped"} == {
        ("single_or_sharded", -1): "success",
        ("remove_orphan_files", -1): "failed",
    }
    # -1 reached the task as -1: not clamped
    assert f"AirflowFailException: table demo.orders: {refusal(shown)}\n" in out
    assert files_under(warehouse) == before


def test_manual_dag_with_allow_recent_files_runs_at_zero_and_warns(
    recent: dict, warehouse: Path, catalog: SqlCatalog, capsys: pytest.CaptureFixture[str]
) -> None:
    orders = recent["demo.orders"]
    before = files_under(warehouse)
    dag = DagBag(dag_folder=str(DAGS)).get_dag(MANUAL)
    run = dag.test(
        run_conf={"table": "demo.orders", "dry_run": False, "older_than_days": 0, "allow_recent_files": True}
    )
    out = capsys.readouterr().out

    assert run.state == "success"
    assert files_under(warehouse) == without(before, warehouse, orders["old"], orders["fresh"])
    assert "table demo.orders: cutoff " in out and WARNING in out
    summary = xcom(MANUAL, run.run_id, "remove_orphan_files")
    assert (summary["orphan_file_count"], summary["deleted_file_count"]) == (2, 2)
    assert catalog.load_table("demo.orders").scan().to_arrow().num_rows == 3


@pytest.mark.parametrize("days", [1, 3])
def test_manual_dag_at_one_day_or_more_runs_normally(
    recent: dict, warehouse: Path, capsys: pytest.CaptureFixture[str], days: int
) -> None:
    orders = recent["demo.orders"]
    before = files_under(warehouse)
    dag = DagBag(dag_folder=str(DAGS)).get_dag(MANUAL)
    run = dag.test(run_conf={"table": "demo.orders", "dry_run": False, "older_than_days": days})
    out = capsys.readouterr().out

    assert run.state == "success"
    assert files_under(warehouse) == without(before, warehouse, orders["old"])
    assert WARNING not in out


# --- The removal operator ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("typed", "shown"),
    [(-1, "-1"), (0, "0"), (0.5, "0.5"), ("-1", "-1"), ("0", "0"), ("0.5", "0.5"), (0.999, "0.999")],
)
def test_operator_refuses_a_cutoff_under_a_day(
    recent: dict, warehouse: Path, state_url: str, tmp_path: Path, context: Context, typed: Any, shown: str
) -> None:
    before = files_under(warehouse)
    with pytest.raises(AirflowFailException) as caught:  # AirflowFailException: no retry
        remover(state_url, tmp_path, table="demo.orders", older_than_days=typed).execute(context)
    assert str(caught.value) == f"table demo.orders: {refusal(shown)}"
    assert files_under(warehouse) == before


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"older_than_days": -1, "allow_recent_files": True},
            "argument older_than_days: expected a number of days >= 0, got -1 (a negative age is a future cutoff)",
        ),
        ({"older_than_days": "inf"}, "argument older_than_days: expected a finite number of days, got 'inf'"),
        (
            {"older_than_days": "nan", "allow_recent_files": True},
            "argument older_than_days: expected a finite number of days, got 'nan'",
        ),
        ({"older_than_days": 1e10}, "argument older_than_days: 1e+10 days before now is out of range"),
        ({"older_than_days": 1e6}, "argument older_than_days: 1e+06 days before now is out of range"),
        (
            {"older_than_days": 0, "allow_recent_files": "maybe"},
            "argument allow_recent_files: expected true or false, got 'maybe'",
        ),
    ],
)
def test_operator_refuses_bad_cutoffs_even_with_the_opt_in(
    recent: dict, warehouse: Path, state_url: str, tmp_path: Path, context: Context, kwargs: dict, message: str
) -> None:
    before = files_under(warehouse)
    with pytest.raises(AirflowFailException) as caught:
        remover(state_url, tmp_path, table="demo.orders", **kwargs).execute(context)
    assert str(caught.value) == f"table demo.orders: {message}"
    assert files_under(warehouse) == before


@pytest.mark.parametrize(
    "age", [timedelta(hours=23), timedelta(days=1) - timedelta(minutes=2), timedelta(0), -timedelta(hours=1)]
)
def test_operator_refuses_an_absolute_cutoff_less_than_a_day_ago(
    recent: dict, warehouse: Path, state_url: str, tmp_path: Path, context: Context, age: timedelta
) -> None:
    before = files_under(warehouse)
    cutoff = datetime.now(UTC) - age
    with pytest.raises(AirflowFailException) as caught:
        remover(state_url, tmp_path, table="demo.orders", older_than=cutoff.isoformat()).execute(context)
    message = str(caught.value)
    refused = f"table demo.orders: argument older_than: {cutoff.isoformat()} is less than 1 day before now ("
    assert message.startswith(refused)
    assert message.endswith(f"; {RISK}; set allow_recent_files to allow it)")
    assert "\n" not in message
    assert files_under(warehouse) == before


def test_operator_with_the_opt_in_runs_under_a_day_and_warns(
    recent: dict,
    warehouse: Path,
    state_url: str,
    tmp_path: Path,
    context: Context,
    capsys: pytest.CaptureFixture[str],
) -> None:
    orders, events = recent["demo.orders"], recent["demo.events"]
    before = files_under(warehouse)
    # As the manual DAG renders them without native objects: strings.
    summary = remover(
        state_url,
        tmp_path,
        table="demo.orders",
        older_than_days="0",
        allow_recent_files="True",
    ).execute(context)
    assert summary["deleted_file_count"] == 2
    assert files_under(warehouse) == without(before, warehouse, orders["old"], orders["fresh"])
    assert WARNING in capsys.readouterr().out

    cutoff = datetime.now(UTC) - timedelta(minutes=1)
    before = files_under(warehouse)
    summary = remover(
        state_url, tmp_path, table="demo.events", older_than=cutoff.isoformat(), allow_recent_files=True
    ).execute(context)
    assert summary["deleted_file_count"] == 2
    assert files_under(warehouse) == without(before, warehouse, events["old"], events["fresh"])
    assert f"table demo.events: cutoff {cutoff.isoformat()} is 0:01:00" in capsys.readouterr().out


def test_operator_at_one_day_or_more_keeps_recent_files_without_a_warning(
    recent: dict,
    warehouse: Path,
    state_url: str,
    tmp_path: Path,
    context: Context,
    capsys: pytest.CaptureFixture[str],
) -> None:
    orders, events = recent["demo.orders"], recent["demo.events"]
    before = files_under(warehouse)
    assert (
        remover(state_url, tmp_path, table="demo.orders", older_than_days=1).execute(context)["deleted_file_count"] == 1
    )
    cutoff = (datetime.now(UTC) - timedelta(days=1, minutes=1)).isoformat()
    assert (
        remover(state_url, tmp_path, table="demo.events", older_than=cutoff).execute(context)["deleted_file_count"] == 1
    )
    assert files_under(warehouse) == without(before, warehouse, orders["old"], events["old"])
    assert WARNING not in capsys.readouterr().out


# --- Policies: the scheduled DAG and the planning operators --------------------------------------


def test_scheduled_dag_refuses_a_policy_under_a_day_before_anything_runs(
    recent: dict, warehouse: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = files_under(warehouse)
    run = scheduled_with_policy(write_policy(tmp_path, "{olderThanDays: 0.5}")).test()
    out = capsys.readouterr().out

    assert run.state == "failed"
    assert task_states(SCHEDULED, run.run_id) == {
        ("plan_due_tables", -1): "failed",
        ("remove_orphan_files", -1): "upstream_failed",
    }
    assert policy_refusal("0.5") + "\n" in out
    assert files_under(warehouse) == before


def test_scheduled_dag_with_a_policy_that_opts_in_runs_under_a_day_and_warns(
    recent: dict, warehouse: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = files_under(warehouse)
    run = scheduled_with_policy(write_policy(tmp_path, "{olderThanDays: 0, allowRecentFiles: true}")).test()
    out = capsys.readouterr().out

    assert run.state == "success"
    jobs = xcom(SCHEDULED, run.run_id, "plan_due_tables")
    assert [(job["table"], job["allow_recent_files"]) for job in jobs] == [("demo.events", True), ("demo.orders", True)]
    planted = [path for tables in recent.values() for path in (tables["old"], tables["fresh"])]
    assert files_under(warehouse) == without(before, warehouse, *planted)
    assert out.count(WARNING) == 2


def test_scheduled_dag_with_a_one_day_policy_keeps_recent_files(
    recent: dict, warehouse: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = files_under(warehouse)
    run = scheduled_with_policy(write_policy(tmp_path, "{olderThanDays: 1}")).test()
    out = capsys.readouterr().out

    assert run.state == "success"
    assert all(job["allow_recent_files"] is False for job in xcom(SCHEDULED, run.run_id, "plan_due_tables"))
    assert files_under(warehouse) == without(before, warehouse, *(t["old"] for t in recent.values()))
    assert WARNING not in out


def test_planned_jobs_carry_the_opt_in_and_the_removal_checks_it(
    recent: dict, warehouse: Path, state_url: str, tmp_path: Path, context: Context
) -> None:
    policy = write_policy(tmp_path, "{olderThanDays: 0.25, allowRecentFiles: true}")
    jobs = IcebergOrphanPolicyExpansionOperator(task_id="plan", policy_file=str(policy), state_url=state_url).execute(
        context
    )
    assert {job["table"]: job["allow_recent_files"] for job in jobs} == {"demo.orders": True, "demo.events": True}
    named = IcebergOrphanDueTablesOperator(
        task_id="due", tables=["demo.orders"], policy_file=str(policy), state_url=state_url
    ).execute(context)
    assert [(job["table"], job["allow_recent_files"]) for job in named] == [("demo.orders", True)]

    # The same job without the opt-in is refused by the removal task: its absolute cutoff is 6 hours ago.
    before = files_under(warehouse)
    orders = next(job for job in jobs if job["table"] == "demo.orders")
    refused = r"^table demo\.orders: argument older_than: .* is less than 1 day before now"
    with pytest.raises(AirflowFailException, match=refused):
        remover(state_url, tmp_path, **{**orders, "allow_recent_files": False}).execute(context)
    assert files_under(warehouse) == before
    summary = remover(state_url, tmp_path, **orders).execute(context)
    # 6 hours: the 10-day-old orphan goes, the 5-minute-old one stays.
    assert summary["deleted_file_count"] == 1
    assert files_under(warehouse) == without(before, warehouse, recent["demo.orders"]["old"])


@pytest.mark.parametrize("operator", ["expansion", "named"])
def test_planning_refuses_a_policy_under_a_day(
    demo_tables: dict, state_url: str, tmp_path: Path, context: Context, operator: str
) -> None:
    policy = str(write_policy(tmp_path, "{olderThanDays: 0}"))
    task = (
        IcebergOrphanPolicyExpansionOperator(task_id="plan", policy_file=policy, state_url=state_url)
        if operator == "expansion"
        else IcebergOrphanDueTablesOperator(
            task_id="due", tables=["demo.orders"], policy_file=policy, state_url=state_url
        )
    )
    with pytest.raises(AirflowFailException) as caught:
        task.execute(context)
    assert str(caught.value) == f"policy file {policy!r}: policy 'fast' {policy_refusal('0')}"


def test_planning_a_policy_file_that_also_holds_an_expiry_policy(
    demo_tables: dict, state_url: str, tmp_path: Path, context: Context
) -> None:
    policy = tmp_path / "policies.yaml"
    policy.write_text(
        "- {name: expire, type: system_iceberg_snapshot_expiry, tables: ['demo.*'], content: {olderThanDays: 5}}\n"
        "- {name: fast, type: system_iceberg_orphan_file_removal, tables: ['demo.*'],"
        " content: {olderThanDays: 0.5, allowRecentFiles: true}}\n"
    )
    jobs = IcebergOrphanPolicyExpansionOperator(task_id="plan", policy_file=str(policy), state_url=state_url).execute(
        context
    )
    assert sorted((job["table"], job["policy"], job["allow_recent_files"]) for job in jobs) == [
        ("demo.events", "fast", True),
        ("demo.orders", "fast", True),
    ]
