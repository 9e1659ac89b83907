"""Catalog access through an ``iceberg`` connection and its ``IcebergHook``: one function for tasks,
triggers and ``iceberg-maint --conn-id``.

``IcebergHook`` gets the connection through Airflow's own API: inside a task from the API server,
elsewhere (the command line) from ``AIRFLOW_CONN_<ID>`` variables (JSON or URI form) and the
secrets backends of ``[secrets] backend``; a connection kept only in the metadata database is not
reachable from the command line. It names the catalog after the connection id; the extra
``catalog_name`` names it otherwise, for a SQL (JDBC) catalog whose tables were registered under
another catalog name than the connection id.
"""

from __future__ import annotations

import os

from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook
from airflow.sdk.exceptions import AirflowNotFoundException
from pyiceberg.catalog import Catalog, load_catalog

from airflow_iceberg_maint.catalog import load_error_message
from airflow_iceberg_maint.errors import InvalidInputError

DEFAULT_CONN_ID = IcebergHook.default_conn_name
#: The connection extra naming the catalog, when not the connection id.
CATALOG_NAME_EXTRA = "catalog_name"


def connection_not_found_message(conn_id: str) -> str:
    """What to define for connection ``conn_id``, in the forms Airflow reads outside a task too."""
    variable = f"AIRFLOW_CONN_{conn_id.upper()}"
    forms = (
        'JSON such as {"conn_type": "iceberg", "host": CATALOG_URI, "extra": {"type": ..., "warehouse": ...}}, or a URI'
    )
    if os.environ.get(variable):
        # Airflow skips a variable it cannot parse and reports the connection as undefined.
        return f"connection {conn_id!r}: {variable} is set but is not a connection Airflow can read: expected {forms}"
    return f"connection {conn_id!r} is not defined: set {variable} to {forms}, or define it in a secrets backend"


def catalog_for(conn_id: str) -> Catalog:
    """The pyiceberg catalog the ``iceberg`` connection ``conn_id`` describes, built by ``IcebergHook``.

    A connection that is not defined, or whose settings pyiceberg refuses, is an ``InvalidInputError``
    saying what to set.
    """
    try:
        catalog = IcebergHook(iceberg_conn_id=conn_id).get_conn()
        # The hook passes the whole extra to pyiceberg, so the extra's catalog_name is among the properties.
        name = catalog.properties.get(CATALOG_NAME_EXTRA)
        if name is None or name == catalog.name:
            return catalog
        if not isinstance(name, str) or not name:
            raise InvalidInputError(
                f"connection {conn_id!r}: extra {CATALOG_NAME_EXTRA!r} must be a non-empty string, got {name!r}"
            )
        return load_catalog(name, **catalog.properties)
    except AirflowNotFoundException as exc:
        raise InvalidInputError(connection_not_found_message(conn_id)) from exc
    except InvalidInputError:
        raise
    except ValueError as exc:
        uri_hint = 'set the connection\'s host (Catalog URI) or "uri" in its extra'
        raise InvalidInputError(load_error_message(f"connection {conn_id!r}", exc, uri_hint)) from exc
