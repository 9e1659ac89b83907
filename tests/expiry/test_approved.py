"""A reviewed expiry (S16): the fresh plan limited to the approved list of a dry run.

The review is a dry run; before the approved run, a commit re-references one approved data file
and adds a snapshot that moves ``main`` (so the fresh plan would expire one snapshot more).
The approved run expires exactly the reviewed snapshots and deletes exactly the approved files
the fresh plan still finds unreachable; every kept snapshot reads the same rows.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.expiry.settings import Approval
from tests.expiry.history import build_history, exists, reachable, snapshot_rows
from tests.expiry.test_expiry import expire
from tests.orphans.scenario import SCHEMA, rows


def test_an_approved_run_expires_and_deletes_only_what_was_reviewed_and_is_still_due(sqlite_catalog: Catalog) -> None:
    history = build_history(sqlite_catalog)
    ids, table = history.ids, history.table
    cutoff = datetime.now(UTC)
    review = expire(table, older_than=cutoff, retain_last=1, dry_run=True)
    every = {s.snapshot_id for s in table.metadata.snapshots}
    assert review.expired_snapshot_ids == sorted(every - {ids["a4"], ids["b1"], ids["pos"]})

    readded = next(p for p in review.deleted_files if p.endswith(".parquet") and "/data/" in p)
    table.add_files([readded])  # a new snapshot on main references an approved file again
    newest = table.metadata.refs["main"].snapshot_id
    rows_before = snapshot_rows(table)
    reachable_before = reachable(table)

    unlisted = history.stats["stats-a2"]  # as if the reviewer had not seen it
    approval = Approval(
        frozenset(review.expired_snapshot_ids),
        frozenset(review.removed_refs),
        frozenset(review.deleted_files) - {unlisted},
        review.table_uuid,
    )
    report = expire(table, older_than=review.older_than, retain_last=review.retain_last, approved=approval)

    after = sqlite_catalog.load_table("db.events")
    assert report.approved and report.expired_snapshot_ids == review.expired_snapshot_ids
    assert {s.snapshot_id for s in after.metadata.snapshots} == {ids["a4"], ids["b1"], ids["pos"], newest}
    # a4 is due now (main moved on) but nobody approved it; it stays, with its statistics file.
    assert report.not_approved_snapshot_ids == [ids["a4"]] and report.not_approved_refs == []
    assert exists(after, history.stats["stats-a4"])
    # An unreachable file missing from the approved list is kept.
    assert report.not_approved_files == [unlisted] and exists(after, unlisted)
    expected = set(review.deleted_files) - {readded, unlisted}
    assert set(report.deleted_files) == expected
    assert not [p for p in expected if exists(after, p)]
    assert expected == reachable_before - reachable(after) - set(report.not_approved_files)
    assert not [p for p in reachable(after) if not exists(after, p)]
    rows_after = snapshot_rows(after)
    assert rows_after == {k: v for k, v in rows_before.items() if k in rows_after}


def test_an_approved_run_removes_only_approved_refs(sqlite_catalog: Catalog) -> None:
    history = build_history(sqlite_catalog)
    table = history.table
    table.manage_snapshots().create_tag(history.ids["a1"], "old", max_ref_age_ms=1).create_tag(
        history.ids["a2"], "older", max_ref_age_ms=1
    ).commit()
    cutoff = datetime.now(UTC)
    review = expire(table, older_than=cutoff, retain_last=1, dry_run=True)
    assert review.removed_refs == ["old", "older"]
    approval = Approval(
        frozenset(review.expired_snapshot_ids), frozenset(["old"]), frozenset(review.deleted_files), review.table_uuid
    )

    report = expire(table, older_than=review.older_than, retain_last=1, approved=approval)

    after = sqlite_catalog.load_table("db.events")
    assert report.removed_refs == ["old"] and report.not_approved_refs == ["older"]
    assert after.metadata.refs["older"].snapshot_id == history.ids["a2"]  # the unapproved tag keeps its snapshot
    assert report.not_approved_snapshot_ids == [] and history.ids["a2"] not in report.expired_snapshot_ids
    assert {s.snapshot_id for s in after.metadata.snapshots} == {
        history.ids["a4"],
        history.ids["b1"],
        history.ids["pos"],
        history.ids["a2"],
    }
    assert not [p for p in reachable(after) if not exists(after, p)]


def _tagged_table(catalog: Catalog) -> Table:
    """``db.t`` with an overwritten snapshot tagged ``audit``, the tag already past its age."""
    table = catalog.create_table("db.t", schema=SCHEMA)
    table.append(rows(0, 3))
    table.overwrite(rows(3, 3))
    table.manage_snapshots().create_tag(table.metadata.snapshots[0].snapshot_id, "audit", max_ref_age_ms=1).commit()
    return table


def test_an_approval_of_a_table_since_dropped_and_created_again_is_refused(sqlite_catalog: Catalog) -> None:
    reviewed = _tagged_table(sqlite_catalog)
    review = expire(reviewed, older_than=datetime.now(UTC), retain_last=1, dry_run=True)
    assert review.removed_refs == ["audit"]
    approval = Approval(
        frozenset(review.expired_snapshot_ids),
        frozenset(review.removed_refs),
        frozenset(review.deleted_files),
        review.table_uuid,
        "reviewed.json",
    )
    sqlite_catalog.drop_table("db.t")
    again = _tagged_table(sqlite_catalog)  # the same name and tag, another table: nobody reviewed it
    new_uuid = str(again.metadata.table_uuid)
    assert new_uuid != review.table_uuid
    before = sqlite_catalog.load_table("db.t").metadata

    with pytest.raises(InvalidInputError) as refused:
        expire(again, older_than=review.older_than, retain_last=1, approved=approval)

    assert str(refused.value) == (
        f"approved_report reviewed.json: reviewed table db.t with UUID {review.table_uuid}, but table db.t now has "
        f"UUID {new_uuid} (dropped and created again): the approval is not for this table; nothing was changed"
    )
    after = sqlite_catalog.load_table("db.t").metadata
    assert after == before and "audit" in after.refs
    assert all(exists(again, p) for p in reachable(again))
