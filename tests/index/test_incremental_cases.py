"""Incremental refresh: schema evolution, fallbacks to a full build, lost commit races, the CLI."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.types import LongType

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.index.format.extract_files import read_tracking_file
from airflow_iceberg_maint.index.lifecycle.expire import expire_extracts
from airflow_iceberg_maint.index.metadata.builders import new_extract, new_index_metadata
from airflow_iceberg_maint.index.metadata.expressions import split_expression_list
from airflow_iceberg_maint.index.metadata.model import EncryptionKey, IndexMetadata
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.index.read.lookup import lookup
from airflow_iceberg_maint.index.write import incremental
from airflow_iceberg_maint.index.write.incremental import refresh_index
from airflow_iceberg_maint.index.write.refresh import refresh_full
from tests.index.oracle_table import OracleTable, multiset
from tests.index.row_deletes import commit_position_deletes
from tests.index.test_incremental import SMALL_REGIONS, create_index, extract_entries, refresh_and_compare


def _oracle(catalog: Catalog, ordering: str, seed: int, rows: int = 120) -> OracleTable:
    oracle = OracleTable.create(catalog, "t", seed=seed)
    oracle.append(rows)
    create_index(oracle, "ix", ordering)
    create_index(oracle, "full", ordering)
    return oracle


def _check_lookups(oracle: OracleTable, column: str) -> None:
    for value in oracle.probes(column, 8):
        found = lookup(oracle.table, "ix", [(value,)])
        assert found.mode == "index"
        assert multiset(found.rows.to_pylist()) == oracle.expected(column, value)


# Schema evolution


def test_promoted_ordering_key_reuses_region_files(sqlite_catalog: Catalog) -> None:
    oracle = _oracle(sqlite_catalog, "k_int", seed=1)
    first = refresh_and_compare(oracle.table, len(oracle.rows))
    with oracle.table.update_schema() as update:
        update.update_column("k_int", LongType())
    oracle.append(1)  # a snapshot of the promoted schema
    oracle.delete_positions(1)
    promoted = refresh_and_compare(oracle.table, len(oracle.rows))
    assert promoted.mode == "incremental" and promoted.region_files_reused > 0
    metadata, _, _ = IndexStore(oracle.table).load("ix")
    assert metadata.extract_schema(promoted.extract).find_field("k_int").field_type == LongType()
    assert metadata.extract_schema(promoted.extract).schema_id != first.extract.extract_schema_id
    # Reused region files still hold int columns; lookups read them through the promoted schema.
    _check_lookups(oracle, "k_int")


def test_dropped_indexed_column_fails_clearly(sqlite_catalog: Catalog) -> None:
    oracle = _oracle(sqlite_catalog, "k_str", seed=2)
    refresh_index(oracle.table, "ix")
    with oracle.table.update_schema() as update:
        update.delete_column("k_str")
    oracle.table = oracle.table.refresh()
    oracle.table.append(oracle.table.scan(limit=3).to_arrow())  # a snapshot without the column
    oracle.table = oracle.table.refresh()
    with pytest.raises(InvalidInputError, match=r"source field 4 is not in the schema .*dropped.*no new extract"):
        refresh_index(oracle.table, "ix")
    assert len(IndexStore(oracle.table).load("ix")[0].extracts) == 1


def test_base_with_a_newer_extract_schema_is_not_reused(sqlite_catalog: Catalog) -> None:
    oracle = _oracle(sqlite_catalog, "k_int", seed=3)
    old_snapshot = oracle.snapshot_id
    oracle.append(20)  # the index has no extract of an ancestor of old_snapshot
    with oracle.table.update_schema() as update:
        update.update_column("k_int", LongType())
    oracle.append(5)
    refresh_index(oracle.table, "ix")  # extract schema 1 (long)
    metadata, _, _ = IndexStore(oracle.table).load("ix")
    assert [s.schema_id for s in metadata.schemas] == [0, 1]
    # Snapshot of schema 0 (int): region files written with the later schema 1 must not be reused.
    result = refresh_and_compare(oracle.table, len(oracle.history[old_snapshot]), snapshot_id=old_snapshot)
    assert (result.mode, result.extract.extract_schema_id) == ("full", 0)


# Fallbacks to a full build


def test_expired_base_snapshot_means_a_full_build(sqlite_catalog: Catalog) -> None:
    oracle = _oracle(sqlite_catalog, "k_long", seed=4)
    first = refresh_index(oracle.table, "ix")
    oracle.append(10)
    oracle.table.maintenance.expire_snapshots().by_id(first.extract.source_table_snapshot_id).commit()
    oracle.table = oracle.table.refresh()
    assert refresh_and_compare(oracle.table, len(oracle.rows)).mode == "full"


def test_encrypted_base_means_a_full_build(sqlite_catalog: Catalog) -> None:
    oracle = _oracle(sqlite_catalog, "k_long", seed=5)
    refresh_index(oracle.table, "ix")

    def encrypt(base: IndexMetadata) -> IndexMetadata:
        (plain,) = base.extracts  # extracts are immutable: replaced by an encrypted copy
        encrypted = replace(plain, extract_id=base.new_extract_id(), key_id="k1")
        return replace(base, encryption_keys=(EncryptionKey("k1", "opaque"),), extracts=(encrypted,))

    IndexStore(oracle.table).commit("ix", encrypt)
    oracle.append(10)
    assert refresh_and_compare(oracle.table, len(oracle.rows)).mode == "full"


def test_index_without_row_location_is_rebuilt_fully(sqlite_catalog: Catalog) -> None:
    oracle = OracleTable.create(sqlite_catalog, "t", seed=6)
    oracle.append(50)
    metadata = new_index_metadata(oracle.table, "ix", split_expression_list("k_long"), [], False, SMALL_REGIONS)
    IndexStore(oracle.table).create(metadata, "ix")
    refresh_index(oracle.table, "ix")
    oracle.append(5)
    assert refresh_index(oracle.table, "ix").mode == "full"


def test_base_that_lacks_deleted_rows_means_a_full_build(
    sqlite_catalog: Catalog,
    caplog: pytest.LogCaptureFixture,
) -> None:
    oracle = _oracle(sqlite_catalog, "k_long", seed=7)
    first = refresh_index(oracle.table, "ix")
    oracle.append(30)

    def lie(base: IndexMetadata) -> IndexMetadata:
        # An extract claiming the new snapshot but holding the old one's entries.
        (old,) = base.extracts
        fake = new_extract(
            base, oracle.snapshot_id, old.extract_schema_id, old.tracking_file, old.tracking_file_size_in_bytes
        )
        return base.with_extract(replace(fake, timestamp_ms=old.timestamp_ms + 1))

    IndexStore(oracle.table).commit("ix", lie)
    newest = max(oracle.rows)
    where = oracle._locations()
    oracle.table = commit_position_deletes(oracle.table, {where[newest][0]: [where[newest][1]]})
    del oracle.rows[newest]
    oracle._remember()
    assert first.mode == "full"
    with caplog.at_level(logging.WARNING, logger=incremental.__name__):
        assert refresh_and_compare(oracle.table, len(oracle.rows)).mode == "full"
    assert "1 deleted rows should have had entries in the base extract, found 0" in caplog.text


# Commit races


def _competing(monkeypatch: pytest.MonkeyPatch, action: Any) -> list[int]:
    """Run ``action`` once, after the refresh planned its regions and before it commits."""
    real = incremental.write_tracking_file  # type: ignore[attr-defined]  # the name as the module imported it (patched there)
    calls: list[int] = []

    def write_then_compete(*args: Any, **kwargs: Any) -> int:
        size = real(*args, **kwargs)
        if not calls:
            calls.append(1)
            action()
        return size

    monkeypatch.setattr(incremental, "write_tracking_file", write_then_compete)
    return calls


def test_lost_race_commits_on_top_of_the_winner(sqlite_catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    oracle = _oracle(sqlite_catalog, "k_long", seed=8)
    refresh_index(oracle.table, "ix")
    _, _, version = IndexStore(oracle.table).load("ix")
    oracle.append(15)
    winner: list[int] = []
    _competing(monkeypatch, lambda: winner.append(refresh_full(oracle.table, "ix").extract.extract_id))
    result = refresh_and_compare(oracle.table, len(oracle.rows))
    assert result.mode == "incremental" and result.region_files_reused > 0
    metadata, _, newest = IndexStore(oracle.table).load("ix")
    assert {e.extract_id for e in metadata.extracts} >= {winner[0], result.extract.extract_id}
    assert newest == version + 2  # the winner's version, then ours on top of it


def test_race_with_an_expiry_redoes_from_the_new_extract(
    sqlite_catalog: Catalog,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    oracle = _oracle(sqlite_catalog, "k_long", seed=9)
    refresh_index(oracle.table, "ix")
    oracle.delete_positions(1)  # touches one region: the others are reused

    def refresh_and_expire() -> None:
        # Another worker indexes the snapshot fully and expires the extract our refresh started from.
        refresh_full(oracle.table, "ix")
        expire_extracts(oracle.table, "ix", retain_last=1, older_than=None)

    calls = _competing(monkeypatch, refresh_and_expire)
    with caplog.at_level(logging.INFO, logger=incremental.__name__):
        result = refresh_and_compare(oracle.table, len(oracle.rows))
    assert calls == [1]
    assert "reused region file(s) are no longer listed by any extract" in caplog.text  # the first commit refused
    # Redone from the other worker's extract of the same snapshot: nothing left to write.
    assert (result.mode, result.region_files_written) == ("incremental", 0)
    for region in read_tracking_file(oracle.table.io, result.extract.tracking_file):
        assert oracle.table.io.new_input(region.file_path).exists()
    _check_lookups(oracle, "k_long")


def _refresh_in_process(uri: str, warehouse: str) -> tuple[str, int]:
    result = refresh_index(SqlCatalog("default", uri=uri, warehouse=warehouse).load_table("db.t"), "ix")
    return result.mode, result.extract.extract_id


def test_concurrent_incremental_refreshes_all_commit(sqlite_catalog: Catalog) -> None:
    oracle = _oracle(sqlite_catalog, "k_long", seed=11)
    refresh_index(oracle.table, "ix")
    oracle.delete_positions(2)
    uri, warehouse = sqlite_catalog.properties["uri"], sqlite_catalog.properties["warehouse"]
    with ProcessPoolExecutor(max_workers=3, mp_context=get_context("spawn")) as pool:
        results = list(pool.map(_refresh_in_process, [uri] * 3, [warehouse] * 3))
    assert [mode for mode, _ in results] == ["incremental"] * 3
    metadata, _, version = IndexStore(oracle.table).load("ix")
    assert version == 5 and len(metadata.extracts) == 4  # nothing lost, history linear
    reference = refresh_index(oracle.table, "full", full=True)
    for _, extract_id in results:
        extract = next(e for e in metadata.extracts if e.extract_id == extract_id)
        assert extract_entries(oracle.table, "ix", extract) == extract_entries(oracle.table, "full", reference.extract)


# The command line


def test_cli_refresh_is_incremental_unless_full(tmp_path: Path) -> None:
    catalog = SqlCatalog("default", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("db")
    oracle = _oracle(catalog, "k_long", seed=10)
    env = {
        "PYICEBERG_CATALOG__DEFAULT__TYPE": "sql",
        "PYICEBERG_CATALOG__DEFAULT__URI": f"sqlite:///{tmp_path}/catalog.db",
        "PYICEBERG_CATALOG__DEFAULT__WAREHOUSE": f"file://{tmp_path}/wh",
    }

    def refresh(*extra: str) -> dict[str, Any]:
        done = subprocess.run(
            [str(Path(sys.executable).parent / "iceberg-maint"), "index", "refresh", "db.t", "ix", *extra, "--json"],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return dict(json.loads(done.stdout))

    assert refresh()["mode"] == "full"  # no extract yet
    oracle.append(5)
    second = refresh()
    assert (second["mode"], second["entries"]) == ("incremental", len(oracle.rows))
    assert second["region_files_reused"] + second["region_files_written"] >= 1
    assert refresh("--full")["mode"] == "full"
