"""Lag of an index behind its table: snapshots, seconds, files added and removed, staleness."""

from __future__ import annotations

from pyiceberg.catalog import Catalog

from airflow_iceberg_maint.index.lifecycle.lag import FileCounts, index_lag
from airflow_iceberg_maint.index.metadata.builders import new_index_metadata
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.index.write.refresh import refresh_full
from tests.index.oracle_table import OracleTable


def _lag(oracle: OracleTable) -> dict:
    metadata, _, _ = IndexStore(oracle.table).load("ix")
    return index_lag(oracle.table, "ix", metadata).to_json()


def _indexed(sqlite_catalog: Catalog) -> OracleTable:
    oracle = OracleTable.create(sqlite_catalog, "t", seed=1)
    IndexStore(oracle.table).create(new_index_metadata(oracle.table, "ix", ["k_long"], [], True, {}), "ix")
    return oracle


def test_lag_of_an_index_without_snapshots_or_extracts(sqlite_catalog: Catalog) -> None:
    oracle = _indexed(sqlite_catalog)
    assert _lag(oracle) == {
        "index": "ix",
        "table_snapshot_id": None,
        "extract_snapshot_id": None,
        "snapshots_behind": 0,
        "lag_seconds": None,
        "added_files": {"data": 0, "delete": 0},
        "removed_files": {"data": 0, "delete": 0},
        "stale": False,
    }
    oracle.append(10)
    oracle.append(10)
    lag = _lag(oracle)
    assert (lag["table_snapshot_id"], lag["extract_snapshot_id"], lag["snapshots_behind"], lag["stale"]) == (
        oracle.snapshot_id,
        None,
        2,
        True,
    )
    assert (lag["added_files"], lag["removed_files"], lag["lag_seconds"]) == (
        {"data": 2, "delete": 0},
        {"data": 0, "delete": 0},
        None,
    )


def test_lag_counts_every_change_since_the_extract(sqlite_catalog: Catalog) -> None:
    oracle = _indexed(sqlite_catalog)
    for _ in range(3):
        oracle.append(30)
    refresh_full(oracle.table, "ix")
    extract_snapshot = oracle.table.current_snapshot()
    assert _lag(oracle) == {
        "index": "ix",
        "table_snapshot_id": extract_snapshot.snapshot_id,
        "extract_snapshot_id": extract_snapshot.snapshot_id,
        "snapshots_behind": 0,
        "lag_seconds": 0.0,
        "added_files": {"data": 0, "delete": 0},
        "removed_files": {"data": 0, "delete": 0},
        "stale": False,
    }

    oracle.append(10)  # +1 data file
    oracle.delete_positions(5)  # +1 delete file
    oracle.delete_copy_on_write(3)  # one data file rewritten: -1 +1 data file
    oracle.delete_equality("k_int", [1])  # +1 delete file (pyiceberg cannot rewrite files after this)
    lag = _lag(oracle)
    current = oracle.table.current_snapshot()
    assert (lag["table_snapshot_id"], lag["extract_snapshot_id"], lag["snapshots_behind"], lag["stale"]) == (
        current.snapshot_id,
        extract_snapshot.snapshot_id,
        4,
        True,
    )
    assert lag["lag_seconds"] == (current.timestamp_ms - extract_snapshot.timestamp_ms) / 1000
    assert lag["added_files"] == FileCounts(2, 2).to_json()
    assert lag["removed_files"] == FileCounts(1, 0).to_json()

    refresh_full(oracle.table, "ix")
    assert _lag(oracle)["stale"] is False and _lag(oracle)["snapshots_behind"] == 0


def test_lag_uses_the_extract_nearest_the_current_snapshot(sqlite_catalog: Catalog) -> None:
    oracle = _indexed(sqlite_catalog)
    oracle.append(10)
    first = oracle.snapshot_id
    oracle.append(10)
    refresh_full(oracle.table, "ix")
    refresh_full(oracle.table, "ix", snapshot_id=first)  # written last, but for an older snapshot
    assert _lag(oracle)["extract_snapshot_id"] == oracle.snapshot_id
    assert _lag(oracle)["stale"] is False
