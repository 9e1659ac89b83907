"""``iceberg_table_maintenance_reviewed`` keeps what a person approved unchanged, beside what was executed (S16).

The DAG runs with ``dag.test()`` on the real metadata database; the approval is recorded as the
HITL REST API of an api-server records it (the response on the task's ``hitl_detail`` row, then
the parked task resumed), from a thread that waits until the ``approve`` task asks.
"""

from __future__ import annotations

import html
import json
import re
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from airflow.dag_processing.dagbag import DagBag
from pyiceberg.catalog.sql import SqlCatalog

from tests.airflow.helpers import xcom
from tests.support.airflow_dags import DAGS

REVIEWED = "iceberg_table_maintenance_reviewed"
TABLE = "demo.orders"
WAIT = 300.0


def _local(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


def _fail_approve() -> None:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState

    with create_session() as session:
        session.query(TaskInstance).filter(TaskInstance.dag_id == REVIEWED, TaskInstance.task_id == "approve").update(
            {TaskInstance.state: TaskInstanceState.FAILED}
        )


class Reviewer(threading.Thread):
    """Approve the run once its ``approve`` task waits for input, keeping the bytes of both dry-run
    reports as they are at that moment (what the reviewer saw)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.seen: dict[str, bytes] = {}
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._approve()
        except BaseException as exc:  # reported by the test, which cannot see this thread's traceback
            self.error = exc
            _fail_approve()  # so that dag.test() ends instead of waiting for input

    def _approve(self) -> None:
        from airflow.models.hitl import HITLDetail
        from airflow.models.taskinstance import TaskInstance
        from airflow.models.trigger import handle_event_submit
        from airflow.triggers.base import TriggerEvent
        from airflow.utils.session import create_session
        from airflow.utils.state import TaskInstanceState

        parked = (TaskInstanceState.AWAITING_INPUT, TaskInstanceState.DEFERRED)
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            with create_session() as session:
                ti = (
                    session.query(TaskInstance)
                    .filter(TaskInstance.dag_id == REVIEWED, TaskInstance.task_id == "approve")
                    .filter(TaskInstance.state.in_(parked))
                    .one_or_none()
                )
                detail = session.get(HITLDetail, ti.id) if ti is not None else None
                if ti is not None and detail is not None:
                    for task in ("expire_dry_run", "dry_run"):
                        uri = xcom(REVIEWED, ti.run_id, task)["report"]
                        self.seen[uri] = _local(uri).read_bytes()
                    detail.responded_by = {"id": "reviewer", "name": "reviewer"}
                    detail.responded_at = datetime.now(UTC)
                    detail.chosen_options = ["Approve"]
                    detail.params_input = {}
                    session.add(detail)
                    handle_event_submit(
                        TriggerEvent(detail.as_resume_event_payload()), task_instance=ti, session=session
                    )
                    return
            time.sleep(0.5)
        raise AssertionError(f"the approve task never waited for input within {WAIT} s")


@pytest.fixture(scope="module")
def dags() -> dict:
    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    return bag.dags


def test_the_approved_reports_stay_as_reviewed_beside_the_executed_ones(
    dags: dict, demo_tables: dict, catalog: SqlCatalog
) -> None:
    from airflow.models.variable import Variable
    from airflow.utils.session import create_session

    from airflow_iceberg_maint.airflow.plugin import table_page
    from airflow_iceberg_maint.state.status_records import STATE_PREFIX, runs_key

    with create_session() as session:  # run and state records other tests of the session left (their reports)
        session.query(Variable).filter_by(key=runs_key(TABLE)).delete()
        session.query(Variable).filter(Variable.key.startswith(STATE_PREFIX)).delete(synchronize_session=False)
    reviewer = Reviewer()
    reviewer.start()
    run = dags[REVIEWED].test(run_conf={"table": TABLE, "expire_older_than_days": 0, "retain_last": 1})
    reviewer.join(timeout=WAIT)
    assert reviewer.error is None, reviewer.error
    assert run.state == "success"

    results = {
        t: xcom(REVIEWED, run.run_id, t) for t in ("expire_dry_run", "dry_run", "expire_approved", "delete_approved")
    }
    dry = {t: results[t]["report"] for t in ("expire_dry_run", "dry_run")}
    real = {t: results[t]["report"] for t in ("expire_approved", "delete_approved")}
    # What the reviewer saw is unchanged after the approved runs wrote their own reports.
    assert reviewer.seen == {uri: _local(uri).read_bytes() for uri in dry.values()}
    for executed, approved in (("expire_approved", "expire_dry_run"), ("delete_approved", "dry_run")):
        body: dict[str, Any] = json.loads(_local(real[executed]).read_text())
        assert body["dry_run"] is False and body["approved_report"] == dry[approved]
        assert json.loads(_local(dry[approved]).read_text())["dry_run"] is True
    assert not demo_tables[TABLE]["old"].exists()  # the approved orphan was deleted
    assert [_local(u).name for u in dry.values()] == ["demo.orders.expiry.dry-run.json", "demo.orders.dry-run.json"]
    assert [_local(u).name for u in real.values()] == ["demo.orders.expiry.json", "demo.orders.json"]

    # The status page's rows: each run links its own report; the executed runs the approved one too.
    with create_session() as session:  # the status records are Variables of the metadata database
        runs = json.loads(session.query(Variable).filter_by(key=runs_key(TABLE)).one().val)["runs"]
    rows = [(r["kind"], r["dry_run"], r["report"], r["approved_report"]) for r in runs]
    assert rows == [
        ("expiry", True, dry["expire_dry_run"], None),
        ("orphans", True, dry["dry_run"], None),
        ("expiry", False, real["expire_approved"], dry["expire_dry_run"]),
        ("orphans", False, real["delete_approved"], dry["dry_run"]),
    ]
    page = bytes(table_page(TABLE).body).decode()
    links = {
        (m[0], unquote(html.unescape(m[1])))
        for m in re.findall(r'<a (class="approved" )?href="report\?uri=([^"]+)"', page)
    }
    assert links == {
        ("", dry["expire_dry_run"]),
        ("", dry["dry_run"]),
        ("", real["expire_approved"]),
        ("", real["delete_approved"]),
        ('class="approved" ', dry["expire_dry_run"]),
        ('class="approved" ', dry["dry_run"]),
    }
