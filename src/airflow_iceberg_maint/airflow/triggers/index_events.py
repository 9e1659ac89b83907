"""``IcebergIndexLagEventTrigger``: an ``AssetWatcher`` trigger that fires when a table's index lag crosses a threshold.

Firing on a standing condition ("lag > N") would schedule a DAG run at every poll, so the
trigger fires on the transition only: for each index, once per extract it lags behind. The
cursor maps each index that has fired to the snapshot of the extract it fired for; an index
whose lag falls back within the threshold (a new extract was committed) leaves the cursor and
may fire again on its next crossing.

A triggerer restart re-creates the trigger from the kwargs captured when its row was created,
so a cursor kept on ``self`` would be lost and the crossing fired again. The cursor is kept
in the watched asset's state store (``asset_state_store``, Airflow 3.3), written after each
event is handed over: a crash in between repeats that one event (at least once), never loses
it. Without a store (several assets share the trigger, or older Airflow) the cursor lives in
memory and a restart may repeat one event per lagging index; the maintenance DAG is
idempotent, so a repeat costs one run.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from functools import cached_property
from typing import Any, Protocol

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from airflow_iceberg_maint.airflow.hooks.maintenance import IcebergMaintenanceHook
from airflow_iceberg_maint.errors import TableNotFoundError
from airflow_iceberg_maint.policy.lag_threshold import CheckedLag, LagThreshold

# Raised by AssetStateStoreAccessors when the trigger watches several assets: no single cursor.
_MULTI_ASSET_ERROR = "concrete inlets and outlets"

Cursor = dict[str, int | None]


class CursorStore(Protocol):
    """The part of an asset state store accessor the trigger uses (sync, called in a thread)."""

    def get(self, key: str, default: Any = None) -> Any: ...

    def set(self, key: str, value: Any) -> None: ...


def advance(cursor: Cursor, checked: Sequence[CheckedLag]) -> tuple[Cursor, list[CheckedLag]]:
    """The next cursor, and the indexes that crossed the threshold since ``cursor``.

    An index crosses when it lags and has not fired for the extract it lags behind. Indexes
    within the threshold, or no longer present, leave the cursor.
    """
    updated: Cursor = {}
    crossed = []
    for item in checked:
        name, extract = item.lag.index, item.lag.extract_snapshot_id
        if not item.lagging:
            continue
        if name not in cursor or cursor[name] != extract:
            crossed.append(item)
        updated[name] = extract
    return updated, crossed


class IcebergIndexLagEventTrigger(BaseEventTrigger):
    """Fire when indexes of ``table`` start lagging by more than the threshold (see ``LagThreshold``).

    The event: ``table``, ``table_snapshot_id`` and ``indexes`` (the lag of each index that
    crossed, with ``reasons``). A missing table, or a named index not created yet, is waited on;
    any read error is logged and polled again.

    :param table: ``namespace.table``.
    :param iceberg_conn_id: an ``iceberg`` connection.
    :param indexes: index names to watch; None: every index the table has at each poll.
    :param max_snapshots_behind: fire above this many commits behind.
    :param max_lag_seconds: fire above this many seconds between the extract's snapshot and the current one.
    :param max_added_files: fire above this many data and delete files added since the extract.
    :param poll_interval: seconds between checks.
    """

    def __init__(
        self,
        *,
        table: str,
        iceberg_conn_id: str,
        indexes: list[str] | None = None,
        max_snapshots_behind: int | None = None,
        max_lag_seconds: float | None = None,
        max_added_files: int | None = None,
        poll_interval: float = 60.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)  # type: ignore[no-untyped-call]  # untyped_calls_exclude misses super()
        self.table = table
        self.iceberg_conn_id = iceberg_conn_id
        self.indexes = sorted(indexes) if indexes is not None else None
        self.max_snapshots_behind = max_snapshots_behind
        self.max_lag_seconds = max_lag_seconds
        self.max_added_files = max_added_files
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        # Deterministic kwargs: BaseEventTrigger.hash() identifies the watcher's trigger row by them.
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table": self.table,
                "iceberg_conn_id": self.iceberg_conn_id,
                "indexes": self.indexes,
                "max_snapshots_behind": self.max_snapshots_behind,
                "max_lag_seconds": self.max_lag_seconds,
                "max_added_files": self.max_added_files,
                "poll_interval": self.poll_interval,
            },
        )

    @property
    def cursor_key(self) -> str:
        """One cursor per watched set of indexes, so two lag watchers of one asset keep apart."""
        return "index_lag_cursor:" + (",".join(self.indexes) if self.indexes is not None else "*")

    @cached_property
    def hook(self) -> IcebergMaintenanceHook:
        """Built once per trigger run: each check reuses its catalog."""
        return IcebergMaintenanceHook(self.iceberg_conn_id)

    def _check(self) -> list[CheckedLag]:
        threshold = LagThreshold(self.max_snapshots_behind, self.max_lag_seconds, self.max_added_files)
        return self.hook.check_index_lags(self.table, self.indexes, threshold, missing_ok=True)

    async def _open_store(self) -> tuple[CursorStore | None, Cursor]:
        store: CursorStore | None = getattr(self, "asset_state_store", None)
        if store is None:
            self.log.warning("%s: no asset state store; the lag cursor is kept in memory only", self.table)
            return None, {}
        try:
            stored = await asyncio.to_thread(store.get, self.cursor_key)
        except ValueError as exc:
            if _MULTI_ASSET_ERROR not in str(exc):
                raise
            self.log.warning("%s: watched by several assets; the lag cursor is kept in memory only", self.table)
            return None, {}
        return store, {str(k): (None if v is None else int(v)) for k, v in (stored or {}).items()}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        store, cursor = await self._open_store()
        while True:
            try:
                checked = await asyncio.to_thread(self._check)
            except TableNotFoundError:
                self.log.info("%s: no such table yet; next check in %ss", self.table, self.poll_interval)
            except Exception as exc:
                # A watcher outlives catalog and storage hiccups (HTTP errors, unreadable metadata):
                # raising would end it and make the triggerer restart it at once, in a loop.
                self.log.warning(
                    "%s: lag not checked (%s: %s); next check in %ss",
                    self.table,
                    type(exc).__name__,
                    exc,
                    self.poll_interval,
                    exc_info=True,
                )
            else:
                updated, crossed = advance(cursor, checked)
                if crossed:
                    self.log.info(
                        "%s: index(es) %s crossed the lag threshold",
                        self.table,
                        ", ".join(c.lag.index for c in crossed),
                    )
                    yield TriggerEvent(
                        {
                            "table": self.table,
                            "table_snapshot_id": crossed[0].lag.table_snapshot_id,
                            "indexes": [c.to_json() for c in crossed],
                        }
                    )
                if updated != cursor:
                    if store is not None:
                        await asyncio.to_thread(store.set, self.cursor_key, updated)
                    cursor = updated
            await asyncio.sleep(self.poll_interval)
