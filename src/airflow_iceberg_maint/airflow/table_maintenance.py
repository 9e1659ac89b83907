"""``table_maintenance_group``: one planned table's maintenance steps (compact, regroup manifests, expire, remove
orphans) as a task group to map over ``IcebergMaintenancePlanOperator``'s items.

Each step after the first runs when the steps before it succeeded or were skipped (``none_failed``): a step
that fails stops the table's later steps, and a step the table is not due for skips. The operator classes
are parameters so that a deployment (or a test) can run subclasses of them with the same wiring.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk import task_group

from airflow_iceberg_maint.airflow.operators.compaction import (
    IcebergRewriteDataFilesOperator,
    IcebergRewriteManifestsOperator,
)
from airflow_iceberg_maint.airflow.operators.expiry import IcebergExpireSnapshotsOperator
from airflow_iceberg_maint.airflow.operators.orphans import IcebergRemoveOrphanFilesOperator


def table_maintenance_group(
    *,
    task_arguments: Mapping[str, Any] | None = None,
    data_files: type[IcebergRewriteDataFilesOperator] = IcebergRewriteDataFilesOperator,
    manifests: type[IcebergRewriteManifestsOperator] = IcebergRewriteManifestsOperator,
    expiry: type[IcebergExpireSnapshotsOperator] = IcebergExpireSnapshotsOperator,
    orphans: type[IcebergRemoveOrphanFilesOperator] = IcebergRemoveOrphanFilesOperator,
) -> Any:
    """Return the ``maintain_table`` task group; map it with ``.expand_kwargs(plan.output)`` inside a DAG.

    :param task_arguments: ``BaseOperator`` arguments (pool, retries, retry_delay...) of every step.
    :param data_files: the class of the ``rewrite_data_files`` step; ``manifests``, ``expiry`` and
        ``orphans`` likewise for ``rewrite_manifests``, ``expire_snapshots`` and ``remove_orphan_files``.
    """
    first: dict[str, Any] = {"map_index_template": "{{ task.table }}", **(task_arguments or {})}
    later: dict[str, Any] = {**first, "trigger_rule": "none_failed"}

    @task_group
    def maintain_table(
        table: str,
        compact: bool,
        target_file_size_mb: float | None,
        min_input_files: int | None,
        strategy: str,
        compact_dry_run: bool,
        compact_policy: str | None,
        expire: bool,
        expire_older_than: str | None,
        retain_last: int | None,
        expire_dry_run: bool,
        expire_policy: str | None,
        remove_orphans: bool,
        older_than: str | None,
        location: str | None,
        dry_run: bool,
        policy: str | None,
        allow_recent_files: bool,
        other_tables_uri: str | None,
        memory_budget_mb: int | None,
        listing: str | None,
    ) -> None:
        compaction: dict[str, Any] = {
            "table": table,
            "enabled": compact,
            "dry_run": compact_dry_run,
            "policy": compact_policy,
        }
        rewrite = data_files(
            task_id="rewrite_data_files",
            target_file_size_mb=target_file_size_mb,
            min_input_files=min_input_files,
            strategy=strategy,
            **compaction,
            **first,
        )
        regroup = manifests(task_id="rewrite_manifests", **compaction, **later)
        expire_snapshots = expiry(
            task_id="expire_snapshots",
            table=table,
            enabled=expire,
            older_than=expire_older_than,
            retain_last=retain_last,
            dry_run=expire_dry_run,
            policy=expire_policy,
            **later,
        )
        remove = orphans(
            task_id="remove_orphan_files",
            table=table,
            enabled=remove_orphans,
            older_than=older_than,
            location=location,
            dry_run=dry_run,
            policy=policy,
            allow_recent_files=allow_recent_files,
            other_tables_uri=other_tables_uri,
            memory_budget_mb=memory_budget_mb,
            listing=listing,
            **later,
        )
        rewrite >> regroup >> expire_snapshots >> remove

    return maintain_table
