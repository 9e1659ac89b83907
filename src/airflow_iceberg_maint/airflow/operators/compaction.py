"""The compaction operators: rewrite one table's data files, rewrite its manifests, plan a sharded rewrite.

``IcebergRewriteDataFilesOperator`` and ``IcebergRewriteManifestsOperator`` run the engines of
``iceberg-maint rewrite-data-files`` and ``rewrite-manifests`` (docs/cli.md, "Compaction") under the
table's lease, through the run lifecycle every maintenance operator shares (``maintenance_run``):
the full report written to ``report_location``, the phases logged, the run recorded in the cleanup
state and the run history, a small summary (counts only) pushed to XCom.
``compaction_planning.IcebergPlanDataRewriteOperator`` plans a rewrite for ``compaction_task_group``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_iceberg_maint.airflow import arguments
from airflow_iceberg_maint.airflow.maintenance_run import (
    Finished,
    MaintenanceRun,
    prepare_run,
    run_maintenance,
)
from airflow_iceberg_maint.airflow.operators.table_maintenance import _TableMaintenanceOperator
from airflow_iceberg_maint.airflow.reports import TaskLog
from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.policy.policies import DATA_COMPACTION
from airflow_iceberg_maint.state.cleanup import MANIFEST_REWRITE, record_compaction_run, record_manifest_rewrite_run

MB = 1024 * 1024
STRATEGIES = ("binpack", "sort", "zorder")


def size_bytes(value: Any, name: str) -> int | None:
    """A size in MB (decimals allowed) as a whole number of bytes >= 1; None: the default."""
    number = arguments.optional_number(value, name)
    if number is None:
        return None
    if number * MB < 1:
        raise InvalidInputError(f"argument {name}: expected a number of MB > 0, got {value!r}")
    return int(number * MB)


def optional_positive(value: Any, name: str) -> int | None:
    return None if arguments.optional_number(value, name) is None else arguments.positive_int(value, name)


def columns(value: Any, name: str) -> tuple[str, ...]:
    """Column names: a list, or one comma-separated string (as a template renders it)."""
    if value is None or value == "":
        return ()
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, Sequence) or not all(isinstance(c, str) and c.strip() for c in items):
        raise InvalidInputError(f"argument {name}: expected column names (a list, or 'a,b'), got {value!r}")
    return tuple(c.strip() for c in items)


def group_id_list(value: Any) -> list[str] | None:
    """Planned group ids: a list of strings, or its JSON text (a rendered template); None: every group."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            value = None
    if not isinstance(value, list | tuple) or not all(isinstance(g, str) for g in value):
        raise InvalidInputError("argument group_ids: expected a list of the plan's group ids (or its JSON text)")
    return list(value)


def strategy(value: Any) -> str:
    text = arguments.optional_str(value, "strategy") or "binpack"
    if text not in STRATEGIES:
        raise InvalidInputError(f"argument strategy: expected one of {', '.join(STRATEGIES)}, got {value!r}")
    return text


