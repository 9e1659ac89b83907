"""``compaction_task_group``: one table's data rewrite spread over mapped tasks, each committing its own groups.

The planning task (``IcebergPlanDataRewriteOperator``) plans the rewrite from manifests and splits its file
groups into shares of about equal input bytes; one ``IcebergRewriteDataFilesOperator`` per share
(dynamic task mapping) rewrites and commits those groups only (``group_ids``), so a failed share is retried
alone and the others' commits stand (partial progress). Each share task takes the table's lease (S15): the
shares of one table run one after another, each a bounded task a retry repeats alone, and the tables of a
DAG spread over the workers. The group's task IDs are not prefixed by its ID.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk import TaskGroup

from airflow_iceberg_maint.airflow.operators.compaction import REWRITE_FIELDS, IcebergRewriteDataFilesOperator
from airflow_iceberg_maint.airflow.operators.compaction_planning import IcebergPlanDataRewriteOperator

PLAN_TASK_ID = "plan_data_rewrite"
REWRITE_TASK_ID = "rewrite_data_file_groups"
#: The rewrite arguments the planning task takes too: the plan must be the one each share rewrites.
_PLANNING = (*REWRITE_FIELDS, "iceberg_conn_id")


def compaction_task_group(
    *,
    table: str,
    shares: int | str,
    group_id: str = "compact_table",
    task_arguments: Mapping[str, Any] | None = None,
    **rewrite: Any,
) -> TaskGroup:
    """Add one table's sharded data rewrite to the DAG being defined (call inside ``with DAG(...)``).

    :param table: ``namespace.table`` (templated).
    :param shares: at most this many mapped rewrite tasks (templated).
    :param group_id: the TaskGroup's ID (the tasks' IDs are not prefixed by it).
    :param task_arguments: ``BaseOperator`` arguments (pool, retries, retry_delay...) of both tasks.
    :param rewrite: ``IcebergRewriteDataFilesOperator``'s arguments (``dry_run``, ``strategy``, ...), but
        ``group_ids``, which the plan gives each share.
    """
    if "group_ids" in rewrite:
        raise ValueError("compaction_task_group: group_ids come from the plan; give the rewrite's other arguments")
    common = dict(task_arguments or {})
    planning = {k: v for k, v in rewrite.items() if k in _PLANNING}
    with TaskGroup(group_id=group_id, prefix_group_id=False, tooltip="sharded data rewrite") as group:
        plan = IcebergPlanDataRewriteOperator(task_id=PLAN_TASK_ID, table=table, shares=shares, **planning, **common)
        IcebergRewriteDataFilesOperator.partial(
            task_id=REWRITE_TASK_ID,
            table=table,
            map_index_template="{{ task.group_ids | length }} file groups",
            **rewrite,
            **common,
        ).expand_kwargs(plan.output)
    return group
