"""Index maintenance operators that change an index: commit extracts, expire old extracts.

The planning operators (create missing indexes, plan by lag) are in ``operators.index_definitions``.

Each is a thin shell over ``airflow_iceberg_maint.index``: arguments are templated and coerced,
XCom gets a small summary, and a retry is safe (creation and commits check what already exists).

Timeouts and SIGTERM (``AirflowTaskTimeout``, ``AirflowTaskTerminated``) are raised inside the
core wherever it is; the core deletes the files of a commit only once that commit is known to
have lost, so a killed task never removes files a landed (or possibly landed) commit names. A
commit whose outcome is unknown fails the try with a retry, which re-reads the index.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_iceberg_maint.airflow import arguments
from airflow_iceberg_maint.airflow.hooks.maintenance import DEFAULT_CONN_ID, MaintenanceHookMixin
from airflow_iceberg_maint.airflow.leased_task import TableLeaseMixin
from airflow_iceberg_maint.airflow.maintenance_run import classified
from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.index.lifecycle.expire import expire_extracts
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.index.source.snapshot_files import resolve_snapshot
from airflow_iceberg_maint.index.write.incremental import refresh_index
from airflow_iceberg_maint.index.write.sharded_build import ShardedBuildPlan, ShardResult, commit_sharded_build
from airflow_iceberg_maint.progress import LoggingReporter, reporting

#: The fields of a committed extract (its ``to_json()``) in a commit's XCom.
EXTRACT_FIELDS = (
    "extract_id",
    "source_table_snapshot_id",
    "mode",
    "entries",
    "region_files_written",
    "region_files_reused",
)


def optional_snapshot_id(value: Any) -> int | None:
    """A snapshot id, parsed as an integer: 64-bit ids do not survive a round trip through float."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = arguments.optional_str(value, "snapshot_id")
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise InvalidInputError(f"argument snapshot_id: expected a whole number, got {value!r}") from None


def _commit_summary(extract: dict[str, Any], committed: bool, seconds: float) -> dict[str, Any]:
    """What both commit paths add to their XCom: the extract's fields, whether this try committed, how long it took."""
    return {**{k: extract[k] for k in EXTRACT_FIELDS}, "committed": committed, "seconds": seconds}


