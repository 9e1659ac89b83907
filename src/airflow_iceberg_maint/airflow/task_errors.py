"""How a core error ends an Airflow task: with a retry when the fault may pass, without one otherwise."""

from __future__ import annotations

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_iceberg_maint.errors import MaintenanceError


def task_exception(what: str, exc: MaintenanceError) -> AirflowException:
    """The exception to raise: ``AirflowException`` (Airflow retries) when ``exc.retryable``, else
    ``AirflowFailException`` (bad input, refusals: no retry can help)."""
    kind = AirflowException if exc.retryable else AirflowFailException
    return kind(f"{what}: {exc}")
