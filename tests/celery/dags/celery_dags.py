"""The DAGs the Celery deployment of tests/celery runs: the project's operators on the queue ``iceberg_maint``.

Each task goes to the queue the two workers listen to (``queue`` in ``default_args``), and the tasks a
test kills are retried once, 2 s later. Two test seams, both off unless a run's conf asks:

* ``kill_on``: a scan shard's first try on that worker, its shard written, waits (bounded) to be killed
  before it reports success, and says so with an object on S3 the test waits for;
* the leased maintenance steps record, in the state database, when each held its table's lease (the
  interval ``maintain`` ran in), so the test can check that one table's steps never overlap.
"""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import sqlalchemy as sa
from airflow.sdk import DAG, Param, get_current_context, task

from airflow_iceberg_maint.airflow.compaction_task_group import compaction_task_group
from airflow_iceberg_maint.airflow.operators.expiry import IcebergExpireSnapshotsOperator
from airflow_iceberg_maint.airflow.operators.index import IcebergCommitIndexExtractOperator
from airflow_iceberg_maint.airflow.operators.index_definitions import IcebergCreateMissingIndexesOperator
from airflow_iceberg_maint.airflow.operators.index_shards import (
    COMMITS_KEY,
    IcebergBuildIndexShardOperator,
    IcebergPlanIndexShardsOperator,
)
from airflow_iceberg_maint.airflow.operators.maintenance_planning import IcebergMaintenancePlanOperator
from airflow_iceberg_maint.airflow.operators.orphans import IcebergRemoveOrphanFilesOperator
from airflow_iceberg_maint.airflow.sensors.due import IcebergTableDueSensor
from airflow_iceberg_maint.airflow.sensors.index_lag import IcebergIndexLagSensor
from airflow_iceberg_maint.airflow.sharded_orphan_removal import sharded_orphan_removal
from airflow_iceberg_maint.airflow.table_maintenance import table_maintenance_group
from tests.celery.helpers import gate_key

HERE = Path(__file__).parent
POLICIES = str(HERE / "celery_policies.yaml")
DUE_POLICIES = str(HERE / "celery_due_policies.yaml")
INDEXES = str(HERE / "celery_indexes.yaml")
QUEUED: dict[str, Any] = {"queue": "iceberg_maint"}
RETRIED: dict[str, Any] = {**QUEUED, "retries": 1, "retry_delay": timedelta(seconds=2)}
GATE_SECONDS = 240  # a gated shard not killed by then fails: the test that gated it has failed


def _s3() -> Any:
    return boto3.client(
        "s3",
        endpoint_url=os.environ["ICEBERG_TEST_S3_ENDPOINT"],
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )


def _gate(context: Any, result: Any = None) -> None:
    """After a scan shard's work, before its success is reported: wait to be killed when the run asks."""
    ti = context["ti"]
    victim = (context["params"] or {}).get("kill_on")
    if not victim or ti.task_id != "scan_orphan_shard" or ti.try_number != 1:
        return
    if os.environ.get("ICEBERG_TEST_HOSTNAME") != victim:
        return
    bucket = os.environ["ICEBERG_TEST_BUCKET"]
    s3 = _s3()
    s3.put_object(Bucket=bucket, Key=gate_key(ti.run_id, ti.map_index), Body=json.dumps(result).encode())
    deadline = time.monotonic() + GATE_SECONDS
    while time.monotonic() < deadline:  # the condition: the worker is killed (nothing ever releases the gate)
        time.sleep(0.5)
    raise RuntimeError(f"{ti.task_id}[{ti.map_index}]: not killed within {GATE_SECONDS} s")


#: What every DAG here shares: triggered by the tests only, the params and plans reaching operators with their types.
MANUAL: dict[str, Any] = {
    "schedule": None,
    "start_date": datetime(2026, 1, 1),
    "catchup": False,
    "render_template_as_native_obj": True,
}
ORPHAN_PARAMS = {
    "table": Param(type="string"),
    "older_than": Param(type="string"),
    "dry_run": Param(True, type="boolean"),
    "shards": Param(4, type="integer"),
    "kill_on": Param(None, type=["null", "string"]),
}
ORPHAN_JOB: dict[str, Any] = {
    "table": "{{ params.table }}",
    "older_than": "{{ params.older_than }}",
    "allow_recent_files": True,
    "dry_run": "{{ params.dry_run }}",
}

with DAG(
    dag_id="celery_orphans_single",
    **MANUAL,
    params=ORPHAN_PARAMS,
    default_args=QUEUED,
):
    IcebergRemoveOrphanFilesOperator(task_id="remove_orphan_files", **ORPHAN_JOB)

with DAG(
    dag_id="celery_orphans_sharded",
    **MANUAL,
    params=ORPHAN_PARAMS,
    default_args=QUEUED,
    max_active_runs=1,
):
    sharded_orphan_removal(
        shards="{{ params.shards }}", task_arguments={**RETRIED, "post_execute": _gate}, **ORPHAN_JOB
    )


