"""``IcebergTableDueTrigger``: polls a table's evaluation until it is due (for the deferrable sensor)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from functools import cached_property
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_iceberg_maint.airflow.hooks.maintenance import IcebergMaintenanceHook
from airflow_iceberg_maint.airflow.task_errors import error_event
from airflow_iceberg_maint.policy.policies import ORPHAN_FILE_REMOVAL, parse_policy


class IcebergTableDueTrigger(BaseTrigger):
    """Yield once, when the table becomes due (``status: due``), or on an error (``status: error``,
    with ``retryable``: see ``task_errors``).

    ``policy`` is the table's policy as a JSON object (None: orphan removal's default interval):
    the triggerer may not see the DAG folder, so the sensor resolves the policy file first. The
    policy's type says which kind's last run counts (orphan removal or snapshot expiry).
    pyiceberg and the state store are synchronous, so each evaluation runs in a thread.

    :param table: ``namespace.table``.
    :param iceberg_conn_id: an ``iceberg`` connection.
    :param policy: the table's policy as a JSON object; None: orphan removal's default interval.
    :param state_url: SQLAlchemy URL of the cleanup state; None: Airflow Variables.
    :param poll_interval: seconds between evaluations.
    """

    def __init__(
        self,
        *,
        table: str,
        iceberg_conn_id: str,
        policy: dict[str, Any] | None = None,
        state_url: str | None = None,
        poll_interval: float = 3600.0,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # untyped_calls_exclude misses super()
        self.table = table
        self.iceberg_conn_id = iceberg_conn_id
        self.policy = policy
        self.state_url = state_url
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table": self.table,
                "iceberg_conn_id": self.iceberg_conn_id,
                "policy": self.policy,
                "state_url": self.state_url,
                "poll_interval": self.poll_interval,
            },
        )

    @cached_property
    def hook(self) -> IcebergMaintenanceHook:
        """Built once per trigger run: each check reuses its catalog."""
        return IcebergMaintenanceHook(self.iceberg_conn_id, state_url=self.state_url)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                policies = [parse_policy(self.policy, "trigger policy")] if self.policy is not None else None
                kind = policies[0].type if policies else ORPHAN_FILE_REMOVAL
                evaluation = await asyncio.to_thread(
                    self.hook.evaluate_due, self.table, policies, "the sensor's policy", kind
                )
            except Exception as exc:  # the task raises it on resuming, as retryable as it is (task_errors)
                yield TriggerEvent(error_event(exc, table=self.table))
                return
            if evaluation.due:
                yield TriggerEvent({"status": "due", "table": self.table, "evaluation": evaluation.to_json()})
                return
            self.log.info("%s: %s; next check in %ss", self.table, evaluation.reason, self.poll_interval)
            await asyncio.sleep(self.poll_interval)
