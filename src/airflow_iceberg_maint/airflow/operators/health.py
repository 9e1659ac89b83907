"""``IcebergTableHealthOperator``: check one table's health and record it for the status page.

The check (``api.health.table_health``: metadata and manifests only, no data file read) runs in
the task, so the web server never reads a manifest: the page draws the stored record
(``iceberg_maint.health.<table>``, the full ``health --json`` object with the time the check ran,
and the score's history).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_iceberg_maint.airflow import arguments, config
from airflow_iceberg_maint.airflow.hooks.maintenance import DEFAULT_CONN_ID, MaintenanceHookMixin
from airflow_iceberg_maint.airflow.maintenance_run import classified
from airflow_iceberg_maint.state.jobs import ORPHAN_FILE_REMOVAL


def health_xcom_summary(body: Mapping[str, Any]) -> dict[str, Any]:
    """The small part of a health check pushed to XCom: the score and counts (no histogram, no lists)."""
    deletes = body.get("delete_files") or {}
    return {
        "table": body.get("table"),
        "score": body.get("score"),
        "deduction_count": len(body.get("deductions") or []),
        "data_files": body.get("data_files"),
        "data_bytes": body.get("data_bytes"),
        "small_data_files": body.get("small_data_files"),
        "delete_files": sum(v for v in deletes.values() if isinstance(v, int)),
        "snapshots": body.get("snapshots"),
        "expirable_bytes": body.get("expirable_bytes"),
    }


class IcebergTableHealthOperator(MaintenanceHookMixin, BaseOperator):
    """Compute a table's health (``iceberg-maint health TABLE``) and record it for the status page.

    Reads metadata and manifests only and changes nothing, so it takes no table lease. The record
    holds the whole ``health --json`` object and when the check ran; XCom: ``{table, score,
    deduction_count, data_files, data_bytes, small_data_files, delete_files, snapshots,
    expirable_bytes}``.

    :param table: ``namespace.table``.
    :param target_file_size_bytes: the target data file size small files are measured against
        (None: the table's ``write.target-file-size-bytes``, else the default).
    :param iceberg_conn_id: an ``iceberg`` connection.
    :param state_url: where the record goes: a SQLAlchemy URL, or None for Airflow Variables
        (``iceberg_maint.health.<table>``), else ``[iceberg_maint] state_url``.
    """

    template_fields: Sequence[str] = ("table", "target_file_size_bytes")
    ui_color = "#d4ecf7"

    def __init__(
        self,
        *,
        table: str,
        target_file_size_bytes: int | str | None = None,
        iceberg_conn_id: str = DEFAULT_CONN_ID,
        state_url: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.target_file_size_bytes = target_file_size_bytes
        self.iceberg_conn_id = iceberg_conn_id
        self.state_url = state_url

    def execute(self, context: Context) -> dict[str, Any]:
        # Imported here: the health module is the core's, and the DAG file parses without loading it.
        from airflow_iceberg_maint.api.health import table_health

        name = arguments.optional_str(self.table, "table") or ""
        target = self.target_file_size_bytes
        target_bytes = (
            None if target in (None, "", "None") else arguments.positive_int(target, "target_file_size_bytes")
        )
        started = datetime.now(UTC)
        with classified(f"table {name}"):
            table = self.hook.load_table(name)
            # The last orphan run's findings come from the state store, never a guess.
            last_orphan_run = self.hook.state_store.get(str(table.metadata.table_uuid), ORPHAN_FILE_REMOVAL)
            body: dict[str, Any] = table_health(
                table,
                target_file_size_bytes=target_bytes,
                last_orphan_run=last_orphan_run,
                cache=config.digest_cache_location(),
            ).to_json()
        self.hook.record_health(name, body, started, self.log)
        summary = health_xcom_summary(body)
        self.log.info("%s: health score %s (%s)", name, summary["score"], body.get("deductions"))
        return summary
