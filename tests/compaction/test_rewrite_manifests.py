"""``rewrite_manifests``: one partition a manifest, every entry as it was, one ``replace`` commit (S21).

Real SQLite catalogs and real Avro and Parquet files. Rows are read twice, independently: by pyiceberg's
scan (which applies position deletes, not equality deletes) and by the index engine's reader (which applies
every delete by sequence number); every snapshot of the history is read before and after.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitStateUnknownException
from pyiceberg.manifest import ManifestContent, ManifestEntryStatus
from pyiceberg.table import Table
from pyiceberg.table.update import AddSnapshotUpdate
from pyiceberg.transforms import IdentityTransform

from airflow_iceberg_maint import commit_fence
from airflow_iceberg_maint.catalog import load_table
from airflow_iceberg_maint.compaction.manifest_plan import group_key
from airflow_iceberg_maint.compaction.manifests import rewrite_manifests
from airflow_iceberg_maint.compaction.options import MANIFEST_TARGET_SIZE_PROPERTY as TARGET_SIZE_PROPERTY
from airflow_iceberg_maint.errors import CommitOutcomeUnknownError
from tests.commit_race import race_into_commit
from tests.expiry.history import snapshot_rows
from tests.index.row_deletes import commit_equality_deletes, commit_position_deletes
from tests.orphans.scenario import SCHEMA, rows


@pytest.fixture(
    params=[
        "sqlite",
        "sqlite-rest-path",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("rest", marks=pytest.mark.rest),
    ]
)
def catalog(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Catalog:
    """SQLite; SQLite on the REST path of ``commit_fence`` (no requirement of the project's own checked in-process,
    the location looked at before the commit); PostgreSQL; SeaweedFS's REST catalog."""
    if request.param == "sqlite-rest-path":
        monkeypatch.setattr(commit_fence, "validates_requirements_in_process", lambda catalog: False)
    fixture = {"sqlite-rest-path": "sqlite_catalog", "postgres": "pg_catalog", "rest": "rest_catalog"}
    return request.getfixturevalue(fixture.get(request.param, f"{request.param}_catalog"))


def make_table(catalog: Catalog, *, partitioned: bool, equality: bool, version: int = 2) -> Table:
    """An unpartitioned first append; then (``partitioned``) a spec on ``category``; three appends of every
    category (each manifest mixes partitions); position deletes on two files; equality deletes on ids 4 and 7
    (``equality``); one more append."""
    table = catalog.create_table(
        f"{getattr(catalog, 'test_namespace', 'db')}.t{uuid.uuid4().hex[:10]}",
        schema=SCHEMA,
        properties={"format-version": str(version)},
    )
    table.append(rows(0, 6))
    if partitioned:
        with table.update_spec() as spec:
            spec.add_field("category", IdentityTransform(), "category")
    for start in (10, 30, 50):
        table.append(rows(start, 12))
    if version > 1:
        files = sorted(table.inspect.files()["file_path"].to_pylist())
        commit_position_deletes(table, {files[0]: [0], files[-1]: [0, 1]})
        if equality:
            commit_equality_deletes(table, ["id"], [[4], [7]])
    table.append(rows(70, 6))
    return load_table(catalog, ".".join(table.name()))


def entries(table: Table) -> dict[str, tuple[Any, ...]]:
    """Every live file of the current snapshot: its content, spec, partition, sequence numbers and snapshot id."""
    snapshot = table.current_snapshot()
    assert snapshot is not None
    found: dict[str, tuple[Any, ...]] = {}
    for manifest in snapshot.manifests(table.io):
        for e in manifest.fetch_manifest_entry(table.io):
            f = e.data_file
            found[f.file_path] = (
                f.content,
                manifest.partition_spec_id,
                group_key(manifest, e)[2],
                e.sequence_number,
                e.file_sequence_number,
                e.snapshot_id,
            )
    return found


def groups(found: dict[str, tuple[Any, ...]]) -> set[tuple[int, int, tuple[Any, ...]]]:
    """The (manifest content, spec, partition) groups of ``entries``: data files, then delete files of any kind."""
    return {(min(int(content), 1), spec, partition) for content, spec, partition, *_ in found.values()}


def scanned(table: Table) -> list[dict[str, Any]]:
    return sorted(table.scan().to_arrow().to_pylist(), key=lambda row: row["id"])


