"""One maintenance run on a table at a time: a per-table lease with an expiry time (docs/safety.md, S15).

Orphan removal, snapshot expiry and index maintenance of one table must not overlap, whoever
starts them: an Airflow task, or an ``iceberg-maint`` run. Each takes the table's lease before it
touches the table and releases it when it ends, failed or not. The lease is keyed by the table's
name as given (``namespace.table``), the same for both.

Each take writes a new token. While the run lasts the lease is renewed every third of its ttl,
and checked before every delete batch and every commit (``state.lease_fence``): a run whose lease was
taken over, or may have expired, stops there with ``LeaseLostError``. That fencing is what makes a
short ttl safe (``DEFAULT_TTL_SECONDS``): a run stalled past it loses the table instead of working
on beside the next holder. A lease whose process has ended on this host is taken over at once
(``state.lease_holder``); the same owner takes its own lease over at once (a retry of an Airflow task).

``sql_leases.SqlLeases`` keeps the leases in the state store's database, judged by the database's
clock. The Airflow layer adds a store in Airflow Variables and a wait that defers
(``airflow.table_lease``, ``airflow.leased_task``).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from airflow_iceberg_maint.errors import TableBusyError
from airflow_iceberg_maint.state.lease_holder import gone_here, this_process

#: A lease lasts this long unless renewed (every third of it). Short, so that a holder killed on
#: another host blocks the table for at most a minute (on this host, not at all); long enough that
#: a state-store hiccup or a slow delete batch (one request of up to 1,000 keys, with its retries)
#: does not cost the lease. A run stalled past it stops at its next fence check.
DEFAULT_TTL_SECONDS = 60.0
#: Longest pause between two tries of a run that waits for a held lease (``take``).
POLL_SECONDS = 1.0


@dataclass(frozen=True)
class Lease:
    table: str
    owner: str
    expires_at: datetime
    #: New for each take: a renewal or check matches it, so a lease taken over is not renewed by the old holder.
    token: str = ""
    #: The holder's process (``state.lease_holder``), "" when not known.
    process: str = ""

    def to_json(self) -> dict[str, Any]:
        body = {"table": self.table, "owner": self.owner, "expires_at": self.expires_at.isoformat()}
        return {**body, "token": self.token, "process": self.process}

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Lease:
        expires_at = datetime.fromisoformat(body["expires_at"])
        return cls(str(body["table"]), str(body["owner"]), expires_at, body.get("token", ""), body.get("process", ""))

    def free_for(self, owner: str, now: datetime) -> bool:
        """Whether ``owner`` may take it now (a hint for a waiter: the take itself decides)."""
        return self.owner == owner or self.expires_at <= now or bool(self.process and gone_here(self.process))


class LeaseStore(Protocol):
    def acquire(
        self, table: str, owner: str, ttl: timedelta, token: str, process: str, stale: str | None = None
    ) -> Lease:
        """Take the lease for ``owner`` under ``token`` when it is free, expired, ``owner``'s own, or held
        under the token ``stale``; the lease as it is afterwards (ours when its token is ``token``)."""
        ...

    def renew(self, lease: Lease, ttl: timedelta) -> bool:
        """Extend ``lease`` by ``ttl`` if it is still held under its token and not expired; whether it was."""
        ...

    def holder(self, table: str) -> Lease | None: ...

    def release(self, lease: Lease) -> None: ...


class LeaseLog(Protocol):
    """What the lease needs of a logger: a ``logging.Logger``, or an Airflow task's (structlog)."""

    def warning(self, msg: str, /, *args: Any) -> Any: ...

    def error(self, msg: str, /, *args: Any) -> Any: ...


def try_take(store: LeaseStore, table: str, owner: str, ttl: timedelta, log: LeaseLog) -> tuple[bool, Lease]:
    """One try at the lease: whether it is ours now, and the lease as it is (ours, or the holder's).

    A holder whose process has ended on this host (``state.lease_holder.gone_here``) is taken over at
    once, by a take conditional on that holder's token.
    """
    token, process = uuid.uuid4().hex, this_process()
    got = store.acquire(table, owner, ttl, token, process)
    if got.token != token and got.process and gone_here(got.process):
        log.warning("table %s: taking over the lease of %s: its process has ended", table, got.owner)
        got = store.acquire(table, owner, ttl, token, process, stale=got.token)
    return got.token == token, got


def busy_with(holder: Lease) -> str:
    return f"another maintenance run holds its lease ({holder.owner}, until {holder.expires_at.isoformat()})"


def take(store: LeaseStore, table: str, owner: str, ttl: timedelta, wait: float, log: LeaseLog) -> Lease:
    """Take the table's lease for ``owner``, trying again for up to ``wait`` seconds while another holds it.

    It tries every ``POLL_SECONDS``, and at once when the holder's lease expires. Gives up with
    ``TableBusyError`` naming the holder and when its lease expires.
    """
    deadline = time.monotonic() + wait
    waiting = False
    while True:
        mine, got = try_take(store, table, owner, ttl, log)
        if mine:
            return got
        left = deadline - time.monotonic()
        if left <= 0:
            waited = f"; gave up after waiting {wait:g} s" if wait > 0 else ""
            raise TableBusyError(f"table {table}: {busy_with(got)}{waited}")
        if not waiting:
            log.warning("table %s: %s; waiting for it at most %g s", table, busy_with(got), wait)
            waiting = True
        # A hint only (this host's clock against the store's): the take itself is judged by the store.
        expires_in = (got.expires_at - datetime.now(UTC)).total_seconds()
        time.sleep(min(POLL_SECONDS, left, max(expires_in, 0.05)))
