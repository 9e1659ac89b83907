"""``iceberg_table_maintenance_reviewed`` in a real ``airflow standalone``: the approval form in chromium.

Approve: the form shows both dry runs (snapshots to expire, the files only they reach, orphans,
report links); only the reviewed snapshots expire (a snapshot that became due after the review,
because ``main`` moved on, stays) and only the reviewed orphans are deleted (an orphan planted
after the review is kept). Reject: nothing is expired or deleted. The form says what the expiry deletes
(files by kind, each snapshot with its commit time and operation) and links to the expiry's own report
page inside Airflow's navigation; after the approval the status page shows the expiry at the time it ran,
with the numbers of its report. Screenshots go to ``$TMPDIR/iceberg-maint-screens/``. An answer is given only
once Airflow is done parking ``approve`` (``Airflow.parked``); the quickest such answer resumes the task.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from airflow_iceberg_maint.airflow.ui.wording import plural, size
from tests.support.browser import ARTIFACTS, BASE, CHROMIUM_ARGS, PASSWORD, Airflow

pytestmark = [pytest.mark.browser, pytest.mark.s3, pytest.mark.timeout(2400)]

REVIEWED = "iceberg_table_maintenance_reviewed"
OLD = time.time() - 10 * 86_400
WAIT = 900.0


def _plant(folder: Path, *names: str) -> list[Path]:
    paths = []
    for name in names:
        path = folder / name
        path.write_bytes(b"PAR1" + name.encode() + b"\0" * 40)
        os.utime(path, (OLD, OLD))
        paths.append(path)
    return paths


def _awaiting_approval(airflow: Airflow, run_id: str) -> None:
    """Wait until the run's ``approve`` task waits for a person and the scheduler is done parking it (``parked``:
    an answer before that fails the task in Airflow 3.3.2), or the run ended without it."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        try:
            states = {task: state for task, _, state in airflow.task_states(REVIEWED, run_id)}
        except (TimeoutError, urllib.error.URLError) as exc:  # a busy api-server: ask again
            if isinstance(exc, urllib.error.HTTPError):
                raise
            continue
        if states.get("approve") in ("deferred", "awaiting_input") and airflow.parked(REVIEWED, run_id, "approve"):
            return
        if states.get("approve") in ("success", "failed", "skipped", "upstream_failed"):
            break
        time.sleep(2)
    raise AssertionError(f"run {run_id} never waited for approval: {airflow.task_states(REVIEWED, run_id)}")


def _check_expiry_report(frame: Any, report: dict[str, Any]) -> None:
    """The expiry report page against the report as the run wrote it: snapshots, files by kind, the summary."""
    rows = frame.locator("#snapshots tr[data-snapshot]")
    assert [int(rows.nth(i).get_attribute("data-snapshot")) for i in range(rows.count())] == report[
        "expired_snapshot_ids"
    ]
    for i, snapshot in enumerate(report["expired_snapshots"]):
        text = rows.nth(i).inner_text()
        committed = datetime.fromisoformat(snapshot["committed_at"]).strftime("%Y-%m-%d %H:%M:%S UTC")
        assert committed in text and snapshot["operation"] in text, text
    kinds = frame.locator("#by-kind tr[data-kind]")
    shown = {
        kinds.nth(i).get_attribute("data-kind"): kinds.nth(i).inner_text().split("\t") for i in range(kinds.count())
    }
    expected = {
        kind: [kind.replace("_", " "), str(tally["count"]), size(tally["bytes"])]
        for kind, tally in report["deleted_by_kind"].items()
        if tally["count"]
    }
    assert shown == expected, (shown, expected)
    summary = frame.locator("#summary").inner_text()
    assert f"{plural(report['deleted_file_count'], 'file')} ({size(report['deleted_bytes'])})" in summary, summary
    assert "orphan" not in summary