@pytest.mark.parametrize("partitioned", [True, False], ids=["partitioned", "unpartitioned"])
@pytest.mark.parametrize("equality", [False, True], ids=["position-deletes", "position-and-equality-deletes"])
def test_a_rewrite_keeps_every_row_entry_and_snapshot_and_puts_one_partition_in_a_manifest(
    catalog: Catalog, partitioned: bool, equality: bool
) -> None:
    sqlite_catalog = catalog
    table = make_table(sqlite_catalog, partitioned=partitioned, equality=equality)
    before_rows, before_entries = snapshot_rows(table), entries(table)
    before_scan = None if equality else scanned(table)
    before_snapshot = table.current_snapshot()
    assert before_snapshot is not None
    before_manifests = before_snapshot.manifests(table.io)

    report = rewrite_manifests(table, dry_run=False)

    table = load_table(sqlite_catalog, ".".join(table.name()))
    current = table.current_snapshot()
    assert current is not None and report.commits == [current.snapshot_id]
    assert current.parent_snapshot_id == before_snapshot.snapshot_id
    assert current.summary is not None and current.summary.operation.value == "replace"
    assert current.summary["total-records"] == before_snapshot.summary["total-records"]
    # Every snapshot reads as before, and the new one as its parent; each live file keeps its sequence
    # numbers and snapshot id, so each delete applies to the same rows.
    after_rows = snapshot_rows(table)
    assert {k: v for k, v in after_rows.items() if k != f"snapshot:{current.snapshot_id}"} == before_rows
    assert after_rows[f"snapshot:{current.snapshot_id}"] == before_rows[f"snapshot:{before_snapshot.snapshot_id}"]
    assert entries(table) == before_entries
    if before_scan is not None:
        assert scanned(table) == before_scan
    # One group (content, spec, partition) a manifest; each rewritten entry EXISTING, a kept manifest as it was.
    manifests = current.manifests(table.io)
    kept = {m.manifest_path for m in before_manifests} & {m.manifest_path for m in manifests}
    keys = []
    for manifest in manifests:
        listed = manifest.fetch_manifest_entry(table.io, discard_deleted=False)
        if manifest.manifest_path not in kept:
            assert {e.status for e in listed} == {ManifestEntryStatus.EXISTING}
            assert manifest.added_snapshot_id == current.snapshot_id
        assert len({group_key(manifest, e) for e in listed}) == 1
        keys.append(group_key(manifest, listed[0]))
    assert sorted(keys, key=repr) == sorted(groups(before_entries), key=repr)
    assert report.to_json() == {
        "table": ".".join(table.name()),
        "dry_run": False,
        "rewritten_manifests": len(before_manifests) - len(kept),
        "added_manifests": len(manifests) - len(kept),
        "commits": [current.snapshot_id],
    }
    if partitioned:  # two specs, six categories: several partitions
        assert len({k[2] for k in keys if k[0] == ManifestContent.DATA}) == 7
    # A second run right after finds nothing to do.
    again = rewrite_manifests(table, dry_run=False)
    assert (again.rewritten_manifests, again.added_manifests, again.commits) == (0, 0, [])
    assert load_table(sqlite_catalog, ".".join(table.name())).metadata == table.metadata


def test_a_dry_run_reports_the_plan_and_changes_nothing(sqlite_catalog: Catalog, warehouse: Any) -> None:
    table = make_table(sqlite_catalog, partitioned=True, equality=True)
    files = sorted(str(p) for p in warehouse.rglob("*"))
    location = table.metadata_location
    report = rewrite_manifests(table)
    assert report.dry_run and report.commits == []
    before = table.current_snapshot()
    assert before is not None
    # Every manifest but the two that hold one partition alone (the first append's, the equality deletes').
    assert (report.rewritten_manifests, report.kept_manifests) == (len(before.manifests(table.io)) - 2, 2)
    assert report.added_manifests == len(groups(entries(table))) - 2
    assert sorted(str(p) for p in warehouse.rglob("*")) == files
    assert load_table(sqlite_catalog, ".".join(table.name())).metadata_location == location


