"""The reviewed runs: only what the approved list holds and a fresh check still finds due goes (S16)."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.airflow.operators.expiry import IcebergExpireSnapshotsOperator
from airflow_iceberg_maint.airflow.operators.reviewed import (
    REVIEW_PATHS,
    IcebergDeleteApprovedOrphansOperator,
    load_review,
    orphan_review,
)
from airflow_iceberg_maint.airflow.operators.reviewed_expiry import (
    IcebergExpireApprovedSnapshotsOperator,
    expiry_markdown,
    expiry_review,
    load_expiry_review,
)
from airflow_iceberg_maint.airflow.ui.wording import size
from tests.expiry.history import build_history
from tests.orphans.scenario import rows
from tests.support.airflow_dags import remover

TABLE = "demo.orders"


def aged(path: Path) -> Path:
    if not path.exists():
        path.write_bytes(b"PAR1" + b"\0" * 60)
    stamp = time.time() - 10 * 86_400
    os.utime(path, (stamp, stamp))
    return path


def test_only_approved_files_still_orphaned_are_deleted(
    demo_tables: dict, catalog: SqlCatalog, state_url: str, tmp_path: Path, context: Context
) -> None:
    planted = demo_tables[TABLE]
    data = planted["old"].parent
    later_referenced = data / "00000-0-added-later.parquet"
    pq.write_table(pa.table({"id": pa.array([7, 8], pa.int64())}), later_referenced)
    aged(later_referenced)

    dry = remover(state_url, tmp_path, table=TABLE, dry_run=True).execute(context)
    reviewed = json.loads(Path(dry["report"].removeprefix("file://")).read_text())
    approved = sorted([planted["old_uri"], f"file://{later_referenced}"])
    assert sorted(reviewed["orphan_files"]) == approved
    assert load_review(dry["report"], "iceberg_default") == orphan_review(reviewed, dry["report"])
    review = orphan_review(reviewed, dry["report"], paths=1)
    assert (review["orphan_file_count"], review["first_paths"], review["more_paths"]) == (2, approved[:1], 1)
    # The report page inside Airflow's navigation (the plugin's view frames it), not a bare page.
    assert review["report_page"].startswith("/plugin/iceberg-maintenance/iceberg-maint/report?uri=file%3A%2F%2F")

    # After the review: a commit references one approved file, and a new orphan appears.
    catalog.load_table(TABLE).add_files([str(later_referenced)])
    unseen = data / "00000-0-after-review.parquet"
    unseen.write_bytes(b"PAR1" + b"\0" * 60)
    aged(unseen)

    delete = IcebergDeleteApprovedOrphansOperator(
        task_id="delete_approved",
        table=TABLE,
        approved_report=dry["report"],
        state_url=state_url,
        report_location=f"file://{tmp_path}/reports",
    )
    context["ti"].run_id = "manual__approved"
    result = delete.execute(context)

    assert not planted["old"].exists()
    assert later_referenced.exists() and unseen.exists() and planted["fresh"].exists()
    assert result == {
        "table": TABLE,
        "approved_count": 2,
        "deleted_file_count": 1,
        "kept_not_orphan_count": 1,
        "kept_not_approved_count": 1,
        "failed_count": 0,
        "report": f"file://{tmp_path}/reports/unit/manual__approved/demo.orders.json",
    }
    report = json.loads(Path(result["report"].removeprefix("file://")).read_text())
    assert report["deleted_files"] == [planted["old_uri"]]
    assert report["kept_not_orphan"] == [f"file://{later_referenced}"]
    assert report["kept_not_approved"] == [f"file://{unseen}"]
    assert sorted(catalog.load_table(TABLE).scan().to_arrow()["id"].to_pylist()) == [1, 2, 3, 7, 8]


def test_a_report_that_is_not_a_dry_run_of_the_table_is_refused(
    demo_tables: dict, state_url: str, tmp_path: Path, context: Context
) -> None:
    dry = remover(state_url, tmp_path, table="demo.events", dry_run=True).execute(context)
    delete = IcebergDeleteApprovedOrphansOperator(
        task_id="delete_approved",
        table=TABLE,
        approved_report=dry["report"],
        state_url=state_url,
        report_location=f"file://{tmp_path}/other",
    )
    with pytest.raises(AirflowFailException, match=r"approved_report .*: not a dry run of table demo\.orders"):
        delete.execute(context)
    assert demo_tables[TABLE]["old"].exists() and demo_tables["demo.events"]["old"].exists()


def test_the_approved_expiry_expires_only_the_reviewed_snapshots_and_files(
    catalog: SqlCatalog, state_url: str, tmp_path: Path, context: Context
) -> None:
    catalog.create_namespace("db")
    history = build_history(catalog)
    ids = history.ids
    cutoff = datetime.now(UTC).isoformat()
    dry = IcebergExpireSnapshotsOperator(
        task_id="expire_dry_run",
        table="db.events",
        older_than=cutoff,
        retain_last=1,
        dry_run=True,
        state_url=state_url,
        report_location=f"file://{tmp_path}/reports",
    ).execute(context)
    reviewed = json.loads(Path(dry["report"].removeprefix("file://")).read_text())
    review = load_expiry_review(dry["report"], "iceberg_default")
    assert review == expiry_review(reviewed, dry["report"])
    assert (review["expired_snapshot_count"], review["file_count"]) == (
        len(reviewed["expired_snapshot_ids"]),
        len(reviewed["deleted_files"]),
    )
    form = expiry_markdown(review)
    assert f"**{review['expired_snapshot_count']} snapshots to expire**" in form
    # The form says what approving deletes, by kind, in the pages' units; each snapshot with its commit.
    kinds = {k: v["count"] for k, v in reviewed["deleted_by_kind"].items() if v["count"]}
    assert kinds["data"] > 0 and sum(kinds.values()) == review["file_count"]
    assert f"**Approving deletes {review['file_count']} files ({size(review['bytes'])})** that only" in form
    assert f"{kinds['data']} data file" in form and f"{kinds['manifest_list']} manifest list" in form
    table = catalog.load_table("db.events")
    for snapshot_id in reviewed["expired_snapshot_ids"]:
        snapshot = table.snapshot_by_id(snapshot_id)
        assert snapshot is not None and snapshot.summary is not None
        committed = datetime.fromtimestamp(snapshot.timestamp_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        assert f"- snapshot `{snapshot_id}`: {snapshot.summary.operation.value}, committed {committed}" in form
    assert "bytes**" not in form and "at least" not in form
    assert all(f"`{p}`" in form for p in reviewed["deleted_files"][:REVIEW_PATHS])

    catalog.load_table("db.events").append(rows(500, 3))  # main moves on: a4 becomes due, unreviewed
    context["ti"].run_id = "manual__approved"
    summary = IcebergExpireApprovedSnapshotsOperator(
        task_id="expire_approved",
        table="db.events",
        approved_report=dry["report"],
        older_than_days=0,  # ignored: the reviewed cutoff counts
        state_url=state_url,
        report_location=f"file://{tmp_path}/reports",
    ).execute(context)

    after = catalog.load_table("db.events")
    assert ids["a4"] in {s.snapshot_id for s in after.metadata.snapshots}
    assert not {s.snapshot_id for s in after.metadata.snapshots} & set(reviewed["expired_snapshot_ids"])
    assert (summary["approved"], summary["expired_snapshot_count"], summary["not_approved_snapshot_count"]) == (
        True,
        len(reviewed["expired_snapshot_ids"]),
        1,
    )
    report = json.loads(Path(summary["report"].removeprefix("file://")).read_text())
    assert report["deleted_files"] == sorted(reviewed["deleted_files"])
    assert not any(Path(p.removeprefix("file://")).exists() for p in report["deleted_files"])
    assert report["not_approved_snapshot_ids"] == [ids["a4"]]


def test_an_approved_expiry_refuses_an_orphan_report(
    demo_tables: dict, state_url: str, tmp_path: Path, context: Context
) -> None:
    dry = remover(state_url, tmp_path, table=TABLE, dry_run=True).execute(context)
    expire = IcebergExpireApprovedSnapshotsOperator(
        task_id="expire_approved",
        table=TABLE,
        approved_report=dry["report"],
        state_url=state_url,
        report_location=f"file://{tmp_path}/other",
    )
    before = demo_tables[TABLE]
    with pytest.raises(AirflowFailException, match=r"approved_report .*: not an expiry dry run of table demo\.orders"):
        expire.execute(context)
    assert before["old"].exists()


def _created_again(catalog: SqlCatalog, name: str, tag: bool) -> tuple[str, str]:
    """Create ``name`` (two commits; with ``tag``, an ``audit`` tag past its age on the first); its
    UUID and location. Called twice, the second table has the name, location and tag of the first."""
    table = catalog.create_table(name, schema=pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [1, 2]}))
    table.overwrite(pa.table({"id": [3]}))
    if tag:
        table.manage_snapshots().create_tag(table.metadata.snapshots[0].snapshot_id, "audit", max_ref_age_ms=1).commit()
    return str(table.metadata.table_uuid), table.location().removeprefix("file://")


def _refused_as_another_table(
    kind: type, uri: str, old: str, new: str, state_url: str, tmp_path: Path, context: Context
) -> None:
    """Run the approved operator ``kind`` on ``db.t`` with the reviewed report ``uri``: refused, naming both UUIDs."""
    context["ti"].run_id = "manual__approved"
    approved = kind(
        task_id="approved",
        table="db.t",
        approved_report=uri,
        state_url=state_url,
        report_location=f"file://{tmp_path}/reports",
    )
    refused = (
        rf"approved_report {uri}: reviewed table db\.t with UUID {old}, but table db\.t now has UUID {new} "
        r"\(dropped and created again\): the approval is not for this table; nothing was changed"
    )
    with pytest.raises(AirflowFailException, match=refused):
        approved.execute(context)


def test_an_approved_expiry_of_a_table_dropped_and_created_again_is_refused(
    catalog: SqlCatalog, state_url: str, tmp_path: Path, context: Context
) -> None:
    catalog.create_namespace("db")
    old_uuid, _ = _created_again(catalog, "db.t", tag=True)
    dry = IcebergExpireSnapshotsOperator(
        task_id="expire_dry_run",
        table="db.t",
        older_than=datetime.now(UTC).isoformat(),
        retain_last=1,
        dry_run=True,
        state_url=state_url,
        report_location=f"file://{tmp_path}/reports",
    ).execute(context)
    assert json.loads(Path(dry["report"].removeprefix("file://")).read_text())["removed_refs"] == ["audit"]
    catalog.drop_table("db.t")
    new_uuid, _ = _created_again(catalog, "db.t", tag=True)
    before = catalog.load_table("db.t").metadata

    _refused_as_another_table(
        IcebergExpireApprovedSnapshotsOperator, dry["report"], old_uuid, new_uuid, state_url, tmp_path, context
    )
    after = catalog.load_table("db.t").metadata
    assert after == before and "audit" in after.refs


def test_an_approved_orphan_delete_of_a_table_dropped_and_created_again_is_refused(
    catalog: SqlCatalog, state_url: str, tmp_path: Path, context: Context
) -> None:
    catalog.create_namespace("db")
    old_uuid, location = _created_again(catalog, "db.t", tag=False)
    orphan = aged(Path(location) / "data" / "00000-0-reviewed-orphan.parquet")
    dry = remover(state_url, tmp_path, table="db.t", dry_run=True).execute(context)
    reviewed = json.loads(Path(dry["report"].removeprefix("file://")).read_text())
    assert reviewed["orphan_files"] == [f"file://{orphan}"]
    catalog.drop_table("db.t")
    new_uuid, again = _created_again(catalog, "db.t", tag=False)
    assert again == location  # the same place: the reviewed orphan is an orphan of the new table too
    files = sorted(Path(location).rglob("*"))

    _refused_as_another_table(
        IcebergDeleteApprovedOrphansOperator, dry["report"], old_uuid, new_uuid, state_url, tmp_path, context
    )
    assert sorted(Path(location).rglob("*")) == files
