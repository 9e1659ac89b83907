"""The Airflow UI in a real browser: a real ``airflow standalone``, Debian's headless chromium, Playwright.

One Airflow (SQLite metadata database, the project's ``dags/``, reports on the local S3 server) for the
module. The manual DAG is triggered through Airflow's own trigger dialog (dry run) and through the
status page's pre-filled form (real run), and the exact files are checked on disk; a bad table,
location and cutoff each fail and delete nothing; the status page shows the runs, their reports and
the index lag recorded by the index maintenance DAG, and the fleet page lists the catalog's tables.
Screenshots go to ``$TMPDIR/iceberg-maint-screens/`` (the run prints the path).
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.airflow.ui.wording import size as _size
from tests.support.browser import ARTIFACTS, BASE, CHROMIUM_ARGS, INDEX_DAG, MANUAL, PASSWORD, Airflow

pytestmark = [pytest.mark.browser, pytest.mark.s3, pytest.mark.timeout(900)]

OLD = time.time() - 10 * 86_400
# Bounded waits on real conditions, sized for a loaded 2-core machine (the api-server is one process).
TRIGGER_WAIT = 600.0


def _triggered_run(scope: Any, airflow: Airflow, timeout: float = TRIGGER_WAIT) -> str:
    """The run id the status page's trigger form shows once Airflow answered its POST.

    The answer waits for the one api-server process, which also serves every running task's calls:
    on a loaded machine it can take minutes. So wait for the real outcome (the run link, or the
    problem the page shows), bounded, and say what the page and Airflow showed if neither came."""
    try:
        scope.locator("#run-link, #result.problem").first.wait_for(timeout=timeout * 1000)
    except Exception as exc:  # Playwright's TimeoutError: report the state, not the locator
        result = scope.locator("#result")
        shown = f"{result.inner_text(timeout=10_000)!r} (class {result.get_attribute('class', timeout=10_000)!r})"
        raise AssertionError(
            f"the trigger form showed neither a run link nor a problem {timeout:.0f} s after submit "
            f"({type(exc).__name__}); #result: {shown}; {airflow.state()}"
        ) from None
    problem = scope.locator("#result.problem")
    if problem.count():
        raise AssertionError(f"the trigger form shows a problem: {problem.inner_text()}; {airflow.state()}")
    return str(scope.locator("#run-link").get_attribute("data-run-id"))


def _columns_agree(scope: Any) -> int:
    """Every row of the status page: a real run that succeeded is the last cleanup the Due column shows, and a
    table with a last cleanup never reads "never cleaned". Returns how many rows were checked."""
    rows = scope.locator("#tables tbody tr[data-table]")
    for i in range(rows.count()):
        row = rows.nth(i)
        cleaned = row.locator("td.due-cell").get_attribute("data-last-cleaned")
        last = row.locator("td.last-run")
        real_success = last.get_attribute("data-dry-run") == "false" and last.get_attribute("data-status") == "success"
        if real_success:
            assert cleaned == last.get_attribute("data-at"), row.inner_text()
        assert ("never cleaned" in row.locator("td.due-cell").inner_text()) == (not cleaned), row.inner_text()
    return int(rows.count())


def _lag_words(behind: int) -> str:
    return "up to date" if behind == 0 else f"{behind} snapshot{'' if behind == 1 else 's'} behind"


def _plant(folder: Path, *names: str, mtime: float = OLD) -> list[Path]:
    paths = []
    for name in names:
        path = folder / name
        path.write_bytes(b"PAR1" + name.encode() + b"\0" * 40)
        os.utime(path, (mtime, mtime))
        paths.append(path)
    return paths


def test_pages_need_an_authenticated_user(airflow: Airflow) -> None:
    for path in (
        "/iceberg-maint/status",
        "/iceberg-maint/status.json",
        "/iceberg-maint/trigger?table=sales.orders",
        f"/iceberg-maint/report?uri={airflow.report_base}/x.json",
    ):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(BASE + path, timeout=10)
        refused.value.close()  # it holds the response's socket
        assert refused.value.code == 401, path


@pytest.mark.timeout(2400)  # bounded waits of minutes each on a loaded machine; the module's 900 s is too short
def test_trigger_dry_then_real_bad_inputs_and_status(airflow: Airflow, chromium: str) -> None:
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    data = airflow.warehouse / "sales" / "orders" / "data"
    referenced = sorted(p for p in data.iterdir())
    orphans = _plant(data, "00000-9-orphan-a.parquet", "00000-9-orphan-b.parquet")
    fresh = _plant(data, "00000-9-in-flight.parquet", mtime=time.time())[0]
    for dag_id in (MANUAL, INDEX_DAG):
        airflow.api("PATCH", f"/dags/{dag_id}", {"is_paused": False})
    airflow.api("POST", "/pools", {"name": "iceberg_maint", "slots": 2, "include_deferred": False})
    airflow.api("POST", f"/dags/{INDEX_DAG}/dagRuns", {"logical_date": None})  # runs alongside the orphan runs

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(120_000)  # a loaded 2-core CI machine: the UI's first render can take long
        page.goto(BASE + "/")
        page.fill("input[name=username]", "admin")
        page.fill("input[name=password]", PASSWORD)
        page.locator("button[type=submit]").click()
        page.wait_for_url(BASE + "/")

        # 1. Dry run through Airflow's own trigger dialog.
        page.goto(f"{BASE}/dags/{MANUAL}")
        page.get_by_role("button", name="Trigger").first.click()
        dialog = page.get_by_role("dialog")
        dialog.locator("input[name=element_table]").fill("sales.orders")
        assert dialog.locator("input[name=element_dry_run]").is_checked()
        page.screenshot(path=ARTIFACTS / "01-airflow-trigger-dialog-dry-run.png")
        before = airflow.run_ids(MANUAL)
        dialog.get_by_role("button", name="Trigger").last.click()
        dialog.wait_for(state="hidden")
        (dry_run,) = airflow.run_ids(MANUAL) - before
        assert airflow.wait_run(MANUAL, dry_run) == "success", airflow.task_states(MANUAL, dry_run)
        assert all(p.exists() for p in [*orphans, fresh, *referenced])

        # 2. The status page shows the dry run; its report lists exactly the two old orphans.
        page.goto(f"{BASE}/plugin/iceberg-maintenance")
        frame = page.frame_locator("iframe")
        row = frame.locator("tr[data-table='sales.orders']")
        row.wait_for()
        assert "dry run" in row.inner_text() and "would delete 2 orphan files (" in row.inner_text()
        page.screenshot(path=ARTIFACTS / "02-status-after-dry-run.png")
        row.get_by_role("link", name="report").click()
        listed = frame.locator("#orphans li")
        listed.first.wait_for()
        assert sorted(listed.all_inner_texts()) == sorted(f"file://{p}" for p in orphans)
        assert frame.locator("#ran").inner_text().endswith("finished")  # the run's end, not a phase
        assert "delete" not in frame.locator("#timings").inner_text()  # a dry run deletes nothing
        # The timings are a bar, one segment per phase, not raw JSON.
        assert frame.locator("#timings .phase").count() >= 3 and "{" not in frame.locator("#timings").inner_text()
        page.screenshot(path=ARTIFACTS / "03-dry-run-report.png")

        # 3. Real run through the status page's pre-filled form.
        page.goto(f"{BASE}/plugin/iceberg-maintenance")
        frame.locator("tr[data-table='sales.orders']").get_by_role("link", name="Trigger…").click()
        table_field = frame.locator("#param-table")
        table_field.wait_for()
        assert table_field.input_value() == "sales.orders"
        frame.locator("#param-dry_run").uncheck()
        page.screenshot(path=ARTIFACTS / "04-prefilled-form-real-run.png")
        frame.locator("#submit").click()
        real_run = _triggered_run(frame, airflow)
        assert airflow.wait_run(MANUAL, real_run) == "success", airflow.task_states(MANUAL, real_run)
        assert [p for p in orphans if p.exists()] == []
        assert fresh.exists() and all(p.exists() for p in referenced)
        page.goto(f"{BASE}/plugin/iceberg-maintenance")
        row = frame.locator("tr[data-table='sales.orders']")
        row.wait_for()
        assert "real run" in row.inner_text() and "deleted 2 orphan files (" in row.inner_text()
        # No policy attaches sales.orders, yet the manual run cleaned it: both columns show when it ran.
        assert "never cleaned" not in row.inner_text() and "0.0 days" not in row.inner_text()
        assert re.search(
            r"last cleaned (just now|\d+ min ago) \(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\)", row.inner_text()
        )
        assert _columns_agree(frame) >= 2
        # The dry and the real run; a task retried on a loaded machine adds its failed attempt, nothing else.
        recent = frame.locator("#recent-runs tr.run[data-kind='orphans']").all_inner_texts()
        done = sorted("real run" in text for text in recent if "sales.orders" in text and "failed" not in text)
        assert done == [False, True], recent
        body = json.loads(page.request.get(f"{BASE}/iceberg-maint/status.json").text())
        orders = next(t for t in body["tables"] if t["table"] == "sales.orders")
        assert orders["last_cleaned_at"] == orders["last_run"]["at"] == orders["runs"][-1]["finished_at"]
        real_report = airflow.report(orders["runs"][-1]["report"])
        assert real_report["finished_at"] == orders["runs"][-1]["finished_at"]
        assert f"({_size(real_report['orphan_bytes'])} reclaimed)" in row.inner_text()
        assert [(r["kind"], r["dry_run"]) for r in orders["runs"]] == [("orphans", True), ("orphans", False)]
        page.screenshot(path=ARTIFACTS / "05-status-after-real-run.png")
        # The table's page: both runs in the history with their kind, as bars and with their phase timings.
        row.locator("a.table-link").click()
        runs = frame.locator("#runs tr.run")
        runs.first.wait_for()
        assert [runs.nth(i).get_attribute("data-kind") for i in range(runs.count())] == ["orphans", "orphans"]
        assert frame.locator("#runs .phases").count() == 2
        bars = frame.locator("#chart-bytes rect")
        assert [bars.nth(i).get_attribute("class") for i in range(bars.count())] == [
            "dry kind-orphans",
            "real kind-orphans",
        ]
        assert frame.locator("#summary-row td.due-cell").get_attribute("data-last-cleaned") == orders["last_cleaned_at"]
        page.screenshot(path=ARTIFACTS / "05b-table-run-history.png", full_page=True)

        # 4. A bad table, location and cutoff: each run fails with its error and deletes nothing.
        kept = _plant(data, "00000-9-orphan-c.parquet")
        sibling = f"file://{airflow.warehouse}/sales/orders_backup"
        bad = {
            "table=sales.nope&dry_run=false": "table 'sales.nope': not found in catalog 'iceberg_default'",
            f"table=sales.orders&dry_run=false&location={sibling}": "is not under the table location",
            "table=sales.orders&dry_run=false&older_than_days=-1": (
                "argument older_than_days: expected a number of days >= 1, got -1"
            ),
        }
        failed_runs: dict[str, str] = {}
        for query, message in bad.items():
            # Opened on its own, the form reopens inside Airflow's navigation.
            page.goto(f"{BASE}/iceberg-maint/trigger?{query}")
            page.wait_for_url(re.compile(r".*/plugin/iceberg-maintenance/iceberg-maint/trigger\?.+"))
            framed = page.frame_locator("iframe")
            framed.locator("#param-table").wait_for()
            framed.locator("#submit").click()
            failed_runs[_triggered_run(framed, airflow)] = message
        page.screenshot(path=ARTIFACTS / "06-bad-cutoff-form.png")
        for run_id, message in failed_runs.items():
            assert airflow.wait_run(MANUAL, run_id) == "failed"
            assert message in airflow.task_log(MANUAL, run_id, "remove_orphan_files")
        assert all(p.exists() for p in [*kept, fresh, *referenced])

        # 5. The index maintenance DAG records each index's lag when it checks it; the page shows it.
        for run_id in airflow.run_ids(INDEX_DAG):  # this test's run and the one unpausing scheduled
            assert airflow.wait_run(INDEX_DAG, run_id) == "success", (run_id, airflow.task_states(INDEX_DAG, run_id))
        appended_at = datetime.now(UTC)
        SqlCatalog("iceberg_default", **airflow.catalog).load_table("demo.events").append(
            pa.table({"id": [1000], "kind": ["c"]})
        )
        second = airflow.api("POST", f"/dags/{INDEX_DAG}/dagRuns", {"logical_date": None})["dag_run_id"]
        assert airflow.wait_run(INDEX_DAG, second) == "success", airflow.task_states(INDEX_DAG, second)
        # The DAG also runs every 15 minutes: a tick may have checked (and refreshed) the index first.
        for run_id in airflow.run_ids(INDEX_DAG):
            assert airflow.wait_run(INDEX_DAG, run_id) == "success", (run_id, airflow.task_states(INDEX_DAG, run_id))
        recorded = json.loads(airflow.api("GET", "/variables/iceberg_maint.index_lag.demo.events")["value"])
        since_append = {
            name: [
                (p["snapshots_behind"], p["lagging"])
                for p in points
                if datetime.fromisoformat(p["checked_at"]) >= appended_at
            ]
            for name, points in recorded["history"].items()
        }
        # The first check after the append saw it: 1 snapshot behind, beyond events_by_id's bound of 0,
        # within events_by_kind's bound of 2; the latest record is the last point of each history.
        assert since_append["events_by_id"][0] == (1, True) and since_append["events_by_kind"][0] == (1, False)
        latest = {n: (i["snapshots_behind"], i["lagging"]) for n, i in recorded["indexes"].items()}
        assert latest == {n: since_append[n][-1] for n in ("events_by_id", "events_by_kind")}
        page.goto(f"{BASE}/plugin/iceberg-maintenance")
        events = frame.locator("tr[data-table='demo.events']")
        events.wait_for()
        shown = {n: events.locator("td.indexes div.index", has_text=f"{n}:").inner_text() for n in latest}
        # The index DAG refreshed the lagging events_by_id: its record is the index after the commit.
        assert latest["events_by_id"] == (0, False), recorded
        for name, (behind, lagging) in latest.items():
            assert f"{name}: {_lag_words(behind)}" in shown[name], shown
            assert ("lagging" if lagging else "within bounds") in shown[name], shown
        assert "events_by_kind: 1 snapshot behind (" in shown["events_by_kind"]
        assert events.locator("td.indexes svg").count() == 2  # each index's lag over time
        assert _columns_agree(frame) >= 2
        page.screenshot(path=ARTIFACTS / "07-status-index-lag.png", full_page=True)
        events.locator("a.table-link").click()
        charts = {n: frame.locator(f".chart-lag[data-index='{n}'] rect") for n in latest}
        charts["events_by_id"].first.wait_for()
        for name, bars in charts.items():
            assert bars.count() == len(recorded["history"][name]) >= 2
            assert bars.last.get_attribute("class") == ("lagging" if latest[name][1] else "ok")
        page.screenshot(path=ARTIFACTS / "08-table-index-lag-history.png", full_page=True)
        page.goto(f"{BASE}/plugin/iceberg-maintenance/iceberg-maint/fleet")
        fleet = frame.locator("#fleet tr[data-table]")
        fleet.first.wait_for()
        fleet_tables = sorted(fleet.nth(i).get_attribute("data-table") or "" for i in range(fleet.count()))
        assert fleet_tables == ["demo.events", "sales.orders"]  # every table of the catalog
        page.screenshot(path=ARTIFACTS / "09-fleet.png", full_page=True)
        browser.close()
    stamp = datetime.now(UTC).isoformat()
    (ARTIFACTS / "README.txt").write_text(f"Screenshots of tests/ui/test_browser.py, {stamp}\n")
