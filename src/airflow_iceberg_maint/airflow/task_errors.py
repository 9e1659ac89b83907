"""How an error ends an Airflow task: with a retry when the fault may pass, without one otherwise.

The one mapping from the core's ``MaintenanceError.retryable`` to Airflow, for every operator,
sensor and trigger of the provider:

- a retryable ``MaintenanceError`` (a store or catalog that did not answer, an unreadable file,
  a lost race) becomes ``AirflowException``: an ordinary failure, so the task's retries apply;
- any other ``MaintenanceError`` (bad input, refusals) becomes ``AirflowFailException``: the task
  fails at once, whatever retries are left;
- an exception that is not a ``MaintenanceError`` is not classified by the core: it keeps
  Airflow's default (retried).

Operators and sensors raise ``task_exception(...)``. A trigger cannot raise into its task, so it
yields ``error_event(...)`` (which carries ``retryable``) and the task's resumed method raises
``event_exception(...)``: the same rule, applied after the deferral.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_iceberg_maint.errors import MaintenanceError

#: ``status`` of a trigger event that reports an error.
ERROR_STATUS = "error"


def retryable(exc: BaseException) -> bool:
    """Whether running the task again may succeed: the core's flag, else True (Airflow's default)."""
    return exc.retryable if isinstance(exc, MaintenanceError) else True


def _exception(what: str | None, message: str, may_pass: bool) -> AirflowException:
    kind = AirflowException if may_pass else AirflowFailException
    return kind(f"{what}: {message}" if what else message)


def task_exception(what: str | None, exc: MaintenanceError) -> AirflowException:
    """The exception to raise: ``AirflowException`` (Airflow retries) when ``exc.retryable``, else
    ``AirflowFailException`` (bad input, refusals: no retry can help). ``what`` prefixes the message
    (None: the error names its subject itself)."""
    return _exception(what, str(exc), exc.retryable)


def error_event(exc: Exception, **fields: Any) -> dict[str, Any]:
    """A trigger's event payload for ``exc``: ``fields`` plus ``status: error``, the message and ``retryable``."""
    message = str(exc) if isinstance(exc, MaintenanceError) else f"{type(exc).__name__}: {exc}"
    return {**fields, "status": ERROR_STATUS, "message": message, "retryable": retryable(exc)}


def event_exception(what: str, event: Mapping[str, Any]) -> AirflowException:
    """The exception a resumed task raises for a trigger event it cannot use.

    An error event of ``error_event`` fails the task as the error would have in ``execute``; an
    event without ``retryable`` (another status, or an event of an older trigger) is an ordinary
    failure, so the task's retries apply.
    """
    return _exception(what, str(event.get("message", dict(event))), bool(event.get("retryable", True)))
