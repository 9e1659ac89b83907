"""Snapshot expiry on real tables: the exact expired snapshots, the exact deleted files against an
independent oracle (pyiceberg's ``inspect`` tables before and after), and every kept snapshot
reading the same rows as before."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.manifest import DataFileContent
from pyiceberg.table import Table

from airflow_iceberg_maint.errors import CommitOutcomeUnknownError, GcDisabledError, InvalidInputError
from airflow_iceberg_maint.expiry.run import ExpiryReport, expire_snapshots
from airflow_iceberg_maint.expiry.settings import ExpireOptions
from airflow_iceberg_maint.fs.locations import Uri
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES, INDEX_SNAPSHOTS
from tests.expiry.history import History, build_history, exists, reachable, snapshot_rows
from tests.orphans.scenario import rows


@pytest.fixture(params=["sqlite", pytest.param("s3", marks=pytest.mark.s3)])
def catalog(request: pytest.FixtureRequest) -> Catalog:
    return request.getfixturevalue(f"{request.param}_catalog")


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("s3", marks=pytest.mark.s3),
        pytest.param("gcs", marks=pytest.mark.gcs),
        pytest.param("azure", marks=pytest.mark.azure),
    ]
)
def any_store_catalog(request: pytest.FixtureRequest) -> Catalog:
    """Every store the deletes go through ``fs/`` on: local, S3, GCS (emulator) and Azure (Azurite)."""
    return request.getfixturevalue(f"{request.param}_catalog")


def expire(table: Table, hook: Callable[[ExpiryReport, str], None] | None = None, **options: Any) -> ExpiryReport:
    now = options.pop("now", datetime.now(UTC))
    return expire_snapshots(
        table, ExpireOptions(**options), sources=[INDEX_FILES], pins=[INDEX_SNAPSHOTS], now=now, on_stage=hook
    )


def sizes(table: Table, paths: set[str]) -> dict[str, int]:
    return {p: len(table.io.new_input(p)) for p in paths}


def check_outcome(history: History, report: ExpiryReport, kept: set[int], before: dict[str, Any]) -> None:
    """Exact ids, exact files against the oracle, nothing kept missing, every kept snapshot's rows unchanged."""
    table = history.table.catalog.load_table(history.table.name())
    every = {s for s in before["ids"]}
    assert report.expired_snapshot_ids == sorted(every - kept)
    assert {s.snapshot_id for s in table.metadata.snapshots} == kept
    expected = before["reachable"] - reachable(table)
    assert set(report.deleted_files) == expected and report.deleted_file_count == len(expected)
    assert report.deleted_bytes == sum(before["sizes"][p] for p in expected)
    assert report.failed == []
    assert not [p for p in expected if exists(table, p)]
    assert not [p for p in reachable(table) if not exists(table, p)]
    after = snapshot_rows(table)
    assert after == {k: v for k, v in before["rows"].items() if k in after}
    assert {k for k in after if k.startswith("snapshot:")} == {f"snapshot:{s}" for s in kept}


def state(table: Table) -> dict[str, Any]:
    found = reachable(table)
    return {
        "ids": {s.snapshot_id for s in table.metadata.snapshots},
        "reachable": found,
        "sizes": sizes(table, found),
        "rows": snapshot_rows(table),
    }


def test_expires_every_unneeded_snapshot_and_deletes_exactly_what_only_they_reached(any_store_catalog: Catalog) -> None:
    history = build_history(any_store_catalog)
    ids, table = history.ids, history.table
    before = state(table)

    report = expire(table, older_than=datetime.now(UTC), retain_last=1)

    # main keeps its head, the audit branch its head, the release tag its snapshot.
    check_outcome(history, report, {ids["a4"], ids["b1"], ids["pos"]}, before)
    assert report.removed_refs == [] and report.committed and report.kept_by_recheck == 0
    assert history.stats["stats-a2"] in report.deleted_files
    assert history.stats["partition-stats-a2"] in report.deleted_files
    assert exists(table, history.stats["stats-a4"])
    kinds = {c for c in table.inspect.all_files()["content"].to_pylist()}
    assert kinds == {DataFileContent.DATA, DataFileContent.POSITION_DELETES, DataFileContent.EQUALITY_DELETES}


def test_manifests_read_by_worker_processes_give_the_same_outcome(sqlite_catalog: Catalog) -> None:
    """Large local tables are read by worker processes: the kept walk, the expired lists, the candidate manifests."""
    history = build_history(sqlite_catalog)
    ids, table = history.ids, history.table
    before = state(table)

    report = expire(table, older_than=datetime.now(UTC), retain_last=1, reader_processes=2)

    check_outcome(history, report, {ids["a4"], ids["b1"], ids["pos"]}, before)
    assert any("/data/" in p for p in report.deleted_files)  # data files, found in manifests the workers read


