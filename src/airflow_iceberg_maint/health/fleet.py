"""The health of many tables of a catalog, a bounded number at a time, worst first.

Tables are read on ``parallelism`` threads (each table's reads wait on the catalog and the store
more than on the CPU) with the manifest decoding of each in its own thread: no worker processes
are started per table. A table that cannot be read is listed in ``failed`` with its error; the
others are reported, worst score first. Which tables, and their state records, the caller gives
(``api.health``): this package reads tables only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from pyiceberg.catalog import Catalog

from airflow_iceberg_maint.catalog import load_table
from airflow_iceberg_maint.errors import InvalidInputError, first_line
from airflow_iceberg_maint.health.names import DEFAULT_PARALLELISM
from airflow_iceberg_maint.health.report import HealthReport, RunRecord, build_report

log = logging.getLogger(__name__)

MAX_PARALLELISM = 64


class FleetHealth(list[HealthReport]):
    """The reports, worst score first (then by name); ``failed``: ``(table, error)`` of the tables not read."""

    def __init__(self, reports: list[HealthReport], failed: list[tuple[str, str]]) -> None:
        super().__init__(sorted(reports, key=lambda r: (r.score, r.table)))
        self.failed = sorted(failed)


#: A table's UUID -> its last orphan-removal record and its last expiry record.
#: A table's last orphan-removal, expiry and compaction records, by its UUID.
Records = Callable[[str], tuple[RunRecord | None, RunRecord | None, RunRecord | None]]


def check_parallelism(value: object, what: str = "parallelism") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PARALLELISM:
        raise InvalidInputError(f"{what} {value!r}: expected a whole number from 1 to {MAX_PARALLELISM}")
    return value


def fleet_scan(
    catalog: Catalog,
    names: list[str],
    records: Records,
    *,
    parallelism: int = DEFAULT_PARALLELISM,
    target_file_size_bytes: int | None = None,
    now: datetime | None = None,
    cache: str | None = None,
) -> FleetHealth:
    """The health of each table of ``names`` in ``catalog``, with its ``records`` (``cache``: see ``build_report``)."""
    check_parallelism(parallelism)
    now = now or datetime.now(UTC)

    def one(name: str) -> HealthReport | tuple[str, str]:
        try:
            table = load_table(catalog, name)
            orphan_run, expiry, compaction = records(str(table.metadata.table_uuid))
            return build_report(
                table,
                target_file_size_bytes=target_file_size_bytes,
                last_orphan_run=orphan_run,
                last_expiry=expiry,
                last_compaction=compaction,
                now=now,
                reader_processes=0,
                cache=cache,
            )
        except Exception as exc:  # one table's failure is reported; the scan goes on
            log.warning("table %s: %s", name, exc)
            return name, first_line(exc)

    with ThreadPoolExecutor(max_workers=parallelism, thread_name_prefix="health") as pool:
        results = list(pool.map(one, names))
    reports = [r for r in results if isinstance(r, HealthReport)]
    return FleetHealth(reports, [r for r in results if not isinstance(r, HealthReport)])