class RewriteArguments(BaseOperator):
    """The rewrite options the data-files operator and the planning operator share, checked when they run.

    First in the bases: its ``__init__`` takes them and passes the other arguments on. A ``BaseOperator``, so
    that Airflow's ``partial`` finds them (it looks in the ``__init__`` of operator classes only).
    """

    table: Any

    def __init__(
        self,
        *,
        target_file_size_mb: float | str | None = None,
        min_input_files: int | str | None = None,
        where: str | None = None,
        strategy: str = "binpack",
        sort: Sequence[str] | str | None = None,
        zorder: Sequence[str] | str | None = None,
        delete_file_threshold: int | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.target_file_size_mb, self.min_input_files, self.where = target_file_size_mb, min_input_files, where
        self.strategy, self.sort, self.zorder = strategy, sort, zorder
        self.delete_file_threshold = delete_file_threshold

    def plan_options(self) -> dict[str, Any]:
        """The keyword arguments of ``plan_data_rewrite`` and ``rewrite_data_files`` both take."""
        from airflow_iceberg_maint.api.compaction import Strategy

        return {
            "strategy": Strategy(strategy(self.strategy)),
            "target_file_size_bytes": size_bytes(self.target_file_size_mb, "target_file_size_mb"),
            "min_input_files": optional_positive(self.min_input_files, "min_input_files"),
            "where": arguments.optional_str(self.where, "where"),
            "sort": columns(self.sort, "sort"),
            "zorder": columns(self.zorder, "zorder"),
            "delete_file_threshold": optional_positive(self.delete_file_threshold, "delete_file_threshold"),
        }


#: The arguments the planning task and each share's rewrite both take: each share rewrites the plan it was given.
REWRITE_FIELDS = (
    "target_file_size_mb",
    "min_input_files",
    "where",
    "strategy",
    "sort",
    "zorder",
    "delete_file_threshold",
)


def data_rewrite_summary(body: Mapping[str, Any], report: str, policy: str | None) -> dict[str, Any]:
    """The small, fixed-size part of a rewrite-data-files report pushed to XCom (lists are counted)."""
    return {
        "table": body["table"],
        "policy": policy,
        "dry_run": body["dry_run"],
        "strategy": body["strategy"],
        "target_file_size_bytes": body["target_file_size_bytes"],
        "group_count": len(body["groups"]),
        "rewritten_data_files": body["rewritten_data_files"],
        "added_data_files": body["added_data_files"],
        "removed_delete_files": body["removed_delete_files"],
        "rewritten_bytes": body["rewritten_bytes"],
        "added_bytes": body["added_bytes"],
        "commit_count": len(body["commits"]),
        "skipped_group_count": len(body["skipped_groups"]),
        "failed_group_count": len(body["failed"]),
        "report": report,
    }


class IcebergRewriteDataFilesOperator(RewriteArguments, _TableMaintenanceOperator):
    """Rewrite one table's small files and files with deletes into files of the target size (bin-pack, sort or
    z-order), every delete applied, each commit a ``replace`` snapshot (``iceberg-maint rewrite-data-files``).

    The full report is written to ``report_location``; XCom gets its counts and the report's URI. A real run
    is the compaction policy's last run for ``due`` (``record_compaction_run``); a run where a file group
    failed is recorded as failed and fails the task, after the groups that succeeded were committed.
    It runs while it holds the table's lease (``leased_task``).

    :param table, iceberg_conn_id: as ``_TableMaintenanceOperator``'s.
    :param target_file_size_mb: target output file size (default: ``write.target-file-size-bytes``, else 512 MB).
    :param min_input_files: a group is rewritten from this many candidate files (default 5), or with deletes.
    :param where: a row filter in pyiceberg's syntax: only files that may hold matching rows.
    :param strategy: ``binpack`` (default), ``sort`` (the table's sort order, or ``sort``) or ``zorder``.
    :param sort: sort columns (a list or ``"a,b"``).
    :param zorder: z-order columns (a list or ``"a,b"``).
    :param delete_file_threshold: a file with this many delete files is rewritten whatever its size.
    :param max_commits: at most this many commits (groups are batched into them).
    :param remove_dangling_deletes: remove the delete files no live data file needs any more (default true).
    :param memory_budget_mb: the rewrite's memory before it streams and spills.
    :param group_ids: rewrite only these planned groups (a share of ``compaction_task_group``); None: all.
    :param dry_run: report the plan; write and commit nothing.
    :param report_location, state_url, policy, enabled: as ``_TableMaintenanceOperator``'s.
    """

    maintenance = "data compaction"
    template_fields: Sequence[str] = (
        "table",
        *REWRITE_FIELDS,
        "max_commits",
        "remove_dangling_deletes",
        "memory_budget_mb",
        "group_ids",
        "is_dry_run",
        "report_location",
        "policy",
        "enabled",
    )
    ui_color = "#dfeee0"

    def __init__(
        self,
        *,
        max_commits: int | str | None = None,
        remove_dangling_deletes: bool | str = True,
        memory_budget_mb: int | str | None = None,
        group_ids: Sequence[str] | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.max_commits, self.remove_dangling_deletes = max_commits, remove_dangling_deletes
        self.memory_budget_mb, self.group_ids = memory_budget_mb, group_ids

    def _options(self) -> dict[str, Any]:
        """Every option, each refused naming this operator's argument before the table is touched."""
        options = self.plan_options()
        budget = optional_positive(self.memory_budget_mb, "memory_budget_mb")
        if budget is not None:
            options["memory_budget_mb"] = budget
        group_ids = group_id_list(self.group_ids)
        return {
            **options,
            "max_commits": optional_positive(self.max_commits, "max_commits"),
            "remove_dangling_deletes": arguments.boolean(self.remove_dangling_deletes, "remove_dangling_deletes"),
            "group_ids": group_ids,
            "dry_run": arguments.boolean(self.is_dry_run, "dry_run"),
        }

    def _run(self, context: Context) -> dict[str, Any]:
        options = self._options()
        name = arguments.optional_str(self.table, "table") or ""
        table = self.hook.load_table(name)
        run: MaintenanceRun = prepare_run(
            context,
            self,
            table,
            name,
            datetime.now(UTC),
            dry_run=options["dry_run"],
            report_name=f"{name}.compaction",
            job=DATA_COMPACTION,
        )
        shares = "" if options["group_ids"] is None else f" ({len(options['group_ids'])} planned file groups)"
        self.log.info(
            "table %s: rewriting data files%s%s", name, shares, f" (policy {run.policy})" if run.policy else ""
        )

        def rewrite(run: MaintenanceRun) -> Finished:
            from airflow_iceberg_maint.api.compaction import rewrite_data_files

            return _data_files_finished(run, rewrite_data_files(run.table, **options).to_json())

        return run_maintenance(context, run, rewrite, self.log)


def _data_files_finished(run: MaintenanceRun, body: dict[str, Any]) -> Finished:
    failure = None
    if body["failed"]:
        first = body["failed"][0]
        failure = (
            f"table {run.table_name}: {len(body['failed'])} file groups failed (first: {first['group']}: "
            f"{first['error']}); the other groups were committed; report: {run.uri}"
        )
    uuid = str(run.table.metadata.table_uuid)

    def log(task_log: TaskLog) -> None:
        verb = "would rewrite" if body["dry_run"] else "rewrote"
        task_log.info(
            "table %s: %s %d data files (%d bytes) in %d file groups into %d files (%d bytes), %d commits; "
            "%d delete files removed; %d groups skipped, %d failed; full report: %s",
            body["table"],
            verb,
            body["rewritten_data_files"],
            body["rewritten_bytes"],
            len(body["groups"]),
            body["added_data_files"],
            body["added_bytes"],
            len(body["commits"]),
            body["removed_delete_files"],
            len(body["skipped_groups"]),
            len(body["failed"]),
            run.uri,
        )

    return Finished(
        body=body,
        record=lambda store, at, uri: record_compaction_run(store, uuid, body, at, uri),
        summary=data_rewrite_summary(body, run.uri, run.policy),
        log=log,
        failure=failure,
    )


class IcebergRewriteManifestsOperator(_TableMaintenanceOperator):
    """Regroup the live entries of one table's current snapshot by partition into manifests of the target size,
    in one ``replace`` commit (``iceberg-maint rewrite-manifests``); every entry keeps its sequence numbers.

    The full report is written to ``report_location``; XCom gets its counts and the report's URI; the run is
    recorded in the run history (kind ``manifests``). It runs while it holds the table's lease.

    :param table, iceberg_conn_id: as ``_TableMaintenanceOperator``'s.
    :param target_manifest_size_mb: default: the table's ``commit.manifest.target-size-bytes``, else 8 MB.
    :param dry_run: report the plan; write and commit nothing.
    :param report_location, state_url, policy, enabled: as ``_TableMaintenanceOperator``'s.
    """

    maintenance = "manifest rewrite"
    template_fields: Sequence[str] = (
        "table",
        "target_manifest_size_mb",
        "is_dry_run",
        "report_location",
        "policy",
        "enabled",
    )
    ui_color = "#e4ecf6"

    def __init__(
        self,
        *,
        target_manifest_size_mb: float | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.target_manifest_size_mb = target_manifest_size_mb

    def _run(self, context: Context) -> dict[str, Any]:
        from airflow_iceberg_maint.compaction.manifests import rewrite_manifests

        target = size_bytes(self.target_manifest_size_mb, "target_manifest_size_mb")
        dry_run = arguments.boolean(self.is_dry_run, "dry_run")
        name = arguments.optional_str(self.table, "table") or ""
        table = self.hook.load_table(name)
        now = datetime.now(UTC)
        run: MaintenanceRun = prepare_run(
            context, self, table, name, now, dry_run=dry_run, report_name=f"{name}.manifests", job=MANIFEST_REWRITE
        )
        self.log.info("table %s: rewriting manifests%s", name, f" (policy {run.policy})" if run.policy else "")

        def rewrite(run: MaintenanceRun) -> Finished:
            report = rewrite_manifests(run.table, target_manifest_size_bytes=target, dry_run=dry_run)
            body = report.to_json()
            uuid = report.table_uuid
            return Finished(
                body={
                    **body,
                    "kept_manifests": report.kept_manifests,
                    "target_bytes": report.target_manifest_size_bytes,
                },
                record=lambda store, at, uri: record_manifest_rewrite_run(store, uuid, body, at, uri),
                summary=manifest_rewrite_summary(body, run.uri, run.policy),
                log=lambda task_log: task_log.info(
                    "table %s: %s %d manifests into %d (target %d bytes), kept %d; commits %s; full report: %s",
                    report.table,
                    "would rewrite" if dry_run else "rewrote",
                    report.rewritten_manifests,
                    report.added_manifests,
                    report.target_manifest_size_bytes,
                    report.kept_manifests,
                    report.commits,
                    run.uri,
                ),
            )

        return run_maintenance(context, run, rewrite, self.log)


def manifest_rewrite_summary(body: Mapping[str, Any], report: str, policy: str | None) -> dict[str, Any]:
    """A manifest rewrite's report for XCom: its counts, the commits counted."""
    counts = {k: v for k, v in body.items() if k != "commits"}
    return {**counts, "policy": policy, "commit_count": len(body["commits"]), "report": report}
