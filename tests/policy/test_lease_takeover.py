"""A lease whose process has ended on this host is taken over at once; a live one never (S15, finding 8).

The process is judged by pid and start time (``state.lease_holder``): a pid now naming another process
(same pid, another start time) has ended too. The kill -9 tests kill a real ``iceberg-maint`` run
while it holds the lease and start the next run at once, as an operator or a retry would.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.state import lease_holder as process
from airflow_iceberg_maint.state.cleanup import default_state_url
from airflow_iceberg_maint.state.leases import try_take
from airflow_iceberg_maint.state.sql_leases import SqlLeases
from tests.lease_helpers import hold
from tests.orphans.scenario import SCHEMA, rows
from tests.orphans.test_cli import _env, _run

_CLI = str(Path(sys.executable).parent / "iceberg-maint")
LOG = logging.getLogger(__name__)
HOUR = timedelta(hours=1)


def _identity(pid: int, start: str | None) -> str:
    mine = process.this_process()
    return f"{mine.rsplit('/', 2)[0]}/{pid}/{start}"


def _dead_child() -> str:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    identity = _identity(child.pid, process.start_ticks(child.pid))
    child.kill()
    child.wait()
    return identity


def test_a_lease_of_an_ended_process_or_a_reused_pid_is_taken_over_and_a_live_ones_is_not(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = SqlLeases(f"sqlite:///{tmp_path}/state.db")
    me = process.this_process()
    assert me and not process.gone_here(me)
    start = me.rsplit("/", 1)[1]
    elsewhere = f"another-host/{me.split('/', 1)[1]}"  # same everything, another host name: nothing is known
    cases = {
        "live": (me, False),
        "reused pid": (_identity(os.getpid(), str(int(start) + 1)), True),
        "ended": (_dead_child(), True),
        "ended elsewhere": (elsewhere.rsplit("/", 2)[0] + "/999999999/1", False),
        "no process (an Airflow task)": ("", False),
    }
    for case, (identity, taken) in cases.items():
        table = f"db.{case.replace(' ', '_').replace('(', '').replace(')', '')}"
        first = hold(store, table, "run A", HOUR, identity)
        with caplog.at_level(logging.WARNING):
            mine, got = try_take(store, table, "run B", HOUR, LOG)
        assert mine is taken, case
        assert (got.owner == "run B") is taken, case
        assert store.renew(first, HOUR) is not taken, case  # A's token renews only while A still holds it
        assert ("taking over the lease of run A: its process has ended" in caplog.text) is taken, case
        caplog.clear()


def _holder_is(prefix: str) -> bool:
    holder = SqlLeases(default_state_url()).holder("db.t")
    return holder is not None and holder.owner.startswith(prefix)


def _kill_while_leased(env: dict[str, str], args: list[str], prefix: str, log: Path) -> None:
    """Start ``iceberg-maint ARGS`` and kill -9 it as soon as it holds the lease (its lease is not released)."""
    with log.open("w") as stderr:
        run = subprocess.Popen([_CLI, *args], env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        deadline = time.monotonic() + 120
        while not _holder_is(prefix):
            assert run.poll() is None, f"the run ended before it was killed: {log.read_text()}"
            assert time.monotonic() < deadline, "the run never took the lease"
            time.sleep(0.005)
        os.kill(run.pid, signal.SIGKILL)
    finally:
        if run.poll() is None:
            run.kill()
        run.wait()
    assert run.returncode == -signal.SIGKILL
    assert _holder_is(prefix)  # killed with its lease held


def test_kill9_of_an_orphans_run_then_another_run_at_once_takes_the_lease(tmp_path: Path) -> None:
    env = _env(tmp_path)
    catalog = SqlCatalog("default", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("db")
    catalog.create_table("db.t", schema=SCHEMA).append(rows(0, 5))
    data = tmp_path / "wh" / "db" / "t" / "data"
    old = time.time() - 5 * 86400
    for i in range(3000):  # enough that the run is still deleting when it is killed
        (data / f"orphan-{i}.parquet").write_bytes(b"x")
        os.utime(data / f"orphan-{i}.parquet", (old, old))

    _kill_while_leased(env, ["orphans", "db.t", "--json"], "iceberg-maint orphans on ", tmp_path / "killed.log")
    again = _run(env, "orphans", "db.t", "--json")

    assert again.returncode == 0, again.stderr
    assert "taking over the lease of iceberg-maint orphans on " in again.stderr
    assert not list(data.glob("orphan-*"))
    assert SqlLeases(default_state_url()).holder("db.t") is None


def test_kill9_of_an_index_refresh_then_another_refresh_at_once_takes_the_lease(tmp_path: Path) -> None:
    env = _env(tmp_path)
    catalog = SqlCatalog("default", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=SCHEMA)
    for i in range(20):
        table.append(rows(i * 50, 50))
    created = _run(env, "index", "create", "db.t", "by_id", "--ordering", "id", "--json")
    assert created.returncode == 0, created.stderr

    _kill_while_leased(
        env, ["index", "refresh", "db.t", "by_id", "--json"], "iceberg-maint index refresh on ", tmp_path / "killed.log"
    )
    again = _run(env, "index", "refresh", "db.t", "by_id", "--json")

    assert again.returncode == 0, again.stderr
    assert "taking over the lease of iceberg-maint index refresh on " in again.stderr
    assert SqlLeases(default_state_url()).holder("db.t") is None
    token = uuid.uuid4().hex  # and the table's lease is free for anyone
    assert SqlLeases(default_state_url()).acquire("db.t", "next", HOUR, token, "").token == token


def test_a_lease_table_of_the_previous_release_gets_its_new_columns_and_its_lease_still_holds(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/old.db"
    with sa.create_engine(url).begin() as conn:
        conn.execute(
            sa.text(
                "CREATE TABLE iceberg_maint_leases (table_name VARCHAR(512) PRIMARY KEY, owner VARCHAR(1024) NOT NULL, "
                "expires_at FLOAT NOT NULL)"
            )
        )
        conn.execute(sa.text("INSERT INTO iceberg_maint_leases VALUES ('db.t', 'old run', 4102444800)"))  # 2100

    store = SqlLeases(url)
    holder = store.holder("db.t")
    assert holder is not None and (holder.owner, holder.token, holder.process) == ("old run", "", "")
    mine, got = try_take(store, "db.t", "new run", HOUR, LOG)
    assert not mine and got == holder
