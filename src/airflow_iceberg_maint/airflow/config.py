"""The provider's ``[iceberg_maint]`` options of Airflow's configuration, read by tasks and the status page alike.

Set them in ``airflow.cfg`` or as ``AIRFLOW__ICEBERG_MAINT__<OPTION>`` on every component (workers
and the api-server), so reports are written where the UI reads them. Each is declared, with its
description and default, in the provider info (``provider_info.CONFIG_OPTIONS``).
"""

from __future__ import annotations

import os
from pathlib import Path

from airflow.configuration import conf

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.provider_info import CONFIG_OPTIONS, CONFIG_SECTION
from airflow_iceberg_maint.reachability.digests import check_location, resolve

DEFAULT_MANUAL_DAG_ID = str(CONFIG_OPTIONS["manual_dag_id"]["default"])


def _option(key: str) -> str | None:
    if key not in CONFIG_OPTIONS:
        raise KeyError(f"[{CONFIG_SECTION}] {key} is not declared in the provider info")
    value = conf.get(CONFIG_SECTION, key, fallback=None)
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
    return _option("report_conn_id") or str(CONFIG_OPTIONS["report_conn_id"]["default"])


def catalog_conn_ids() -> list[str]:
    """``catalog_conn_ids``: the iceberg connections whose catalogs the status page lists."""
    configured = _option("catalog_conn_ids") or str(CONFIG_OPTIONS["catalog_conn_ids"]["default"])
    return [c.strip() for c in configured.split(",") if c.strip()]


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


def digest_cache_location() -> str | None:
    """``digest_cache_location``: the local folder of the digest cache (S22); None: no cache.

    Refused in one line (``InvalidInputError``) when it names no local folder.
    """
    configured = _option("digest_cache_location")
    if configured is None:
        return None
    if error := check_location(configured):
        raise InvalidInputError(f"[{CONFIG_SECTION}] digest_cache_location: {error}")
    return resolve(configured)
