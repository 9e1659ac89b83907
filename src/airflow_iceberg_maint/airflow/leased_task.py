"""``TableLeaseMixin``: a maintenance operator runs only while it holds its table's lease (``state.leases``).

A task that finds the lease held defers (``TableLeaseTrigger`` watches it in the triggerer; no
worker slot is held) and tries again when it is free. After ``lease_timeout`` seconds of waiting
in all, it gives up: the task fails with ``TableBusyError`` naming the holder, retried like any
fault that may pass (``task_errors``). ``lease_timeout=0`` gives up at once, without deferring.

The lease's owner is the task instance (DAG, run, task, map index), so a retry of a task whose
worker died takes over its own lease at once instead of waiting for it to expire.
"""

from __future__ import annotations

from abc import abstractmethod
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowSkipException

from airflow_iceberg_maint.airflow import arguments
from airflow_iceberg_maint.airflow.maintenance_run import classified
from airflow_iceberg_maint.airflow.table_lease import lease_store_for
from airflow_iceberg_maint.airflow.task_errors import event_exception, task_exception
from airflow_iceberg_maint.airflow.triggers.table_lease import FREE, TIMEOUT, TableLeaseTrigger
from airflow_iceberg_maint.errors import LeaseLostError, MaintenanceError, TableBusyError
from airflow_iceberg_maint.state.lease_fence import held
from airflow_iceberg_maint.state.leases import DEFAULT_TTL_SECONDS, Lease, try_take

DEFAULT_LEASE_TIMEOUT_SECONDS = 6 * 3600.0
DEFAULT_LEASE_POLL_SECONDS = 30.0


def lease_owner(context: Context, task_id: str) -> str:
    """The task instance, without the try number: a retry is the same owner."""
    ti = context["ti"]
    parts = (getattr(ti, "dag_id", "?"), getattr(ti, "run_id", "?"), getattr(ti, "task_id", task_id))
    return "/".join((*parts, str(getattr(ti, "map_index", -1))))


class TableLeaseMixin(BaseOperator):
    """Put it before ``BaseOperator`` in the bases; the operator has a ``table`` and implements ``maintain``.

    A ``BaseOperator`` itself, so that ``partial`` (dynamic task mapping, e.g. ``compaction_task_group``'s
    shares) takes the lease arguments: Airflow looks for them in the ``__init__`` of operator classes only.

    :param lease_timeout: seconds to wait in all for the table's lease (default 6 hours; 0: give up at once).
    :param lease_ttl: seconds a lease lasts unless renewed (default 60); a worker killed on another host holds
        it this long, and a task stalled this long loses it (it stops at its next delete batch or commit).
    :param lease_poll_interval: seconds between the trigger's looks at the lease (default 30).
    """

    # Provided by the operator (an operator without a state_url uses the configured store).
    table: Any
    state_url: str | None = None

    def __init__(
        self,
        *,
        lease_timeout: float = DEFAULT_LEASE_TIMEOUT_SECONDS,
        lease_ttl: float = DEFAULT_TTL_SECONDS,
        lease_poll_interval: float = DEFAULT_LEASE_POLL_SECONDS,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if lease_timeout < 0 or lease_ttl <= 0 or lease_poll_interval <= 0:
            raise ValueError(
                f"lease_timeout {lease_timeout}, lease_ttl {lease_ttl}, lease_poll_interval {lease_poll_interval}: "
                "expected a timeout >= 0 and a ttl and poll interval > 0"
            )
        self.lease_timeout = lease_timeout
        self.lease_ttl = lease_ttl
        self.lease_poll_interval = lease_poll_interval

    def leased_table(self) -> str:
        """The table this task maintains: its rendered ``table``."""
        return arguments.optional_str(self.table, "table") or ""

    @abstractmethod
    def maintain(self, context: Context) -> Any:
        """The task's work, run while the lease is held."""

    def execute(self, context: Context) -> Any:
        return self._under_lease(context, None)

    def resume_after_lease(self, context: Context, event: dict[str, Any]) -> Any:
        """Where a deferred task resumes: take the lease now (or defer again until the same deadline), or give up."""
        status = event.get("status")
        if status == FREE:
            return self._under_lease(context, str(event["deadline"]))
        if status == TIMEOUT:
            raise self._busy(Lease.from_json(event["holder"]))
        raise event_exception(f"table {self.leased_table()}", event)

    def _busy(self, holder: Lease) -> Exception:
        return task_exception(
            None,
            TableBusyError(
                f"table {holder.table}: another maintenance task holds its lease ({holder.owner}, until "
                f"{holder.expires_at.isoformat()}); gave up after waiting {self.lease_timeout:g} s (lease_timeout)"
            ),
        )

    def _under_lease(self, context: Context, deadline_text: str | None) -> Any:
        table = self.leased_table()
        owner = lease_owner(context, self.task_id)
        ttl = timedelta(seconds=self.lease_ttl)
        now = datetime.now(UTC)
        try:
            store = lease_store_for(self.state_url)
            mine, holder = try_take(store, table, owner, ttl, self.log)
        except MaintenanceError as exc:
            raise task_exception(f"table {table}", exc) from exc
        if mine:
            self.log.info("table %s: lease taken by %s, until %s unless renewed", table, owner, holder.expires_at)
            try:
                with held(store, holder, ttl, self.log):
                    return self.maintain(context)
            except LeaseLostError as exc:  # lost before the work began (inside it, ``maintain`` reports it)
                raise task_exception(None, exc) from exc
        deadline = (
            datetime.fromisoformat(deadline_text) if deadline_text else now + timedelta(seconds=self.lease_timeout)
        )
        if now >= deadline:
            raise self._busy(holder)
        self.log.info(
            "table %s: lease held by %s until %s; deferring until it is free (waiting at most until %s)",
            table,
            holder.owner,
            holder.expires_at.isoformat(),
            deadline.isoformat(),
        )
        trigger = TableLeaseTrigger(
            table=table,
            owner=owner,
            deadline=deadline.isoformat(),
            state_url=self.state_url,
            poll_interval=self.lease_poll_interval,
            first_wait=self.lease_poll_interval if deadline_text else 0.0,  # resumed on free, yet held
        )
        self.defer(trigger=trigger, method_name="resume_after_lease")


class TableTaskMixin(TableLeaseMixin):
    """A leased task on one table (``table``) that a plan may turn off (``enabled`` false: skipped).

    The subclass names its work (``maintenance``, for the skip message) and does it in ``_run``;
    a core error becomes the task's error through ``task_errors``.
    """

    enabled: Any
    maintenance: str

    def execute(self, context: Context) -> Any:
        if not arguments.boolean(self.enabled, "enabled"):
            raise AirflowSkipException(f"table {self.table}: not due for {self.maintenance}")
        return super().execute(context)  # under the table's lease

    def maintain(self, context: Context) -> dict[str, Any]:
        with classified(f"table {self.table}", self_named=(LeaseLostError,)):  # a lost lease names its table
            return self._run(context)

    @abstractmethod
    def _run(self, context: Context) -> dict[str, Any]:
        """The task's work on its table."""
