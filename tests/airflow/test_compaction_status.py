"""The status page shows a table's compaction policy: due or not, and the days since its last compaction."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from airflow_iceberg_maint.airflow.plugin import status_json, status_page
from airflow_iceberg_maint.state.cleanup import SqlStateStore, record_compaction_run
from airflow_iceberg_maint.state.jobs import DATA_COMPACTION
from tests.airflow.test_status_page import Elements
from tests.policy.test_compaction_policy import UUID, rewrite_json
from tests.support.airflow_dags import DAGS


def test_the_page_shows_days_since_the_last_compaction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    monkeypatch.setenv("AIRFLOW__ICEBERG_MAINT__STATE_URL", url)
    # The sample file's compaction policy, enabled (the sample ships it disabled).
    sample = (DAGS / "iceberg_maint_policies.yaml").read_text(encoding="utf-8")
    policies = tmp_path / "policies.yaml"
    policies.write_text(sample.replace("  enabled: false", "  enabled: true"), encoding="utf-8")
    monkeypatch.setenv("AIRFLOW__ICEBERG_MAINT__POLICY_FILE", str(policies))
    monkeypatch.setenv("AIRFLOW__ICEBERG_MAINT__INDEX_DEFINITIONS_FILE", str(DAGS / "iceberg_indexes.yaml"))
    at = datetime.now(UTC) - timedelta(days=2)
    record_compaction_run(SqlStateStore(url), UUID, {**rewrite_json(), "table": "demo.events"}, at)
    page = Elements(bytes(status_page().body).decode())
    cells = {a["title"]: text for a, text in page.find("div", class_="policy") if a.get("data-type") == DATA_COMPACTION}
    (reason,) = [r for r in cells if r.startswith("last compacted 2 days ago")]
    assert reason.endswith("interval 1 day: due")
    assert " ".join(cells[reason].split()) == "compact_daily (compaction): due"
    body = json.loads(bytes(status_json().body))
    events = next(t for t in body["tables"] if t["table"] == "demo.events")
    assert (events["compaction"]["policy"], events["compaction"]["due"]) == ("compact_daily", True)
