"""Which core errors let Airflow retry a task: faults that may pass, never bad input or refusals."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_iceberg_maint import errors
from airflow_iceberg_maint.airflow.task_errors import error_event, event_exception, task_exception

RETRYABLE = [
    errors.MetadataReadError,
    errors.StorageError,
    errors.CatalogListingError,
    errors.CommitOutcomeUnknownError,
    errors.IndexCommitConflictError,
    errors.IncompleteMetadataError,
    errors.ExpiryConflictError,
    errors.TableBusyError,
    errors.LeaseLostError,
]
FINAL = [
    errors.InvalidInputError,
    errors.LocationRefusedError,
    errors.WriteRefusedError,
    errors.GcDisabledError,
    errors.UnknownLocationsError,
    errors.TableNotFoundError,
    errors.IndexNotFoundError,
    errors.IndexExistsError,
    errors.UnsupportedStoreError,
    errors.DamagedMetadataError,
    errors.ExpiryRestoreError,  # a ref that could not be put back needs a person, not a retry
]


@pytest.mark.parametrize("kind", RETRYABLE)
def test_faults_that_may_pass_are_retried(kind: type[errors.MaintenanceError]) -> None:
    raised = task_exception("table db.t", kind("the store did not answer"))
    assert type(raised) is AirflowException
    assert str(raised) == "table db.t: the store did not answer"


@pytest.mark.parametrize("kind", FINAL)
def test_bad_input_and_refusals_fail_without_retry(kind: type[errors.MaintenanceError]) -> None:
    raised = task_exception("table db.t", kind("bad"))
    assert type(raised) is AirflowFailException
    assert str(raised) == "table db.t: bad"


def test_a_prefix_mismatch_fails_without_retry() -> None:
    raised = task_exception("table db.t", errors.PrefixMismatchError("2 conflicts", conflicts=[]))
    assert type(raised) is AirflowFailException


def test_every_error_class_is_classified() -> None:
    classes = {c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.MaintenanceError)}
    assert classes - {errors.MaintenanceError, errors.PrefixMismatchError} == set(RETRYABLE) | set(FINAL)


def test_an_error_that_is_not_the_cores_keeps_airflows_default_retry() -> None:
    event = error_event(ConnectionRefusedError("connection refused"), table="db.t")
    assert event == {
        "table": "db.t",
        "status": "error",
        "message": "ConnectionRefusedError: connection refused",
        "retryable": True,
    }
    raised = event_exception("table db.t", event)
    assert type(raised) is AirflowException
    assert str(raised) == "table db.t: ConnectionRefusedError: connection refused"


@pytest.mark.parametrize("kind", RETRYABLE + FINAL)
def test_a_trigger_error_fails_the_resumed_task_as_it_would_have_in_execute(
    kind: type[errors.MaintenanceError],
) -> None:
    event = error_event(kind("the store did not answer"), table="db.t", index="by_id")
    assert event == {
        "table": "db.t",
        "index": "by_id",
        "status": "error",
        "message": "the store did not answer",
        "retryable": kind.retryable,
    }
    raised = event_exception("table db.t index by_id", event)
    assert type(raised) is type(task_exception("table db.t index by_id", kind("the store did not answer")))
    assert str(raised) == "table db.t index by_id: the store did not answer"


def test_an_event_without_retryable_is_an_ordinary_failure() -> None:
    raised = event_exception("table db.t", {"status": "timeout"})
    assert type(raised) is AirflowException
    assert str(raised) == "table db.t: {'status': 'timeout'}"


def test_an_error_that_names_its_subject_is_raised_with_its_own_message() -> None:
    raised = task_exception(None, errors.InvalidInputError("policy file 'p.yaml': bad"))
    assert type(raised) is AirflowFailException
    assert str(raised) == "policy file 'p.yaml': bad"
