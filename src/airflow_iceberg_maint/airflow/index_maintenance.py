"""The index-and-orphan maintenance task graph shared by the event-triggered and the scheduled sample DAGs.

Per run: find the tables to maintain (those whose assets triggered the run; every defined table
otherwise), create their missing indexes, check each index's lag, commit extracts for the
lagging ones (a full build over mapped shard tasks for indexes defined with ``shards``), expire
old extracts, then evaluate the orphan-removal trigger of those tables
and remove orphans where it is due. Every step is idempotent, so a repeated event costs a run
and changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from airflow.sdk import TriggerRule, get_current_context, task

from airflow_iceberg_maint.airflow.hooks.maintenance import DEFAULT_CONN_ID
from airflow_iceberg_maint.airflow.operators.index import (
    IcebergCommitIndexExtractOperator,
    IcebergExpireIndexExtractsOperator,
)
from airflow_iceberg_maint.airflow.operators.index_definitions import (
    EXPIRE_KEY,
    SHARDED_KEY,
    IcebergCreateMissingIndexesOperator,
    IcebergIndexLagPlanOperator,
)
from airflow_iceberg_maint.airflow.operators.index_shards import (
    COMMITS_KEY,
    IcebergBuildIndexShardOperator,
    IcebergPlanIndexShardsOperator,
)
from airflow_iceberg_maint.airflow.operators.orphan_planning import IcebergOrphanDueTablesOperator
from airflow_iceberg_maint.airflow.operators.orphans import IcebergRemoveOrphanFilesOperator
from airflow_iceberg_maint.airflow.table_assets import table_of_asset_uri
from airflow_iceberg_maint.policy.index_definitions import TableDefinition, load_index_definitions

POOL = "iceberg_maint"

log = logging.getLogger(__name__)


def tables_to_maintain(definitions: Iterable[TableDefinition], asset_uris: Iterable[str]) -> list[str]:
    """Defined tables named by the triggering assets, in file order; every defined table when none triggered."""
    defined = [d.table for d in definitions]
    named = {table_of_asset_uri(uri) for uri in asset_uris}
    named.discard(None)
    return [t for t in defined if t in named] if named else defined


@task(task_id="tables_to_maintain")
def _tables_task(definitions_file: str) -> list[str]:
    context = get_current_context()
    uris = [asset.uri for asset in context.get("triggering_asset_events") or {}]
    tables = tables_to_maintain(load_index_definitions(definitions_file), uris)
    log.info("tables to maintain: %s (triggering assets: %s)", ", ".join(tables) or "none", ", ".join(uris) or "none")
    return tables


@task
def _pushed_list(task_id: str, key: str) -> list[dict[str, Any]]:
    # Mapping needs a return value; the planning tasks push these lists under their own keys.
    return get_current_context()["ti"].xcom_pull(task_ids=task_id, key=key) or []


def index_maintenance_tasks(definitions_file: str, policy_file: str, iceberg_conn_id: str = DEFAULT_CONN_ID) -> None:
    """Add the maintenance tasks to the DAG being defined (call inside ``with DAG(...)``)."""
    tables = _tables_task(definitions_file)
    ensure = IcebergCreateMissingIndexesOperator(
        task_id="create_missing_indexes",
        definitions_file=definitions_file,
        tables=tables,
        iceberg_conn_id=iceberg_conn_id,
    )
    plan = IcebergIndexLagPlanOperator(
        task_id="check_index_lag",
        definitions_file=definitions_file,
        tables=tables,
        iceberg_conn_id=iceberg_conn_id,
    )
    # One mapped task per index: the same connection, pool, labels and retries for each kind.
    per_index: dict[str, Any] = {
        "iceberg_conn_id": iceberg_conn_id,
        "pool": POOL,
        "map_index_template": "{{ task.table }}.{{ task.index }}",
        "retries": 2,
        "retry_delay": timedelta(minutes=1),
    }
    commit = IcebergCommitIndexExtractOperator.partial(task_id="commit_index_extract", **per_index).expand_kwargs(
        plan.output
    )
    # Indexes defined with `shards`: a full build over mapped shard tasks, then one commit each.
    to_shard = _pushed_list.override(task_id="indexes_to_shard")(plan.task_id, SHARDED_KEY)
    shard_plan = IcebergPlanIndexShardsOperator(
        task_id="plan_index_shards",
        iceberg_conn_id=iceberg_conn_id,
        indexes=to_shard,
    )
    shard_builds = IcebergBuildIndexShardOperator.partial(
        task_id="build_index_shard", **{**per_index, "map_index_template": "{{ task.table }} shard {{ task.shard }}"}
    ).expand_kwargs(shard_plan.output)
    # ALL_DONE: a failed shard fails only its own index's commit (which says which shard is missing).
    to_commit = _pushed_list.override(task_id="sharded_builds_to_commit")(shard_plan.task_id, COMMITS_KEY)
    sharded_commit = IcebergCommitIndexExtractOperator.partial(
        task_id="commit_sharded_extract",
        shard_task_id=shard_builds.task_id,
        trigger_rule=TriggerRule.ALL_DONE,
        **per_index,
    ).expand_kwargs(to_commit)
    # The pulls above name their task by ID, which is no dependency: make them explicit.
    plan >> to_shard
    shard_plan >> to_commit
    shard_builds >> sharded_commit
    # Mapped over zero lagging indexes the commit task is skipped; expiry and orphans still run.
    to_expire = _pushed_list.override(task_id="indexes_to_expire", trigger_rule=TriggerRule.NONE_FAILED)(
        plan.task_id, EXPIRE_KEY
    )
    expire = IcebergExpireIndexExtractsOperator.partial(
        task_id="expire_index_extracts", trigger_rule=TriggerRule.NONE_FAILED, **per_index
    ).expand_kwargs(to_expire)
    orphans_due = IcebergOrphanDueTablesOperator(
        task_id="evaluate_orphan_removal",
        tables=tables,
        policy_file=policy_file,
        iceberg_conn_id=iceberg_conn_id,
        trigger_rule=TriggerRule.NONE_FAILED,
    )
    remove = IcebergRemoveOrphanFilesOperator.partial(
        task_id="remove_orphan_files",
        iceberg_conn_id=iceberg_conn_id,
        pool=POOL,
        map_index_template="{{ task.table }}",
        retries=2,
        retry_delay=timedelta(minutes=5),
    ).expand_kwargs(orphans_due.output)
    tables >> ensure >> plan >> [commit, sharded_commit] >> to_expire >> expire >> orphans_due >> remove
