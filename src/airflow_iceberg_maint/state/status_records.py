"""What tasks record for the status page besides the cleanup state: run history, index lags and the
policies' tables.

Tasks record these when they have computed them anyway, in the store the cleanup state uses
(Airflow Variables by default, a SQL table next to the state with ``state_url``), so the status
page reads stored facts and never calls the catalog:

* ``iceberg_maint.runs.<table>``: ``{"table", "runs": [run, ...]}``, the table's last
  ``RUN_HISTORY_LIMIT`` runs of every kind, oldest first (``RunRecord``);
* ``iceberg_maint.index_lag.<table>``: ``{"table", "indexes": {<index>: lag}, "history": {<index>:
  [point, ...]}}``, each lag as the ``index lag`` keys plus ``lagging``, ``reasons`` and
  ``checked_at`` (and ``threshold``, the bounds it was checked against), and the last
  ``LAG_HISTORY_LIMIT`` checks of each index as points (``checked_at``, ``snapshots_behind``,
  ``lag_seconds``, ``lagging``); written by the lag plan operator (every index of the table), the
  lag sensor (its index) and the extract commit task (its index, measured after its commit);
* ``iceberg_maint.health.<table>``: ``{"table", "checked_at", "health", "history": [point, ...]}``,
  the last health check (``health`` as ``iceberg-maint health --json`` gives it, ``checked_at`` when it
  ran) and the last ``HEALTH_HISTORY_LIMIT`` checks as points (``checked_at``, ``score``,
  ``data_files``, ``data_bytes``, ``expirable_bytes``); written by the health operator;
* ``iceberg_maint.policy_tables``: ``{"checked_at", "tables": {<table>: <uuid>}}``, every table the
  last planning run evaluated, so tables attached by a glob show before their first cleanup.

Recording is best effort: a record that cannot be written is logged, and the maintenance it
describes still succeeds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Any, Protocol

import sqlalchemy as sa

from airflow_iceberg_maint.state.cleanup import MANIFEST_REWRITE, CleanupState, state_engine
from airflow_iceberg_maint.state.jobs import DATA_COMPACTION, ORPHAN_FILE_REMOVAL, SNAPSHOT_EXPIRY

KEY_PREFIX = "iceberg_maint."
#: Cleanup states, ``iceberg_maint.state.<job>.<table uuid>`` (``state.cleanup.CleanupState``).
STATE_PREFIX = f"{KEY_PREFIX}state."
INDEX_LAG_PREFIX = f"{KEY_PREFIX}index_lag."
RUNS_PREFIX = f"{KEY_PREFIX}runs."
HEALTH_PREFIX = f"{KEY_PREFIX}health."
POLICY_TABLES_KEY = f"{KEY_PREFIX}policy_tables"
RUN_HISTORY_LIMIT = 50
LAG_HISTORY_LIMIT = 50
HEALTH_HISTORY_LIMIT = 50
#: The figures of a health check kept in its history (the trend charts).
HEALTH_POINT_KEYS = ("score", "data_files", "data_bytes", "expirable_bytes")
#: ``RunRecord.kind`` of an orphan-file removal run.
ORPHANS_KIND = "orphans"
#: The run kind of each job's cleanup state; a job not listed is shown by its own name.
JOB_KINDS = {
    ORPHAN_FILE_REMOVAL: ORPHANS_KIND,
    SNAPSHOT_EXPIRY: "expiry",
    DATA_COMPACTION: "compaction",
    MANIFEST_REWRITE: "manifests",
}


class RecordLog(Protocol):
    """What recording needs of a logger: the standard library's and a task's own (structlog) both fit."""

    def warning(self, msg: str, /, *args: Any) -> Any: ...


class RecordStore(Protocol):
    def get(self, key: str) -> dict[str, Any] | None: ...

    def put(self, key: str, body: Mapping[str, Any], description: str) -> None: ...


_METADATA = sa.MetaData()
_RECORDS = sa.Table(
    "iceberg_maint_records",
    _METADATA,
    sa.Column("key", sa.String(512), primary_key=True),
    sa.Column("body", sa.Text, nullable=False),
)


class SqlRecords:
    """Records in one SQL table (``iceberg_maint_records``) of the state store's database.

    The database is opened at the first read or write, so a store that cannot be reached fails
    the recording (which logs it), never the task that builds the store.
    """

    def __init__(self, url: str) -> None:
        self.url = url

    @cached_property
    def _engine(self) -> sa.Engine:
        engine = state_engine(self.url)
        _METADATA.create_all(engine)
        return engine

    def get(self, key: str) -> dict[str, Any] | None:
        with self._engine.connect() as conn:
            body = conn.execute(sa.select(_RECORDS.c.body).where(_RECORDS.c.key == key)).scalar_one_or_none()
        return json.loads(body) if body else None

    def put(self, key: str, body: Mapping[str, Any], description: str) -> None:
        text = json.dumps(body)
        with self._engine.begin() as conn:
            if conn.execute(sa.update(_RECORDS).where(_RECORDS.c.key == key).values(body=text)).rowcount == 0:
                conn.execute(sa.insert(_RECORDS).values(key=key, body=text))

    def items(self) -> list[tuple[str, str]]:
        with self._engine.connect() as conn:
            return [(key, body) for key, body in conn.execute(sa.select(_RECORDS.c.key, _RECORDS.c.body))]


@dataclass(frozen=True)
class RunRecord:
    """One maintenance run of a table, of any kind (``orphans``, ``expiry``, ...), as the page shows it.

    ``counts`` holds the kind's own figures (``deleted_file_count`` and ``deleted_bytes`` or
    ``orphan_bytes``...); ``phase_seconds`` the time each phase took.
    """

    kind: str
    at: str  # ISO 8601, UTC
    dry_run: bool
    status: str  # "success" or "failed"
    counts: Mapping[str, int] = field(default_factory=dict)
    error: str | None = None
    report: str | None = None
    phase_seconds: Mapping[str, float] = field(default_factory=dict)
    approved_report: str | None = None  # a reviewed run: the report of the dry run a person approved
    #: When the work itself ran (ISO 8601, UTC). ``at`` is the cleanup clock, which a scheduled run
    #: sets to its logical date so intervals do not drift: never what the page shows as the run's time.
    started_at: str | None = None
    finished_at: str | None = None

    @property
    def ran_at(self) -> str:
        """When the run's work ended (its start, else the clock, for records written before these existed)."""
        return self.finished_at or self.started_at or self.at

    @property
    def order(self) -> tuple[str, int]:
        """Sort key, oldest first: by when the work ran, a real run after a dry run of the same moment."""
        return (_utc_text(self.ran_at), 0 if self.dry_run else 1)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "at": self.at,
            "dry_run": self.dry_run,
            "status": self.status,
            "counts": dict(self.counts),
            "error": self.error,
            "report": self.report,
            "phase_seconds": dict(self.phase_seconds),
            "approved_report": self.approved_report,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
        }

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> RunRecord:
        return cls(
            kind=str(body["kind"]),
            at=str(body["at"]),
            dry_run=bool(body["dry_run"]),
            status=str(body["status"]),
            counts={str(k): int(v) for k, v in (body.get("counts") or {}).items()},
            error=body.get("error"),
            report=body.get("report"),
            phase_seconds={str(k): float(v) for k, v in (body.get("phase_seconds") or {}).items()},
            approved_report=body.get("approved_report"),
            started_at=body.get("started_at"),
            finished_at=body.get("finished_at"),
        )


