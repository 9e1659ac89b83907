"""Compaction for Python callers: ``plan_data_rewrite``, ``rewrite_data_files`` and ``rewrite_manifests``, with
the command line's options and defaults (``iceberg-maint rewrite-data-files`` and ``rewrite-manifests``, docs/cli.md).

``rewrite_data_files`` and ``rewrite_manifests`` are dry runs unless ``dry_run=False``. The arguments are checked
before the catalog is contacted (S7). Neither takes the table's lease nor records the run for ``due``: the
command line and the Airflow operators do both around it.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace

from pyiceberg.table import Table

from airflow_iceberg_maint.api.tables import (
    DEFAULT_CATALOG,
    CatalogLike,
    TableLike,
    check_flag,
    check_whole,
    resolve_table,
)
from airflow_iceberg_maint.compaction import manifests, run
from airflow_iceberg_maint.compaction.manifests import ManifestRewriteReport
from airflow_iceberg_maint.compaction.options import (
    DEFAULT_DELETE_FILE_THRESHOLD,
    DEFAULT_MIN_INPUT_FILES,
    RewriteOptions,
    Strategy,
    check_strategy_columns,
    column_list,
    strategy_of,
    table_target_size,
)
from airflow_iceberg_maint.compaction.planning import DataRewritePlan, FileGroupPlan, plan_rewrite
from airflow_iceberg_maint.compaction.report import DataRewriteReport
from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.orphans.options import DEFAULT_MEMORY_BUDGET_MB
from airflow_iceberg_maint.progress import ProgressReporter, reporting

__all__ = [
    "DataRewritePlan",
    "DataRewriteReport",
    "FileGroupPlan",
    "ManifestRewriteReport",
    "Strategy",
    "plan_data_rewrite",
    "rewrite_data_files",
    "rewrite_manifests",
]


def _options(
    strategy: Strategy | str,
    target_file_size_bytes: int | None,
    min_input_files: int | None,
    where: str | None,
    sort: Sequence[str],
    zorder: Sequence[str],
    delete_file_threshold: int | None,
    **rest: object,
) -> tuple[RewriteOptions, int | None]:
    """The options as given (the target still None when it is the table's); refused with one line when wrong."""
    check_whole(target_file_size_bytes, "target_file_size_bytes", 1)
    check_whole(min_input_files, "min_input_files", 1)
    check_whole(delete_file_threshold, "delete_file_threshold", 1)
    if where is not None and not isinstance(where, str):
        raise InvalidInputError(f"where {where!r}: expected a row filter in pyiceberg's syntax, e.g. 'day >= 3'")
    chosen = strategy_of(strategy)
    sort_columns, zorder_columns = column_list(sort, "sort"), column_list(zorder, "zorder")
    check_strategy_columns(chosen, sort_columns, zorder_columns)
    options = RewriteOptions(
        strategy=chosen,
        target_file_size_bytes=target_file_size_bytes or 1,
        min_input_files=DEFAULT_MIN_INPUT_FILES if min_input_files is None else min_input_files,
        delete_file_threshold=DEFAULT_DELETE_FILE_THRESHOLD if delete_file_threshold is None else delete_file_threshold,
        where=where,
        sort=sort_columns,
        zorder=zorder_columns,
        **rest,  # type: ignore[arg-type]
    )
    return options, target_file_size_bytes


def _with_target(options: RewriteOptions, target: int | None, table: Table) -> RewriteOptions:
    return replace(options, target_file_size_bytes=target if target is not None else table_target_size(table))


def plan_data_rewrite(
    table: TableLike,
    *,
    catalog: CatalogLike = DEFAULT_CATALOG,
    strategy: Strategy | str = Strategy.BINPACK,
    target_file_size_bytes: int | None = None,
    min_input_files: int | None = None,
    where: str | None = None,
    sort: Sequence[str] = (),
    zorder: Sequence[str] = (),
    delete_file_threshold: int | None = None,
) -> DataRewritePlan:
    """The file groups a rewrite would take, read from the manifests; changes nothing.

    ``plan.groups`` lists them (``group_id``, ``partition``, ``spec_id``, ``input_files``, ``input_bytes``,
    ``delete_files``); ``plan.to_json()`` is the JSON of ``rewrite-data-files --dry-run``.
    """
    options, target = _options(
        strategy, target_file_size_bytes, min_input_files, where, sort, zorder, delete_file_threshold
    )
    loaded = resolve_table(table, catalog)
    return plan_rewrite(loaded, _with_target(options, target, loaded))


def rewrite_data_files(
    table: TableLike,
    *,
    catalog: CatalogLike = DEFAULT_CATALOG,
    dry_run: bool = True,
    strategy: Strategy | str = Strategy.BINPACK,
    target_file_size_bytes: int | None = None,
    min_input_files: int | None = None,
    where: str | None = None,
    sort: Sequence[str] = (),
    zorder: Sequence[str] = (),
    delete_file_threshold: int | None = None,
    max_commits: int | None = None,
    remove_dangling_deletes: bool = True,
    memory_budget_mb: int = DEFAULT_MEMORY_BUDGET_MB,
    group_ids: Sequence[str] | None = None,
    progress: ProgressReporter | None = None,
) -> DataRewriteReport:
    """Rewrite the table's small (and oversized) data files into files of the target size, with every delete
    applied, when ``dry_run=False`` (``iceberg-maint rewrite-data-files``, docs/cli.md).

    Each group (one partition of one spec) commits as a ``replace`` snapshot (``max_commits`` batches groups
    so that the run makes at most that many); a group that conflicts with a concurrent commit is left out and
    reported in ``failed``. ``group_ids``: rewrite only those groups of a fresh plan (``FileGroupPlan.group_id``).
    A dry run writes nothing and reports the plan.
    """
    for flag, what in ((dry_run, "dry_run"), (remove_dangling_deletes, "remove_dangling_deletes")):
        check_flag(flag, what)
    check_whole(max_commits, "max_commits", 1)
    check_whole(memory_budget_mb, "memory_budget_mb", 1)
    if group_ids is not None and (isinstance(group_ids, str) or not all(isinstance(g, str) for g in group_ids)):
        raise InvalidInputError(f"group_ids {group_ids!r}: expected a list of group ids (FileGroupPlan.group_id)")
    options, target = _options(
        strategy,
        target_file_size_bytes,
        min_input_files,
        where,
        sort,
        zorder,
        delete_file_threshold,
        max_commits=max_commits,
        remove_dangling_deletes=remove_dangling_deletes,
        memory_budget_mb=memory_budget_mb,
    )
    loaded = resolve_table(table, catalog)
    options = _with_target(options, target, loaded)
    name = ".".join(loaded.name())

    def load() -> Table:
        return resolve_table(name, loaded.catalog)

    reporter: AbstractContextManager[object] = reporting(progress) if progress is not None else nullcontext()
    with reporter:
        return run.rewrite_data_files(load, options, dry_run=dry_run, group_ids=group_ids)


def rewrite_manifests(
    table: TableLike,
    *,
    catalog: CatalogLike = DEFAULT_CATALOG,
    target_manifest_size_bytes: int | None = None,
    dry_run: bool = True,
) -> ManifestRewriteReport:
    """Regroup the live entries of the table's current snapshot by partition into manifests of the target size,
    in one ``replace`` commit when ``dry_run=False`` (``iceberg-maint rewrite-manifests``, docs/cli.md).

    ``table``: a pyiceberg ``Table`` or ``"namespace.table"`` in ``catalog``. The target is
    ``target_manifest_size_bytes``, else the table's ``commit.manifest.target-size-bytes``, else 8 MB. Every
    entry keeps its snapshot id and sequence numbers, so every snapshot reads the same rows. A dry run reads
    manifests only and reports the plan.
    """
    check_whole(target_manifest_size_bytes, "target_manifest_size_bytes", 1)
    check_flag(dry_run, "dry_run")
    loaded = resolve_table(table, catalog)
    return manifests.rewrite_manifests(loaded, target_manifest_size_bytes=target_manifest_size_bytes, dry_run=dry_run)
