"""Two runs never both pass a check of one table's lease at overlapping times (S15), over interleavings.

Three runs: A and B, and A2, a retry of A (the same owner: it takes A's lease over at once, and A
must then fail its checks). Each step is a take, a check (the fence a delete batch or commit
passes), a release, or time passing beyond the ttl (``jump``: the lease's expiry moved back, as
the database's clock moving on would). A run that passed a take or check holds the table until
time passes beyond the ttl; no other run may pass a take or check while it does.
"""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_iceberg_maint.errors import LeaseLostError
from airflow_iceberg_maint.state.cleanup import state_engine
from airflow_iceberg_maint.state.lease_fence import Fence
from airflow_iceberg_maint.state.leases import try_take
from airflow_iceberg_maint.state.sql_leases import SqlLeases
from tests.support.services import service

LOG = logging.getLogger(__name__)
TTL = timedelta(seconds=60)
RUNS = {"A": "owner-a", "A2": "owner-a", "B": "owner-b"}
#: Takes and checks weigh most: the interleavings that matter are of those, between jumps and releases.
ACTIONS = ["take"] * 3 + ["check"] * 4 + ["release"]
STEPS = st.lists(
    st.one_of(st.tuples(st.sampled_from(ACTIONS), st.sampled_from(sorted(RUNS))), st.just(("jump", ""))),
    min_size=3,
    max_size=25,
)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def state_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/state.db" if request.param == "sqlite" else service("TEST_PG_URL")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
def test_two_runs_never_both_pass_a_check_at_overlapping_times(state_url: str, steps: list[tuple[str, str]]) -> None:
    url = state_url
    store = SqlLeases(url)
    table = f"db.t{uuid.uuid4().hex[:12]}"
    fences: dict[str, Fence] = {}
    holding: str | None = None  # the run whose last take or check is still within its ttl
    superseded: set[str] = set()  # runs whose owner took the lease again since: they never pass again

    def passed(run: str, take: bool) -> None:
        nonlocal holding
        assert run not in superseded, f"{run} passed after a retry of its owner took the lease over"
        # Another run still within its ttl: only a take by a retry of the same owner may take over.
        allowed = holding in (None, run) or (take and RUNS[holding] == RUNS[run])
        assert allowed, f"{run} passed while {holding} holds the lease"
        if take:
            superseded.update(r for r in fences if r != run and RUNS[r] == RUNS[run])
        holding = run

    for action, run in steps:
        if action == "take" and run not in fences:  # a new run of that name
            superseded.discard(run)
            mine, lease = try_take(store, table, RUNS[run], TTL, LOG)
            if mine:
                passed(run, take=True)
                fences[run] = Fence(store, lease, TTL, LOG)
        elif action == "check" and run in fences:
            try:
                fences[run].check("a delete batch")
            except LeaseLostError:
                assert holding != run, f"{run} lost a lease it still holds"
            else:
                passed(run, take=False)
        elif action == "release" and run in fences:
            store.release(fences.pop(run).lease)
            holding = None if holding == run else holding
        elif action == "jump":
            with state_engine(url).begin() as conn:
                jump = "UPDATE iceberg_maint_leases SET expires_at = expires_at - :s WHERE table_name = :t"
                conn.execute(sa.text(jump), {"s": 2 * TTL.total_seconds(), "t": table})
            holding = None
