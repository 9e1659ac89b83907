"""The lag the status page shows right after the index DAG committed an extract: the index as it now stands.

The page showed "1 snapshots behind, lagging" after the commit task had refreshed the index (the
command line said 0 behind): the only record was the lag plan's, measured before the commit. The
commit task now measures the index again and records it, checked against the bounds the plan used.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.state.status_records import SqlRecords, index_lag_key
from tests.airflow.index_helpers import TABLE, append, events_table
from tests.airflow.test_index_operators import commit, create, plan

if TYPE_CHECKING:
    from airflow.sdk import Context


@pytest.fixture
def records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SqlRecords:
    """The status records in a SQL database (``[iceberg_maint] state_url``), where the tasks write them."""
    url = f"sqlite:///{tmp_path}/state.db"
    monkeypatch.setenv("AIRFLOW__ICEBERG_MAINT__STATE_URL", url)
    return SqlRecords(url)


def _recorded(records: SqlRecords) -> dict[str, Any]:
    body = records.get(index_lag_key(TABLE))
    assert body is not None
    return body


def _lag(recorded: dict[str, Any], index: str) -> tuple[int, bool]:
    lag = recorded["indexes"][index]
    return lag["snapshots_behind"], lag["lagging"]


def test_the_lag_recorded_after_a_commit_is_the_index_as_it_now_stands(
    catalog: SqlCatalog, context: Context, records: SqlRecords
) -> None:
    events_table(catalog)
    create(context)
    commit(context, "events_by_id", full="true")
    commit(context, "events_by_kind")
    append(catalog, 5)
    plan(context)  # what the index DAG's plan task records: both one snapshot behind
    before = _recorded(records)
    assert (_lag(before, "events_by_id"), _lag(before, "events_by_kind")) == ((1, True), (1, False))

    commit(context, "events_by_id")  # the DAG's refresh of the lagging index
    after = _recorded(records)
    assert _lag(after, "events_by_id") == (0, False)
    assert after["indexes"]["events_by_id"]["threshold"]["max_snapshots_behind"] == 0
    assert [(p["snapshots_behind"], p["lagging"]) for p in after["history"]["events_by_id"]][-2:] == [
        (1, True),
        (0, False),
    ]
    assert _lag(after, "events_by_kind") == (1, False)  # not committed: its record stays

    # A commit that leaves an index behind (an older snapshot) is judged by that index's own bounds
    # (events_by_kind lags only beyond 2 snapshots), not by "any staleness".
    older = catalog.load_table(TABLE).current_snapshot().snapshot_id
    append(catalog, 5)
    commit(context, "events_by_kind", snapshot_id=older)
    assert _lag(_recorded(records), "events_by_kind") == (1, False)
    commit(context, "events_by_id", snapshot_id=older)
    assert _lag(_recorded(records), "events_by_id") == (1, True)