def test_manifests_close_at_the_target_size_and_the_table_property_is_the_default(sqlite_catalog: Catalog) -> None:
    table = make_table(sqlite_catalog, partitioned=False, equality=False)
    for start in range(100, 400, 12):
        table.append(rows(start, 12))
    before = snapshot_rows(table)
    with table.transaction() as tx:
        tx.set_properties({TARGET_SIZE_PROPERTY: "6000"})
    report = rewrite_manifests(table, dry_run=False)
    current = table.current_snapshot()
    assert current is not None
    data = [m for m in current.manifests(table.io) if m.content == ManifestContent.DATA]
    assert len(data) > 1 and report.added_manifests == len(data)
    assert report.kept_manifests == 1  # the position deletes' manifest, one partition alone
    # Each manifest but the last of its group closed at the first entry past the target.
    assert all(m.manifest_length < 6000 + 1500 for m in data)
    assert snapshot_rows(table)[f"snapshot:{current.snapshot_id}"] == before[f"snapshot:{current.parent_snapshot_id}"]
    # The option wins over the property: one manifest again.
    again = rewrite_manifests(table, target_manifest_size_bytes=8 * 1024 * 1024, dry_run=False)
    assert (again.rewritten_manifests, again.added_manifests, again.kept_manifests) == (len(data), 1, 1)


def test_a_format_version_1_table(sqlite_catalog: Catalog) -> None:
    table = make_table(sqlite_catalog, partitioned=True, equality=False, version=1)
    before, before_scan = entries(table), scanned(table)
    report = rewrite_manifests(table, dry_run=False)
    assert len(report.commits) == 1
    assert entries(table) == before and scanned(table) == before_scan


def test_an_append_inside_the_commit_makes_the_rewrite_plan_again_on_it(catalog: Catalog) -> None:
    """A writer's append lands just before the rewrite's commit call (after every check the project makes
    before it): the catalog refuses ours; the rewrite plans again on the table with the append and commits;
    the appended rows are there."""
    sqlite_catalog = catalog
    table = make_table(sqlite_catalog, partitioned=True, equality=True)
    name = ".".join(table.name())
    writer = load_table(sqlite_catalog, name)
    race_into_commit(
        sqlite_catalog,
        lambda: writer.append(rows(1000, 3)),
        lambda updates: any(
            isinstance(u, AddSnapshotUpdate) and u.snapshot.summary.operation.value == "replace" for u in updates
        ),
    )
    expected = sorted([*snapshot_rows(table)[f"snapshot:{table.metadata.current_snapshot_id}"], 1000, 1001, 1002])
    report = rewrite_manifests(table, dry_run=False)
    assert report.commit_attempts == 2 and len(report.commits) == 1
    table = load_table(sqlite_catalog, name)
    current = table.current_snapshot()
    assert current is not None and current.snapshot_id == report.commits[0]
    parent = table.snapshot_by_id(current.parent_snapshot_id)
    assert parent is not None and parent.summary.operation.value == "append"
    assert snapshot_rows(table)[f"snapshot:{current.snapshot_id}"] == expected
    assert pa.array(expected).to_pylist() == expected


@pytest.mark.parametrize("landed", [True, False], ids=["landed", "not-landed"])
def test_an_unknown_commit_outcome_keeps_the_new_manifests(sqlite_catalog: Catalog, landed: bool) -> None:
    """The catalog's answer is lost (after the commit landed, or before): the run fails naming the unknown
    outcome, every file it wrote stays, and the table reads the same rows either way."""
    table = make_table(sqlite_catalog, partitioned=True, equality=True)
    name = ".".join(table.name())
    expected = snapshot_rows(table)[f"snapshot:{table.metadata.current_snapshot_id}"]
    commit = sqlite_catalog.commit_table

    def lost_answer(table: Table, requirements: Any, updates: Any) -> Any:
        if landed:
            commit(table, requirements, updates)
        raise CommitStateUnknownException("the catalog did not answer")

    sqlite_catalog.commit_table = lost_answer  # type: ignore[method-assign]
    metadata_dir = Path(table.location().removeprefix("file://")) / "metadata"
    before = set(metadata_dir.iterdir())
    with pytest.raises(CommitOutcomeUnknownError, match="whether it landed is unknown: its new manifests are kept"):
        rewrite_manifests(table, dry_run=False)
    written = {p for p in set(metadata_dir.iterdir()) - before if p.suffix == ".avro"}
    assert len(written) > 1  # the manifests and the manifest list, none deleted
    sqlite_catalog.commit_table = commit  # type: ignore[method-assign]
    after = load_table(sqlite_catalog, name)
    current = after.current_snapshot()
    assert current is not None and (current.summary.operation.value == "replace") == landed
    assert snapshot_rows(after)[f"snapshot:{current.snapshot_id}"] == expected
    if landed:
        assert {Path(m.manifest_path.removeprefix("file://")) for m in current.manifests(after.io)} <= written | before