@task
def pushed_commits(task_id: str) -> list[dict[str, Any]]:
    return get_current_context()["ti"].xcom_pull(task_ids=task_id, key=COMMITS_KEY) or []


with DAG(
    dag_id="celery_index_build",
    **MANUAL,
    default_args=RETRIED,
    params={"table": Param("idx.events", type="string"), "shards": Param(4, type="integer")},
):
    create = IcebergCreateMissingIndexesOperator(
        task_id="create_missing_indexes", definitions_file=INDEXES, tables="{{ params.table }}"
    )
    plan = IcebergPlanIndexShardsOperator(
        task_id="plan_index_shards",
        indexes=[{"table": "{{ params.table }}", "index": "events_by_id", "shards": "{{ params.shards }}"}],
    )
    builds = IcebergBuildIndexShardOperator.partial(task_id="build_index_shard").expand_kwargs(plan.output)
    commits = pushed_commits(plan.task_id)
    commit = IcebergCommitIndexExtractOperator.partial(
        task_id="commit_sharded_extract", shard_task_id="build_index_shard"
    ).expand_kwargs(commits)
    create >> plan >> commits
    builds >> commit


class _Recorded:
    """Records the interval its ``maintain`` (the work under the table's lease) ran in."""

    table: Any
    task_id: str

    def maintain(self, context: Any) -> Any:
        started = datetime.now(UTC)
        try:
            return super().maintain(context)  # type: ignore[misc]
        finally:
            ended = datetime.now(UTC)
            engine = sa.create_engine(os.environ["AIRFLOW__ICEBERG_MAINT__STATE_URL"])
            with engine.begin() as conn:
                conn.execute(
                    sa.text(
                        "create table if not exists celery_lease_intervals (tbl text, task text, run_id text, "
                        "host text, started timestamptz, ended timestamptz)"
                    )
                )
                conn.execute(
                    sa.text("insert into celery_lease_intervals values (:t, :k, :r, :h, :s, :e)"),
                    {
                        "t": self.table,
                        "k": self.task_id,
                        "r": context["ti"].run_id,
                        "h": os.environ.get("ICEBERG_TEST_HOSTNAME"),
                        "s": started,
                        "e": ended,
                    },
                )
            engine.dispose()


class RecordedExpiry(_Recorded, IcebergExpireSnapshotsOperator):
    pass


class RecordedOrphans(_Recorded, IcebergRemoveOrphanFilesOperator):
    pass


with DAG(
    dag_id="celery_table_maintenance",
    **MANUAL,
    max_active_runs=2,
    default_args=RETRIED,
):
    due = IcebergMaintenancePlanOperator(task_id="plan_due_tables", policy_file=POLICIES)
    maintain_table = table_maintenance_group(
        task_arguments={"lease_poll_interval": 1.0}, expiry=RecordedExpiry, orphans=RecordedOrphans
    )
    maintain_table.expand_kwargs(due.output)

with DAG(
    dag_id="celery_deferred",
    **MANUAL,
    default_args=RETRIED,
    params={"older_than": Param(type="string")},
):
    # The due sensor: the table was just cleaned, so it is due again only 35 s later (celery_due_soon).
    cleaned = IcebergRemoveOrphanFilesOperator(
        task_id="clean_due_table",
        table="due.events",
        older_than="{{ params.older_than }}",
        allow_recent_files=True,
        dry_run=False,
        policy="celery_due_soon",
    )
    due_again = IcebergTableDueSensor(
        task_id="wait_until_due", table="due.events", policy_file=DUE_POLICIES, deferrable=True, poke_interval=2
    )
    cleaned >> due_again
    # The index-lag sensor: indexed now, it waits in the triggerer for the next commit to the table.
    indexed = IcebergCreateMissingIndexesOperator(
        task_id="create_lag_index", definitions_file=INDEXES, tables="lag.events"
    )
    built = IcebergCommitIndexExtractOperator(task_id="build_lag_index", table="lag.events", index="events_by_id")
    lagging = IcebergIndexLagSensor(
        task_id="wait_for_lag",
        table="lag.events",
        index="events_by_id",
        max_snapshots_behind=0,
        deferrable=True,
        poke_interval=2,
    )
    indexed >> built >> lagging

with DAG(
    dag_id="celery_compaction_sharded",
    **MANUAL,
    default_args=RETRIED,
    params={"table": Param(type="string"), "shares": Param(4, type="integer")},
):
    # Each share takes the table's lease: the others wait for it in the triggerer (polled each second), then
    # resume on whichever worker takes them.
    compaction_task_group(
        table="{{ params.table }}", shares="{{ params.shares }}", target_file_size_mb=1, lease_poll_interval=1.0
    )
