"""The provider's ``[iceberg_maint]`` options of Airflow's configuration, read by tasks and the status page alike.

Set them in ``airflow.cfg`` or as ``AIRFLOW__ICEBERG_MAINT__<OPTION>`` on every component (workers
and the api-server), so reports are written where the UI reads them.
"""

from __future__ import annotations

import os
from pathlib import Path

from airflow.configuration import conf

SECTION = "iceberg_maint"
DEFAULT_MANUAL_DAG_ID = "iceberg_orphan_cleanup_manual"


def _option(key: str) -> str | None:
    value = conf.get(SECTION, key, fallback=None)
    return value.strip() or None if value else None


def report_location() -> str:
    """Base URI of reports: ``report_location``, else ``$AIRFLOW_HOME/iceberg_maint/reports``."""
    configured = _option("report_location")
    if configured:
        return configured
    home = Path(os.environ.get("AIRFLOW_HOME") or Path.home() / "airflow")
    return (home / "iceberg_maint" / "reports").absolute().as_uri()


def report_conn_id() -> str:
    """The ``iceberg`` connection whose storage properties (``s3.endpoint``, keys...) read reports in the UI."""
    return _option("report_conn_id") or "iceberg_default"


def _dags_file(key: str, name: str) -> Path:
    configured = _option(key)
    return Path(configured) if configured else Path(conf.get("core", "dags_folder")) / name


def policy_file() -> Path:
    return _dags_file("policy_file", "iceberg_maint_policies.yaml")


def index_definitions_file() -> Path:
    return _dags_file("index_definitions_file", "iceberg_indexes.yaml")


def manual_dag_id() -> str:
    return _option("manual_dag_id") or DEFAULT_MANUAL_DAG_ID


def state_url() -> str | None:
    """``state_url``: a SQLAlchemy URL shared by the tasks and the status page; None: Airflow Variables."""
    return _option("state_url")
