"""The Airflow asset of each table of the index definitions (``policy.index_definitions``).

Writers name a table's asset in their outlets; the index maintenance DAG that defines the asset (with
its watchers) is scheduled on it.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from airflow.sdk import Asset, AssetWatcher

from airflow_iceberg_maint.catalog import parse_identifier


def table_asset_uri(conn_id: str, table: str) -> str:
    """``iceberg://<connection>/<namespace...>/<table>``: one asset per table of a catalog."""
    return f"iceberg://{conn_id}/{'/'.join(parse_identifier(table))}"


def table_asset_name(conn_id: str, table: str) -> str:
    """``<connection>.<namespace...>.<table>``, the name writers reference the table asset by."""
    return f"{conn_id}.{'.'.join(parse_identifier(table))}"


def table_asset(conn_id: str, table: str, watchers: Iterable[AssetWatcher] = ()) -> Asset:
    """The asset of a table, defined (with its watchers) by the DAG that schedules on it.

    Writers declare ``Asset.ref(name=table_asset_name(...))`` as their outlet rather than a second
    ``Asset``: the DAG processor keeps the watchers of the definition it parsed last, so a copy
    without watchers would drop them, and the triggerer would stop and restart them at every parse.
    """
    return Asset(
        name=table_asset_name(conn_id, table),
        uri=table_asset_uri(conn_id, table),
        group="iceberg",
        watchers=list(watchers),
    )


def table_of_asset_uri(uri: str) -> str | None:
    """The table an ``iceberg://`` asset URI names (None for any other URI)."""
    parts = urlsplit(uri)
    if parts.scheme != "iceberg":
        return None
    path = [p for p in parts.path.split("/") if p]
    return ".".join(path) if len(path) >= 2 else None