def _per_ref_history(catalog: Catalog) -> tuple[History, set[int], int]:
    """Refs with their own retention; returns the history, the snapshots the spec keeps, and 'now'."""
    history = build_history(catalog)
    ids, table = history.ids, history.table
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    cow_ms = table.snapshot_by_id(ids["cow"]).timestamp_ms
    (
        table.manage_snapshots()
        .create_branch(ids["a3"], "keep3", min_snapshots_to_keep=3)
        .create_branch(ids["dv"], "young", max_snapshot_age_ms=now_ms - cow_ms)
        .create_tag(ids["a1"], "old", max_ref_age_ms=1)
        .commit()
    )
    kept = {
        ids["a4"], ids["a3"],  # main, retain-last 2
        ids["dv"], ids["eq"],  # keep3: a3 and its two parents
        ids["pos"], ids["cow"],  # young: every ancestor not older than cow (and the release tag)
        ids["b1"],  # audit: b1 and a3
    }  # fmt: skip
    return history, kept, now_ms


def test_per_ref_retention_and_ref_age(catalog: Catalog) -> None:
    history, kept, now_ms = _per_ref_history(catalog)
    before = state(history.table)
    now = datetime.fromtimestamp(now_ms / 1000, UTC)

    report = expire(history.table, older_than=now, retain_last=2, now=now)

    check_outcome(history, report, kept, before)
    assert report.removed_refs == ["old"]
    refs = set(history.table.catalog.load_table("db.events").metadata.refs)
    assert refs == {"main", "release", "audit", "keep3", "young"}


def test_table_properties_give_the_defaults(sqlite_catalog: Catalog) -> None:
    history, kept, now_ms = _per_ref_history(sqlite_catalog)
    table = history.table
    age = now_ms - min(s.timestamp_ms for s in table.metadata.snapshots) + 10_000  # nothing is old enough
    with table.transaction() as tx:
        tx.set_properties({"history.expire.max-snapshot-age-ms": str(age), "history.expire.min-snapshots-to-keep": "2"})
    now = datetime.fromtimestamp(now_ms / 1000, UTC)
    dry = expire(table, dry_run=True, now=now)
    assert dry.expired_snapshot_ids == [] and dry.removed_refs == ["old"] and dry.retain_last == 2
    assert dry.older_than == now - timedelta(milliseconds=age)

    with table.transaction() as tx:
        tx.set_properties({"history.expire.max-snapshot-age-ms": "0"})
    before = state(table)
    report = expire(table, now=now)
    check_outcome(history, report, kept, before)


@pytest.mark.parametrize("scenario", ["plain", "per_ref"])
def test_a_dry_run_reports_exactly_what_the_real_run_does(sqlite_catalog: Catalog, scenario: str) -> None:
    if scenario == "plain":
        history, retain = build_history(sqlite_catalog), 1
        now = datetime.now(UTC)
    else:
        history, _, now_ms = _per_ref_history(sqlite_catalog)
        now, retain = datetime.fromtimestamp(now_ms / 1000, UTC), 2
    table = history.table
    location, files = table.metadata_location, reachable(table)

    dry = expire(table, older_than=now, retain_last=retain, dry_run=True, now=now)
    assert table.catalog.load_table("db.events").metadata_location == location
    assert all(exists(table, p) for p in files) and not dry.committed

    real = expire(table, older_than=now, retain_last=retain, now=now)
    assert real.deleted_files and real.expired_snapshot_ids
    for key in ("expired_snapshot_ids", "removed_refs", "deleted_files", "deleted_file_count", "deleted_bytes"):
        assert dry.to_json()[key] == real.to_json()[key], key


def test_an_append_before_the_commit_makes_the_run_plan_again(sqlite_catalog: Catalog) -> None:
    history = build_history(sqlite_catalog)
    table, ids = history.table, history.ids
    writer = sqlite_catalog.load_table("db.events")
    appended: list[int] = []

    def append_once(report: ExpiryReport, stage: str) -> None:
        if stage == "retention" and not appended:
            writer.append(rows(900, 3))
            appended.append(writer.metadata.current_snapshot_id)

    cutoff = datetime.now(UTC)
    report = expire(table, append_once, older_than=cutoff, retain_last=1)

    assert report.commit_attempts == 2
    # Planned again on the writer's commit: its snapshot is main's head, and a4 (older than the cutoff) goes.
    table = sqlite_catalog.load_table("db.events")
    assert {s.snapshot_id for s in table.metadata.snapshots} == {appended[0], ids["b1"], ids["pos"]}
    assert ids["a4"] in report.expired_snapshot_ids
    assert {900, 901, 902} <= set(snapshot_rows(table)["ref:main"])


