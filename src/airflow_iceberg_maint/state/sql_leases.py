"""Table leases in a SQL table, judged by the database's own clock (docs/safety.md, S15).

Every statement that takes, renews or checks a lease is one conditional statement, and the
lease's expiry time is written and compared in the database's clock (``_store_now``), so that
hosts whose clocks disagree still agree on whether a lease has expired: only the database's clock
counts. Each take writes a new token; a renewal (and the check before each delete batch or commit,
``state.lease_fence``) extends the lease only where table, owner and token still match and the lease has
not expired, so a run whose lease another run has taken finds zero rows and stops.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from airflow_iceberg_maint.errors import StorageError
from airflow_iceberg_maint.state.cleanup import state_engine
from airflow_iceberg_maint.state.leases import Lease

_METADATA = sa.MetaData()
_LEASES = sa.Table(
    "iceberg_maint_leases",
    _METADATA,
    sa.Column("table_name", sa.String(512), primary_key=True),
    sa.Column("owner", sa.String(1024), nullable=False),
    sa.Column("expires_at", sa.Float, nullable=False),  # seconds since the epoch, by the database's clock
    sa.Column("token", sa.String(64), nullable=False, server_default=""),
    sa.Column("process", sa.String(512), nullable=False, server_default=""),
)
#: Columns added since the table first shipped: an older table gets them on first use.
_ADDED = ("token", "process")


def _store_now(dialect: str) -> sa.ColumnElement[Any]:
    """The database's current time in seconds since the epoch (a SQL expression)."""
    if dialect == "sqlite":  # the file's host: the same clock for every process that opens it
        return (sa.func.julianday("now") - 2440587.5) * 86400.0
    if dialect == "postgresql":
        return sa.extract("epoch", sa.func.clock_timestamp())
    if dialect in ("mysql", "mariadb"):
        return sa.func.unix_timestamp(sa.func.now(6))
    return sa.literal(time.time())  # another database: the caller's clock (docs/safety.md, S15)


class SqlLeases:
    """Leases in one SQL table; each take, renewal and check is a single conditional statement."""

    def __init__(self, url: str) -> None:
        self._engine = state_engine(url)
        self._now = _store_now(self._engine.dialect.name)
        try:
            _METADATA.create_all(self._engine)
            self._add_columns()
        except sa.exc.SQLAlchemyError as exc:
            raise StorageError(f"lease store {url}: {exc}".splitlines()[0]) from exc

    def _add_columns(self) -> None:
        present = {c["name"] for c in sa.inspect(self._engine).get_columns(_LEASES.name)}
        for name in _ADDED:
            if name in present:
                continue
            try:
                with self._engine.begin() as conn:
                    conn.execute(
                        sa.text(f"ALTER TABLE {_LEASES.name} ADD COLUMN {name} VARCHAR(512) NOT NULL DEFAULT ''")
                    )
            except sa.exc.SQLAlchemyError:  # another process added it first
                if name not in {c["name"] for c in sa.inspect(self._engine).get_columns(_LEASES.name)}:
                    raise

    def acquire(
        self, table: str, owner: str, ttl: timedelta, token: str, process: str, stale: str | None = None
    ) -> Lease:
        expires = self._now + ttl.total_seconds()
        free = sa.or_(_LEASES.c.owner == owner, _LEASES.c.expires_at <= self._now)
        if stale is not None:  # the holder's process is known to have ended
            free = sa.or_(free, _LEASES.c.token == stale)
        row = {"owner": owner, "token": token, "process": process, "expires_at": expires}
        try:
            with self._engine.begin() as conn:
                taken = conn.execute(sa.update(_LEASES).where(_LEASES.c.table_name == table, free).values(**row))
                if not taken.rowcount:
                    conn.execute(sa.insert(_LEASES).values(table_name=table, **row))
        except sa.exc.IntegrityError:  # another run inserted it between our two statements: it holds it
            pass
        except sa.exc.SQLAlchemyError as exc:
            raise StorageError(f"lease of {table}: {exc}".splitlines()[0]) from exc
        # Released between our statements (seen as no row): reported as a holder expiring now, asked again later.
        return self.holder(table) or Lease(table, "(released meanwhile)", datetime.now(UTC))

    def renew(self, lease: Lease, ttl: timedelta) -> bool:
        mine = sa.and_(
            _LEASES.c.table_name == lease.table,
            _LEASES.c.owner == lease.owner,
            _LEASES.c.token == lease.token,
            _LEASES.c.expires_at > self._now,
        )
        try:
            with self._engine.begin() as conn:
                done = conn.execute(sa.update(_LEASES).where(mine).values(expires_at=self._now + ttl.total_seconds()))
        except sa.exc.SQLAlchemyError as exc:
            raise StorageError(f"lease of {lease.table}: {exc}".splitlines()[0]) from exc
        return bool(done.rowcount)

    def holder(self, table: str) -> Lease | None:
        columns = (_LEASES.c.owner, _LEASES.c.expires_at, _LEASES.c.token, _LEASES.c.process)
        query = sa.select(*columns).where(_LEASES.c.table_name == table)
        try:
            with self._engine.connect() as conn:
                row = conn.execute(query).one_or_none()
        except sa.exc.SQLAlchemyError as exc:
            raise StorageError(f"lease of {table}: {exc}".splitlines()[0]) from exc
        if row is None:
            return None
        return Lease(table, row.owner, datetime.fromtimestamp(row.expires_at, UTC), row.token, row.process)

    def release(self, lease: Lease) -> None:
        mine = (_LEASES.c.table_name == lease.table, _LEASES.c.owner == lease.owner, _LEASES.c.token == lease.token)
        with self._engine.begin() as conn:
            conn.execute(sa.delete(_LEASES).where(*mine))
