"""Loading catalogs and tables the pyiceberg way (``.pyiceberg.yaml`` or ``PYICEBERG_CATALOG__*``).

pyiceberg turns every ``_`` of a ``PYICEBERG_CATALOG__<NAME>__<KEY>`` variable into ``-``, so
``PYICEBERG_CATALOG__ICEBERG_DEFAULT__URI`` configures a catalog ``iceberg-default``, never
``iceberg_default`` (the name ``IcebergHook`` gives the catalog of the connection
``iceberg_default``). ``open_catalog`` reads the variables of a name itself: for catalog ``NAME``
the variables ``PYICEBERG_CATALOG__<NAME upper, - as _>__<KEY>`` apply whether ``NAME`` is
spelled with ``_`` or ``-``, over the ``.pyiceberg.yaml`` entry of exactly ``NAME`` (environment
over file, as in pyiceberg). The catalog keeps the name asked for: a SQL catalog sees only the
tables registered under its own name.

Every table the library works on is loaded by ``load_table`` (and reloaded by ``refresh_table``),
which takes its metadata from the table's own metadata file, never from what the catalog chose to
return: a REST catalog may leave snapshots out (``snapshot-loading-mode=refs``), and a file whose
snapshots are unknown looks unreferenced to the orphan scan. It also records how to renew the S3
credentials a catalog vends with the table (``fs.vended``).
"""

from __future__ import annotations

import os
import re
from typing import Any

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.serializers import Compressor
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil
from pyiceberg.utils.config import Config, merge_config

from airflow_iceberg_maint.errors import (
    IncompleteMetadataError,
    InvalidInputError,
    MaintenanceError,
    MetadataReadError,
    TableNotFoundError,
    first_line,
)
from airflow_iceberg_maint.fs.vended import remember
from airflow_iceberg_maint.load_errors import metadata_failure
from airflow_iceberg_maint.metadata_check import checked_metadata_text

_ENV_PREFIX = "pyiceberg_catalog__"
# Names a PYICEBERG_CATALOG__<NAME>__<KEY> variable can spell: letters and digits, single - or _ between.
_ENV_SPELLABLE = re.compile(r"[A-Za-z0-9]+(?:[-_][A-Za-z0-9]+)*")
# pyiceberg's wording when a catalog has no URI; its advice names a --uri flag of its own CLI.
_PYICEBERG_URI_MISSING = "URI missing"


def parse_identifier(identifier: str) -> tuple[str, ...]:
    """Split ``namespace.table`` into its parts, refusing anything without a namespace."""
    parts = tuple(identifier.split("."))
    if len(parts) < 2 or any(not p for p in parts):
        raise InvalidInputError(f"table {identifier!r}: expected 'namespace.table'")
    return parts


def catalog_env_name(name: str) -> str | None:
    """The ``<NAME>`` of the ``PYICEBERG_CATALOG__<NAME>__<KEY>`` variables of catalog ``name``, or None."""
    if not _ENV_SPELLABLE.fullmatch(name):
        return None
    return name.upper().replace("-", "_")


def _env_catalog_properties(name: str) -> dict[str, str]:
    """The catalog properties set by ``PYICEBERG_CATALOG__<NAME>__<KEY>`` variables, keys spelled as pyiceberg does."""
    env_name = catalog_env_name(name)
    if env_name is None:
        return {}
    prefix = f"{_ENV_PREFIX}{env_name.lower()}__"
    properties: dict[str, str] = {}
    for variable, value in os.environ.items():
        lowered = variable.lower()
        if lowered.startswith(prefix) and len(lowered) > len(prefix):
            # The key part follows pyiceberg's rule: "__" is ".", "_" is "-" (S3__ACCESS_KEY_ID: s3.access-key-id).
            key = lowered[len(prefix) :].replace("__", ".").replace("_", "-")
            properties[key] = value
    return properties


def catalog_properties(name: str) -> dict[str, Any] | None:
    """The configuration of catalog ``name``: its ``.pyiceberg.yaml`` entry with its variables over it.

    None when neither configures it.
    """
    from_file = Config().get_catalog_config(name)
    from_env = _env_catalog_properties(name)
    if from_file is None and not from_env:
        return None
    return dict(merge_config(dict(from_file or {}), dict(from_env)))


def not_configured_message(name: str) -> str:
    """What to set for catalog ``name``, in the forms that work."""
    env_name = catalog_env_name(name)
    env = (
        f"set PYICEBERG_CATALOG__{env_name}__TYPE, PYICEBERG_CATALOG__{env_name}__URI and "
        f"PYICEBERG_CATALOG__{env_name}__WAREHOUSE (e.g. sql, sqlite:////path/catalog.db, file:///path/warehouse), "
        if env_name
        else ""
    )
    return (
        f"catalog {name!r} is not configured: {env}"
        f"add {name!r} under 'catalog:' in .pyiceberg.yaml (in $PYICEBERG_HOME, ~ or the current directory), "
        "or use --conn-id with an Airflow connection instead of --catalog"
    )


def load_error_message(subject: str, exc: Exception, uri_hint: str) -> str:
    """One line on why pyiceberg could not build a catalog; ``uri_hint`` says where a URI goes.

    pyiceberg's missing-URI message advises a ``--uri`` flag this command does not have, so it is replaced.
    """
    text = " ".join(str(exc).split())
    if _PYICEBERG_URI_MISSING in text:
        return f"{subject}: no catalog URI: {uri_hint}"
    return f"{subject}: cannot be loaded: {text or type(exc).__name__}"


