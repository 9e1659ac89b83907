"""What a status page view reads, in bulk: the stored records and the policy and index-definition files.

Records come from the ``state_url`` database when it is set, else from Airflow's Variables: one query
on the ``Variable`` model for every ``iceberg_maint.*`` key, each value read through the model's
public ``val`` (which decrypts it). The files are parsed once per change. The only catalog call is
the listing of table names (``catalog_tables``, at most once a minute): no table is ever loaded.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from airflow_iceberg_maint.airflow import config
from airflow_iceberg_maint.airflow.ui.catalog_tables import catalog_listing
from airflow_iceberg_maint.errors import MaintenanceError
from airflow_iceberg_maint.policy.index_definitions import TableDefinition, load_index_definitions
from airflow_iceberg_maint.policy.policies import Policy, load_policies
from airflow_iceberg_maint.policy.status_rows import Records, TableStatus, table_rows
from airflow_iceberg_maint.state.cleanup import SqlStateStore
from airflow_iceberg_maint.state.status_records import JOB_KINDS, KEY_PREFIX, SqlRecords


@lru_cache(maxsize=8)
def _parsed(path: str, mtime: float, kind: str) -> tuple[Any, str | None]:
    """A definitions file parsed once per change (keyed by modification time)."""
    try:
        return (load_policies(path) if kind == "policies" else load_index_definitions(path)), None
    except MaintenanceError as exc:
        return [], str(exc)


def _load(path: Path, kind: str) -> tuple[Any, str | None]:
    try:
        mtime = path.stat().st_mtime
    except OSError:
        return [], None  # no such file: nothing of that kind is configured
    return _parsed(str(path), mtime, kind)


def _variable_rows() -> list[tuple[str, str]]:
    """Every ``iceberg_maint.*`` Variable, in one query."""
    from airflow.models.variable import Variable
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        variables = session.scalars(select(Variable).where(Variable.key.startswith(KEY_PREFIX))).all()
        return [(v.key, v.val) for v in variables if v.val]


def load_records() -> Records:
    url = config.state_url()
    if url:
        store = SqlStateStore(url)
        states = [state for job in JOB_KINDS for state in store.all(job)]
        return Records.build(states, SqlRecords(url).items())
    return Records.from_variables(_variable_rows())


def current_rows(now: datetime | None = None, *, fleet: bool = False) -> tuple[list[TableStatus], list[str]]:
    """The rows and the problems found reading the definitions (shown above the table); ``fleet``: a row
    for every table of the catalogs, not only those a policy covers."""
    policy_path, index_path = config.policy_file(), config.index_definitions_file()
    policies, policy_error = _load(policy_path, "policies")
    definitions, index_error = _load(index_path, "indexes")
    listing = catalog_listing()
    rows = table_rows(
        _typed(policies, Policy),
        _typed(definitions, TableDefinition),
        load_records(),
        now or datetime.now(UTC),
        source=str(policy_path),
        catalog_tables=listing.names,
        every_catalog_table=fleet,
    )
    return rows, [e for e in (policy_error, index_error, *listing.problems) if e]


def _typed(items: Iterable[Any], kind: type) -> list[Any]:
    return [i for i in items if isinstance(i, kind)]
