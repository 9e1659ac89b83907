"""The table lease on the command line (S15): a run that changes a table takes the lease Airflow tasks take.

Each lease here is taken through the store's own API, as an Airflow task takes it (its owner named as
``lease_owner`` names a task instance), in the database the command's ``$ICEBERG_MAINT_STATE_URL`` names.
The commands run as a user runs them: subprocesses of the installed ``iceberg-maint``.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.cli import main
from airflow_iceberg_maint.policy.policies import SNAPSHOT_EXPIRY
from airflow_iceberg_maint.progress import reporting
from airflow_iceberg_maint.state.cleanup import SqlStateStore, default_state_url
from airflow_iceberg_maint.state.leases import Lease
from airflow_iceberg_maint.state.sql_leases import SqlLeases
from tests.lease_helpers import hold
from tests.orphans.scenario import SCHEMA, rows
from tests.orphans.test_cli import _env, _run, _table_with_orphan

#: An Airflow task instance, as ``leased_task.lease_owner`` names it.
TASK = "iceberg_orphan_cleanup_manual/manual__2026-12-03T07:00:00+00:00/remove_orphan_files/-1"
EXIT_TABLE_BUSY = 4
_CLI = str(Path(sys.executable).parent / "iceberg-maint")


def _store() -> SqlLeases:
    return SqlLeases(default_state_url())  # the database the subprocesses use (tests/conftest.py)


def _task_holds(table: str, ttl: timedelta = timedelta(minutes=10)) -> Lease:
    """The lease of ``table`` taken as an Airflow task takes it; its expiry time is the database's."""
    return hold(_store(), table, TASK, ttl)


def _busy(command: str, table: str, until: datetime) -> str:
    return (
        f"iceberg-maint {command}: table {table}: another maintenance run holds its lease ({TASK}, until "
        f"{until.isoformat()}); nothing was changed (--lease-wait SECONDS waits for it)\n"
    )


