"""One maintenance run on a table at a time: a per-table lease with an expiry time (docs/safety.md, S15).

Orphan removal, snapshot expiry and index maintenance of one table must not overlap, whoever
starts them: an Airflow task, or an ``iceberg-maint`` run. Each takes the table's lease before it
touches the table and releases it when it ends, failed or not. The lease is keyed by the table's
name as given (``namespace.table``), the same for both. It has an expiry time, renewed every third
of ``ttl`` while the run lasts (``held``), so a process killed with ``kill -9`` holds it at most
``ttl``; the same owner takes its own lease over at once (a retry of an Airflow task).

``SqlLeases`` keeps the leases in the table ``iceberg_maint_leases`` of the state store's database
(the command line's ``$ICEBERG_MAINT_STATE_URL``, an Airflow ``state_url``), taken with one atomic
insert or conditional update: two runs can never both hold one. The Airflow layer adds a store in
Airflow Variables and a wait that defers (``airflow.table_lease``, ``airflow.leased_task``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import sqlalchemy as sa

from airflow_iceberg_maint.errors import StorageError, TableBusyError
from airflow_iceberg_maint.policy.state import state_engine

DEFAULT_TTL_SECONDS = 600.0
#: Longest pause between two tries of a run that waits for a held lease (``take``).
POLL_SECONDS = 1.0


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


class LeaseLog(Protocol):
    """What ``held`` needs of a logger: a ``logging.Logger``, or an Airflow task's (structlog)."""

    def warning(self, msg: str, /, *args: Any) -> Any: ...

    def error(self, msg: str, /, *args: Any) -> Any: ...


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
        self._engine = state_engine(url)
        try:
            _METADATA.create_all(self._engine)
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
        except sa.exc.IntegrityError:  # another run inserted it between our two statements
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


def take(store: LeaseStore, table: str, owner: str, ttl: timedelta, wait: float, log: LeaseLog) -> Lease:
    """Take the table's lease for ``owner``, trying again for up to ``wait`` seconds while another holds it.

    It tries every ``POLL_SECONDS``, and at once when the holder's lease expires. Gives up with
    ``TableBusyError`` naming the holder and when its lease expires.
    """
    deadline = time.monotonic() + wait
    waiting = False
    while True:
        now = datetime.now(UTC)
        holder = store.acquire(table, owner, now + ttl, now)
        if holder is None:
            return Lease(table, owner, now + ttl)
        left = deadline - time.monotonic()
        held_by = f"another maintenance run holds its lease ({holder.owner}, until {holder.expires_at.isoformat()})"
        if left <= 0:
            waited = f"; gave up after waiting {wait:g} s" if wait > 0 else ""
            raise TableBusyError(f"table {table}: {held_by}{waited}")
        if not waiting:
            log.warning("table %s: %s; waiting for it at most %g s", table, held_by, wait)
            waiting = True
        expires_in = (holder.expires_at - now).total_seconds()
        # A lease just released between two statements reads as expiring now: wait a little anyway.
        time.sleep(min(POLL_SECONDS, left, max(expires_in, 0.05)))


@contextmanager
def held(store: LeaseStore, lease: Lease, ttl: timedelta, log: LeaseLog) -> Iterator[Lease]:
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