def test_a_commit_after_the_plan_keeps_the_file_it_references(sqlite_catalog: Catalog) -> None:
    """A writer re-adds a data file the run planned to delete: the re-check keeps it."""
    history = build_history(sqlite_catalog)
    table = history.table
    entries = {
        e.data_file.file_path: e.data_file
        for s in table.metadata.snapshots
        for m in s.manifests(table.io)
        for e in m.fetch_manifest_entry(table.io, discard_deleted=False)
        if e.data_file.content == DataFileContent.DATA
    }
    readded: list[str] = []

    def readd(report: ExpiryReport, stage: str) -> None:
        if stage == "planned":
            path = next(p for p in report.deleted_files if p in entries)
            writer = sqlite_catalog.load_table("db.events")
            with writer.transaction() as tx, tx.update_snapshot().fast_append() as append:
                append.append_data_file(entries[path])
            readded.append(path)

    report = expire(table, readd, older_than=datetime.now(UTC), retain_last=1)

    assert report.kept_by_recheck == 1 and readded[0] not in report.deleted_files
    assert exists(table, readded[0])
    table = sqlite_catalog.load_table("db.events")
    assert readded[0] in table.inspect.files()["file_path"].to_pylist()
    assert not [p for p in reachable(table) if not exists(table, p)]
    snapshot_rows(table)  # every snapshot, the re-adding one included, still reads


def test_a_commit_that_moves_no_ref_before_ours_makes_the_run_plan_again(sqlite_catalog: Catalog) -> None:
    """S18: a SQL catalog refuses our commit when any commit landed since the plan (here a property), and
    the run plans again on it (the catalog would otherwise apply our updates on metadata we never read)."""
    history = build_history(sqlite_catalog)
    table = history.table
    done: list[bool] = []

    def set_property(report: ExpiryReport, stage: str) -> None:
        if stage == "retention" and not done:
            with sqlite_catalog.load_table("db.events").transaction() as tx:
                tx.set_properties({"owner": "someone"})
            done.append(True)

    report = expire(table, set_property, older_than=datetime.now(UTC), retain_last=1)

    assert report.committed and report.commit_attempts == 2 and report.kept_all_files is None
    table = sqlite_catalog.load_table("db.events")
    assert table.properties["owner"] == "someone" and report.deleted_files
    assert not [p for p in reachable(table) if not exists(table, p)]
    snapshot_rows(table)


def test_a_commit_the_store_fails_raises_a_clear_error_and_deletes_nothing(sqlite_catalog: Catalog) -> None:
    """The store failing under the commit (here its read of the current metadata file: the metadata folder is
    moved aside after the plan) is a ``CommitOutcomeUnknownError`` naming the table and the cause, not the
    store's own error (found by tests/reliability/test_s3_faults.py: a raw pyarrow ``OSError``)."""
    history = build_history(sqlite_catalog)
    table = history.table
    location, files = table.metadata_location, reachable(table)
    folder = Uri.parse(f"{table.location()}/metadata").path

    def move_metadata_aside(report: ExpiryReport, stage: str) -> None:
        if stage == "retention":
            os.rename(folder, f"{folder}.aside")

    try:
        with pytest.raises(CommitOutcomeUnknownError, match=r"table db\.events: the expiry commit failed \(File"):
            expire(table, move_metadata_aside, older_than=datetime.now(UTC), retain_last=1)
    finally:
        os.rename(f"{folder}.aside", folder)
    table = sqlite_catalog.load_table("db.events")
    assert table.metadata_location == location and all(exists(table, p) for p in files)


def test_bad_input_is_refused_naming_it_and_changes_nothing(sqlite_catalog: Catalog) -> None:
    history = build_history(sqlite_catalog)
    table = history.table
    location = table.metadata_location
    cases: list[tuple[dict[str, Any], str]] = [
        ({"older_than": datetime.now(UTC) + timedelta(days=1)}, "is in the future"),
        ({"older_than_days": -1.0}, "older_than_days -1"),
        ({"retain_last": 0}, "retain_last 0"),
        ({"max_concurrent_deletes": 0}, "max_concurrent_deletes 0"),
    ]
    for options, message in cases:
        with pytest.raises(InvalidInputError, match=message):
            expire(table, **options)
    with table.transaction() as tx:
        tx.set_properties({"history.expire.min-snapshots-to-keep": "none"})
    with pytest.raises(InvalidInputError, match=re.escape("history.expire.min-snapshots-to-keep='none'")):
        expire(table)
    with table.transaction() as tx:
        tx.set_properties({"history.expire.min-snapshots-to-keep": "1", "gc.enabled": "false"})
    with pytest.raises(GcDisabledError):
        expire(table, older_than=datetime.now(UTC))
    table = sqlite_catalog.load_table("db.events")
    assert len(table.metadata.snapshots) == len(history.table.metadata.snapshots)
    assert table.metadata_location != location  # only the property commits of this test
