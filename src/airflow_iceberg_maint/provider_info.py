"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point.

Catalog access reuses the ``iceberg`` connection type and ``IcebergHook`` of
apache-airflow-providers-apache-iceberg, so no connection type is declared here.
"""

from __future__ import annotations

from typing import Any

from airflow_iceberg_maint import __version__

_INTEGRATION = "Apache Iceberg maintenance"


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-iceberg-maint",
        "name": "Apache Iceberg maintenance",
        "description": "Keeps Apache Iceberg tables healthy natively in Python: policy-driven orphan-file removal, "
        "and secondary indexes (builds, incremental refreshes, lookups, lag sensors, expiry).",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": _INTEGRATION,
                "external-doc-url": "https://iceberg.apache.org/docs/latest/maintenance/",
                "tags": ["software"],
            }
        ],
        "operators": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": [
                    "airflow_iceberg_maint.airflow.operators.orphans",
                    "airflow_iceberg_maint.airflow.operators.orphan_planning",
                    "airflow_iceberg_maint.airflow.operators.index",
                    "airflow_iceberg_maint.airflow.operators.index_shards",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": [
                    "airflow_iceberg_maint.airflow.sensors.due",
                    "airflow_iceberg_maint.airflow.sensors.index_lag",
                ],
            }
        ],
        "triggers": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": [
                    "airflow_iceberg_maint.airflow.triggers.due",
                    "airflow_iceberg_maint.airflow.triggers.index_lag",
                    "airflow_iceberg_maint.airflow.triggers.index_events",
                ],
            }
        ],
    }
