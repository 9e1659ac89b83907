"""Where a table's indexes live, chosen at ``index create``: the table property ``write.index.path``.

By default each index lives under its table, at ``<table-location>/index/<name>/``. A store that
restricts a table's layout (S3 Tables, SeaweedFS's table buckets: writes only under ``metadata/``,
``data/`` and ``_`` folders) refuses that with a 403, so ``index create --location URI`` puts the
table's indexes at ``URI/<name>/`` instead and records ``URI`` in the table's properties,
committed through its catalog. Every command finds them there (``IndexStore``), orphan removal
keeps their files wherever they are (S1), and another table's orphan run keeps them whole when
they lie under its location (S8: the property is one of the write paths it honours). One folder
holds all of a table's indexes, and it is chosen once: moving it would hide the indexes made.
"""

from __future__ import annotations

from pyiceberg.table import Table

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.fs.locations import Uri
from airflow_iceberg_maint.index.metadata.rules import is_absolute_location
from airflow_iceberg_maint.index.metadata.spec import INDEX_PATH_PROPERTY
from airflow_iceberg_maint.index.metadata.store import IndexStore


def use_index_location(table: Table, location: str) -> Table:
    """Make ``location`` the folder of the table's indexes, committing the property when it is new.

    Refused, changing nothing: a location that is not absolute or is the table location itself,
    a table whose indexes already live elsewhere (another ``write.index.path``, or indexes under
    the default folder).
    """
    wanted = location.rstrip("/")
    uri = Uri.parse(wanted)
    if not is_absolute_location(wanted) or not (uri.authority or uri.path.strip("/")):
        raise InvalidInputError(f"index location: {location!r} must be an absolute location naming a folder")
    table_location = table.metadata.location.rstrip("/")
    if wanted == table_location:
        raise InvalidInputError(f"index location: {location!r} is the table location; name a folder for the indexes")
    current = table.metadata.properties.get(INDEX_PATH_PROPERTY)
    if current is not None and current.rstrip("/") == wanted:
        return table
    if current is not None:
        raise InvalidInputError(
            f"index location: the indexes of table {table_location!r} live at {current!r} (table property "
            f"{INDEX_PATH_PROPERTY}), not {location!r}; all of a table's indexes live in one folder"
        )
    store = IndexStore(table)
    if existing := store.names():
        raise InvalidInputError(
            f"index location: table {table_location!r} has indexes at {store.root!r} ({', '.join(existing)}); "
            f"they cannot be moved to {location!r}"
        )
    with table.transaction() as transaction:
        transaction.set_properties({INDEX_PATH_PROPERTY: wanted})
    return table
