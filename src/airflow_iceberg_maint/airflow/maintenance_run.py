"""The Airflow run lifecycle every maintenance operator shares: prepare, run, report, record, XCom summary.

The lease around it is ``leased_task``'s. An operator prepares a ``MaintenanceRun`` (``prepare_run``:
the table, the report's URI outside every table, the policy, the clock), runs its engine inside
``failures_recorded`` (a failure saves what the run had found and is recorded in the cleanup
state), and hands a ``Finished`` to ``publish`` (the report written with stage ``done``, the run
recorded in the cleanup state and the run history, the outcome logged, failed deletes failing the
task, the XCom summary returned). ``run_maintenance`` is the three in a row; ``classified`` turns
a core error into the task's error with its retry meaning (``task_errors``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowException
from pyiceberg.table import Table

from airflow_iceberg_maint.airflow import arguments
from airflow_iceberg_maint.airflow.hooks.maintenance import IcebergMaintenanceHook
from airflow_iceberg_maint.airflow.reports import (
    REPORT_SETTING,
    TaskLog,
    default_report_base,
    refuse_inside_tables,
    report_uri,
    write_report,
)
from airflow_iceberg_maint.airflow.shared_storage import require_shared_location
from airflow_iceberg_maint.airflow.task_errors import task_exception
from airflow_iceberg_maint.errors import MaintenanceError, PrefixMismatchError
from airflow_iceberg_maint.orphans.report import OrphanReport
from airflow_iceberg_maint.policy.policies import ORPHAN_FILE_REMOVAL
from airflow_iceberg_maint.progress import LoggingReporter, reporting
from airflow_iceberg_maint.reachability.other_tables import TablePaths
from airflow_iceberg_maint.state.cleanup import CleanupState, StateStore, record_attempt
from airflow_iceberg_maint.state.status_records import last_attempt

log = logging.getLogger(__name__)


class Staged(Protocol):
    """A report an engine hands over as it advances (``on_stage``)."""

    def to_json(self) -> dict[str, Any]: ...


def cleanup_clock(context: Context, started: datetime) -> datetime:
    """When a cleanup counts as done: the run's logical date if earlier than the start.

    A daily DAG evaluates at about the same time each day; a clock set at the end of the
    cleanup would be seconds later than the next week's evaluation, and a 7-day interval
    would become 8. The schedule tick has no such jitter.
    """
    logical_date = context.get("logical_date")
    return min(logical_date, started) if isinstance(logical_date, datetime) else started


class SavedReport:
    """The run's report on storage: written before anything is deleted, and again when the run ends.

    ``keeps_failure``: the report also records how the run failed (an ``error`` field, null until
    then, and the last stage reached written again on failure); an expiry's report does not.
    """

    def __init__(self, uri: str, io_properties: Mapping[str, str], *, keeps_failure: bool = True) -> None:
        self.uri = uri
        self.io_properties = io_properties
        self.keeps_failure = keeps_failure
        self.last: dict[str, Any] | None = None  # the latest stage the engine reported

    def write(self, body: Mapping[str, Any], stage: str, error: str | None = None) -> None:
        failure = {"error": error} if self.keeps_failure else {}
        write_report(self.uri, {**body, "stage": stage, **failure}, self.io_properties)

    def stage(self, report: Staged, stage: str) -> None:
        self.last = {**report.to_json(), "stage": stage}
        if stage == "planned":
            self.write(self.last, stage)

    def failed(self, exc: Exception) -> str | None:
        """Save what the run had found when it failed; the URI, or None when there is nothing to save."""
        if not self.keeps_failure:
            return None
        found = exc.report if isinstance(exc, PrefixMismatchError) and isinstance(exc.report, OrphanReport) else None
        body = {**found.to_json(), "stage": "matched"} if found else self.last
        if body is None:
            return None
        try:
            self.write(body, body["stage"], f"{type(exc).__name__}: {exc}")
        except Exception as write_error:  # never hide the run's own error behind the report's
            log.warning("report %s not written: %s", self.uri, write_error)
            return None
        return self.uri


@dataclass
class MaintenanceRun:
    """What a maintenance task knows before its engine runs; ``job``: the kind its failures are recorded as."""

    hook: IcebergMaintenanceHook
    table: Table
    table_name: str
    policy: str | None
    now: datetime
    uri: str
    saved: SavedReport
    dry_run: bool = False
    job: str = ORPHAN_FILE_REMOVAL


R = TypeVar("R", bound=MaintenanceRun)


class ReportingTask(Protocol):
    """What ``prepare_run`` reads of the operator: its hook, where reports go, the policy it applies."""

    @property
    def hook(self) -> IcebergMaintenanceHook: ...

    @property
    def report_location(self) -> str | None: ...

    @property
    def policy(self) -> str | None: ...


def prepare_run(
    context: Context,
    task: ReportingTask,
    table: Table,
    table_name: str,
    now: datetime,
    other_tables: Sequence[TablePaths] = (),
    *,
    dry_run: bool = False,
    kind: type[R] = MaintenanceRun,  # type: ignore[assignment]
    report_name: str | None = None,
    job: str = ORPHAN_FILE_REMOVAL,
    keeps_failure: bool = True,
) -> R:
    """Place the run's report (``<report_name>[.dry-run][.<map index>].json``, default name the table's)
    outside this table and ``other_tables``, and gather what the run needs into a ``kind``."""
    hook = task.hook
    base = arguments.optional_str(task.report_location, "report_location") or default_report_base()
    require_shared_location(base, "report location", REPORT_SETTING)  # read by other tasks and the api-server
    refuse_inside_tables(base, [TablePaths.of(table_name, table.metadata), *other_tables])
    ti = context["ti"]
    name = report_name or table_name
    uri = report_uri(base, ti.dag_id, ti.run_id, name, getattr(ti, "map_index", None), dry_run=dry_run)
    saved = SavedReport(uri, {**hook.catalog.properties, **table.io.properties}, keeps_failure=keeps_failure)
    policy = arguments.optional_str(task.policy, "policy")
    return kind(hook, table, table_name, policy, now, uri, saved, dry_run, job)


@contextmanager
def failures_recorded(run: MaintenanceRun, task_log: TaskLog) -> Iterator[None]:
    """A failed engine run saves what it had found and is recorded in the cleanup state."""
    try:
        yield
    except Exception as exc:
        written = run.saved.failed(exc)
        if isinstance(exc, MaintenanceError):
            state = record_attempt(
                run.hook.state_store,
                table_uuid=str(run.table.metadata.table_uuid),
                table=run.table_name,
                at=datetime.now(UTC),
                dry_run=run.dry_run,
                succeeded=False,
                error=str(exc).splitlines()[0][:500],
                job=run.job,
                report=written,
            )
            record_history(run.hook, run.table_name, state, task_log, started=run.now)
        if isinstance(exc, PrefixMismatchError):
            raise PrefixMismatchError(f"{exc} (every pair: {written})", exc.conflicts, exc.report) from exc
        if written:
            task_log.error("the files this run had planned to delete are in its report: %s", written)
        raise


@dataclass(frozen=True)
class Finished:
    """What an engine run hands to ``publish``.

    :param body: the full report, written with stage ``done``.
    :param record: records the run in the cleanup state (store, clock, report URI).
    :param summary: the XCom summary.
    :param log: logs the outcome to the task log.
    :param failure: the task's error when deletes failed (the run is recorded first); None: success.
    """

    body: Mapping[str, Any]
    record: Callable[[StateStore, datetime, str], CleanupState]
    summary: dict[str, Any]
    log: Callable[[TaskLog], None]
    failure: str | None = None
    phase_seconds: Mapping[str, float] | None = None
    approved_report: str | None = None


def publish(context: Context, run: MaintenanceRun, finished: Finished, task_log: TaskLog) -> dict[str, Any]:
    """Write the full report, record the run, log it, and return the XCom summary; failed deletes fail the task."""
    finished_at = datetime.now(UTC)
    ran = {"started_at": run.now.isoformat(), "finished_at": finished_at.isoformat()}
    run.saved.write({**finished.body, **ran}, "done")
    state = finished.record(run.hook.state_store, cleanup_clock(context, run.now), run.uri)
    record_history(
        run.hook,
        run.table_name,
        state,
        task_log,
        finished.phase_seconds,
        finished.approved_report,
        started=run.now,
        finished=finished_at,
    )
    finished.log(task_log)
    if finished.failure:
        raise AirflowException(finished.failure)
    return finished.summary


def run_maintenance(context: Context, run: R, engine: Callable[[R], Finished], task_log: TaskLog) -> dict[str, Any]:
    """The engine's run with its phases logged and its failure recorded, then ``publish``."""
    with failures_recorded(run, task_log), reporting(LoggingReporter(task_log)):
        finished = engine(run)
    return publish(context, run, finished, task_log)


