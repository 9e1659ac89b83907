"""``IcebergTableDueSensor``: wait until a table is due for orphan-file removal or snapshot expiry."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue, conf

from airflow_iceberg_maint.airflow.hooks.maintenance import DEFAULT_CONN_ID, MaintenanceHookMixin
from airflow_iceberg_maint.airflow.task_errors import event_exception, task_exception
from airflow_iceberg_maint.airflow.triggers.due import IcebergTableDueTrigger
from airflow_iceberg_maint.errors import InvalidInputError, MaintenanceError
from airflow_iceberg_maint.policy.due import Evaluation
from airflow_iceberg_maint.policy.policies import (
    DATA_COMPACTION,
    ORPHAN_FILE_REMOVAL,
    SNAPSHOT_EXPIRY,
    Policy,
    load_policies,
    policy_for_table,
)

POLICY_TYPES = (ORPHAN_FILE_REMOVAL, SNAPSHOT_EXPIRY, DATA_COMPACTION)


class IcebergTableDueSensor(MaintenanceHookMixin, BaseSensorOperator):
    """Succeed when ``days_since_last_cleanup >= minIntervalDays`` for the table (or it was never cleaned).

    ``policy_type`` chooses the kind: ``system_iceberg_orphan_file_removal`` (the default: days since
    the last cleanup), ``system_iceberg_snapshot_expiry`` (days since the last expiry) or
    ``system_iceberg_data_compaction`` (days since the last compaction); for these two ``policy_file``
    is required, as they have no default interval.

    Pokes in a worker slot, or with ``deferrable=True`` waits in the triggerer. The XCom value
    is the evaluation (``due``, ``score``, ``reason``, ...). A table no policy of the file
    attaches to, a missing table or a bad policy file fails at once; a fault that may pass (an
    unreachable state store, an unreadable file) fails the try, so the task's retries apply,
    whether met in a poke, before deferring or in the trigger.

    :param table: ``namespace.table``.
    :param policy_file: JSON or YAML policy file; without it the default 7-day interval applies.
    :param iceberg_conn_id: an ``iceberg`` connection.
    :param state_url: SQLAlchemy URL of a shared state store; default: Airflow Variables.
    :param deferrable: wait in the triggerer instead of a worker slot.
    :param policy_type: the kind of maintenance to wait for (orphan removal, snapshot expiry or data compaction).
    """

    template_fields: Sequence[str] = ("table", "policy_file")

    def __init__(
        self,
        *,
        table: str,
        policy_file: str | None = None,
        iceberg_conn_id: str = DEFAULT_CONN_ID,
        state_url: str | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        policy_type: str = ORPHAN_FILE_REMOVAL,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if policy_type not in POLICY_TYPES:
            raise ValueError(f"policy_type {policy_type!r}: expected one of {', '.join(POLICY_TYPES)}")
        if policy_type != ORPHAN_FILE_REMOVAL and not policy_file:
            raise ValueError(f"policy_type {policy_type!r}: needs a policy_file")
        self.policy_type = policy_type
        self.table = table
        self.policy_file = policy_file
        self.iceberg_conn_id = iceberg_conn_id
        self.state_url = state_url
        self.deferrable = deferrable

    def _policies(self) -> list[Policy[Any]] | None:
        if not self.policy_file:
            return None
        policies = load_policies(self.policy_file)
        if policy_for_table(policies, self.table, self.policy_type) is None:
            kind = "orphan-removal" if self.policy_type == ORPHAN_FILE_REMOVAL else "snapshot-expiry"
            raise InvalidInputError(f"no {kind} policy in {self.policy_file} attaches to {self.table}")
        return policies

    def _evaluate(self, policies: list[Policy[Any]] | None) -> Evaluation:
        evaluation = self.hook.evaluate_due(self.table, policies, str(self.policy_file), self.policy_type)
        self.log.info("%s: %s", self.table, evaluation.reason)
        return evaluation

    def poke(self, context: Context) -> PokeReturnValue:
        try:
            evaluation = self._evaluate(self._policies())
        except MaintenanceError as exc:
            raise task_exception(f"table {self.table}", exc) from exc
        return PokeReturnValue(is_done=evaluation.due, xcom_value=evaluation.to_json())

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        try:
            policies = self._policies()
            evaluation = self._evaluate(policies)
        except MaintenanceError as exc:
            raise task_exception(f"table {self.table}", exc) from exc
        if evaluation.due:
            return evaluation.to_json()
        policy = policy_for_table(policies, self.table, self.policy_type) if policies else None
        self.defer(
            trigger=IcebergTableDueTrigger(
                table=self.table,
                iceberg_conn_id=self.iceberg_conn_id,
                policy=policy.to_json() if policy else None,
                state_url=self.state_url,
                poll_interval=self.poke_interval,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        if event.get("status") != "due":
            raise event_exception(f"table {self.table}", event)
        self.log.info("%s: %s", self.table, event["evaluation"]["reason"])
        evaluation: dict[str, Any] = event["evaluation"]
        return evaluation
