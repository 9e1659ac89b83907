"""``IcebergPlanDataRewriteOperator``: plan one table's data rewrite and split its file groups into shares, one
mapped rewrite task each (``compaction_task_group``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_iceberg_maint.airflow import arguments
from airflow_iceberg_maint.airflow.hooks.maintenance import DEFAULT_CONN_ID, MaintenanceHookMixin
from airflow_iceberg_maint.airflow.maintenance_run import classified
from airflow_iceberg_maint.airflow.operators.compaction import REWRITE_FIELDS, RewriteArguments


def split_shares(groups: Sequence[tuple[str, int]], shares: int) -> list[list[str]]:
    """File groups ``(group id, input bytes)`` in at most ``shares`` shares of about equal bytes (largest first,
    each to the lightest share, the one with fewer groups on a tie), each share's ids in plan order; no empty
    share."""
    order = {group_id: i for i, (group_id, _) in enumerate(groups)}
    loads: list[tuple[int, list[str]]] = [(0, []) for _ in range(max(1, shares))]
    for group_id, size in sorted(groups, key=lambda g: (-g[1], order[g[0]])):
        lightest = min(range(len(loads)), key=lambda i: (loads[i][0], len(loads[i][1]), i))
        loads[lightest] = (loads[lightest][0] + size, [*loads[lightest][1], group_id])
    return [sorted(ids, key=order.__getitem__) for _, ids in loads if ids]


class IcebergPlanDataRewriteOperator(RewriteArguments, MaintenanceHookMixin, BaseOperator):
    """Plan one table's data rewrite (from manifests only) and return its file groups split into ``shares``:
    ``[{"group_ids": [...]}, ...]``, about equal input bytes each, for ``expand_kwargs`` of the mapped rewrite
    tasks. It reads only, so it takes no lease. Its planning arguments are ``IcebergRewriteDataFilesOperator``'s.

    :param table: ``namespace.table``.
    :param shares: at most this many shares; fewer when the plan has fewer groups.
    :param iceberg_conn_id: an ``iceberg`` connection.
    :param target_file_size_mb: as ``IcebergRewriteDataFilesOperator``'s.
    :param min_input_files: as ``IcebergRewriteDataFilesOperator``'s.
    :param where: as ``IcebergRewriteDataFilesOperator``'s.
    :param strategy: as ``IcebergRewriteDataFilesOperator``'s.
    :param sort: as ``IcebergRewriteDataFilesOperator``'s.
    :param zorder: as ``IcebergRewriteDataFilesOperator``'s.
    :param delete_file_threshold: as ``IcebergRewriteDataFilesOperator``'s.
    """

    template_fields: Sequence[str] = ("table", "shares", *REWRITE_FIELDS)

    def __init__(
        self,
        *,
        table: str,
        shares: int | str,
        iceberg_conn_id: str = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table, self.shares, self.iceberg_conn_id = table, shares, iceberg_conn_id
        self.state_url = None

    def execute(self, context: Context) -> list[dict[str, Any]]:
        from airflow_iceberg_maint.api.compaction import plan_data_rewrite

        name = arguments.optional_str(self.table, "table") or ""
        with classified(f"table {name}"):
            shares = arguments.positive_int(self.shares, "shares")
            options = self.plan_options()
            plan = plan_data_rewrite(self.hook.load_table(name), **options)
        split = split_shares([(g.group_id, g.input_bytes) for g in plan.groups], shares)
        self.log.info("table %s: %d file groups to rewrite, in %d shares", name, len(plan.groups), len(split))
        return [{"group_ids": ids} for ids in split]
