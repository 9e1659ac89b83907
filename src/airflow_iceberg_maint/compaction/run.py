"""A data-file rewrite: plan, rewrite each group, commit in batches, then remove dangling deletes."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import pyarrow as pa
from pyiceberg.table import Table

from airflow_iceberg_maint.compaction.commit import commit_batch
from airflow_iceberg_maint.compaction.dangling import remove_dangling_deletes
from airflow_iceberg_maint.compaction.options import RewriteOptions, Strategy
from airflow_iceberg_maint.compaction.ordering import check_columns, parse_sort, table_sort_keys
from airflow_iceberg_maint.compaction.planning import DataRewritePlan, FileGroupPlan, plan_rewrite
from airflow_iceberg_maint.compaction.report import DataRewriteReport
from airflow_iceberg_maint.compaction.rewriter import GroupOutput, Layout, rewrite_group
from airflow_iceberg_maint.compaction.snapshot import check_format
from airflow_iceberg_maint.errors import MaintenanceError, first_line
from airflow_iceberg_maint.progress import Phase
from airflow_iceberg_maint.reachability.manifest_entries import reading_once


def layout_of(table: Table, options: RewriteOptions) -> Layout:
    """The strategy's row order, its columns checked against the table (refused before anything is written)."""
    if options.strategy == Strategy.SORT:
        keys = parse_sort(options.sort) if options.sort else table_sort_keys(table)
        check_columns(table, [k.column for k in keys], "sort")
        order_id = None if options.sort else table.sort_order().order_id
        return Layout(Strategy.SORT, sort=keys, sort_order_id=order_id)
    if options.strategy == Strategy.ZORDER:
        check_columns(table, options.zorder, "zorder")
        return Layout(Strategy.ZORDER, zorder=options.zorder)
    return Layout(Strategy.BINPACK)


def selected(
    plan: DataRewritePlan, group_ids: Sequence[str] | None
) -> tuple[list[FileGroupPlan], list[dict[str, str]]]:
    """The plan's groups among ``group_ids`` (all without), and the ids no longer in the plan."""
    if group_ids is None:
        return list(plan.groups), []
    wanted = set(group_ids)
    groups = [g for g in plan.groups if g.group_id in wanted]
    gone = sorted(wanted - {g.group_id for g in groups})
    return groups, [{"partition": g, "reason": "no longer a group of the plan"} for g in gone]


def batches(groups: list[FileGroupPlan], max_commits: int | None) -> list[list[FileGroupPlan]]:
    """One group a commit, or as many a commit as keeps the commits within ``max_commits``."""
    if not groups:
        return []
    size = 1 if max_commits is None else math.ceil(len(groups) / max_commits)
    return [groups[i : i + size] for i in range(0, len(groups), size)]


def rewrite_data_files(
    load: Callable[[], Table], options: RewriteOptions, *, dry_run: bool, group_ids: Sequence[str] | None = None
) -> DataRewriteReport:
    """The rewrite of the table ``load()`` returns (a fresh load each time it is called).

    Each manifest of the starting snapshot is decoded once for the whole run: planning, every
    commit and the dangling-delete check share what was read (manifests never change)."""
    table = load()
    current = table.current_snapshot()
    starting = (current.sequence_number or 0) if current is not None else -1
    with reading_once(starting):
        return _rewrite(table, load, options, dry_run=dry_run, group_ids=group_ids)


def _rewrite(
    table: Table,
    load: Callable[[], Table],
    options: RewriteOptions,
    *,
    dry_run: bool,
    group_ids: Sequence[str] | None,
) -> DataRewriteReport:
    layout = layout_of(table, options)
    plan = plan_rewrite(table, options)
    groups, gone = selected(plan, group_ids)
    report = DataRewriteReport.of_plan(plan, groups, dry_run=dry_run)
    report.skipped_groups += gone
    if dry_run:
        return report
    check_format(table.metadata)
    start = plan.snapshot_files
    start_snapshot = table.snapshot_by_id(plan.snapshot_id) if plan.snapshot_id is not None else None
    with Phase("rewriting data files", total=sum(len(g.files) for g in groups)) as phase:
        for batch in batches(groups, options.max_commits):
            assert start is not None and start_snapshot is not None  # groups come from a snapshot
            outputs: list[GroupOutput] = []
            for group in batch:
                try:
                    outputs.append(rewrite_group(table, start, group, options, layout, phase.advance))
                except (MaintenanceError, OSError, pa.ArrowException) as exc:
                    report.fail(group.group_id, first_line(exc))
            if not outputs:
                continue
            result = commit_batch(load, start, start_snapshot.sequence_number or 0, outputs)
            for group_id, reason in result.failed:
                report.fail(group_id, reason)
            for output in result.committed:
                report.committed(output)
            if result.snapshot_id is not None:
                report.commits.append(result.snapshot_id)
                report.removed_delete_files += result.removed_delete_files
    if options.remove_dangling_deletes:
        dangling = remove_dangling_deletes(load)
        if dangling.snapshot_id is not None:
            report.commits.append(dangling.snapshot_id)
            report.removed_delete_files += dangling.removed
        if dangling.error:
            report.fail("dangling-deletes", dangling.error)
    return report
