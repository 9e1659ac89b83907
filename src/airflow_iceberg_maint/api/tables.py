"""The tables and arguments of the public API: a table given by name or as a pyiceberg ``Table``, loaded the
way the rest of the project loads it, and the checks every function makes before it loads anything (S7)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TypeAlias

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from airflow_iceberg_maint.catalog import load_table as load_complete
from airflow_iceberg_maint.catalog import open_catalog as open_configured
from airflow_iceberg_maint.catalog import parse_identifier
from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.reachability.cutoff import cutoff_for_days
from airflow_iceberg_maint.reachability.digests import check_location
from airflow_iceberg_maint.reachability.digests import resolve as resolve_digests

#: A table as the API takes it: a pyiceberg ``Table``, or its ``"namespace.table"`` name in a catalog.
TableLike: TypeAlias = Table | str
#: A catalog as the API takes it: a loaded pyiceberg ``Catalog``, or the name pyiceberg configures it under.
CatalogLike: TypeAlias = Catalog | str
DEFAULT_CATALOG = "default"


def open_catalog(name: str = DEFAULT_CATALOG) -> Catalog:
    """The pyiceberg catalog ``name`` (``.pyiceberg.yaml`` or ``PYICEBERG_CATALOG__<NAME>__<KEY>`` variables).

    Not configured, or refused by pyiceberg: ``InvalidInputError`` naming what to set.
    """
    if not isinstance(name, str) or not name:
        raise InvalidInputError(f"catalog {name!r}: expected a catalog name or a pyiceberg Catalog")
    return open_configured(name)


def load_table(identifier: str, catalog: CatalogLike = DEFAULT_CATALOG) -> Table:
    """Table ``identifier`` (``"namespace.table"``) of ``catalog``, with its complete metadata.

    The metadata is read from the table's own metadata file, never taken from what the catalog chose
    to return (a REST catalog may leave snapshots out, and the files of a snapshot left out would look
    unreferenced). No such table: ``TableNotFoundError``.
    """
    if not isinstance(identifier, str):
        raise InvalidInputError(f"table {identifier!r}: expected 'namespace.table' or a pyiceberg Table")
    parse_identifier(identifier)  # refused before any catalog is opened
    return load_complete(catalog if isinstance(catalog, Catalog) else open_catalog(catalog), identifier)


def resolve_table(table: TableLike, catalog: CatalogLike) -> Table:
    """The table to work on: a name is loaded from ``catalog``; a ``Table`` is loaded again from its own catalog,
    so that its metadata is complete and current whatever the caller's object holds (``catalog`` is not used)."""
    if isinstance(table, Table):
        return load_complete(table.catalog, ".".join(table.name()))
    return load_table(table, catalog)


def check_cutoff(older_than: datetime | None, older_than_days: float | None, now: datetime) -> None:
    """The cutoff arguments as the command line checks them: one of the two at most, a number of days >= 0
    reaching back to 1970 at most, a time not in the future (a time without a zone is UTC)."""
    if older_than is not None and older_than_days is not None:
        raise InvalidInputError("older_than and older_than_days: give one of them, not both")
    if older_than_days is not None:
        if isinstance(older_than_days, bool) or not isinstance(older_than_days, int | float):
            raise InvalidInputError(f"older_than_days {older_than_days!r}: expected a number of days >= 0")
        cutoff_for_days(older_than_days, now)
    if older_than is not None:
        if not isinstance(older_than, datetime):
            raise InvalidInputError(f"older_than {older_than!r}: expected a datetime")
        cutoff = older_than if older_than.tzinfo else older_than.replace(tzinfo=UTC)
        if cutoff > now:
            raise InvalidInputError(f"older_than {cutoff.isoformat()}: is in the future (now is {now.isoformat()})")


def check_whole(value: int | None, what: str, minimum: int | None = None) -> None:
    """A whole number (>= ``minimum`` when given); None passes: the default applies."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        bound = "" if minimum is None else f" >= {minimum}"
        raise InvalidInputError(f"{what} {value!r}: expected a whole number{bound}")


def check_flag(value: bool, what: str) -> None:
    """A real ``bool``: ``dry_run=0`` or ``dry_run="false"`` is refused, never guessed."""
    if not isinstance(value, bool):
        raise InvalidInputError(f"{what} {value!r}: expected True or False")


def check_protocol(items: Sequence[object], what: str, methods: tuple[str, ...]) -> None:
    """Each of ``items`` has a ``name`` and the ``methods`` of its protocol; a single object is refused too."""
    if isinstance(items, str | bytes) or not isinstance(items, Sequence):
        raise InvalidInputError(f"{what}: expected a list or tuple, got {type(items).__name__}")
    for item in items:
        missing = [m for m in ("name", *methods) if not hasattr(item, m)]
        if missing:
            raise InvalidInputError(f"{what}: {item!r} lacks {', '.join(missing)}")


def digest_folder(cache: str | None) -> str | None:
    """The digest cache's folder (S22): ``DIGEST_CACHE`` the default location, None no cache."""
    if cache is not None and not isinstance(cache, str):
        raise InvalidInputError(f"cache {cache!r}: expected a local folder, a file:// URI or None")
    error = check_location(cache)
    if error:
        raise InvalidInputError(error)
    return resolve_digests(cache)
