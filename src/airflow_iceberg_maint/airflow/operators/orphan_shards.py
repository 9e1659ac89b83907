"""One table's orphan scan over several mapped tasks: plan, scan shards, match buckets, finish.

The tasks exchange files through a scratch folder beside the run's reports (never inside the
table); XCom carries only its URI, the table and counts. ``IcebergPlanOrphanShardsOperator``
takes every argument of ``IcebergRemoveOrphanFilesOperator`` plus ``shards``;
``IcebergOrphanShardItemsOperator`` turns one plan (or the plans of a mapped planning task)
into the items the shard and match tasks are mapped over. A failed shard or match
task fails its downstream tasks, and the finish task checks every marker again before it
re-checks against reloaded metadata and deletes: nothing is deleted after a failed shard.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import BaseOperator, Context
from pyiceberg.table import Table

from airflow_iceberg_maint.airflow import arguments
from airflow_iceberg_maint.airflow.hooks.maintenance import DEFAULT_CONN_ID, MaintenanceHookMixin
from airflow_iceberg_maint.airflow.leased_task import TableLeaseMixin
from airflow_iceberg_maint.airflow.maintenance_run import (
    Finished,
    MaintenanceRun,
    classified,
    failures_recorded,
    prepare_run,
    run_maintenance,
)
from airflow_iceberg_maint.airflow.operators.orphans import IcebergRemoveOrphanFilesOperator, orphans_finished
from airflow_iceberg_maint.errors import MaintenanceError
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES
from airflow_iceberg_maint.orphans.sharded.files import Scratch
from airflow_iceberg_maint.orphans.sharded.finish import finish_sharded_scan
from airflow_iceberg_maint.orphans.sharded.match import match_shard
from airflow_iceberg_maint.orphans.sharded.plan import read_plan
from airflow_iceberg_maint.orphans.sharded.scan import plan_sharded_scan, run_shard


class IcebergPlanOrphanShardsOperator(IcebergRemoveOrphanFilesOperator):
    """Check and plan one table's sharded orphan scan; return ``{table, scratch, policy, shards}``.

    :param shards: how many mapped tasks list and read the table (1 to 256).
    Every other argument is ``IcebergRemoveOrphanFilesOperator``'s; the scratch folder is
    ``<report>.shards`` beside the run's report.
    """

    template_fields: Sequence[str] = (*IcebergRemoveOrphanFilesOperator.template_fields, "shards")

    def __init__(self, *, shards: int | str = 2, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.shards = shards

    def _run(self, context: Context) -> dict[str, Any]:
        run = self._prepare(context)
        shards = arguments.positive_int(self.shards, "shards")
        scratch = run.uri.removesuffix(".json") + ".shards"  # beside the report, outside every table
        with failures_recorded(run, self.log):
            plan = plan_sharded_scan(
                run.table,
                run.options,
                shards=shards,
                scratch=scratch,
                io_properties=run.saved.io_properties,
                sources=[INDEX_FILES],
                now=run.now,
            )
        self.log.info("table %s: planned %s", run.table_name, plan.to_json())
        return {"table": run.table_name, "policy": run.policy, **plan.to_json()}


def finish_kwargs(plan: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments of the finish task of a plan (for ``plans.output.map(finish_kwargs)``)."""
    return {"table": plan["table"], "scratch": plan["scratch"], "policy": plan["policy"]}


class IcebergOrphanShardItemsOperator(BaseOperator):
    """The items to map the shard and match tasks over: one a shard of each plan.

    :param plans: one plan, or the plans of a mapped planning task.
    """

    template_fields: Sequence[str] = ("plans",)

    def __init__(self, *, plans: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plans = plans

    def execute(self, context: Context) -> list[dict[str, Any]]:
        plans = [self.plans] if isinstance(self.plans, Mapping) else list(self.plans)
        return [{"table": p["table"], "scratch": p["scratch"], "shard": i} for p in plans for i in range(p["shards"])]


class _ShardTask(MaintenanceHookMixin, BaseOperator):
    template_fields: Sequence[str] = ("table", "scratch", "shard")
    ui_color = "#d4e8f7"

    def __init__(
        self, *, table: str, scratch: str, shard: int | str, iceberg_conn_id: str = DEFAULT_CONN_ID, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.table, self.scratch, self.shard, self.iceberg_conn_id = table, scratch, shard, iceberg_conn_id

    def execute(self, context: Context) -> dict[str, int]:
        with classified(f"table {self.table} shard {self.shard}"):
            return self._step(int(self.shard))

    @abstractmethod
    def _step(self, shard: int) -> dict[str, int]:
        """Run this task's step of the sharded scan for ``shard``; returns small counts for XCom."""


class IcebergOrphanShardScanOperator(_ShardTask):
    """List one shard's directories and read its manifests into the scratch folder."""

    def _step(self, shard: int) -> dict[str, int]:
        table = self.hook.load_table(self.table)
        return run_shard(table, self.scratch, shard, {**self.hook.catalog.properties, **table.io.properties})


class IcebergOrphanShardMatchOperator(_ShardTask):
    """Match one shard's hash buckets: listed candidates minus referenced files."""

    def _step(self, shard: int) -> dict[str, int]:
        table = self.hook.load_table(self.table)
        return match_shard(self.scratch, shard, {**self.hook.catalog.properties, **table.io.properties})


class IcebergFinishOrphanShardsOperator(TableLeaseMixin, MaintenanceHookMixin, BaseOperator):
    """Gather the shards' unmatched files, re-check against reloaded metadata, delete, and report.

    Reports, cleanup state and XCom summary as ``IcebergRemoveOrphanFilesOperator``'s. It deletes,
    so it runs under the table's lease (``TableLeaseMixin``: waits, deferred, while another
    maintenance task holds it); the scan and match tasks before it only read.
    """

    template_fields: Sequence[str] = ("table", "scratch", "policy", "report_location")
    ui_color = "#d4e8f7"

    def __init__(
        self,
        *,
        table: str,
        scratch: str,
        policy: str | None = None,
        iceberg_conn_id: str = DEFAULT_CONN_ID,
        report_location: str | None = None,
        state_url: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table, self.scratch, self.policy = table, scratch, policy
        self.iceberg_conn_id, self.report_location, self.state_url = iceberg_conn_id, report_location, state_url

    def _planned_dry_run(self, table: Table) -> bool:
        """Whether the plan is a dry run's, so that the report gets a dry run's name. An unreadable plan
        counts as a real run here: reading it again fails the step, with the failure recorded."""
        io_properties = {**self.hook.catalog.properties, **table.io.properties}
        try:
            plan = read_plan(Scratch(self.scratch, io_properties), str(table.metadata.table_uuid))
            return bool(plan["options"]["dry_run"])
        except (MaintenanceError, KeyError, TypeError):
            return False

    def maintain(self, context: Context) -> dict[str, Any]:
        with classified(f"table {self.table}"):
            table = self.hook.load_table(self.table)
            dry_run = self._planned_dry_run(table)
            run: MaintenanceRun = prepare_run(context, self, table, self.table, datetime.now(UTC), dry_run=dry_run)
            return run_maintenance(context, run, self._finish, self.log)

    def _finish(self, run: MaintenanceRun) -> Finished:
        report = finish_sharded_scan(
            run.table, self.scratch, run.saved.io_properties, sources=[INDEX_FILES], on_stage=run.saved.stage
        )
        return orphans_finished(run, report)
