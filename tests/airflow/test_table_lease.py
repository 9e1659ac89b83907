"""The per-table lease: the store's rules, the trigger, the give-up message, and two real task runs.

The two runs are ``airflow dags test`` processes on the session's metadata database: one holds
the lease of ``demo.orders`` (tests/airflow/dags/table_lease_pair.py) while the other, an expiry of
the same table, defers until it is released and only then changes the table.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred
from airflow.triggers.base import TriggerEvent
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.airflow.leased_task import lease_owner
from airflow_iceberg_maint.airflow.operators.expiry import IcebergExpireSnapshotsOperator
from airflow_iceberg_maint.airflow.operators.orphan_shards import IcebergFinishOrphanShardsOperator
from airflow_iceberg_maint.airflow.table_lease import HostAndVariableLeases, VariableLeases, lease_store_for
from airflow_iceberg_maint.airflow.triggers.table_lease import TableLeaseTrigger
from airflow_iceberg_maint.cli import main
from airflow_iceberg_maint.progress import reporting
from airflow_iceberg_maint.state.leases import Lease
from airflow_iceberg_maint.state.sql_leases import SqlLeases
from tests.airflow.helpers import TaskContextTI, next_event, task_context, task_states, xcom
from tests.lease_helpers import hold

TABLE = "demo.orders"


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.parametrize("kind", ["sql", "variables"])
def test_one_holder_at_a_time_until_released_or_expired(kind: str, state_url: str) -> None:
    store = SqlLeases(state_url) if kind == "sql" else VariableLeases()
    table = f"db.lease_{kind}"
    ttl = timedelta(seconds=60)
    a = hold(store, table, "a", ttl)
    told = store.acquire(table, "b", ttl, "token-b", "")
    assert (told.owner, told.token) == ("a", a.token)  # held: b is told by whom
    assert store.renew(a, ttl)  # the holder renews under its token
    again = hold(store, table, "a", ttl)  # a retry of the same task takes it over at once, with a new token
    assert not store.renew(a, ttl)  # the first try's token no longer renews it
    store.release(Lease(table, "b", again.expires_at, "token-b"))  # not b's: nothing happens
    store.release(a)  # an old token of a: nothing happens either
    assert store.holder(table) == again
    store.release(again)
    assert store.holder(table) is None
    # A holder killed without releasing: once its lease expires, b takes it, and the old token no longer renews.
    gone = hold(store, table, "a", timedelta(0))
    b = hold(store, table, "b", ttl)
    assert not store.renew(gone, ttl)
    store.release(b)
    assert store.holder(table) is None


class _VariablesDown:
    """A Variable store whose metadata database does not answer (a test double: the outage cannot be made
    here without stopping the session's database under the other tests)."""

    def acquire(self, *args: object, **kwargs: Any) -> Lease:
        raise ConnectionError("the metadata database did not answer")


def test_a_task_that_cannot_take_the_variable_gives_back_the_hosts_lease(tmp_path: Path) -> None:
    host = SqlLeases(f"sqlite:///{tmp_path}/host.db")
    both = HostAndVariableLeases(host, _VariablesDown())  # type: ignore[arg-type]
    with pytest.raises(ConnectionError):
        both.acquire(TABLE, "a task", timedelta(seconds=60), "token-a", "")
    assert host.holder(TABLE) is None  # an iceberg-maint run on the host is not kept waiting for the ttl


def test_the_trigger_fires_when_the_lease_is_released_and_gives_up_at_its_deadline(state_url: str) -> None:
    store = SqlLeases(state_url)
    now = datetime.now(UTC)
    other = hold(store, TABLE, "other")
    waiting = TableLeaseTrigger(
        table=TABLE,
        owner="me",
        deadline=(now + timedelta(hours=1)).isoformat(),
        state_url=state_url,
        poll_interval=0.05,
    )

    async def release_then_wait() -> object:
        event = asyncio.ensure_future(next_event(waiting, timeout=30))
        await asyncio.sleep(0)  # the trigger's first look finds the lease held
        await asyncio.to_thread(store.release, other)
        return await event

    fired = asyncio.run(release_then_wait())
    assert isinstance(fired, TriggerEvent)
    assert fired.payload == {"status": "free", "table": TABLE, "deadline": (now + timedelta(hours=1)).isoformat()}

    hold(store, TABLE, "other")
    late = TableLeaseTrigger(table=TABLE, owner="me", deadline=now.isoformat(), state_url=state_url)
    gave_up = asyncio.run(next_event(late, timeout=30))
    assert gave_up is not None and gave_up.payload["status"] == "timeout"
    assert gave_up.payload["holder"]["owner"] == "other"


def test_a_task_that_finds_the_lease_held_defers_or_gives_up_naming_the_holder(
    demo_tables: dict, state_url: str, tmp_path: Path, catalog: SqlCatalog
) -> None:
    store = SqlLeases(state_url)
    holder = hold(store, TABLE, "manual/run_1/remove_orphan_files/-1")
    until = holder.expires_at
    snapshots = len(catalog.load_table(TABLE).metadata.snapshots)

    def expirer(**kwargs: Any) -> IcebergExpireSnapshotsOperator:
        return IcebergExpireSnapshotsOperator(
            task_id="expire", table=TABLE, state_url=state_url, report_location=f"file://{tmp_path}/r", **kwargs
        )

    with pytest.raises(TaskDeferred) as deferred:
        expirer(older_than_days=0).execute(task_context())
    trigger = deferred.value.trigger
    assert isinstance(trigger, TableLeaseTrigger)
    assert (trigger.table, trigger.owner) == (TABLE, "unit/manual__unit/expire/-1")
    assert deferred.value.method_name == "resume_after_lease"
    assert trigger.first_wait == 0  # the first look at the lease is at once
    # Resumed on free but still held (by a part of the lease the triggerer cannot see): the next look
    # waits a poll interval instead of resuming again at once.
    event = {"status": "free", "table": TABLE, "deadline": (until + timedelta(hours=1)).isoformat()}
    with pytest.raises(TaskDeferred) as again:
        expirer(older_than_days=0, lease_poll_interval=7).resume_after_lease(task_context(), event)
    assert isinstance(again.value.trigger, TableLeaseTrigger) and again.value.trigger.first_wait == 7

    with pytest.raises(AirflowException) as busy:
        expirer(lease_timeout=0).execute(task_context())
    assert type(busy.value) is AirflowException  # retried: the holder may be done by then
    assert str(busy.value) == (
        f"table {TABLE}: another maintenance task holds its lease (manual/run_1/remove_orphan_files/-1, until "
        f"{until.isoformat()}); gave up after waiting 0 s (lease_timeout)"
    )
    assert len(catalog.load_table(TABLE).metadata.snapshots) == snapshots

    # The lease is released when the task ends, failed or not.
    store.release(holder)
    with pytest.raises(AirflowFailException):
        expirer(retain_last=0).execute(task_context())
    assert store.holder(TABLE) is None
    assert lease_owner({"ti": TaskContextTI(map_index=3)}, "expire") == "unit/manual__unit/expire/3"  # type: ignore[typeddict-item]


def _a_task_during_an_orphan_run(
    leases: SqlLeases, state_url: str | None, tmp_path: Path
) -> tuple[int, dict[str, object]]:
    """Run ``iceberg-maint orphans``; at its first phase an expiry task (``state_url``) tries the same table.

    The command's status, and what was seen then: ``holder`` (the command's lease in ``leases``) and
    ``task`` (the task's error, if it gave up).
    """
    seen: dict[str, object] = {}

    class TaskDuringTheRun:  # a progress reporter
        def update(self, phase: str, done: int, total: int | None, finished: bool) -> None:
            if "holder" in seen:
                return
            seen["holder"] = leases.holder(TABLE)
            expirer = IcebergExpireSnapshotsOperator(
                task_id="expire",
                table=TABLE,
                state_url=state_url,
                report_location=f"file://{tmp_path}/r",
                lease_timeout=0,
            )
            try:
                expirer.execute(task_context())
            except AirflowException as exc:
                seen["task"] = str(exc)

    with reporting(TaskDuringTheRun()):
        status = main(["--conn-id", "iceberg_default", "--progress", "off", "orphans", TABLE, "--json"])
    return status, seen


def test_a_task_gives_up_while_an_iceberg_maint_run_holds_the_lease(
    demo_tables: dict, state_url: str, tmp_path: Path, catalog: SqlCatalog, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """The other way round from tests/test_cli_lease.py: a command-line run on the task's state_url holds it."""
    monkeypatch.setenv("ICEBERG_MAINT_STATE_URL", state_url)
    status, seen = _a_task_during_an_orphan_run(SqlLeases(state_url), state_url, tmp_path)
    assert status == 0, capsys.readouterr().err
    holder = seen["holder"]
    assert isinstance(holder, Lease) and holder.owner.startswith("iceberg-maint orphans on ")
    assert seen["task"] == (
        f"table {TABLE}: another maintenance task holds its lease ({holder.owner}, until "
        f"{holder.expires_at.isoformat()}); gave up after waiting 0 s (lease_timeout)"
    )
    assert SqlLeases(state_url).holder(TABLE) is None


def test_out_of_the_box_a_task_and_an_iceberg_maint_run_on_one_host_exclude_each_other(
    demo_tables: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """No state URL anywhere: the command's default state file is the host's, and a task takes it too (S15)."""
    for name in ("ICEBERG_MAINT_STATE_URL", "AIRFLOW__ICEBERG_MAINT__STATE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    host = SqlLeases(f"sqlite:///{tmp_path}/state/iceberg-maint/state.db")  # what both read by default
    status, seen = _a_task_during_an_orphan_run(host, None, tmp_path)  # the task has no state_url
    assert status == 0, capsys.readouterr().err
    holder = seen["holder"]
    assert isinstance(holder, Lease) and holder.owner.startswith("iceberg-maint orphans on ")
    assert str(seen["task"]).startswith(f"table {TABLE}: another maintenance task holds its lease ({holder.owner}, ")
    assert host.holder(TABLE) is None

    # The other way round: the task's store holds it, in the host's file and in the Variable.
    task = hold(lease_store_for(None), TABLE, "a task of the maintenance DAG")
    for store in (host, VariableLeases()):
        held = store.holder(TABLE)
        assert held is not None and (held.owner, held.token) == (task.owner, task.token)
    capsys.readouterr()
    busy = main(["--conn-id", "iceberg_default", "--progress", "off", "orphans", TABLE, "--json"])
    assert busy == 4
    assert "another maintenance run holds its lease (a task of the maintenance DAG, until " in capsys.readouterr().err
    lease_store_for(None).release(task)
    assert host.holder(TABLE) is None and VariableLeases().holder(TABLE) is None


def test_the_sharded_scans_delete_step_waits_for_the_lease(demo_tables: dict, state_url: str, tmp_path: Path) -> None:
    """The finish task deletes, so it takes the lease before it reads its scratch (here, none exists)."""
    store = SqlLeases(state_url)
    held = hold(store, TABLE, "scheduled/run_1/expire_snapshots/0")

    def finisher(**kwargs: Any) -> IcebergFinishOrphanShardsOperator:
        scratch = f"file://{tmp_path}/no-scratch"
        return IcebergFinishOrphanShardsOperator(
            task_id="finish", table=TABLE, scratch=scratch, state_url=state_url, **kwargs
        )

    with pytest.raises(TaskDeferred) as deferred:
        finisher().execute(task_context())
    assert isinstance(deferred.value.trigger, TableLeaseTrigger)
    assert (deferred.value.trigger.table, deferred.value.trigger.owner) == (TABLE, "unit/manual__unit/finish/-1")
    with pytest.raises(AirflowException, match=r"another maintenance task holds its lease \(scheduled/run_1/"):
        finisher(lease_timeout=0).execute(task_context())
    assert store.holder(TABLE) == held


def _dags_test(dag_id: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as output:
        return subprocess.Popen(
            [sys.executable, "-m", "airflow", "dags", "test", dag_id],
            env=dict(os.environ),
            stdout=output,
            stderr=subprocess.STDOUT,
        )


def _run_id(dag_id: str) -> str | None:
    states = task_states(dag_id, "%")
    if not states:
        return None
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        run = session.query(DagRun).filter(DagRun.dag_id == dag_id).one()
        return str(run.run_id)


def test_two_task_runs_on_one_table_take_turns(
    demo_tables: dict, catalog: SqlCatalog, state_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ICEBERG_MAINT_TEST_STATE_URL", state_url)
    monkeypatch.setenv("ICEBERG_MAINT_TEST_LEASE_DIR", str(tmp_path))
    snapshots = [s.snapshot_id for s in catalog.load_table(TABLE).metadata.snapshots]
    store = SqlLeases(state_url)

    holder = _dags_test("lease_holder", tmp_path / "holder.log")
    try:
        wait_for(lambda: (tmp_path / "held").exists() or holder.poll() is not None, "the holder to take the lease")
        assert holder.poll() is None, (tmp_path / "holder.log").read_text()[-4000:]
        held = store.holder(TABLE)
        assert held is not None and held.owner.startswith("lease_holder/")

        waiter = _dags_test("lease_waiter", tmp_path / "waiter.log")
        try:

            def waiter_deferred() -> bool:
                # Its log, not the metadata DB: `dags test` runs the trigger in the same process and
                # commits the task's "deferred" state only when the trigger fires.
                log = (tmp_path / "waiter.log").read_text()
                assert waiter.poll() is None, log[-4000:]
                return "Pausing task as DEFERRED" in log and f"lease of {TABLE} held by lease_holder/" in log

            wait_for(waiter_deferred, "the expiry task to defer")
            # Deferred, it has not touched the table, and the lease is still the holder's.
            assert [s.snapshot_id for s in catalog.load_table(TABLE).metadata.snapshots] == snapshots
            now = store.holder(TABLE)  # the same take (its expiry moves with each renewal)
            assert now is not None and (now.owner, now.token) == (held.owner, held.token)

            (tmp_path / "release").write_text("go")
            assert holder.wait(timeout=180) == 0, (tmp_path / "holder.log").read_text()[-4000:]
            assert waiter.wait(timeout=180) == 0, (tmp_path / "waiter.log").read_text()[-4000:]
        finally:
            if waiter.poll() is None:
                waiter.kill()
                waiter.wait()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()

    holder_run, waiter_run = _run_id("lease_holder"), _run_id("lease_waiter")
    assert task_states("lease_holder", "%") == {("remove_orphan_files", -1): "success"}
    assert task_states("lease_waiter", "%") == {("expire_snapshots", -1): "success"}
    removed = xcom("lease_holder", str(holder_run), "remove_orphan_files")
    expired = xcom("lease_waiter", str(waiter_run), "expire_snapshots")
    assert removed["deleted_file_count"] == 1 and not demo_tables[TABLE]["old"].exists()
    assert expired["expired_snapshot_count"] == 1
    assert [s.snapshot_id for s in catalog.load_table(TABLE).metadata.snapshots] == snapshots[1:]
    assert store.holder(TABLE) is None  # both released


def _stopped(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rfind(")") + 2] == "T"


def test_a_stalled_orphan_task_loses_its_lease_to_an_iceberg_maint_run_and_deletes_nothing_more(
    demo_tables: dict, state_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Finding 4 of issue 31: the task (a 2 s lease) stops after its plan; ``iceberg-maint orphans`` on the same
    state store takes the lease once it expired, and only then is the task continued: it stops before deleting."""
    monkeypatch.setenv("ICEBERG_MAINT_TEST_STATE_URL", state_url)
    monkeypatch.setenv("ICEBERG_MAINT_TEST_LEASE_DIR", str(tmp_path))
    monkeypatch.setenv("ICEBERG_MAINT_STATE_URL", state_url)  # the command line's lease store: the tasks' state_url
    old, paused, log = demo_tables[TABLE]["old"], tmp_path / "paused", tmp_path / "stalled.log"
    seen: dict[str, object] = {}
    task = _dags_test("lease_stalled", log)
    try:
        wait_for(lambda: task.poll() is not None or (paused.exists() and _stopped(int(paused.read_text()))), "a stop")
        assert task.poll() is None, log.read_text()[-4000:]

        class ContinueTheTask:  # the command's first phase: it holds the lease; the task goes on meanwhile
            def update(self, phase: str, done: int, total: int | None, finished: bool) -> None:
                if "holder" in seen:
                    return
                seen["holder"] = SqlLeases(state_url).holder(TABLE)
                os.kill(int(paused.read_text()), signal.SIGCONT)
                task.wait(timeout=180)
                seen["old still there"] = old.exists()

        with reporting(ContinueTheTask()):
            argv = ["--conn-id", "iceberg_default", "--progress", "off", "orphans", TABLE, "--lease-wait", "60"]
            status = main([*argv, "--json"])
    finally:
        if task.poll() is None:
            os.kill(task.pid, signal.SIGCONT)
            task.kill()
            task.wait()

    assert status == 0, capsys.readouterr().err
    holder = seen["holder"]
    assert isinstance(holder, Lease) and holder.owner.startswith("iceberg-maint orphans on ")
    assert seen["old still there"] is True  # the task deleted nothing while the command held the lease
    assert task_states("lease_stalled", "%") == {("remove_orphan_files", -1): "failed"}
    assert (f"AirflowException: table {TABLE}: lease of lease_stalled/") in log.read_text()
    assert (
        f"lost before a delete batch: another maintenance run holds its lease ({holder.owner}, until "
        f"{holder.expires_at.isoformat()}); the run stopped there, nothing more was deleted or committed"
    ) in log.read_text()
    assert json.loads(capsys.readouterr().out)["deleted_file_count"] == 1 and not old.exists()
    assert SqlLeases(state_url).holder(TABLE) is None
