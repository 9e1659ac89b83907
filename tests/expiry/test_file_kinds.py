"""What an expiry deletes, described: each file's kind and each expired snapshot's commit, and its phases.

The oracle is pyiceberg's ``inspect`` tables (every manifest and every file of every snapshot, with
their content), the snapshots' manifest lists and the metadata's statistics files, read before the
expiry; the history has data files, position and equality deletes, a deletion vector and statistics.
"""

from __future__ import annotations

import os
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from airflow_iceberg_maint.expiry.file_kinds import KINDS
from airflow_iceberg_maint.expiry.run import expire_snapshots
from airflow_iceberg_maint.expiry.settings import ExpireOptions
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES, INDEX_SNAPSHOTS
from tests.expiry.history import build_history
from tests.orphans.scenario import SCHEMA, rows


def _oracle_kinds(table: Table) -> dict[str, str]:
    kinds = {s.manifest_list: "manifest_list" for s in table.metadata.snapshots}
    kinds |= {p: "manifest" for p in table.inspect.all_manifests()["path"].to_pylist()}
    files = table.inspect.all_files().to_pylist()
    for f in files:
        content = {0: "data", 2: "equality_delete"}.get(f["content"], "position_delete")
        if f["content"] == 1 and f["file_format"] == "PUFFIN":
            content = "deletion_vector"
        kinds[f["file_path"]] = content
    stats = [*table.metadata.statistics, *table.metadata.partition_statistics]
    return kinds | {s.statistics_path: "statistics" for s in stats}


def _expire(table: Table, dry_run: bool) -> dict:
    options = ExpireOptions(older_than=datetime.now(UTC), retain_last=1, dry_run=dry_run)
    return expire_snapshots(table, options, sources=[INDEX_FILES], pins=[INDEX_SNAPSHOTS]).to_json()


def test_the_report_says_what_each_deleted_file_is_and_when_each_snapshot_was_committed(
    sqlite_catalog: SqlCatalog,
) -> None:
    table = build_history(sqlite_catalog).table
    oracle = _oracle_kinds(table)
    snapshots = {s.snapshot_id: s for s in table.metadata.snapshots}

    dry = _expire(table, dry_run=True)
    expected = Counter(oracle[p] for p in dry["deleted_files"])
    assert {k: v["count"] for k, v in dry["deleted_by_kind"].items() if v["count"]} == dict(expected)
    assert set(expected) >= {"data", "manifest", "manifest_list", "statistics"}
    assert sum(v["bytes"] for v in dry["deleted_by_kind"].values()) == dry["deleted_bytes"]
    assert list(dry["deleted_by_kind"]) == list(KINDS)
    assert dry["expired_snapshots"] == [
        {
            "snapshot_id": i,
            "committed_at": datetime.fromtimestamp(snapshots[i].timestamp_ms / 1000, UTC).isoformat(),
            "operation": snapshots[i].summary.operation.value,
        }
        for i in dry["expired_snapshot_ids"]
    ]
    # Phases are each one's own time, named for what ran: a dry run commits and deletes nothing.
    assert list(dry["phase_seconds"]) == ["plan", "plan_files", "recheck"]

    real = _expire(sqlite_catalog.load_table("db.events"), dry_run=False)
    assert real["deleted_files"] == dry["deleted_files"]
    assert real["deleted_by_kind"] == dry["deleted_by_kind"]
    assert not any(os.path.exists(p.removeprefix("file://")) for p in real["deleted_files"])
    assert list(real["phase_seconds"]) == ["plan_and_commit", "plan_files", "recheck", "delete"]


def test_an_expiry_that_drops_no_manifest_names_only_manifest_lists_cold_or_with_a_warm_cache(
    sqlite_catalog: SqlCatalog, tmp_path: Path
) -> None:
    sqlite_catalog.create_namespace_if_not_exists("db")
    table = sqlite_catalog.create_table("db.appends", schema=SCHEMA)
    for i in range(4):
        table.append(rows(i * 10, 10))
    lists = {s.manifest_list for s in table.metadata.snapshots[:-1]}
    cache = str(tmp_path / "digests")
    expire_snapshots(  # fills the cache, as the day before's run would
        table, ExpireOptions(retain_last=4, dry_run=True, cache=cache), sources=[INDEX_FILES], pins=[INDEX_SNAPSHOTS]
    )

    for with_cache in (None, cache, cache):
        options = ExpireOptions(older_than=datetime.now(UTC), retain_last=1, dry_run=True, cache=with_cache)
        report = expire_snapshots(table, options, sources=[INDEX_FILES], pins=[INDEX_SNAPSHOTS]).to_json()
        assert set(report["deleted_files"]) == lists
        assert {k: v["count"] for k, v in report["deleted_by_kind"].items() if v["count"]} == {"manifest_list": 3}


def test_the_data_files_of_a_format_version_1_table_are_data(sqlite_catalog: SqlCatalog) -> None:
    sqlite_catalog.create_namespace_if_not_exists("db")
    table = sqlite_catalog.create_table("db.v1", schema=SCHEMA, properties={"format-version": "1"})
    table.append(rows(0, 10))
    table.overwrite(rows(100, 5))  # the appended file is deleted: its manifest is dropped at expiry
    oracle = _oracle_kinds(table)

    report = _expire(table, dry_run=True)
    counts = {k: v["count"] for k, v in report["deleted_by_kind"].items() if v["count"]}
    assert counts == dict(Counter(oracle[p] for p in report["deleted_files"]))
    assert counts["data"] >= 1 and "other" not in counts
