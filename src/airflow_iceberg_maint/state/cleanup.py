"""Per-table maintenance state: when a job last succeeded, and what its last attempt did.

State is keyed by the table UUID (so dropping and recreating a table resets it) and by the
policy type, the ``job``: orphan removal, snapshot expiry and data compaction each have their own clock, and the
records written before expiry existed are read as the orphan-removal records they always were.
It is kept outside the table: bookkeeping never makes an Iceberg commit. Only a successful
non-dry run moves ``last_success_at``; dry runs and failures record an attempt.

The store is pluggable (``StateStore``): ``SqlStateStore`` here serves the CLI (a SQLite
file by default, or any SQLAlchemy URL); the Airflow layer adds one backed by Airflow's
metadata database.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import sqlalchemy as sa

from airflow_iceberg_maint.errors import InvalidInputError, MaintenanceError, StorageError
from airflow_iceberg_maint.state.jobs import DATA_COMPACTION, ORPHAN_FILE_REMOVAL, SNAPSHOT_EXPIRY

STATE_URL_ENV = "ICEBERG_MAINT_STATE_URL"

#: The state's job of a manifest rewrite: not a policy type (the compaction policy runs it), its runs' record.
MANIFEST_REWRITE = "manifest_rewrite"

SUCCESS = "success"
FAILED = "failed"


@dataclass(frozen=True)
class CleanupState:
    table_uuid: str
    job: str
    table: str
    last_success_at: datetime | None = None
    last_attempt_at: datetime | None = None
    last_attempt_status: str | None = None
    last_attempt_dry_run: bool | None = None
    last_attempt_counts: dict[str, int] = field(default_factory=dict)
    last_error: str | None = None
    last_report: str | None = None  # URI of the last attempt's full report, when one was written

    def to_json(self) -> dict[str, Any]:
        return {
            "table_uuid": self.table_uuid,
            "job": self.job,
            "table": self.table,
            "last_success_at": _iso(self.last_success_at),
            "last_attempt_at": _iso(self.last_attempt_at),
            "last_attempt_status": self.last_attempt_status,
            "last_attempt_dry_run": self.last_attempt_dry_run,
            "last_attempt_counts": dict(self.last_attempt_counts),
            "last_error": self.last_error,
            "last_report": self.last_report,
        }

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> CleanupState:
        return cls(
            table_uuid=body["table_uuid"],
            job=body["job"],
            table=body["table"],
            last_success_at=_parse_time(body.get("last_success_at")),
            last_attempt_at=_parse_time(body.get("last_attempt_at")),
            last_attempt_status=body.get("last_attempt_status"),
            last_attempt_dry_run=body.get("last_attempt_dry_run"),
            last_attempt_counts={k: int(v) for k, v in (body.get("last_attempt_counts") or {}).items()},
            last_error=body.get("last_error"),
            last_report=body.get("last_report"),
        )


def _iso(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).isoformat() if moment else None


def _parse_time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text).astimezone(UTC) if text else None


class StateStore(Protocol):
    def get(self, table_uuid: str, job: str = ORPHAN_FILE_REMOVAL) -> CleanupState | None: ...

    def put(self, state: CleanupState) -> None: ...


def record_attempt(
    store: StateStore,
    *,
    table_uuid: str,
    table: str,
    at: datetime,
    dry_run: bool,
    succeeded: bool,
    counts: dict[str, int] | None = None,
    error: str | None = None,
    job: str = ORPHAN_FILE_REMOVAL,
    report: str | None = None,
) -> CleanupState:
    """Record one run. The clock (``last_success_at``) moves only for a successful real run."""
    if at.tzinfo is None:
        raise InvalidInputError(f"attempt time {at!r}: must be timezone-aware")
    previous = store.get(table_uuid, job) or CleanupState(table_uuid=table_uuid, job=job, table=table)
    state = replace(
        previous,
        table=table,
        last_success_at=at.astimezone(UTC) if succeeded and not dry_run else previous.last_success_at,
        last_attempt_at=at.astimezone(UTC),
        last_attempt_status=SUCCESS if succeeded else FAILED,
        last_attempt_dry_run=dry_run,
        last_attempt_counts=dict(counts or {}),
        last_error=None if succeeded else error,
        last_report=report,
    )
    store.put(state)
    return state


def _record_run(
    store: StateStore,
    job: str,
    summary: Mapping[str, Any],
    counts: dict[str, int],
    at: datetime,
    report: str | None,
) -> CleanupState:
    # A run where some deletes failed did not finish its work, so it does not move the clock.
    failed = len(summary.get("failed") or [])
    return record_attempt(
        store,
        table_uuid=str(summary["table_uuid"]),
        table=str(summary["table"]),
        at=at,
        dry_run=bool(summary["dry_run"]),
        succeeded=failed == 0,
        counts={**counts, "failed_count": failed},
        error=f"{failed} deletes failed" if failed else None,
        job=job,
        report=report,
    )


def record_orphan_run(
    store: StateStore, summary: Mapping[str, Any], at: datetime, report: str | None = None
) -> CleanupState:
    """Record a completed orphan-removal run from its report summary (``OrphanReport.summary()``)."""
    counts = {key: int(summary[key]) for key in ("orphan_file_count", "orphan_bytes", "deleted_file_count")}
    return _record_run(store, ORPHAN_FILE_REMOVAL, summary, counts, at, report)


def record_expiry_run(
    store: StateStore, summary: Mapping[str, Any], at: datetime, report: str | None = None
) -> CleanupState:
    """Record a completed snapshot-expiry run from its JSON (``ExpiryReport.to_json()``)."""
    counts = {
        "expired_snapshot_count": len(summary["expired_snapshot_ids"]),
        "deleted_file_count": int(summary["deleted_file_count"]),
        "deleted_bytes": int(summary["deleted_bytes"]),
    }
    return _record_run(store, SNAPSHOT_EXPIRY, summary, counts, at, report)


def record_compaction_run(
    store: StateStore, table_uuid: str, summary: Mapping[str, Any], at: datetime, report: str | None = None
) -> CleanupState:
    """Record a completed rewrite-data-files run from its JSON (``DataRewriteReport.to_json()``, whose keys do
    not name the table's UUID: the caller passes it). A run where a file group failed did not finish its work,
    so it does not move the "days since last compaction" clock."""
    failed = summary.get("failed") or []
    counts = {
        "rewritten_data_files": int(summary["rewritten_data_files"]),
        "added_data_files": int(summary["added_data_files"]),
        "removed_delete_files": int(summary["removed_delete_files"]),
        "rewritten_bytes": int(summary["rewritten_bytes"]),
        "commit_count": len(summary["commits"]),
        "failed_count": len(failed),
    }
    first = failed[0] if failed else None
    error = f"{len(failed)} file groups failed (first: {first.get('group')}: {first.get('error')})" if first else None
    return record_attempt(
        store,
        table_uuid=table_uuid,
        table=str(summary["table"]),
        at=at,
        dry_run=bool(summary["dry_run"]),
        succeeded=not failed,
        counts=counts,
        error=error,
        job=DATA_COMPACTION,
        report=report,
    )


def record_manifest_rewrite_run(
    store: StateStore, table_uuid: str, summary: Mapping[str, Any], at: datetime, report: str | None = None
) -> CleanupState:
    """Record a completed manifest rewrite from its JSON (``ManifestRewriteReport.to_json()``)."""
    counts = {
        "rewritten_manifests": int(summary["rewritten_manifests"]),
        "added_manifests": int(summary["added_manifests"]),
        "commit_count": len(summary["commits"]),
    }
    return record_attempt(
        store,
        table_uuid=table_uuid,
        table=str(summary["table"]),
        at=at,
        dry_run=bool(summary["dry_run"]),
        succeeded=True,
        counts=counts,
        job=MANIFEST_REWRITE,
        report=report,
    )


def default_state_url() -> str:
    """``$ICEBERG_MAINT_STATE_URL``, else a SQLite file under the user's state directory."""
    url = os.environ.get(STATE_URL_ENV)
    if url:
        return url
    base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return f"sqlite:///{base / 'iceberg-maint' / 'state.db'}"


#: One engine per server database, shared by every store of the process (see ``state_engine``).
_SHARED: dict[str, sa.Engine] = {}
_SHARED_LOCK = threading.Lock()


def _forget_in_child() -> None:
    """In a forked child: never use nor close the parent's connections; the child opens its own."""
    global _SHARED_LOCK
    _SHARED_LOCK = threading.Lock()  # another thread of the parent may have held it at the fork
    for engine in _SHARED.values():
        engine.dispose(close=False)
    _SHARED.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def state_engine(url: str) -> sa.Engine:
    """An engine on the state store's database; the folder of a SQLite file is created.

    Every store of a process gets the same engine for a server database (PostgreSQL, MySQL), so the
    process holds at most one pool of connections, however many stores it makes (a store per task,
    per table of a fleet); with an engine each, the pooled connections outlived their stores until
    a garbage collection and ran the database out of connections. A forked child starts without
    them (``_forget_in_child``). A SQLite file has no pool: opening it is cheap, and tests make
    thousands; an in-memory SQLite database keeps SQLAlchemy's own pool, its one connection.
    """
    try:
        parsed = sa.engine.make_url(url)
        if parsed.get_backend_name() == "sqlite":
            if parsed.database in (None, "", ":memory:"):
                return sa.create_engine(parsed)
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
            return sa.create_engine(parsed, poolclass=sa.pool.NullPool)
        with _SHARED_LOCK:
            if url not in _SHARED:
                _SHARED[url] = sa.create_engine(parsed, pool_pre_ping=True)
            return _SHARED[url]
    except (sa.exc.ArgumentError, ImportError) as exc:
        raise InvalidInputError(f"state store URL {url!r}: {exc}") from exc


_METADATA = sa.MetaData()
_TABLE = sa.Table(
    "iceberg_maint_state",
    _METADATA,
    sa.Column("table_uuid", sa.String(36), primary_key=True),
    sa.Column("job", sa.String(128), primary_key=True),
    sa.Column("body", sa.Text, nullable=False),
)


class SqlStateStore:
    """State in one SQL table (``iceberg_maint_state``), created on first use."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url or default_state_url()
        self._engine = state_engine(self.url)
        try:
            _METADATA.create_all(self._engine)
        except sa.exc.SQLAlchemyError as exc:
            raise self._error(exc) from exc

    def _error(self, exc: Exception) -> MaintenanceError:
        """A database that could not be reached or was busy may answer a retry: ``StorageError``
        (``OperationalError``: refused, timed out, locked, not openable, which for SQLite also covers a
        table it does not find; a pool that ran dry). Anything else may not."""
        message = f"state store {self._engine.url.render_as_string()}: {exc}".splitlines()[0]
        if isinstance(exc, sa.exc.OperationalError | sa.exc.TimeoutError):
            return StorageError(message)
        return MaintenanceError(message)

    def get(self, table_uuid: str, job: str = ORPHAN_FILE_REMOVAL) -> CleanupState | None:
        query = sa.select(_TABLE.c.body).where(_TABLE.c.table_uuid == table_uuid, _TABLE.c.job == job)
        try:
            with self._engine.connect() as conn:
                body = conn.execute(query).scalar_one_or_none()
        except sa.exc.SQLAlchemyError as exc:
            raise self._error(exc) from exc
        return CleanupState.from_json(json.loads(body)) if body else None

    def all(self, job: str = ORPHAN_FILE_REMOVAL) -> list[CleanupState]:
        """Every table's state for one job, in one query (the status page's read)."""
        query = sa.select(_TABLE.c.body).where(_TABLE.c.job == job)
        try:
            with self._engine.connect() as conn:
                bodies = conn.execute(query).scalars().all()
        except sa.exc.SQLAlchemyError as exc:
            raise self._error(exc) from exc
        return [CleanupState.from_json(json.loads(body)) for body in bodies]

    def put(self, state: CleanupState) -> None:
        body = json.dumps(state.to_json())
        key = (_TABLE.c.table_uuid == state.table_uuid) & (_TABLE.c.job == state.job)
        try:
            with self._engine.begin() as conn:
                if conn.execute(sa.update(_TABLE).where(key).values(body=body)).rowcount == 0:
                    conn.execute(sa.insert(_TABLE).values(table_uuid=state.table_uuid, job=state.job, body=body))
        except sa.exc.SQLAlchemyError as exc:
            raise self._error(exc) from exc
