"""Each report in a layout of its own kind: an expiry's report reads as an expiry, never as an orphan run.

"Full expiry report" used to open the orphan layout ("Dry run of , ... 0 orphan files (0 B)") while its
JSON held the snapshots and files. Reports here come from the real operators on a real table history
(appends, an overwrite, deletes of every kind, a tag, a branch, statistics files); the compaction
report is shaped as ``rewrite-data-files --json`` prints it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.airflow.operators.expiry import IcebergExpireSnapshotsOperator
from airflow_iceberg_maint.airflow.plugin import report_page
from airflow_iceberg_maint.airflow.ui.wording import size
from tests.airflow.test_status_page import Elements
from tests.expiry.history import build_history
from tests.support.airflow_dags import remover

if TYPE_CHECKING:
    from airflow.sdk import Context


def _page(uri: str) -> Elements:
    return Elements(report_page(uri).body.decode())


def _read(uri: str) -> dict[str, Any]:
    return dict(json.loads(Path(uri.removeprefix("file://")).read_text()))


def _expire(tmp_path: Path, state_url: str, context: Context, dry_run: bool) -> dict[str, Any]:
    return IcebergExpireSnapshotsOperator(
        task_id="expire",
        table="db.events",
        older_than=datetime.now(UTC).isoformat(),
        retain_last=1,
        dry_run=dry_run,
        state_url=state_url,
        report_location=f"file://{tmp_path}/reports",
    ).execute(context)


def test_an_expiry_report_shows_snapshots_refs_and_files_by_kind(
    catalog: SqlCatalog,
    pages: str,
    tmp_path: Path,
    context: Context,
) -> None:
    catalog.create_namespace("db")
    table = build_history(catalog).table
    snapshots = {s.snapshot_id: s for s in table.metadata.snapshots}
    dry = _expire(tmp_path, pages, context, dry_run=True)
    report = _read(dry["report"])
    page = _page(dry["report"])
    (heading,) = [t for _, t in page.find("h2")]
    assert heading == "Snapshot-expiry report: db.events"
    rows = page.find("tr", data_snapshot=str(report["expired_snapshot_ids"][0]))
    assert len(page.find("tr")) > len(report["expired_snapshot_ids"])
    shown = {a["data-snapshot"]: t for a, t in page.find("tr") if "data-snapshot" in a}
    assert list(shown) == [str(i) for i in report["expired_snapshot_ids"]] and rows
    for snapshot_id, text in shown.items():
        snapshot = snapshots[int(snapshot_id)]
        committed = datetime.fromtimestamp(snapshot.timestamp_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        assert committed in text and text.endswith(snapshot.summary.operation.value), text
    by_kind = {a["data-kind"]: t for a, t in page.find("tr") if "data-kind" in a}
    assert by_kind == {
        kind: f"{kind.replace('_', ' ')}{tally['count']}{size(tally['bytes'])}"  # the cells' texts, joined
        for kind, tally in report["deleted_by_kind"].items()
        if tally["count"]
    }
    (summary,) = [t for _, t in page.find("p", id="summary")]
    count = len(report["expired_snapshot_ids"])
    assert f"would expire {count} snapshots and would delete {report['deleted_file_count']} files" in summary
    assert f"({size(report['deleted_bytes'])})" in summary
    assert [t for _, t in page.find("code") if "/warehouse/" in t] == report["deleted_files"]
    assert "orphan" not in " ".join(t for _, t in page.find("body")).lower()
    phases = [a["title"].split(":")[0] for a, _ in page.find("span") if a.get("class", "").startswith("phase phase-")]
    assert phases == ["plan", "plan_files", "recheck"]  # no "commit" on a dry run, no "done"

    context["ti"].run_id = "manual__real"
    real = _expire(tmp_path, pages, context, dry_run=False)
    page = _page(real["report"])
    (summary,) = [t for _, t in page.find("p", id="summary")]
    assert f"expired {count} snapshots and deleted {real['deleted_file_count']} files" in summary
    assert real["deleted_file_count"] == report["deleted_file_count"] > 0


def test_an_orphan_dry_run_has_no_delete_phase(
    demo_tables: dict,
    pages: str,
    tmp_path: Path,
    context: Context,
) -> None:
    dry = remover(pages, tmp_path, table="demo.orders", dry_run=True).execute(context)
    assert list(_read(dry["report"])["phase_seconds"]) == ["list_and_reference", "match", "recheck"]
    context["ti"].run_id = "manual__real"
    real = remover(pages, tmp_path, table="demo.orders", dry_run=False).execute(context)
    assert list(_read(real["report"])["phase_seconds"]) == ["list_and_reference", "match", "recheck", "delete"]
    page = _page(dry["report"])
    (summary,) = [t for _, t in page.find("p", id="summary")]
    assert "1 orphan file (64 B); would delete 1 file." in summary


def test_a_compaction_report_shows_its_groups(pages: str, tmp_path: Path) -> None:
    uri = (tmp_path / "reports" / "dag" / "run" / "sales.orders.json").as_uri()
    body = {
        "table": "sales.orders",
        "dry_run": False,
        "strategy": "binpack",
        "target_file_size_bytes": 536870912,
        "groups": [
            {
                "partition": {"day": 3},
                "spec_id": 0,
                "input_files": 12,
                "input_bytes": 3 * 1024 * 1024,
                "output_files": 1,
                "output_bytes": 2 * 1024 * 1024,
                "delete_files": 2,
            }
        ],
        "rewritten_data_files": 12,
        "added_data_files": 1,
        "removed_delete_files": 2,
        "rewritten_bytes": 3 * 1024 * 1024,
        "added_bytes": 2 * 1024 * 1024,
        "commits": [77],
        "skipped_groups": [],
        "failed": [],
        "stage": "done",
        "phase_seconds": {"plan": 0.5, "rewrite": 2.0, "commit": 0.1},
    }
    Path(uri.removeprefix("file://")).parent.mkdir(parents=True)
    Path(uri.removeprefix("file://")).write_text(json.dumps(body))
    page = _page(uri)
    (summary,) = [t for _, t in page.find("p", id="summary")]
    assert summary == (
        "Strategy binpack, target 512.0 MiB: rewrote 12 data files (3.0 MiB) in 1 group into 1 data file (2.0 MiB), "
        "2 delete files removed, 1 commit."
    )
    (group,) = [t for _, t in page.find("table", id="groups")]
    cells = ["Partition", "Spec", "Files in", "Bytes in", "Files out", "Bytes out", "Delete files"]
    assert group == "".join(cells) + ' {"day": 3}' + "".join(["0", "12", "3.0 MiB ", "1", "2.0 MiB", "2"])