def _files(root: Path) -> dict[str, int]:
    """Every file under ``root`` with its modification time: unchanged means nothing written or deleted."""
    return {str(p): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def _two_snapshots(tmp_path: Path) -> SqlCatalog:
    catalog = SqlCatalog("default", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("db")
    table = catalog.create_table("db.events", schema=SCHEMA)
    table.append(rows(0, 5))
    table.append(rows(5, 5))
    return catalog


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_expire_snapshots_fails_at_once_on_a_held_lease_changing_nothing_then_runs_once_released(
    tmp_path: Path,
) -> None:
    catalog = _two_snapshots(tmp_path)
    env = _env(tmp_path)
    task = _task_holds("db.events")
    until = task.expires_at
    before, files = catalog.load_table("db.events").metadata_location, _files(tmp_path / "wh")
    args = ["expire-snapshots", "db.events", "--older-than", datetime.now(UTC).isoformat(), "--json"]

    busy = _run(env, *args)

    assert (busy.returncode, busy.stdout, busy.stderr) == (
        EXIT_TABLE_BUSY,
        "",
        _busy("expire-snapshots", "db.events", until),
    )
    assert catalog.load_table("db.events").metadata_location == before
    assert _files(tmp_path / "wh") == files
    table_uuid = str(catalog.load_table("db.events").metadata.table_uuid)
    assert SqlStateStore().get(table_uuid, SNAPSHOT_EXPIRY) is None  # not even recorded as an attempt
    assert _store().holder("db.events").owner == TASK

    _store().release(task)
    done = _run(env, *args)

    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["expired_snapshot_ids"]) == 1
    assert catalog.load_table("db.events").metadata_location != before
    assert _store().holder("db.events") is None  # released at the end


def test_orphans_fails_at_once_on_a_held_lease_and_takes_over_an_expired_one(tmp_path: Path) -> None:
    orphan = _table_with_orphan(tmp_path)
    env = _env(tmp_path)
    task = _task_holds("db.t")
    until = task.expires_at
    files = _files(tmp_path / "wh")

    busy = _run(env, "orphans", "db.t", "--older-than-days", "3", "--json")

    assert (busy.returncode, busy.stdout, busy.stderr) == (EXIT_TABLE_BUSY, "", _busy("orphans", "db.t", until))
    assert _files(tmp_path / "wh") == files

    # The task's worker was killed: its lease expired without being released.
    _task_holds("db.t", timedelta(0))
    done = _run(env, "orphans", "db.t", "--older-than-days", "3", "--json")

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["deleted_file_count"] == 1 and not os.path.exists(orphan)
    assert _store().holder("db.t") is None


def test_a_dry_run_takes_no_lease(tmp_path: Path) -> None:
    orphan = _table_with_orphan(tmp_path)
    _task_holds("db.t")
    dry = _run(_env(tmp_path), "orphans", "db.t", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["orphan_files"] == [f"file://{orphan}"]
    assert _store().holder("db.t").owner == TASK


def test_lease_wait_waits_for_the_release_then_runs_or_gives_up(tmp_path: Path) -> None:
    orphan = _table_with_orphan(tmp_path)
    env = _env(tmp_path)
    task = _task_holds("db.t")
    until = task.expires_at

    short = _run(env, "orphans", "db.t", "--lease-wait", "0.2", "--json")
    assert short.returncode == EXIT_TABLE_BUSY
    assert short.stderr.splitlines()[-1] == (
        f"iceberg-maint orphans: table db.t: another maintenance run holds its lease ({TASK}, until "
        f"{until.isoformat()}); gave up after waiting 0.2 s; nothing was changed"
    )

    log = tmp_path / "stderr.txt"
    with log.open("w") as stderr:
        waiting = subprocess.Popen(
            [_CLI, "orphans", "db.t", "--lease-wait", "120", "--json"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        try:
            wait_for(lambda: "waiting for it at most 120 s" in log.read_text(), "the run to find the lease held")
            assert os.path.exists(orphan) and waiting.poll() is None
            _store().release(task)
            out, _ = waiting.communicate(timeout=120)
        finally:
            if waiting.poll() is None:
                waiting.kill()
    assert waiting.returncode == 0, log.read_text()
    assert json.loads(out)["deleted_file_count"] == 1 and not os.path.exists(orphan)


class _SecondRun:
    """A progress reporter that, at the first phase the run reports, looks at the lease and starts a second run."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.lock = threading.Lock()
        self.holder: str | None = None
        self.second: subprocess.CompletedProcess[str] | None = None

    def update(self, phase: str, done: int, total: int | None, finished: bool) -> None:
        with self.lock:
            if self.second is None:
                self.holder = _store().holder("db.t").owner
                self.second = _run(self.env, "orphans", "db.t", "--json")


def test_two_command_line_runs_never_overlap(tmp_path: Path, capsys, monkeypatch) -> None:
    orphan = _table_with_orphan(tmp_path)
    env = _env(tmp_path)
    for key in [k for k in env if k.startswith("PYICEBERG_CATALOG__DEFAULT__")]:
        monkeypatch.setenv(key, env[key])  # the run in this process reaches the same catalog
    second = _SecondRun(env)
    with reporting(second):
        status = main(["--progress", "off", "orphans", "db.t", "--json"])
    assert status == 0 and json.loads(capsys.readouterr().out)["deleted_file_count"] == 1
    assert not os.path.exists(orphan)
    owner = f"iceberg-maint orphans on {socket.gethostname()} (pid {os.getpid()}, run "
    assert second.holder is not None and second.holder.startswith(owner)
    assert second.second is not None and second.second.returncode == EXIT_TABLE_BUSY
    assert f"another maintenance run holds its lease ({second.holder}, until " in second.second.stderr
    assert _store().holder("db.t") is None


def test_index_commands_that_commit_take_the_lease(tmp_path: Path) -> None:
    _table_with_orphan(tmp_path)
    env = _env(tmp_path)
    task = _task_holds("db.t")
    until = task.expires_at
    files = _files(tmp_path / "wh")

    create = _run(env, "index", "create", "db.t", "by_id", "--ordering", "id", "--json")

    assert (create.returncode, create.stdout, create.stderr) == (EXIT_TABLE_BUSY, "", _busy("index", "db.t", until))
    assert _files(tmp_path / "wh") == files
    listed = _run(env, "index", "list", "db.t", "--json")  # reading takes no lease
    assert listed.returncode == 0 and json.loads(listed.stdout)["indexes"] == []


def test_a_run_that_loses_its_lease_exits_4_with_one_line_and_deletes_nothing_more(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    """The command's lease is taken over while it runs (time passing beyond its ttl, then a task's take):
    it stops before its first delete batch."""
    orphan = _table_with_orphan(tmp_path)
    env = _env(tmp_path)
    for key in [k for k in env if k.startswith("PYICEBERG_CATALOG__")]:
        monkeypatch.setenv(key, env[key])
    seen: dict[str, Lease] = {}

    class TakeItOver:  # a progress reporter: when the deleting phase starts, another run takes the lease
        def update(self, phase: str, done: int, total: int | None, finished: bool) -> None:
            if phase != "deleting" or "task" in seen:
                return
            jump = "UPDATE iceberg_maint_leases SET expires_at = expires_at - 3600 WHERE table_name = 'db.t'"
            with sa.create_engine(default_state_url()).begin() as conn:
                conn.execute(sa.text(jump))  # the database's clock past the command's lease
            seen["task"] = _task_holds("db.t")

    with reporting(TakeItOver()):
        status = main(["--progress", "off", "orphans", "db.t", "--older-than-days", "3", "--json"])

    task = seen["task"]
    assert status == EXIT_TABLE_BUSY
    last = capsys.readouterr().err.splitlines()[-1]
    assert re.fullmatch(
        rf"iceberg-maint orphans: table db\.t: lease of iceberg-maint orphans on {re.escape(socket.gethostname())} "
        rf"\(pid {os.getpid()}, run [0-9a-f]{{8}}\) lost before a delete batch: another maintenance run holds its "
        rf"lease \({re.escape(TASK)}, until {re.escape(task.expires_at.isoformat())}\); the run stopped there, "
        "nothing more was deleted or committed",
        last,
    ), last
    assert os.path.exists(orphan)
    assert _store().holder("db.t") == task  # the command's release did not drop the task's lease
