"""One maintenance task on a table at a time: a per-table lease with an expiry time.

Orphan removal, snapshot expiry and index maintenance on one table must not overlap (a manual
run, a scheduled run and an index task may otherwise run at once). A task takes the table's
lease before it touches the table and releases it when it ends, failed or not. The lease has
an expiry time, renewed while the task runs (every third of ``ttl``), so a worker killed with
``kill -9`` holds it at most ``ttl`` seconds. A retry of the same task instance takes over its
own lease at once.

The lease lives where the cleanup state does (``IcebergMaintenanceHook.state_store``):

* with a ``state_url`` (or ``[iceberg_maint] state_url``), in the table ``iceberg_maint_leases``
  of that database, taken with one atomic insert or conditional update: two tasks can never
  both hold it;
* otherwise in the Airflow Variable ``iceberg_maint.lease.<table>``, written then read back.
  The Task SDK offers no compare-and-set on Variables, so two tasks that read a free lease in
  the same instant can both take it; set a ``state_url`` where that matters.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import sqlalchemy as sa

from airflow_iceberg_maint.airflow import config
from airflow_iceberg_maint.airflow.reports import TaskLog
from airflow_iceberg_maint.errors import InvalidInputError, StorageError

VARIABLE_PREFIX = "iceberg_maint.lease."
DEFAULT_TTL_SECONDS = 600.0


@dataclass(frozen=True)
class Lease:
    table: str
    owner: str
    expires_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "owner": self.owner, "expires_at": self.expires_at.isoformat()}

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Lease:
        return cls(str(body["table"]), str(body["owner"]), datetime.fromisoformat(body["expires_at"]))

    def free_for(self, owner: str, now: datetime) -> bool:
        return self.owner == owner or self.expires_at <= now


class LeaseStore(Protocol):
    def acquire(self, table: str, owner: str, expires_at: datetime, now: datetime) -> Lease | None:
        """Take (or renew) the lease for ``owner``: None when taken, else the current holder's lease."""
        ...

    def holder(self, table: str) -> Lease | None: ...

    def release(self, table: str, owner: str) -> None: ...


_METADATA = sa.MetaData()
_LEASES = sa.Table(
    "iceberg_maint_leases",
    _METADATA,
    sa.Column("table_name", sa.String(512), primary_key=True),
    sa.Column("owner", sa.String(1024), nullable=False),
    sa.Column("expires_at", sa.Float, nullable=False),  # seconds since the epoch, UTC
)


class SqlLeases:
    """Leases in one SQL table; taking one is a single atomic statement."""

    def __init__(self, url: str) -> None:
        try:
            self._engine = sa.create_engine(url)
            _METADATA.create_all(self._engine)
        except (sa.exc.ArgumentError, ImportError) as exc:
            raise InvalidInputError(f"state store URL {url!r}: {exc}") from exc
        except sa.exc.SQLAlchemyError as exc:
            raise StorageError(f"lease store {url}: {exc}".splitlines()[0]) from exc

    def acquire(self, table: str, owner: str, expires_at: datetime, now: datetime) -> Lease | None:
        row = {"owner": owner, "expires_at": expires_at.timestamp()}
        try:
            with self._engine.begin() as conn:
                taken = conn.execute(
                    sa.update(_LEASES)
                    .where(
                        _LEASES.c.table_name == table,
                        sa.or_(_LEASES.c.owner == owner, _LEASES.c.expires_at <= now.timestamp()),
                    )
                    .values(**row)
                ).rowcount
                if taken:
                    return None
            with self._engine.begin() as conn:
                conn.execute(sa.insert(_LEASES).values(table_name=table, **row))
            return None
        except sa.exc.IntegrityError:  # another task inserted it between our two statements
            # Reported as held even if it was released meanwhile: the caller asks again later.
            return self.holder(table) or Lease(table, "(released meanwhile)", now)
        except sa.exc.SQLAlchemyError as exc:
            raise StorageError(f"lease of {table}: {exc}".splitlines()[0]) from exc

    def holder(self, table: str) -> Lease | None:
        query = sa.select(_LEASES.c.owner, _LEASES.c.expires_at).where(_LEASES.c.table_name == table)
        try:
            with self._engine.connect() as conn:
                row = conn.execute(query).one_or_none()
        except sa.exc.SQLAlchemyError as exc:
            raise StorageError(f"lease of {table}: {exc}".splitlines()[0]) from exc
        return None if row is None else Lease(table, row.owner, datetime.fromtimestamp(row.expires_at, UTC))

    def release(self, table: str, owner: str) -> None:
        with self._engine.begin() as conn:
            conn.execute(sa.delete(_LEASES).where(_LEASES.c.table_name == table, _LEASES.c.owner == owner))


class VariableLeases:
    """Leases as Airflow Variables: written, then read back (no compare-and-set; see the module)."""

    def acquire(self, table: str, owner: str, expires_at: datetime, now: datetime) -> Lease | None:
        current = self.holder(table)
        if current is not None and not current.free_for(owner, now):
            return current
        mine = Lease(table, owner, expires_at)
        _variables().set(_key(table), json.dumps(mine.to_json()), description=f"iceberg-maint lease of {table}")
        after = self.holder(table)
        return None if after is not None and after.owner == owner else after

    def holder(self, table: str) -> Lease | None:
        raw = _variables().get(_key(table), None)
        return Lease.from_json(json.loads(raw)) if raw else None

    def release(self, table: str, owner: str) -> None:
        current = self.holder(table)
        if current is not None and current.owner == owner:
            _variables().delete(_key(table))


def _variables() -> Any:
    """The Task SDK's ``Variable`` in a task or the triggerer; outside them (an operator's ``execute``
    called directly) Airflow's model, which reads the metadata database: the switch Airflow's own
    ``airflow.models.Variable`` makes, without its deprecation warning."""
    if hasattr(sys.modules.get("airflow.sdk.execution_time.task_runner"), "SUPERVISOR_COMMS"):
        from airflow.sdk import Variable

        return Variable
    from airflow.models.variable import Variable as VariableModel

    return VariableModel


def _key(table: str) -> str:
    return f"{VARIABLE_PREFIX}{table}"


def lease_store_for(state_url: str | None) -> LeaseStore:
    """Where the cleanup state is: the database of ``state_url`` (or ``[iceberg_maint] state_url``), or Variables."""
    url = state_url or config.state_url()
    return SqlLeases(url) if url else VariableLeases()


@contextmanager
def held(store: LeaseStore, lease: Lease, ttl: timedelta, log: TaskLog) -> Iterator[Lease]:
    """Keep a taken lease: renew it every third of ``ttl`` while the body runs, release it after, failed or not."""
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(ttl.total_seconds() / 3):
            now = datetime.now(UTC)
            try:
                holder = store.acquire(lease.table, lease.owner, now + ttl, now)
            except Exception as exc:  # the next renewal may succeed; the lease holds until it expires
                log.warning("lease of %s not renewed: %s", lease.table, exc)
                continue
            if holder is not None:
                log.error("lease of %s lost to %s (not renewed before it expired)", lease.table, holder.owner)

    renewer = threading.Thread(target=renew, name=f"lease {lease.table}", daemon=True)
    renewer.start()
    try:
        yield lease
    finally:
        stop.set()
        renewer.join()
        try:
            store.release(lease.table, lease.owner)
        except Exception as exc:  # it expires on its own
            log.warning("lease of %s not released (it expires at %s): %s", lease.table, lease.expires_at, exc)
