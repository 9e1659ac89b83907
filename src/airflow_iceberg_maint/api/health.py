"""Table health for Python callers: one table's statistics and score, or every table of a catalog, worst first.

Both read metadata and manifests only (no data file, no listing) and change nothing; docs/health.md
explains the numbers and the score, docs/python.md shows them in use.
"""

from __future__ import annotations

from datetime import UTC, datetime

from pyiceberg.catalog import Catalog

from airflow_iceberg_maint.api.tables import (
    DEFAULT_CATALOG,
    CatalogLike,
    TableLike,
    check_whole,
    digest_folder,
    open_catalog,
    resolve_table,
)
from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.health.fleet import FleetHealth, Records, check_parallelism, fleet_scan
from airflow_iceberg_maint.health.names import DEFAULT_PARALLELISM
from airflow_iceberg_maint.health.report import HealthReport, build_report
from airflow_iceberg_maint.policy.policies import DATA_COMPACTION, ORPHAN_FILE_REMOVAL, SNAPSHOT_EXPIRY, catalog_tables
from airflow_iceberg_maint.reachability.digests import DEFAULT as DIGEST_CACHE
from airflow_iceberg_maint.state.cleanup import CleanupState, StateStore


def _state(value: object) -> CleanupState | None:
    if value is not None and not isinstance(value, CleanupState):
        raise InvalidInputError(f"last_orphan_run {value!r}: expected the state store's record (a CleanupState)")
    return value


def table_health(
    table: TableLike,
    *,
    catalog: CatalogLike = DEFAULT_CATALOG,
    target_file_size_bytes: int | None = None,
    last_orphan_run: CleanupState | None = None,
    cache: str | None = DIGEST_CACHE,
) -> HealthReport:
    """The health of ``table`` (a pyiceberg ``Table``, or ``"namespace.table"`` in ``catalog``).

    ``target_file_size_bytes``: what counts as small (below 75% of it); default: the table's
    ``write.target-file-size-bytes``, else 512 MiB. ``last_orphan_run``: the table's orphan-removal record
    of the state store (``SqlStateStore().get(uuid)``), whose findings the report and the score include.
    ``cache``: the digest cache of manifest lists and manifests (S22) that what expiry would free is read
    through, as ``remove_orphan_files`` takes it.
    """
    if target_file_size_bytes is not None:
        check_whole(target_file_size_bytes, "target_file_size_bytes", 1)
    _state(last_orphan_run)
    folder = digest_folder(cache)
    loaded = resolve_table(table, catalog)
    return build_report(
        loaded, target_file_size_bytes=target_file_size_bytes, last_orphan_run=last_orphan_run, cache=folder
    )


def fleet_health(
    catalog: CatalogLike = DEFAULT_CATALOG,
    *,
    namespace: str | None = None,
    parallelism: int = DEFAULT_PARALLELISM,
    state: StateStore | None = None,
    target_file_size_bytes: int | None = None,
    cache: str | None = DIGEST_CACHE,
) -> FleetHealth:
    """The health of every table of ``namespace`` (and the namespaces under it), or of the whole catalog,
    ``parallelism`` tables at a time: a list of ``HealthReport``, worst score first. Its ``failed`` lists
    ``(table, error)`` for the tables that could not be read. ``state``: the state store whose orphan-run
    records the reports include (None: none); ``cache`` as ``table_health`` takes it."""
    check_parallelism(parallelism)
    folder = digest_folder(cache)
    if target_file_size_bytes is not None:
        check_whole(target_file_size_bytes, "target_file_size_bytes", 1)
    if namespace is not None and (not isinstance(namespace, str) or not namespace.strip(".")):
        raise InvalidInputError(f"namespace {namespace!r}: expected a namespace name such as 'sales'")
    opened = open_catalog(catalog) if isinstance(catalog, str) else catalog
    scope = tuple(namespace.split(".")) if namespace is not None else None
    if scope is not None and not opened.namespace_exists(scope):
        raise InvalidInputError(f"namespace {namespace!r}: not found in catalog {opened.name!r}")
    names = sorted(catalog_tables(opened, None) if scope is None else _tables_under(opened, scope))
    return fleet_scan(
        opened,
        names,
        _records(state),
        parallelism=parallelism,
        target_file_size_bytes=target_file_size_bytes,
        now=datetime.now(UTC),
        cache=folder,
    )


def _tables_under(catalog: Catalog, namespace: tuple[str, ...]) -> list[str]:
    """The tables of ``namespace`` and of the namespaces nested in it."""
    names: list[str] = []
    pending = [namespace]
    while pending:
        ns = pending.pop()
        names += catalog_tables(catalog, ns)
        pending += [tuple(child) for child in catalog.list_namespaces(ns) if tuple(child) != ns]
    return names


def _records(state: StateStore | None) -> Records:
    """Each table's orphan-removal, expiry and compaction records, read in one query a job when the store can (SQL)."""
    if state is None:
        return lambda uuid: (None, None, None)
    every = getattr(state, "all", None)
    if every is None:  # a store without a bulk read: two queries a table
        return lambda uuid: (
            state.get(uuid, ORPHAN_FILE_REMOVAL),
            state.get(uuid, SNAPSHOT_EXPIRY),
            state.get(uuid, DATA_COMPACTION),
        )
    orphans, expiries, compactions = (
        {s.table_uuid: s for s in every(job)} for job in (ORPHAN_FILE_REMOVAL, SNAPSHOT_EXPIRY, DATA_COMPACTION)
    )
    return lambda uuid: (orphans.get(uuid), expiries.get(uuid), compactions.get(uuid))
