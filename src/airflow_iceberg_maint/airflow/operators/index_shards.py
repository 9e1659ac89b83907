"""Sharded index builds on Airflow: plan key ranges, build each range in a mapped task, commit once.

Airflow's executors (Celery, Kubernetes) run the mapped shard tasks on many workers, and the
shards hand their region files to the commit through object storage under the index location:
no cluster of our own. The graph, for any number of indexes::

    IcebergPlanIndexShardsOperator             -> [{table, build, shard}, ...]   (and "commits")
    IcebergBuildIndexShardOperator (mapped)     -> one ShardResult each
    IcebergCommitIndexExtractOperator(sharded_build=...) (mapped over "commits") -> one commit each

Every task is safe to retry: a shard retry writes under a new attempt directory, and the commit
uses each shard's result from its one successful try, commits at most once per build, and
deletes the files no extract references (``airflow_iceberg_maint.index.write.sharded_build``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_iceberg_maint.airflow import arguments
from airflow_iceberg_maint.airflow.hooks.maintenance import DEFAULT_CONN_ID, MaintenanceHookMixin
from airflow_iceberg_maint.airflow.maintenance_run import classified
from airflow_iceberg_maint.airflow.operators.index import optional_snapshot_id
from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.index.write.sharded_build import ShardedBuildPlan, build_shard, plan_sharded_build
from airflow_iceberg_maint.progress import LoggingReporter, reporting

COMMITS_KEY = "commits"


class IcebergPlanIndexShardsOperator(MaintenanceHookMixin, BaseOperator):
    """Plan a sharded full build of each given index: key ranges of about equal size, from a sample.

    Returns one ``{table, build, shard}`` per key range of every index, for
    ``IcebergBuildIndexShardOperator.partial(...).expand_kwargs(...)``, and pushes under
    ``commits`` one ``{table, index, sharded_build}`` per index, for
    ``IcebergCommitIndexExtractOperator.partial(shard_task_id=...).expand_kwargs(...)``. An
    index may get fewer ranges than asked when its sample has fewer distinct keys. A table
    without a snapshot is skipped.

    :param indexes: ``[{table, index, shards, snapshot_id?}]`` (e.g. the lag plan's ``sharded``).
    :param iceberg_conn_id: an ``iceberg`` connection.
    """

    template_fields: Sequence[str] = ("indexes",)
    ui_color = "#d4eef7"

    def __init__(self, *, indexes: Any, iceberg_conn_id: str = DEFAULT_CONN_ID, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.indexes = indexes
        self.iceberg_conn_id = iceberg_conn_id

    def execute(self, context: Context) -> list[dict[str, Any]]:
        shards: list[dict[str, Any]] = []
        commits: list[dict[str, Any]] = []
        for item in self.indexes or []:
            if not isinstance(item, dict):
                raise InvalidInputError(f"argument indexes: expected {{table, index, shards}} items, got {item!r}")
            table_name = arguments.optional_str(item.get("table"), "table") or ""
            index = arguments.optional_str(item.get("index"), "index") or ""
            with classified(f"table {table_name} index {index}"):
                count = arguments.positive_int(item.get("shards"), "shards")
                table = self.hook.load_table(table_name)
                if table.current_snapshot() is None and item.get("snapshot_id") is None:
                    self.log.info("%s: no snapshot yet, nothing to index", table_name)
                    continue
                build = plan_sharded_build(table, index, count, optional_snapshot_id(item.get("snapshot_id")))
            self.log.info(
                "%s index %s: build %s of snapshot %d over %d key ranges (%d asked), %d entries per region",
                table_name,
                index,
                build.build_id,
                build.snapshot_id,
                build.shards,
                count,
                build.rows_per_region,
            )
            plan = build.to_json()
            shards.extend({"table": table_name, "build": plan, "shard": shard} for shard in range(build.shards))
            commits.append({"table": table_name, "index": index, "sharded_build": plan})
        context["ti"].xcom_push(key=COMMITS_KEY, value=commits)
        return shards


class IcebergBuildIndexShardOperator(MaintenanceHookMixin, BaseOperator):
    """Build one key range of a sharded build: its region files and manifest, under this try's own directory.

    Reads only the data files whose bounds may hold the range, and only the index's columns.
    Returns ``{build_id, shard, manifest, region_files, entries}`` (the commit reads the
    manifest). A killed or failed try leaves files only in its own directory, which the commit
    deletes.

    :param table: ``namespace.table``.
    :param build: the plan of ``IcebergPlanIndexShardsOperator``.
    :param shard: the key range to build, from 0.
    :param iceberg_conn_id: an ``iceberg`` connection.
    """

    ui_color = "#d4eef7"

    def __init__(
        self,
        *,
        table: str,
        build: dict[str, Any],
        shard: int | str,
        iceberg_conn_id: str = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.build = build
        self.shard = shard
        self.iceberg_conn_id = iceberg_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        table_name = arguments.optional_str(self.table, "table") or ""
        with classified(f"table {table_name} index build shard {self.shard}"):
            plan = ShardedBuildPlan.from_json(self.build)
            shard = int(arguments.optional_number(self.shard, "shard") or 0)
            table = self.hook.load_table(table_name)
            with reporting(LoggingReporter(self.log)):
                result = build_shard(table, plan, shard)
        self.log.info(
            "%s index %s shard %d of %d: %d entries in %d region files",
            table_name,
            plan.index,
            shard,
            plan.shards,
            result.entries,
            result.region_files,
        )
        return result.to_json()
