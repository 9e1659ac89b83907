"""What tasks record for the status page besides the cleanup state: index lags and the policies' tables.

Tasks record these when they have computed them anyway, in the store the cleanup state uses
(Airflow Variables by default, a SQL table next to the state with ``state_url``), so the status
page reads stored facts and never calls the catalog:

* ``iceberg_maint.index_lag.<table>``: ``{"table", "indexes": {<index>: lag}}``, each lag as the
  ``index lag`` keys plus ``lagging``, ``reasons`` and ``checked_at``; written by the lag plan
  operator (every index of the table) and the lag sensor (its index).
* ``iceberg_maint.policy_tables``: ``{"checked_at", "tables": {<table>: <uuid>}}``, every table the
  last planning run evaluated, so tables attached by a glob show before their first cleanup.
* ``iceberg_maint.last_run.<kind>.<table>``: the last run of one kind of maintenance on a table,
  ``{"kind", "table", "at", "status", ...}``; kind ``expiry`` (written by the expiry operator)
  adds what was expired and the bytes freed (``expiry_run_record``).

Recording is best effort: a record that cannot be written is logged, and the maintenance it
describes still succeeds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Protocol

import sqlalchemy as sa

from airflow_iceberg_maint.airflow import config
from airflow_iceberg_maint.airflow.reports import TaskLog
from airflow_iceberg_maint.errors import InvalidInputError

INDEX_LAG_PREFIX = "iceberg_maint.index_lag."
POLICY_TABLES_KEY = "iceberg_maint.policy_tables"
LAST_RUN_PREFIX = "iceberg_maint.last_run."
EXPIRY = "expiry"
#: Snapshot ids kept in an expiry record; the full list is in the run's report.
RECORDED_SNAPSHOT_IDS = 50


class RecordStore(Protocol):
    def get(self, key: str) -> dict[str, Any] | None: ...

    def put(self, key: str, body: Mapping[str, Any], description: str) -> None: ...


class VariableRecords:
    """Records as Airflow Variables (through the Task SDK: tasks only)."""

    def get(self, key: str) -> dict[str, Any] | None:
        from airflow.sdk import Variable

        raw = Variable.get(key, default=None)
        return json.loads(raw) if raw else None

    def put(self, key: str, body: Mapping[str, Any], description: str) -> None:
        from airflow.sdk import Variable

        Variable.set(key, json.dumps(body), description=description)


_METADATA = sa.MetaData()
_RECORDS = sa.Table(
    "iceberg_maint_records",
    _METADATA,
    sa.Column("key", sa.String(512), primary_key=True),
    sa.Column("body", sa.Text, nullable=False),
)


class SqlRecords:
    """Records in one SQL table (``iceberg_maint_records``) of the state store's database."""

    def __init__(self, url: str) -> None:
        try:
            self._engine = sa.create_engine(url)
        except (sa.exc.ArgumentError, ImportError) as exc:
            raise InvalidInputError(f"state store URL {url!r}: {exc}") from exc
        _METADATA.create_all(self._engine)

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


def record_store_for(state_url: str | None) -> RecordStore:
    """The same place as ``state_store_for``: Variables by default, the SQL database of ``state_url`` else."""
    url = state_url or config.state_url()
    return SqlRecords(url) if url else VariableRecords()


def index_lag_key(table: str) -> str:
    return f"{INDEX_LAG_PREFIX}{table}"


def record_index_lags(
    state_url: str | None, table: str, lags: Iterable[Mapping[str, Any]], at: datetime, log: TaskLog
) -> None:
    """Store the lags just checked (``CheckedLag.to_json()``), keeping the records of the table's other indexes."""
    key = index_lag_key(table)
    try:
        store = record_store_for(state_url)
        indexes: dict[str, Any] = dict((store.get(key) or {}).get("indexes") or {})
        for lag in lags:
            indexes[str(lag["index"])] = {**lag, "checked_at": at.isoformat()}
        store.put(key, {"table": table, "indexes": indexes}, f"iceberg-maint index lag of {table}, as last checked")
    except Exception as exc:  # the dashboard must never fail the maintenance
        log.warning("index lag of %s not recorded for the status page: %s", table, exc)


def record_policy_tables(state_url: str | None, tables: Mapping[str, str], at: datetime, log: TaskLog) -> None:
    try:
        record_store_for(state_url).put(
            POLICY_TABLES_KEY,
            {"checked_at": at.isoformat(), "tables": dict(tables)},
            "iceberg-maint: the tables the policies attached at the last planning run",
        )
    except Exception as exc:
        log.warning("tables of the policies not recorded for the status page: %s", exc)


def last_run_key(kind: str, table: str) -> str:
    return f"{LAST_RUN_PREFIX}{kind}.{table}"


def expiry_run_record(
    summary: Mapping[str, Any], at: datetime, report: str | None, error: str | None = None
) -> dict[str, Any]:
    """The status record of one expiry run, from ``ExpiryReport.to_json()``: what was expired, bytes freed."""
    ids = list(summary.get("expired_snapshot_ids") or [])
    failed = len(summary.get("failed") or [])
    return {
        "kind": EXPIRY,
        "table": summary["table"],
        "table_uuid": summary["table_uuid"],
        "at": at.isoformat(),
        "status": "failed" if error or failed else "success",
        "dry_run": bool(summary["dry_run"]),
        "older_than": summary["older_than"],
        "retain_last": summary["retain_last"],
        "expired_snapshot_count": len(ids),
        "expired_snapshot_ids": ids[:RECORDED_SNAPSHOT_IDS],
        "removed_refs": list(summary.get("removed_refs") or []),
        "deleted_file_count": int(summary.get("deleted_file_count") or 0),
        "deleted_bytes": int(summary.get("deleted_bytes") or 0),
        "failed_count": failed,
        "error": error,
        "report": report,
    }


def record_last_run(state_url: str | None, record: Mapping[str, Any], log: TaskLog) -> None:
    """Store a run's record (``expiry_run_record``) under its kind and table, replacing the previous one."""
    kind, table = str(record["kind"]), str(record["table"])
    try:
        record_store_for(state_url).put(
            last_run_key(kind, table), record, f"iceberg-maint: the last {kind} run of {table}"
        )
    except Exception as exc:
        log.warning("%s run of %s not recorded for the status page: %s", kind, table, exc)
