"""Loading catalogs and tables the pyiceberg way (``.pyiceberg.yaml`` or ``PYICEBERG_CATALOG__*``)."""

from __future__ import annotations

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.table import Table

from airflow_iceberg_maint.errors import InvalidInputError, TableNotFoundError


def parse_identifier(identifier: str) -> tuple[str, ...]:
    """Split ``namespace.table`` into its parts, refusing anything without a namespace."""
    parts = tuple(identifier.split("."))
    if len(parts) < 2 or any(not p for p in parts):
        raise InvalidInputError(f"table {identifier!r}: expected 'namespace.table'")
    return parts


def open_catalog(name: str = "default", **properties: str) -> Catalog:
    """Load a pyiceberg catalog by name, with optional property overrides."""
    return load_catalog(name, **properties)


def load_table(catalog: Catalog, identifier: str) -> Table:
    """Load a table, turning pyiceberg's not-found errors into one that names the table."""
    try:
        return catalog.load_table(parse_identifier(identifier))
    except (NoSuchTableError, NoSuchNamespaceError) as exc:
        raise TableNotFoundError(f"table {identifier!r}: not found in catalog {catalog.name!r}") from exc
