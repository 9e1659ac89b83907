"""``IcebergIndexLagSensor``: wait until an index lags its table by more than a threshold."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue, conf

from airflow_iceberg_maint.airflow import arguments
from airflow_iceberg_maint.airflow.hooks.maintenance import DEFAULT_CONN_ID, MaintenanceHookMixin
from airflow_iceberg_maint.airflow.task_errors import event_exception, task_exception
from airflow_iceberg_maint.airflow.triggers.index_lag import IcebergIndexLagTrigger
from airflow_iceberg_maint.errors import MaintenanceError
from airflow_iceberg_maint.policy.lag_threshold import CheckedLag, LagThreshold


class IcebergIndexLagSensor(MaintenanceHookMixin, BaseSensorOperator):
    """Succeed when the index lags the table by more than the threshold; XCom: the lag.

    Bounds (any one exceeded is enough; with none, any staleness counts): more than
    ``max_snapshots_behind`` commits, more than ``max_lag_seconds`` between the extract's
    snapshot and the current one, more than ``max_added_files`` data and delete files added.
    Pokes in a worker slot, or with ``deferrable=True`` waits in the triggerer. A missing table
    or index fails at once; a fault that may pass (an unreadable file) fails the try, so the
    task's retries apply, whether met in a poke, before deferring or in the trigger.

    :param table: ``namespace.table``.
    :param index: index name.
    :param iceberg_conn_id: an ``iceberg`` connection.
    :param deferrable: wait in the triggerer instead of a worker slot.
    :param state_url: where the lag is recorded for the status page (None: Airflow Variables).
    """

    template_fields: Sequence[str] = ("table", "index", "max_snapshots_behind", "max_lag_seconds", "max_added_files")
    ui_color = "#f7ecd4"

    def __init__(
        self,
        *,
        table: str,
        index: str,
        max_snapshots_behind: int | str | None = None,
        max_lag_seconds: float | str | None = None,
        max_added_files: int | str | None = None,
        iceberg_conn_id: str = DEFAULT_CONN_ID,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        state_url: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.index = index
        self.max_snapshots_behind = max_snapshots_behind
        self.max_lag_seconds = max_lag_seconds
        self.max_added_files = max_added_files
        self.iceberg_conn_id = iceberg_conn_id
        self.deferrable = deferrable
        self.state_url = state_url

    def _threshold(self) -> LagThreshold:
        return LagThreshold.from_arguments(self.max_snapshots_behind, self.max_lag_seconds, self.max_added_files)

    def _check(self, threshold: LagThreshold) -> CheckedLag:
        table = arguments.optional_str(self.table, "table") or ""
        index = arguments.optional_str(self.index, "index") or ""
        checked = self.hook.check_index_lags(table, [index], threshold)[0]
        self.hook.record_index_lags(table, [{**checked.to_json(), "threshold": threshold.to_json()}], self.log)
        lag = checked.lag
        self.log.info(
            "%s index %s: extract of snapshot %s, table at %s, %d snapshot(s) behind: %s",
            table,
            index,
            lag.extract_snapshot_id,
            lag.table_snapshot_id,
            lag.snapshots_behind,
            "; ".join(checked.reasons) or f"within {threshold.to_json()}",
        )
        return checked

    def poke(self, context: Context) -> PokeReturnValue:
        try:
            checked = self._check(self._threshold())
        except MaintenanceError as exc:
            raise task_exception(f"table {self.table} index {self.index}", exc) from exc
        return PokeReturnValue(is_done=checked.lagging, xcom_value=checked.to_json())

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        try:
            threshold = self._threshold()
            checked = self._check(threshold)
        except MaintenanceError as exc:
            raise task_exception(f"table {self.table} index {self.index}", exc) from exc
        if checked.lagging:
            return checked.to_json()
        self.defer(
            trigger=IcebergIndexLagTrigger(
                table=str(self.table),
                index=str(self.index),
                iceberg_conn_id=self.iceberg_conn_id,
                max_snapshots_behind=threshold.snapshots,
                max_lag_seconds=threshold.seconds,
                max_added_files=threshold.added_files,
                poll_interval=self.poke_interval,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        if event.get("status") != "lagging":
            raise event_exception(f"table {self.table} index {self.index}", event)
        self.log.info("%s index %s: %s", self.table, self.index, "; ".join(event["lag"]["reasons"]))
        threshold = self._threshold().to_json()
        self.hook.record_index_lags(str(self.table), [{**event["lag"], "threshold": threshold}], self.log)
        lag: dict[str, Any] = event["lag"]
        return lag
