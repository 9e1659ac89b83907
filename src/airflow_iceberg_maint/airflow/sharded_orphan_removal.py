"""``sharded_orphan_removal``: one table's (or each planned table's) sharded orphan scan as one TaskGroup.

It wires the five operators of ``operators.orphan_shards``: the plan, the shard items, the scan
and match tasks mapped over the shards, and the finish task that re-checks and deletes. The
group's task IDs are not prefixed by its ID, so its tasks keep the names a hand-wired DAG gives
them (``plan_orphan_shards``, ``shard_items``, ``scan_orphan_shard``, ``match_orphan_shard``,
and the finish task's ``finish_task_id``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk import TaskGroup

from airflow_iceberg_maint.airflow.operators.orphan_shards import (
    IcebergFinishOrphanShardsOperator,
    IcebergOrphanShardItemsOperator,
    IcebergOrphanShardMatchOperator,
    IcebergOrphanShardScanOperator,
    IcebergPlanOrphanShardsOperator,
    finish_kwargs,
)

PLAN_TASK_ID = "plan_orphan_shards"
#: The arguments the finish task takes from a removal job (it reads the rest from the plan).
_FINISH_ARGUMENTS = ("table", "policy", "iceberg_conn_id", "report_location", "state_url")


def sharded_orphan_removal(
    *,
    shards: int | str,
    jobs: Any = None,
    finish_task_id: str = "finish_orphan_shards",
    group_id: str = "sharded_orphan_removal",
    task_arguments: Mapping[str, Any] | None = None,
    map_index_template: str = "{{ task.table }}",
    **job: Any,
) -> TaskGroup:
    """Add a sharded orphan scan to the DAG being defined (call inside ``with DAG(...)``) and return its group.

    :param shards: how many mapped scan and match tasks each table's scan is spread over (templated).
    :param jobs: removal jobs to map the plan and finish tasks over, one a table (e.g. the
        ``output`` of ``IcebergOrphanPolicyExpansionOperator``); None: one table, given by ``job``.
    :param finish_task_id: the ID of the task that re-checks, deletes and reports.
    :param group_id: the TaskGroup's ID (the tasks' IDs are not prefixed by it).
    :param task_arguments: ``BaseOperator`` arguments (pool, retries, retry_delay...) of the plan,
        scan, match and finish tasks.
    :param map_index_template: the label of each mapped plan and finish task (with ``jobs``).
    :param job: ``IcebergRemoveOrphanFilesOperator``'s arguments for one table (without ``jobs``).
    """
    if jobs is not None and job:
        raise ValueError(f"sharded_orphan_removal: give jobs or one table's arguments, not both ({sorted(job)})")
    if jobs is None and "table" not in job:
        raise ValueError("sharded_orphan_removal: expected jobs, or a table and its removal arguments")
    common = dict(task_arguments or {})
    plan: Any  # an operator, or a mapped one
    finish: Any
    with TaskGroup(group_id=group_id, prefix_group_id=False, tooltip="sharded orphan scan") as group:
        if jobs is None:
            plan = IcebergPlanOrphanShardsOperator(task_id=PLAN_TASK_ID, shards=shards, **job, **common)
        else:
            plan = IcebergPlanOrphanShardsOperator.partial(
                task_id=PLAN_TASK_ID, shards=shards, map_index_template=map_index_template, **common
            ).expand_kwargs(jobs)
        items = IcebergOrphanShardItemsOperator(task_id="shard_items", plans=plan.output)
        scan = IcebergOrphanShardScanOperator.partial(task_id="scan_orphan_shard", **common).expand_kwargs(items.output)
        match = IcebergOrphanShardMatchOperator.partial(task_id="match_orphan_shard", **common).expand_kwargs(
            items.output
        )
        if jobs is None:
            # A template, not the plan's XComArg: the finish task waits for the matches, not the plan.
            finish = IcebergFinishOrphanShardsOperator(
                task_id=finish_task_id,
                scratch=f"{{{{ ti.xcom_pull(task_ids='{PLAN_TASK_ID}')['scratch'] }}}}",
                **{k: job[k] for k in _FINISH_ARGUMENTS if k in job},
                **common,
            )
        else:
            finish = IcebergFinishOrphanShardsOperator.partial(
                task_id=finish_task_id, map_index_template=map_index_template, **common
            ).expand_kwargs(plan.output.map(finish_kwargs))
        scan >> match >> finish
    return group