def _utc_text(iso: str) -> str:
    """An ISO time in UTC with microseconds, so that times compare as text whatever their offset or precision."""
    try:
        return datetime.fromisoformat(iso).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
    except ValueError:
        return iso


def last_attempt(state: CleanupState) -> RunRecord | None:
    """A state's last attempt as a run (None: never attempted)."""
    if state.last_attempt_at is None:
        return None
    return RunRecord(
        kind=JOB_KINDS.get(state.job, state.job),
        at=state.last_attempt_at.isoformat(),
        dry_run=bool(state.last_attempt_dry_run),
        status=state.last_attempt_status or "",
        counts=dict(state.last_attempt_counts),
        error=state.last_error,
        report=state.last_report,
    )


def runs_key(table: str) -> str:
    return f"{RUNS_PREFIX}{table}"


def index_lag_key(table: str) -> str:
    return f"{INDEX_LAG_PREFIX}{table}"


def health_key(table: str) -> str:
    return f"{HEALTH_PREFIX}{table}"


def record_health(store: RecordStore, table: str, health: Mapping[str, Any], at: datetime, log: RecordLog) -> None:
    """Store a table's health check (``HealthReport.to_json()``) that ran at ``at``, and add it to its history."""
    key = health_key(table)
    try:
        history = list((store.get(key) or {}).get("history") or [])
        point = {"checked_at": at.isoformat(), **{k: health.get(k) for k in HEALTH_POINT_KEYS}}
        store.put(
            key,
            {
                "table": table,
                "checked_at": at.isoformat(),
                "health": dict(health),
                "history": [*history, point][-HEALTH_HISTORY_LIMIT:],
            },
            f"iceberg-maint: the last health checks of {table}",
        )
    except Exception as exc:  # the dashboard must never fail the maintenance
        log.warning("health of %s not recorded for the status page: %s", table, exc)