class IcebergCommitIndexExtractOperator(TableLeaseMixin, MaintenanceHookMixin, BaseOperator):
    """Refresh an index: build an extract of a table snapshot and commit it by atomic swap.

    Incremental by default (only the regions the table change touched are rewritten) and full
    with ``full=True``. The core falls back to a full build when no usable base extract exists
    (the first extract, an expired base snapshot, ...): ``mode`` says which build ran and
    ``requested_mode`` what was asked. Keyed by snapshot: when the index already has an extract
    of the target snapshot (an earlier try committed it), nothing is built and ``committed`` is
    false, so a retry never commits twice. XCom: ``{table, index, extract_id,
    source_table_snapshot_id, requested_mode, mode, committed, region_files_written,
    region_files_reused, entries, seconds}``.

    With ``sharded_build`` (a plan of ``IcebergPlanIndexShardsOperator``) the extract was built by
    the mapped ``IcebergBuildIndexShardOperator`` tasks ``shard_task_id``: this task only joins
    their region lists into one tracking file, commits once, and deletes the files of failed or
    superseded shard attempts (``index.sharded_build``). A retry after a landed commit finds
    the build's extract and commits nothing. XCom as above, with ``mode`` ``full`` and
    ``shards``.

    :param table: ``namespace.table``.
    :param index: index name.
    :param full: rebuild every region instead of only those the table change touched.
    :param snapshot_id: table snapshot to index (default: the current one).
    :param sharded_build: commit this sharded build instead of building here.
    :param shard_task_id: the task ID of the mapped shard builds of ``sharded_build``.
    :param iceberg_conn_id: an ``iceberg`` connection.
    """

    template_fields: Sequence[str] = ("table", "index", "full", "snapshot_id")
    ui_color = "#d4f7e0"

    def __init__(
        self,
        *,
        table: str,
        index: str,
        full: bool | str = False,
        snapshot_id: int | str | None = None,
        sharded_build: dict[str, Any] | None = None,
        shard_task_id: str = "build_index_shard",
        iceberg_conn_id: str = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.index = index
        self.full = full
        self.snapshot_id = snapshot_id
        self.sharded_build = sharded_build
        self.shard_task_id = shard_task_id
        self.iceberg_conn_id = iceberg_conn_id

    def maintain(self, context: Context) -> dict[str, Any]:
        table_name = arguments.optional_str(self.table, "table") or ""
        index = arguments.optional_str(self.index, "index") or ""
        with classified(f"table {table_name} index {index}"):
            if self.sharded_build is not None:
                pulled = context["ti"].xcom_pull(task_ids=self.shard_task_id)
                summary = self._commit_shards(table_name, index, pulled)
            else:
                summary = self._run(table_name, index)
        # The lag the plan recorded is from before this commit: record the index as it now stands.
        self.hook.record_refreshed_lag(table_name, index, self.log)
        return summary

    def _commit_shards(self, table_name: str, index: str, pulled: Any) -> dict[str, Any]:
        build = ShardedBuildPlan.from_json(self.sharded_build)
        if build.index != index:
            raise InvalidInputError(f"sharded_build: a build of index {build.index!r}, not {index!r}")
        # A failed shard has no XCom; results of other indexes' builds are skipped by build ID.
        values = pulled if isinstance(pulled, list) else [pulled]
        results = [ShardResult.from_json(v) for v in values if v is not None]
        started = time.monotonic()
        outcome = commit_sharded_build(self.hook.load_table(table_name), build, results)
        seconds = round(time.monotonic() - started, 3)
        body = outcome.result.to_json()
        self.log.info(
            "%s index %s: %s extract %d of snapshot %d from %d shards: %d entries in %d region files, "
            "%d unreferenced build files deleted, in %.3fs",
            table_name,
            index,
            "committed" if outcome.committed else "found the already committed",
            body["extract_id"],
            build.snapshot_id,
            build.shards,
            body["entries"],
            body["region_files_written"],
            outcome.deleted_files,
            seconds,
        )
        return {
            "table": table_name,
            "index": index,
            "requested_mode": "full",
            "shards": build.shards,
            **_commit_summary(body, outcome.committed, seconds),
        }

    def _run(self, table_name: str, index: str) -> dict[str, Any]:
        requested = "full" if arguments.boolean(self.full, "full") else "incremental"
        snapshot_id = optional_snapshot_id(self.snapshot_id)
        table = self.hook.load_table(table_name)
        snapshot = resolve_snapshot(table, snapshot_id)
        summary: dict[str, Any] = {"table": table_name, "index": index, "requested_mode": requested}
        if snapshot is None:
            self.log.info("%s: no snapshot yet, nothing to index", table_name)
            return {**summary, "extract_id": None, "source_table_snapshot_id": None, "mode": None, "committed": False}
        metadata, _, _ = IndexStore(table).load(index)
        existing = metadata.extracts_for_snapshot(snapshot.snapshot_id)
        if existing:
            extract = max(existing, key=lambda e: e.timestamp_ms)
            self.log.info(
                "%s index %s: extract %d already covers snapshot %d; nothing to commit",
                table_name,
                index,
                extract.extract_id,
                snapshot.snapshot_id,
            )
            return {
                **summary,
                "extract_id": extract.extract_id,
                "source_table_snapshot_id": snapshot.snapshot_id,
                "mode": None,
                "committed": False,
            }
        started = time.monotonic()
        with reporting(LoggingReporter(self.log)):
            result = refresh_index(table, index, snapshot.snapshot_id, full=requested == "full")
        seconds = round(time.monotonic() - started, 3)
        body = result.to_json()
        self.log.info(
            "%s index %s: committed extract %d of snapshot %d (%s): %d entries, %d region files written, "
            "%d reused, in %.3fs",
            table_name,
            index,
            body["extract_id"],
            body["source_table_snapshot_id"],
            body["mode"],
            body["entries"],
            body["region_files_written"],
            body["region_files_reused"],
            seconds,
        )
        return {
            **summary,
            **_commit_summary(body, True, seconds),
        }

    def on_kill(self) -> None:
        # Nothing to undo here: the core keeps the files of a commit that may have landed.
        self.log.warning(
            "%s index %s: killed; files of a commit in flight are kept for the next try to settle",
            self.table,
            self.index,
        )


class IcebergExpireIndexExtractsOperator(TableLeaseMixin, MaintenanceHookMixin, BaseOperator):
    """Expire old extracts of an index and delete the files no remaining extract references.

    ``retain_last`` keeps the N newest extracts, ``older_than`` expires those created before an
    ISO 8601 time; with both, those older beyond the N newest. The newest extract is never
    expired. A retry finds nothing more to expire. Files whose delete failed are unreferenced
    and left for orphan removal; they are counted and logged. XCom: ``{table, index,
    expired_extract_ids, deleted_files, failed_count}``.

    :param table: ``namespace.table``.
    :param index: index name.
    :param retain_last: keep this many newest extracts.
    :param older_than: expire extracts created before this time (ISO 8601 with a zone).
    :param iceberg_conn_id: an ``iceberg`` connection.
    """

    template_fields: Sequence[str] = ("table", "index", "retain_last", "older_than")
    ui_color = "#f7d4d4"

    def __init__(
        self,
        *,
        table: str,
        index: str,
        retain_last: int | str | None = None,
        older_than: datetime | str | None = None,
        iceberg_conn_id: str = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.index = index
        self.retain_last = retain_last
        self.older_than = older_than
        self.iceberg_conn_id = iceberg_conn_id

    def maintain(self, context: Context) -> dict[str, Any]:
        table_name = arguments.optional_str(self.table, "table") or ""
        index = arguments.optional_str(self.index, "index") or ""
        with classified(f"table {table_name} index {index}"):
            retain = arguments.optional_number(self.retain_last, "retain_last")
            table = self.hook.load_table(table_name)
            result = expire_extracts(
                table,
                index,
                retain_last=None if retain is None else arguments.positive_int(retain, "retain_last"),
                older_than=arguments.optional_datetime(self.older_than, "older_than"),
            )
        failed = result["failed"]
        self.log.info(
            "%s index %s: expired extracts %s, deleted %d files",
            table_name,
            index,
            result["expired_extract_ids"] or "none",
            result["deleted_files"],
        )
        if failed:
            self.log.warning(
                "%s index %s: %d file(s) not deleted (left for orphan removal); first: %s: %s",
                table_name,
                index,
                len(failed),
                failed[0]["path"],
                failed[0]["error"],
            )
        return {
            "table": table_name,
            "index": index,
            "expired_extract_ids": result["expired_extract_ids"],
            "deleted_files": result["deleted_files"],
            "failed_count": len(failed),
        }

    def on_kill(self) -> None:
        # Nothing to undo here: the core keeps the files of a commit that may have landed.
        self.log.warning(
            "%s index %s: killed; files of a commit in flight are kept for the next try to settle",
            self.table,
            self.index,
        )
