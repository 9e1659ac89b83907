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

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import Table
from pyiceberg.table.update import SetPropertiesUpdate

from airflow_iceberg_maint import fencing
from airflow_iceberg_maint.catalog import refresh_table
from airflow_iceberg_maint.commit_fence import commit_fenced
from airflow_iceberg_maint.errors import IndexCommitConflictError, InvalidInputError
from airflow_iceberg_maint.fs.locations import Uri
from airflow_iceberg_maint.index.metadata.rules import is_absolute_location
from airflow_iceberg_maint.index.metadata.spec import INDEX_PATH_PROPERTY
from airflow_iceberg_maint.index.metadata.store import IndexStore

COMMIT_ATTEMPTS = 4


def use_index_location(table: Table, location: str) -> Table:
    """Make ``location`` the folder of the table's indexes, committing the property when it is new.

    Refused, changing nothing: a location that is not absolute or is the table location itself,
    a table whose indexes already live elsewhere (another ``write.index.path``, or indexes under
    the default folder). The commit checks everything this read (S18): when the table changed
    meanwhile, it is read and checked again.
    """
    for _ in range(COMMIT_ATTEMPTS):
        wanted = _location_to_commit(table, location)
        if wanted is None:
            return table
        try:
            _commit_location(table, wanted)
            return table
        except CommitFailedException:
            refresh_table(table)
    raise IndexCommitConflictError(
        f"index location: table {table.metadata.location!r} changed during each of {COMMIT_ATTEMPTS} attempts "
        "to record it; nothing was committed"
    )


def _location_to_commit(table: Table, location: str) -> str | None:
    """The location to record, None when it is already the table's, or ``InvalidInputError``."""
    wanted = location.rstrip("/")
    uri = Uri.parse(wanted)
    if not is_absolute_location(wanted) or not (uri.authority or uri.path.strip("/")):
        raise InvalidInputError(f"index location: {location!r} must be an absolute location naming a folder")
    table_location = table.metadata.location.rstrip("/")
    if wanted == table_location:
        raise InvalidInputError(f"index location: {location!r} is the table location; name a folder for the indexes")
    current = table.metadata.properties.get(INDEX_PATH_PROPERTY)
    if current is not None and current.rstrip("/") == wanted:
        return None
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
    return wanted


def _commit_location(table: Table, wanted: str) -> None:
    """Commit the property on the metadata just checked; ``CommitFailedException`` when the table changed.

    On a catalog that cannot refuse every concurrent change (REST), a value another writer set in
    between, which this commit overwrote, is put back and the location refused.
    """
    base = table.metadata
    fencing.guard("the commit of the index location")  # the run's lease (S15)
    committed = commit_fenced(
        table, base, table.metadata_location, [SetPropertiesUpdate(updates={INDEX_PATH_PROPERTY: wanted})]
    )
    if committed.applied_on_base or committed.predecessor is None:
        return
    theirs = FromInputFile.table_metadata(table.io.new_input(committed.predecessor)).properties.get(INDEX_PATH_PROPERTY)
    if theirs is None or theirs.rstrip("/") == wanted:
        return
    try:
        commit_fenced(
            table, table.metadata, table.metadata_location, [SetPropertiesUpdate(updates={INDEX_PATH_PROPERTY: theirs})]
        )
    except CommitFailedException as exc:  # not a conflict to retry: a retry would find ours recorded and keep it
        raise IndexCommitConflictError(
            f"index location: the indexes of table {base.location!r} were placed at {theirs!r} (table property "
            f"{INDEX_PATH_PROPERTY}) by another writer meanwhile, and putting that back failed ({exc}); set "
            f"{INDEX_PATH_PROPERTY} to {theirs!r} again before any orphan run on the table"
        ) from exc
    raise InvalidInputError(
        f"index location: the indexes of table {base.location!r} were placed at {theirs!r} (table property "
        f"{INDEX_PATH_PROPERTY}) by another writer meanwhile, not {wanted!r}"
    )
