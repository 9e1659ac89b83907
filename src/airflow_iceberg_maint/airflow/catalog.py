"""Catalog access from tasks, through the ``iceberg`` connection and its ``IcebergHook``."""

from __future__ import annotations

from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook
from pyiceberg.catalog import Catalog

DEFAULT_CONN_ID = IcebergHook.default_conn_name


def catalog_for(conn_id: str) -> Catalog:
    """The pyiceberg catalog an ``iceberg`` connection describes."""
    return IcebergHook(iceberg_conn_id=conn_id).get_conn()
