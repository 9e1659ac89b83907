"""``IcebergIndexLagTrigger``: polls one index's lag until it exceeds a threshold (for the deferrable sensor)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from functools import cached_property
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_iceberg_maint.airflow.hooks.maintenance import IcebergMaintenanceHook
from airflow_iceberg_maint.airflow.task_errors import error_event
from airflow_iceberg_maint.policy.lag_threshold import CheckedLag, LagThreshold


class IcebergIndexLagTrigger(BaseTrigger):
    """Yield once: ``status: lagging`` with the lag when the index exceeds the threshold, or
    ``status: error`` (with ``retryable``: see ``task_errors``) when the table or index cannot be read.

    pyiceberg is synchronous, so each check runs in a worker thread, never on the event loop.

    :param table: ``namespace.table``.
    :param index: index name.
    :param iceberg_conn_id: an ``iceberg`` connection.
    :param max_snapshots_behind: lagging above this many commits behind.
    :param max_lag_seconds: lagging above this many seconds between the extract's snapshot and the current one.
    :param max_added_files: lagging above this many data and delete files added since the extract.
    :param poll_interval: seconds between checks.
    """

    def __init__(
        self,
        *,
        table: str,
        index: str,
        iceberg_conn_id: str,
        max_snapshots_behind: int | None = None,
        max_lag_seconds: float | None = None,
        max_added_files: int | None = None,
        poll_interval: float = 60.0,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # untyped_calls_exclude misses super()
        self.table = table
        self.index = index
        self.iceberg_conn_id = iceberg_conn_id
        self.max_snapshots_behind = max_snapshots_behind
        self.max_lag_seconds = max_lag_seconds
        self.max_added_files = max_added_files
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table": self.table,
                "index": self.index,
                "iceberg_conn_id": self.iceberg_conn_id,
                "max_snapshots_behind": self.max_snapshots_behind,
                "max_lag_seconds": self.max_lag_seconds,
                "max_added_files": self.max_added_files,
                "poll_interval": self.poll_interval,
            },
        )

    @cached_property
    def hook(self) -> IcebergMaintenanceHook:
        """Built once per trigger run: each check reuses its catalog."""
        return IcebergMaintenanceHook(self.iceberg_conn_id)

    def _check(self) -> CheckedLag:
        threshold = LagThreshold(self.max_snapshots_behind, self.max_lag_seconds, self.max_added_files)
        return self.hook.check_index_lags(self.table, [self.index], threshold)[0]

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                checked = await asyncio.to_thread(self._check)
            except Exception as exc:  # the task raises it on resuming, as retryable as it is (task_errors)
                yield TriggerEvent(error_event(exc, table=self.table, index=self.index))
                return
            if checked.lagging:
                yield TriggerEvent({"status": "lagging", "table": self.table, "lag": checked.to_json()})
                return
            self.log.info(
                "%s index %s: %d snapshot(s) behind, within the threshold; next check in %ss",
                self.table,
                self.index,
                checked.lag.snapshots_behind,
                self.poll_interval,
            )
            await asyncio.sleep(self.poll_interval)
