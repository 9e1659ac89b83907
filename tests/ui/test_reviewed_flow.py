"""``iceberg_table_maintenance_reviewed`` in a real ``airflow standalone``: the approval form in chromium.

Approve: the form shows both dry runs (snapshots to expire, the files only they reach, orphans,
report links); only the reviewed snapshots expire (a snapshot that became due after the review,
because ``main`` moved on, stays) and only the reviewed orphans are deleted (an orphan planted
after the review is kept). Reject: nothing is expired or deleted. Screenshots go to
``test-artifacts/ui/``.
"""

from __future__ import annotations

import os
import time
import urllib.error
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

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
    """Wait until the run's ``approve`` task waits for a person (or the run ended without it)."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        try:
            states = {task: state for task, _, state in airflow.task_states(REVIEWED, run_id)}
        except (TimeoutError, urllib.error.URLError) as exc:  # a busy api-server: ask again
            if isinstance(exc, urllib.error.HTTPError):
                raise
            continue
        if states.get("approve") in ("deferred", "awaiting_input"):
            return
        if states.get("approve") in ("success", "failed", "skipped", "upstream_failed"):
            break
        time.sleep(2)
    raise AssertionError(f"run {run_id} never waited for approval: {airflow.task_states(REVIEWED, run_id)}")


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
    first_list = Path(_orders(airflow).snapshot_by_id(first).manifest_list.removeprefix("file://"))
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
        assert page.get_by_text("1 snapshots to expire", exact=False).count() >= 1
        assert page.get_by_text(str(first), exact=False).count() >= 1
        assert page.get_by_text(f"file://{first_list}", exact=False).count() >= 1
        for path in reviewed:
            assert page.get_by_text(f"file://{path}", exact=False).count() >= 1
        assert page.get_by_text(str(unseen), exact=False).count() == 0
        for link in ("Full report", "Full expiry report"):
            href = page.get_by_role("link", name=link, exact=True).get_attribute("href")
            assert href is not None and href.startswith("/iceberg-maint/report?uri=s3%3A%2F%2F"), (link, href)
        page.screenshot(path=ARTIFACTS / "10-reviewed-approval-form.png", full_page=True)
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

        # 2. Reject: the expiry and the delete are skipped; every snapshot and file stays.
        fourth = _append(airflow, 300)
        rejected = _trigger(airflow)
        _awaiting_approval(airflow, rejected)
        page.goto(f"{BASE}/dags/{REVIEWED}/runs/{rejected}/tasks/approve/required_actions")
        page.get_by_text("1 orphan files", exact=False).first.wait_for()
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
