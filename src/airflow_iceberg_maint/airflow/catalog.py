"""Catalog access through an ``iceberg`` connection outside an operator: ``iceberg-maint --conn-id``
and DAG code. Operators, sensors and triggers use ``IcebergMaintenanceHook`` directly; this is the
same hook's catalog.
"""

from __future__ import annotations

from pyiceberg.catalog import Catalog

from airflow_iceberg_maint.airflow.hooks.maintenance import DEFAULT_CONN_ID as DEFAULT_CONN_ID
from airflow_iceberg_maint.airflow.hooks.maintenance import IcebergMaintenanceHook


def catalog_for(conn_id: str) -> Catalog:
    """The pyiceberg catalog the ``iceberg`` connection ``conn_id`` describes (``IcebergMaintenanceHook.catalog``)."""
    return IcebergMaintenanceHook(conn_id).catalog