def record_run(store: RecordStore, table: str, run: RunRecord, log: RecordLog) -> None:
    """Append one run to the table's history, keeping the last ``RUN_HISTORY_LIMIT``."""
    key = runs_key(table)
    try:
        runs = list((store.get(key) or {}).get("runs") or [])
        runs.append(run.to_json())
        store.put(
            key,
            {"table": table, "runs": runs[-RUN_HISTORY_LIMIT:]},
            f"iceberg-maint: the last maintenance runs of {table}",
        )
    except Exception as exc:  # the dashboard must never fail the maintenance
        log.warning("%s run of %s not recorded for the status page: %s", run.kind, table, exc)


def record_index_lags(
    store: RecordStore, table: str, lags: Iterable[Mapping[str, Any]], at: datetime, log: RecordLog
) -> None:
    """Store the lags just checked (``CheckedLag.to_json()``), keeping the records of the table's other
    indexes, and add each to its index's history."""
    key = index_lag_key(table)
    try:
        stored = store.get(key) or {}
        indexes: dict[str, Any] = dict(stored.get("indexes") or {})
        history: dict[str, list[Any]] = {k: list(v) for k, v in (stored.get("history") or {}).items()}
        for lag in lags:
            name, checked_at = str(lag["index"]), at.isoformat()
            indexes[name] = {**lag, "checked_at": checked_at}
            point = {k: lag.get(k) for k in ("snapshots_behind", "lag_seconds", "lagging")}
            history[name] = [*history.get(name, []), {"checked_at": checked_at, **point}][-LAG_HISTORY_LIMIT:]
        store.put(
            key,
            {"table": table, "indexes": indexes, "history": history},
            f"iceberg-maint index lag of {table}, as last checked",
        )
    except Exception as exc:  # the dashboard must never fail the maintenance
        log.warning("index lag of %s not recorded for the status page: %s", table, exc)


def record_policy_tables(store: RecordStore, tables: Mapping[str, str], at: datetime, log: RecordLog) -> None:
    try:
        store.put(
            POLICY_TABLES_KEY,
            {"checked_at": at.isoformat(), "tables": dict(tables)},
            "iceberg-maint: the tables the policies attached at the last planning run",
        )
    except Exception as exc:
        log.warning("tables of the policies not recorded for the status page: %s", exc)
