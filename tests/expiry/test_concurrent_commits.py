"""S18: an expiry's commit checks everything its plan read, on SQLite, PostgreSQL and the REST catalog.

A writer changes the table between the expiry's plan and its commit (the ``retention`` stage):
a tag or a branch on an expiring snapshot, the table's retention raised, a ref's retention
raised, an append, a schema change, alone or two at once. Afterwards every ref the writer
made or changed still exists and scans the rows it did, every snapshot the raised retention
keeps is there, nothing any snapshot references is missing, and an orphan run right after
deletes none of it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.catalog import Catalog
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import Table
from pyiceberg.table.update import AddSnapshotUpdate, AssertRefSnapshotId, RemoveSnapshotsUpdate, SetSnapshotRefUpdate
from pyiceberg.types import StringType

from airflow_iceberg_maint.catalog import load_table
from airflow_iceberg_maint.errors import ExpiryRestoreError
from airflow_iceberg_maint.expiry.run import ExpiryReport, expire_snapshots
from airflow_iceberg_maint.expiry.settings import Approval, ExpireOptions
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES, INDEX_SNAPSHOTS
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from tests.commit_race import race_into_commit
from tests.expiry.history import after_clock_passes, exists, reachable, snapshot_rows
from tests.orphans.scenario import SCHEMA, rows

DAY_MS = 86_400_000


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("pg", marks=pytest.mark.postgres),
        pytest.param("rest", marks=pytest.mark.rest),
        pytest.param("glue", marks=pytest.mark.s3),  # the Glue API of the local server (moto)
    ]
)
def catalog(request: pytest.FixtureRequest) -> Catalog:
    return request.getfixturevalue(f"{request.param}_catalog")


def expiring_table(catalog: Catalog) -> Table:
    """A new v2 table that expires everything older than 1 ms but main's head."""
    return catalog.create_table(
        f"{getattr(catalog, 'test_namespace', 'db')}.t{uuid.uuid4().hex[:10]}",
        schema=SCHEMA,
        properties={
            "format-version": "2",
            "history.expire.max-snapshot-age-ms": "1",
            "history.expire.min-snapshots-to-keep": "1",
        },
    )


def make_history(catalog: Catalog) -> tuple[Table, dict[str, int]]:
    """s1 (rows 0-2), replaced by an overwrite (s2: rows 10-12), then an append (s3); a tag ``old`` on s1
    whose own max-ref-age (1 ms) is long over. The table expires everything older than 1 ms but main's head."""
    table = expiring_table(catalog)
    ids: dict[str, int] = {}
    for step, write in (
        ("s1", lambda: table.append(rows(0, 3))),
        ("s2", lambda: table.overwrite(rows(10, 3))),
        ("s3", lambda: table.append(rows(20, 3))),
    ):
        write()
        ids[step] = table.metadata.current_snapshot_id
        after_clock_passes(table.metadata.snapshot_by_id(ids[step]).timestamp_ms)
    table.manage_snapshots().create_tag(ids["s1"], "old", max_ref_age_ms=1).commit()
    return load_table(catalog, ".".join(table.name())), ids


def _set_ref_age(writer: Table, name: str, age_ms: int) -> None:
    ref = writer.metadata.refs[name]
    update = SetSnapshotRefUpdate.model_validate(
        {"ref-name": name, "type": ref.snapshot_ref_type, "snapshot-id": ref.snapshot_id, "max-ref-age-ms": age_ms}
    )
    requirement = AssertRefSnapshotId.model_validate({"ref": name, "snapshot-id": ref.snapshot_id})
    writer.catalog.commit_table(writer, (requirement,), (update,))


#: kind -> the writer's change (on a fresh load of the table) and the refs it made or changed.
KINDS: dict[str, tuple[Callable[[Table, dict[str, int]], object], tuple[str, ...]]] = {
    "tag": (lambda w, ids: w.manage_snapshots().create_tag(ids["s1"], "keep-s1").commit(), ("keep-s1",)),
    "branch": (lambda w, ids: w.manage_snapshots().create_branch(ids["s1"], "b-s1").commit(), ("b-s1",)),
    "table-retention": (
        lambda w, ids: (
            w.transaction().set_properties({"history.expire.max-snapshot-age-ms": str(DAY_MS)}).commit_transaction()
        ),
        (),
    ),
    "ref-retention": (lambda w, ids: _set_ref_age(w, "old", DAY_MS), ("old",)),
    "append": (lambda w, ids: w.append(rows(900, 3)), ("main",)),
    "schema": (lambda w, ids: w.update_schema().add_column("extra", StringType()).commit(), ()),
}


def expire(table: Table, hook: Callable[[ExpiryReport, str], None], **options: Any) -> ExpiryReport:
    return expire_snapshots(
        table, ExpireOptions(**options), sources=[INDEX_FILES], pins=[INDEX_SNAPSHOTS], on_stage=hook
    )


def _approval_of_a_dry_run(table: Table) -> Approval:
    review = expire(table, lambda r, s: None, dry_run=True)
    return Approval(
        frozenset(review.expired_snapshot_ids),
        frozenset(review.removed_refs),
        frozenset(review.deleted_files),
        review.table_uuid,
    )


