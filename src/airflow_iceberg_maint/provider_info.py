"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point.

Catalog access reuses the ``iceberg`` connection type of apache-airflow-providers-apache-iceberg:
``IcebergMaintenanceHook`` extends its ``IcebergHook``, so no connection type is declared here. The
``[iceberg_maint]`` options (``airflow.config`` reads them) are declared under ``config``, as
Airflow's own providers declare theirs, so ``airflow config list`` shows them with their defaults.
The module lists are kept by hand; tests/test_provider_info.py fails when a module of
``airflow/operators``, ``sensors``, ``triggers`` or ``hooks`` that defines one is missing, or one is extra.
"""

from __future__ import annotations

from typing import Any

from airflow_iceberg_maint import __version__

_INTEGRATION = "Apache Iceberg maintenance"
#: Set on every component (workers, triggerer, api-server) alike.
_EVERYWHERE = " Set it on the workers and the api-server alike."

CONFIG_SECTION = "iceberg_maint"
CONFIG_OPTIONS: dict[str, dict[str, Any]] = {
    "report_location": {
        "description": "Base URI of the orphan-removal reports (local path, file://, s3://, gs://, abfss://...), "
        "written by the removal tasks and read by the status page. Unset: $AIRFLOW_HOME/iceberg_maint/reports."
        + _EVERYWHERE,
        "version_added": None,
        "type": "string",
        "example": "s3://ops-bucket/iceberg-maint/reports",
        "default": None,
    },
    "report_conn_id": {
        "description": "The iceberg connection whose storage properties (s3.endpoint, keys...) the status page "
        "uses to read reports.",
        "version_added": None,
        "type": "string",
        "example": "iceberg_default",
        "default": "iceberg_default",
    },
    "catalog_conn_ids": {
        "description": "The iceberg connections (comma-separated) whose catalogs the status page lists: the fleet "
        "page shows every table, and the tables a policy's glob covers show before their first run. Listing "
        "reads the catalog's namespaces and table names only, at most once a minute.",
        "version_added": None,
        "type": "string",
        "example": "iceberg_default,iceberg_rest",
        "default": "iceberg_default",
    },
    "policy_file": {
        "description": "The orphan-removal policy file the status page evaluates. Unset: "
        "iceberg_maint_policies.yaml in [core] dags_folder.",
        "version_added": None,
        "type": "string",
        "example": "/opt/airflow/dags/iceberg_maint_policies.yaml",
        "default": None,
    },
    "index_definitions_file": {
        "description": "The index definitions file the status page lists indexes from. Unset: iceberg_indexes.yaml "
        "in [core] dags_folder.",
        "version_added": None,
        "type": "string",
        "example": "/opt/airflow/dags/iceberg_indexes.yaml",
        "default": None,
    },
    "manual_dag_id": {
        "description": "The DAG the status page's trigger form runs.",
        "version_added": None,
        "type": "string",
        "example": "iceberg_orphan_cleanup_manual",
        "default": "iceberg_orphan_cleanup_manual",
    },
    "digest_cache_location": {
        "description": "A local folder where the orphan-removal, expiry and health tasks keep digests of the manifest "
        "lists and manifests they read (what each names, checked against the file's identity before use), so "
        "that the next run decodes only what is new. Unset: no cache. A worker's own disk serves it: a digest "
        "another worker lacks is a file read again. Set it on the workers.",
        "version_added": None,
        "type": "string",
        "example": "/var/cache/iceberg-maint/digests",
        "default": None,
    },
    "state_url": {
        "description": "SQLAlchemy URL of a database holding the cleanup state and the status records, shared "
        "with the iceberg-maint command line. Unset: Airflow Variables." + _EVERYWHERE,
        "version_added": None,
        "type": "string",
        "example": "postgresql+psycopg2://user:pw@db/iceberg_maint",
        "default": None,
    },
}


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-iceberg-maint",
        "name": "Apache Iceberg maintenance",
        "description": "Keeps Apache Iceberg tables healthy natively in Python: policy-driven orphan-file removal "
        "and snapshot expiry (each with an optional human review), compaction (data files and manifests), and "
        "secondary indexes (builds, incremental refreshes, lookups, lag sensors, extract expiry).",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": _INTEGRATION,
                "external-doc-url": "https://iceberg.apache.org/docs/latest/maintenance/",
                "tags": ["software"],
            }
        ],
        "hooks": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": ["airflow_iceberg_maint.airflow.hooks.maintenance"],
            }
        ],
        "config": {
            CONFIG_SECTION: {
                "description": "Options of the Apache Iceberg maintenance provider: where reports and state are kept, "
                "and what its status page reads.",
                "options": CONFIG_OPTIONS,
            }
        },
        "operators": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": [
                    "airflow_iceberg_maint.airflow.operators.orphans",
                    "airflow_iceberg_maint.airflow.operators.orphan_planning",
                    "airflow_iceberg_maint.airflow.operators.orphan_shards",
                    "airflow_iceberg_maint.airflow.operators.expiry",
                    "airflow_iceberg_maint.airflow.operators.compaction",
                    "airflow_iceberg_maint.airflow.operators.compaction_planning",
                    "airflow_iceberg_maint.airflow.operators.health",
                    "airflow_iceberg_maint.airflow.operators.maintenance_planning",
                    "airflow_iceberg_maint.airflow.operators.reviewed",
                    "airflow_iceberg_maint.airflow.operators.reviewed_expiry",
                    "airflow_iceberg_maint.airflow.operators.index",
                    "airflow_iceberg_maint.airflow.operators.index_definitions",
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
                    "airflow_iceberg_maint.airflow.triggers.table_lease",
                ],
            }
        ],
    }