def record_history(
    hook: IcebergMaintenanceHook,
    table_name: str,
    state: CleanupState,
    task_log: TaskLog,
    phase_seconds: Mapping[str, float] | None = None,
    approved_report: str | None = None,
    *,
    started: datetime,
    finished: datetime | None = None,
) -> None:
    """Add the attempt just recorded in the state (any kind) to the table's run history (the status page);
    ``approved_report``: the reviewed dry run's report a reviewed run executed; ``started`` and ``finished``:
    when the work ran (the state's clock may be the run's logical date), ``finished`` now by default."""
    attempt = last_attempt(state)
    if attempt is not None:
        run = replace(
            attempt,
            phase_seconds=dict(phase_seconds or {}),
            approved_report=approved_report,
            started_at=started.isoformat(),
            finished_at=(finished or datetime.now(UTC)).isoformat(),
        )
        hook.record_run(table_name, run, task_log)


@contextmanager
def classified(what: str | None, *, self_named: tuple[type[MaintenanceError], ...] = ()) -> Iterator[None]:
    """A core error raised inside becomes the task's error: retried or not (``task_errors``), its message
    prefixed by ``what``; errors of the ``self_named`` classes name their subject themselves."""
    try:
        yield
    except self_named as exc:
        raise task_exception(None, exc) from exc
    except MaintenanceError as exc:
        raise task_exception(what, exc) from exc