def run_with_concurrent_writer(catalog: Catalog, kinds: list[str], approved: bool = False) -> None:
    """``approved``: the run is a reviewed one (S16), approving everything its dry run listed."""
    table, ids = make_history(catalog)
    approval = _approval_of_a_dry_run(table) if approved else None
    name = ".".join(table.name())
    made: dict[str, tuple[int, list[int]]] = {}  # the writer's refs -> snapshot, rows
    kept_snapshots: set[int] = set()

    def writer(report: ExpiryReport, stage: str) -> None:
        if stage != "retention" or report.commit_attempts != 1:
            return
        for kind in kinds:
            KINDS[kind][0](catalog.load_table(name), ids)
        now = load_table(catalog, name)
        read = snapshot_rows(now)
        for kind in kinds:
            for ref in KINDS[kind][1]:
                made[ref] = (now.metadata.refs[ref].snapshot_id, read[f"ref:{ref}"])
        if "table-retention" in kinds:  # nothing is a day old: every snapshot stays
            kept_snapshots.update(s.snapshot_id for s in now.metadata.snapshots)

    report = expire(table, writer, approved=approval)
    assert made or kept_snapshots or kinds == ["schema"]

    for moment in ("after the expiry", "after an orphan run"):
        after = load_table(catalog, name)
        assert not [p for p in reachable(after) if not exists(after, p)], moment
        read = snapshot_rows(after)  # every snapshot still reads
        for ref, (snapshot_id, ref_rows) in made.items():
            assert ref in after.metadata.refs, f"{moment}: ref {ref} was dropped ({report.to_json()})"
            assert after.metadata.refs[ref].snapshot_id == snapshot_id, moment
            assert read[f"ref:{ref}"] == ref_rows, moment
        assert kept_snapshots <= {s.snapshot_id for s in after.metadata.snapshots}, moment
        if moment == "after the expiry":
            orphans = remove_orphan_files(after, OrphanOptions(older_than=datetime.now(UTC)), sources=[INDEX_FILES])
            assert not orphans.failed


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kinds=st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=2, unique=True), approved=st.booleans())
def test_a_change_between_plan_and_commit_is_never_lost(catalog: Catalog, kinds: list[str], approved: bool) -> None:
    run_with_concurrent_writer(catalog, kinds, approved)


@pytest.mark.parametrize("approved", [False, True], ids=["plain", "approved"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_of_concurrent_change_alone(sqlite_catalog: Catalog, kind: str, approved: bool) -> None:
    """Every kind once, plain and reviewed, whatever hypothesis draws."""
    run_with_concurrent_writer(sqlite_catalog, [kind], approved)


def _race_into_the_commit(catalog: Catalog, change: Callable[[], object]) -> None:
    race_into_commit(catalog, change, lambda updates: any(isinstance(u, RemoveSnapshotsUpdate) for u in updates))


def test_rest_a_ref_retention_raised_inside_the_commit_is_restored(rest_catalog: Catalog) -> None:
    table, ids = make_history(rest_catalog)
    name = ".".join(table.name())
    table.manage_snapshots().create_tag(ids["s3"], "head", max_ref_age_ms=1).commit()
    table = load_table(rest_catalog, name)
    files = reachable(table)
    _race_into_the_commit(rest_catalog, lambda: _set_ref_age(rest_catalog.load_table(name), "head", DAY_MS))

    report = expire(table, lambda r, s: None)

    after = load_table(rest_catalog, name)
    assert report.committed and report.kept_all_files and report.deleted_files == []
    assert "restored 0 snapshots and refs ['head']" in report.kept_all_files
    assert "head" in report.removed_refs  # planned on what the run read, then put back for the writer
    assert after.metadata.refs["head"].snapshot_id == ids["s3"]
    assert after.metadata.refs["head"].max_ref_age_ms == DAY_MS
    assert all(exists(after, p) for p in files)
    remove_orphan_files(after, OrphanOptions(older_than=datetime.now(UTC)), sources=[INDEX_FILES])
    assert not [p for p in reachable(after) if not exists(after, p)]


def test_rest_a_restore_that_loses_a_race_fails_naming_the_ref_and_how_to_put_it_back(rest_catalog: Catalog) -> None:
    """A tag on an expiring snapshot lands inside the expiry's commit, and an append inside the commit that
    would put the tag back (on a copy, ``test_restore_copies.py``): the restore is refused, and the run fails
    with one line naming the tag, its snapshot, the metadata file that holds them and how to put it back."""
    table, ids = make_history(rest_catalog)
    name = ".".join(table.name())
    files = reachable(table)
    _race_into_the_commit(
        rest_catalog, lambda: rest_catalog.load_table(name).manage_snapshots().create_tag(ids["s1"], "keep-s1").commit()
    )
    race_into_commit(
        rest_catalog,
        lambda: rest_catalog.load_table(name).append(rows(900, 3)),
        lambda updates: any(isinstance(u, AddSnapshotUpdate) for u in updates),
    )

    with pytest.raises(ExpiryRestoreError) as raised:
        expire(table, lambda r, s: None)

    message = str(raised.value)
    after = load_table(rest_catalog, name)
    holder = next(e.metadata_file for e in after.metadata.metadata_log if "keep-s1" in _refs_in(after, e.metadata_file))
    assert "\n" not in message and "'keep-s1'" in message and str(ids["s1"]) in message and holder in message
    assert "the table changed again" in message and "manifest list" in message
    assert "keep-s1" not in after.metadata.refs
    assert all(exists(after, p) for p in files)


def _refs_in(table: Table, metadata_file: str) -> set[str]:
    return set(FromInputFile.table_metadata(table.io.new_input(metadata_file)).refs)
