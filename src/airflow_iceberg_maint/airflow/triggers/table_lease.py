"""``TableLeaseTrigger``: waits in the triggerer until a table's lease is free (for a deferred maintenance task)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_iceberg_maint.airflow.table_lease import lease_store_for
from airflow_iceberg_maint.airflow.task_errors import error_event

FREE = "free"
TIMEOUT = "timeout"


class TableLeaseTrigger(BaseTrigger):
    """Yield once: ``status: free`` (with the ``deadline``, for the next wait) when the lease of ``table``
    is released, expired or ``owner``'s;
    ``status: timeout`` (with the ``holder``) at ``deadline``; or ``status: error`` (``task_errors``).

    It only watches: the resumed task takes the lease itself, and defers again if another task
    took it first. The store is read in a thread every ``poll_interval`` seconds, and at the
    moment the holder's lease expires if that comes sooner.

    :param table: ``namespace.table`` whose lease is watched.
    :param owner: the waiting task instance (``<dag_id>/<run_id>/<task_id>/<map_index>``); its own lease counts as free.
    :param deadline: ISO 8601 time at which the wait gives up (``status: timeout``).
    :param state_url: SQLAlchemy URL of the lease table; None: Airflow Variables.
    :param poll_interval: seconds between reads of the lease.
    :param first_wait: seconds before the first read: a task that resumed on ``free`` and found the lease
        held after all (a part the triggerer cannot see, such as the worker host's own lease file)
        waits a poll interval instead of resuming again at once.
    """

    def __init__(
        self,
        *,
        table: str,
        owner: str,
        deadline: str,
        state_url: str | None = None,
        poll_interval: float = 30.0,
        first_wait: float = 0.0,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # untyped_calls_exclude misses super()
        self.table = table
        self.owner = owner
        self.deadline = deadline
        self.state_url = state_url
        self.poll_interval = poll_interval
        self.first_wait = first_wait

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table": self.table,
                "owner": self.owner,
                "deadline": self.deadline,
                "state_url": self.state_url,
                "poll_interval": self.poll_interval,
                "first_wait": self.first_wait,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        deadline = datetime.fromisoformat(self.deadline)
        await asyncio.sleep(max(0.0, min(self.first_wait, (deadline - datetime.now(UTC)).total_seconds())))
        while True:
            try:
                holder = await asyncio.to_thread(lambda: lease_store_for(self.state_url).holder(self.table))
            except Exception as exc:  # the task raises it on resuming, as retryable as it is
                yield TriggerEvent(error_event(exc, table=self.table))
                return
            now = datetime.now(UTC)
            if holder is None or holder.free_for(self.owner, now):
                yield TriggerEvent({"status": FREE, "table": self.table, "deadline": self.deadline})
                return
            if now >= deadline:
                yield TriggerEvent({"status": TIMEOUT, "table": self.table, "holder": holder.to_json()})
                return
            wake = min(deadline, holder.expires_at)
            self.log.info("lease of %s held by %s until %s", self.table, holder.owner, holder.expires_at.isoformat())
            await asyncio.sleep(max(0.0, min(self.poll_interval, (wake - now).total_seconds())))
