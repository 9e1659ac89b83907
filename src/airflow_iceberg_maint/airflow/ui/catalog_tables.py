"""The tables of the catalogs the status page lists (``[iceberg_maint] catalog_conn_ids``).

Listing reads namespaces and table names only, never a table's metadata or manifests, and is kept
for ``TTL_SECONDS`` so that page views do not each list the catalog. A catalog that cannot be listed
is a problem shown above the tables; the page still renders from its records.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from airflow_iceberg_maint.airflow import config
from airflow_iceberg_maint.policy.policies import catalog_table_names

TTL_SECONDS = 60.0


@dataclass(frozen=True)
class Listing:
    tables: dict[str, list[str]]  # connection id -> its tables
    problems: list[str]
    at: float

    @property
    def names(self) -> list[str]:
        return sorted({t for tables in self.tables.values() for t in tables})


_lock = threading.Lock()
_cached: dict[tuple[str, ...], Listing] = {}


def _list(conn_ids: tuple[str, ...]) -> Listing:
    from airflow_iceberg_maint.airflow.hooks.maintenance import IcebergMaintenanceHook

    tables: dict[str, list[str]] = {}
    problems = []
    for conn_id in conn_ids:
        try:
            tables[conn_id] = catalog_table_names(IcebergMaintenanceHook(conn_id).catalog)
        except Exception as exc:  # any catalog failure: say so, show the records anyway
            problems.append(f"catalog of connection {conn_id!r} cannot be listed: {str(exc).splitlines()[0]}")
    return Listing(tables, problems, time.monotonic())


def catalog_listing(max_age: float = TTL_SECONDS) -> Listing:
    """The configured catalogs' tables, listed at most once per ``max_age`` seconds."""
    conn_ids = tuple(config.catalog_conn_ids())
    with _lock:
        known = _cached.get(conn_ids)
        if known is None or time.monotonic() - known.at >= max_age:
            known = _cached[conn_ids] = _list(conn_ids)
        return known


def forget() -> None:
    """Drop the kept listings: the next page view lists the catalogs again."""
    with _lock:
        _cached.clear()