def _status_after_approval(page: Any, airflow: Airflow, approved_at: datetime, kept_files: int) -> None:
    """The status page after the approved expiry: its time is when it ran (after the approval), its numbers the
    report's; the expiry report, the table page and the fleet, each screenshotted."""
    airflow.api(
        "POST", "/variables", {"key": "iceberg_maint.health.sales.orders", "value": json.dumps(_health(airflow))}
    )
    page.goto(f"{BASE}/plugin/iceberg-maintenance")
    frame = page.frame_locator("iframe")
    row = frame.locator("tr[data-table='sales.orders']")
    row.wait_for()
    body = json.loads(page.request.get(f"{BASE}/iceberg-maint/status.json").text())
    orders = next(t for t in body["tables"] if t["table"] == "sales.orders")
    last = orders["last_expiry"]
    report = airflow.report(last["report"])
    assert last["at"] == report["finished_at"] and datetime.fromisoformat(last["at"]) >= approved_at
    count, files = len(report["expired_snapshot_ids"]), report["deleted_file_count"]
    freed = size(report["deleted_bytes"])
    words = f"expired {plural(count, 'snapshot')}, deleted {plural(files, 'file')} ({freed} reclaimed)"
    cell = row.locator("td.expiry")
    assert words in cell.inner_text(), cell.inner_text()
    assert cell.get_attribute("data-last-expired") == report["finished_at"]
    health = row.locator("td.health")
    assert health.get_attribute("data-score") == "70" and "rewrite-data-files" in health.inner_text()
    page.screenshot(path=ARTIFACTS / "14-status-after-approval.png", full_page=True)
    cell.get_by_role("link", name="report").click()
    page.wait_for_url(re.compile(r".*/plugin/iceberg-maintenance/iceberg-maint/report\?uri=.+"))
    frame.locator("#snapshots tr[data-snapshot]").first.wait_for()
    _check_expiry_report(frame, report)
    page.screenshot(path=ARTIFACTS / "15-expiry-report.png", full_page=True)
    page.goto(f"{BASE}/plugin/iceberg-maintenance/iceberg-maint/table?name=sales.orders")
    frame.locator("#chart-histogram rect").first.wait_for()
    bars = frame.locator("#chart-histogram rect.files")
    assert bars.count() == len(_health(airflow)["health"]["file_size_histogram"])
    kinds = frame.locator("#runs tr.run .badge")
    assert {kinds.nth(i).inner_text() for i in range(kinds.count())} >= {"snapshot expiry", "orphan removal"}
    page.screenshot(path=ARTIFACTS / "16-table-page.png", full_page=True)
    page.goto(f"{BASE}/plugin/iceberg-maintenance/iceberg-maint/fleet")
    frame.locator("#fleet tr[data-table='sales.orders']").wait_for()
    page.screenshot(path=ARTIFACTS / "17-fleet.png", full_page=True)


def _health(airflow: Airflow) -> dict[str, Any]:
    """A health record as the health operator writes it, from the table's own files (pyiceberg's inspect)."""
    table = _orders(airflow)
    sizes = table.inspect.files()["file_size_in_bytes"].to_pylist()
    bounds = [1024, 4096, None]
    histogram = []
    lower = 0
    for upper in bounds:
        histogram.append({"upper_bytes": upper, "files": sum(lower < s <= (upper or 2**62) for s in sizes)})
        lower = upper or lower
    small = {
        "cause": f"{len(sizes)} of {len(sizes)} data files are small",
        "points": 30,
        "remedy": "rewrite-data-files",
    }
    health = {
        "table": "sales.orders",
        "snapshot_id": table.metadata.current_snapshot_id,
        "data_files": len(sizes),
        "data_bytes": sum(sizes),
        "small_data_files": len(sizes),
        "file_size_histogram": histogram,
        "delete_files": {"position": 0, "equality": 0, "deletion_vector": 0},
        "deleted_rows": 0,
        "snapshots": len(table.metadata.snapshots),
        "oldest_snapshot_at": None,
        "manifests": 0,
        "manifest_bytes": 0,
        "metadata_files": 0,
        "expirable_snapshots": 0,
        "expirable_bytes": 0,
        "score": 70,
        "deductions": [small],
    }
    return {"table": "sales.orders", "checked_at": datetime.now(UTC).isoformat(), "health": health, "history": []}