def open_catalog(name: str = "default", **properties: str) -> Catalog:
    """Load pyiceberg catalog ``name`` (see the module docstring for ``_`` in names), with optional overrides.

    A catalog nothing configures, or one pyiceberg refuses, is an ``InvalidInputError`` naming the
    settings to make; a catalog that fails to connect is a ``MaintenanceError``.
    """
    configured = catalog_properties(name)
    if configured is None and not properties:
        raise InvalidInputError(not_configured_message(name))
    env_name = catalog_env_name(name)
    uri_hint = (f"set PYICEBERG_CATALOG__{env_name}__URI or " if env_name else "set ") + (
        f"'uri' under catalog {name!r} in .pyiceberg.yaml"
    )
    subject = f"catalog {name!r}"
    try:
        return load_catalog(name, **{**(configured or {}), **properties})
    except ValueError as exc:
        raise InvalidInputError(load_error_message(subject, exc, uri_hint)) from exc
    except Exception as exc:
        # A driver or network error (a SQLite path in a missing directory, a REST endpoint down):
        # one line naming the catalog, not a traceback.
        raise MaintenanceError(load_error_message(subject, exc, uri_hint)) from exc


def load_table(catalog: Catalog, identifier: str) -> Table:
    """Load a table with its complete metadata (every snapshot, the whole metadata log).

    pyiceberg's not-found errors become one that names the table; any other failure is a one-line
    ``IncompleteMetadataError`` (``load_errors``). The metadata comes from the
    table's metadata file (see ``complete_metadata``), so it is the same whatever a catalog returns.
    """
    parts = parse_identifier(identifier)
    try:
        loaded = catalog.load_table(parts)
    except (NoSuchTableError, NoSuchNamespaceError) as exc:
        raise TableNotFoundError(f"table {identifier!r}: not found in catalog {catalog.name!r}") from exc
    except MaintenanceError:
        raise
    except Exception as exc:  # a file it cannot parse, a catalog that did not answer: one line (S2, S7)
        raise metadata_failure(identifier, exc) from exc
    # Credentials the catalog vended with the table are renewed by loading it again (only its FileIO
    # properties are taken from that load, never its metadata).
    remember(loaded.io.properties, lambda: catalog.load_table(parts).io.properties)
    return Table(
        identifier=loaded.name(),
        metadata=complete_metadata(identifier, loaded),
        metadata_location=loaded.metadata_location,
        io=loaded.io,
        catalog=catalog,
        config=loaded.config,
    )


def refresh_table(table: Table) -> Table:
    """``table.refresh()`` with complete metadata: reload through ``load_table`` and update ``table`` in place.

    In place, as pyiceberg's ``refresh`` does, so whatever holds the table sees the new metadata.
    Refuses (``IncompleteMetadataError``) a reload that is another table (a new UUID under the name).
    """
    identifier = ".".join(table.name())
    fresh = load_table(table.catalog, identifier)
    if fresh.metadata.table_uuid != table.metadata.table_uuid:
        raise IncompleteMetadataError(
            f"table {identifier!r}: reloaded as another table (UUID {fresh.metadata.table_uuid}, "
            f"was {table.metadata.table_uuid}): it was dropped and created again"
        )
    table.metadata = fresh.metadata
    table.metadata_location = fresh.metadata_location
    table.io = fresh.io
    table.config = fresh.config
    return table


def reload_to_plan_again(table: Table, name: str, work: str, outcome: str) -> None:
    """``refresh_table`` after a commit conflict, before ``work`` is planned again on the new metadata.

    A reload that fails is a ``MetadataReadError`` naming the work and its ``outcome`` (what was left
    as it was); a ``MaintenanceError`` (e.g. another table under the name) stays as raised.
    """
    try:
        refresh_table(table)
    except MaintenanceError:
        raise
    except Exception as exc:
        raise MetadataReadError(
            f"table {name}: cannot be reloaded to plan {work} again ({first_line(exc)}); {outcome}"
        ) from exc


def complete_metadata(identifier: str, loaded: Table) -> TableMetadata:
    """The whole metadata of ``loaded``, read from its metadata file with the table's own FileIO.

    What the catalog returned must be part of it (same UUID, location, current snapshot; each of its
    snapshots and refs present in the file), else the file is not this table's state and nothing runs.
    """
    location = loaded.metadata_location
    if not location:
        raise IncompleteMetadataError(
            f"table {identifier!r}: the catalog gave no metadata file location, so its complete metadata "
            "(every snapshot, the whole metadata log) cannot be read; nothing was done"
        )
    subject = f"table {identifier!r}: its metadata file {location}"
    try:
        with (
            loaded.io.new_input(location).open() as stream,
            Compressor.get_compressor(location).stream_decompressor(stream) as plain,
        ):
            raw = plain.read()
        # pyiceberg would default fields the spec requires (no snapshots at all): checked first.
        full = TableMetadataUtil.parse_raw(checked_metadata_text(raw, subject))
    except MaintenanceError:
        raise
    except Exception as exc:  # missing, unreadable or not table metadata: never fall back to the partial view
        raise metadata_failure(identifier, exc, location) from exc
    given = loaded.metadata
    missing = {s.snapshot_id for s in given.snapshots} - {s.snapshot_id for s in full.snapshots}
    disagreements = [
        what
        for what, same in (
            ("table UUID", full.table_uuid == given.table_uuid),
            ("location", full.location == given.location),
            ("current snapshot", full.current_snapshot_id == given.current_snapshot_id),
            ("refs", all(full.refs.get(name) == ref for name, ref in given.refs.items())),
            (f"snapshots {sorted(missing)}", not missing),
        )
        if not same
    ]
    if disagreements:
        raise IncompleteMetadataError(
            f"table {identifier!r}: its metadata file {location} differs from the catalog's answer in "
            f"{', '.join(disagreements)}; nothing was done"
        )
    return full