def _trigger(airflow: Airflow) -> str:
    conf = {"table": "sales.orders", "expire_older_than_days": 0, "retain_last": 1}
    body = airflow.api("POST", f"/dags/{REVIEWED}/dagRuns", {"logical_date": None, "conf": conf})
    return str(body["dag_run_id"])


def _orders(airflow: Airflow) -> Table:
    return SqlCatalog("iceberg_default", **airflow.catalog).load_table("sales.orders")


def _append(airflow: Airflow, start: int) -> int:
    """Append to ``sales.orders``; the new snapshot's id."""
    table = _orders(airflow)
    table.append(pa.table({"id": list(range(start, start + 10)), "amount": [2.5] * 10}))
    return table.metadata.refs["main"].snapshot_id


def _snapshots(airflow: Airflow) -> list[int]:
    """The table's snapshot ids, oldest first."""
    return [s.snapshot_id for s in _orders(airflow).metadata.snapshots]


def test_approve_expires_and_deletes_the_reviewed_files_and_reject_changes_nothing(
    airflow: Airflow, chromium: str
) -> None:
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    data = airflow.warehouse / "sales" / "orders" / "data"
    referenced = sorted(data.iterdir())
    first, second = _snapshots(airflow)
    first_snapshot = _orders(airflow).snapshot_by_id(first)
    assert first_snapshot is not None
    first_list = Path(first_snapshot.manifest_list.removeprefix("file://"))
    reviewed = _plant(data, "00000-8-orphan-a.parquet", "00000-8-orphan-b.parquet")
    airflow.api("PATCH", f"/dags/{REVIEWED}", {"is_paused": False})

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(120_000)
        page.goto(BASE + "/")
        page.fill("input[name=username]", "admin")
        page.fill("input[name=password]", PASSWORD)
        page.locator("button[type=submit]").click()
        page.wait_for_url(BASE + "/")

        # 1. Approve: the form shows the review; only the reviewed files go.
        approved = _trigger(airflow)
        _awaiting_approval(airflow, approved)
        (unseen,) = _plant(data, "00000-8-after-review.parquet")
        third = _append(airflow, 200)  # main moves on: the second snapshot becomes due, unreviewed
        page.goto(f"{BASE}/dags/{REVIEWED}/runs/{approved}/tasks/approve/required_actions")
        form = page.get_by_text("2 orphan files", exact=False).first
        form.wait_for()
        assert page.get_by_text("1 snapshot to expire", exact=False).count() >= 1
        expiry_link = page.get_by_role("link", name="Full expiry report", exact=True).get_attribute("href") or ""
        dry_expiry = airflow.report(parse_qs(urlsplit(expiry_link).query)["uri"][0])
        data_files = dry_expiry["deleted_by_kind"]["data"]["count"]
        assert (
            page.get_by_text(
                f"Approving deletes {plural(dry_expiry['deleted_file_count'], 'file')} (", exact=False
            ).count()
            >= 1
        )
        if data_files:
            assert page.get_by_text(f"{data_files} data file", exact=False).count() >= 1
        first_at = datetime.fromtimestamp(first_snapshot.timestamp_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        assert page.get_by_text(f"{first}`: append, committed {first_at}".replace("`", ""), exact=False).count() >= 1
        assert page.get_by_text(str(first), exact=False).count() >= 1
        assert page.get_by_text(f"file://{first_list}", exact=False).count() >= 1
        for path in reviewed:
            assert page.get_by_text(f"file://{path}", exact=False).count() >= 1
        assert page.get_by_text(str(unseen), exact=False).count() == 0
        for link in ("Full report", "Full expiry report"):
            href = page.get_by_role("link", name=link, exact=True).get_attribute("href")
            assert href is not None and href.startswith(
                "/plugin/iceberg-maintenance/iceberg-maint/report?uri=s3%3A%2F%2F"
            )
        page.screenshot(path=ARTIFACTS / "10-reviewed-approval-form.png", full_page=True)
        # The expiry's own report page, inside Airflow's navigation: its snapshots and files by kind.
        form_url = page.url
        page.goto(BASE + expiry_link)  # the form opens its links in a new tab: follow it here
        frame = page.frame_locator("iframe")
        frame.locator("#snapshots tr[data-snapshot]").first.wait_for()
        _check_expiry_report(frame, dry_expiry)
        page.screenshot(path=ARTIFACTS / "10b-expiry-dry-run-report.png", full_page=True)
        page.goto(form_url)
        page.get_by_role("button", name="Approve").wait_for()
        approved_at = datetime.now(UTC)
        page.get_by_role("button", name="Approve").click()
        assert airflow.wait_run(REVIEWED, approved, timeout=WAIT) == "success", airflow.task_states(REVIEWED, approved)
        states = {task: state for task, _, state in airflow.task_states(REVIEWED, approved)}
        assert (states["expire_approved"], states["delete_approved"]) == ("success", "success")
        assert _snapshots(airflow) == [second, third]
        assert not first_list.exists()
        assert not any(p.exists() for p in reviewed)
        assert unseen.exists() and all(p.exists() for p in referenced)
        page.goto(f"{BASE}/dags/{REVIEWED}/runs/{approved}")
        page.screenshot(path=ARTIFACTS / "11-reviewed-approved-run.png", full_page=True)
        _status_after_approval(page, airflow, approved_at, len(referenced))

        # 2. Reject: the expiry and the delete are skipped; every snapshot and file stays.
        fourth = _append(airflow, 300)
        rejected = _trigger(airflow)
        _awaiting_approval(airflow, rejected)
        page.goto(f"{BASE}/dags/{REVIEWED}/runs/{rejected}/tasks/approve/required_actions")
        page.get_by_text("1 orphan file,", exact=False).first.wait_for()
        assert page.get_by_text("2 snapshots to expire", exact=False).count() >= 1
        page.screenshot(path=ARTIFACTS / "12-reviewed-reject-form.png", full_page=True)
        page.get_by_role("button", name="Reject").click()
        assert airflow.wait_run(REVIEWED, rejected, timeout=WAIT) == "success", airflow.task_states(REVIEWED, rejected)
        states = {task: state for task, _, state in airflow.task_states(REVIEWED, rejected)}
        assert (states["expire_approved"], states["delete_approved"]) == ("skipped", "skipped")
        assert _snapshots(airflow) == [second, third, fourth]
        assert unseen.exists() and all(p.exists() for p in referenced)
        page.goto(f"{BASE}/dags/{REVIEWED}/runs/{rejected}")
        page.screenshot(path=ARTIFACTS / "13-reviewed-rejected-run.png", full_page=True)
        browser.close()


def test_an_answer_the_moment_the_approval_waits_resumes_the_task(airflow: Airflow) -> None:
    """The quickest answer there is (through the REST API, the moment ``_awaiting_approval`` returns) resumes
    ``approve``: without the wait for the scheduler to finish parking it, each such answer failed the task
    (the executor's late exit event of the parked attempt, see ``Airflow.parked``)."""
    airflow.api("PATCH", f"/dags/{REVIEWED}", {"is_paused": False})
    before = _snapshots(airflow)
    for _ in range(2):
        run = _trigger(airflow)
        _awaiting_approval(airflow, run)
        answer = {"chosen_options": ["Reject"], "params_input": {}}
        airflow.api("PATCH", f"/dags/{REVIEWED}/dagRuns/{run}/taskInstances/approve/-1/hitlDetails", answer)
        assert airflow.wait_run(REVIEWED, run, timeout=WAIT) == "success", airflow.task_states(REVIEWED, run)
        states = {task: state for task, _, state in airflow.task_states(REVIEWED, run)}
        assert (states["approve"], states["expire_approved"], states["delete_approved"]) == (
            "success",
            "skipped",
            "skipped",
        )
    assert _snapshots(airflow) == before
