"""A lost lease stops the run (S15): fencing before every delete batch and commit, outages, and the takeover
of a lease whose process has ended.

Run A is a real run in its own process (``lease_worker``) under a 6 s lease; at a stage it stops its
whole process (SIGSTOP: its lease renewal stops too). Run B takes the lease once A's has expired by
the database's clock, and only then is A continued. The state store is a real SQLite database.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from airflow_iceberg_maint.index.metadata.builders import new_index_metadata
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.index.write.incremental import refresh_index
from airflow_iceberg_maint.state.leases import Lease
from airflow_iceberg_maint.state.sql_leases import SqlLeases
from tests.orphans.scenario import SCHEMA, rows

ROOT = Path(__file__).resolve().parents[2]
TABLE, INDEX, OWNER_B = "db.events", "by_id", "run B"
ORPHANS = 3


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    return value


def _stopped(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rfind(")") + 2] == "T"


def _files(root: Path) -> set[str]:
    return {str(p) for p in root.rglob("*") if p.is_file()}


class World:
    def __init__(self, tmp: Path) -> None:
        self.tmp, self.wh = tmp, tmp / "wh"
        self.catalog_uri, self.state_url = f"sqlite:///{tmp}/catalog.db", f"sqlite:///{tmp}/state.db"
        self.catalog = SqlCatalog("default", uri=self.catalog_uri, warehouse=f"file://{self.wh}")
        self.catalog.create_namespace("db")
        table = self.catalog.create_table(TABLE, schema=SCHEMA)
        for i in range(3):
            table.append(rows(i * 10, 10))
        table.overwrite(rows(100, 5))
        IndexStore(table).create(new_index_metadata(table, INDEX, ["id"], [], True, {}), INDEX)
        refresh_index(table, INDEX)
        table.append(rows(200, 10))  # work for the refresh
        data = Path(self.table().location().removeprefix("file://")) / "data"
        self.orphans = {str(data / f"orphan-{i}.parquet") for i in range(ORPHANS)}
        for path in self.orphans:
            Path(path).write_bytes(b"orphan")
        self.store = SqlLeases(self.state_url)

    def table(self) -> Table:
        return self.catalog.load_table(TABLE)

    def start_a(self, op: str, directory: Path) -> subprocess.Popen[bytes]:
        directory.mkdir()
        spec = {
            "op": op,
            "dir": str(directory),
            "catalog_uri": self.catalog_uri,
            "warehouse": f"file://{self.wh}",
            "table": TABLE,
            "index": INDEX,
            "state_url": self.state_url,
            "ttl": 6.0,  # short, yet long enough that a run starved of the CPU on a busy machine keeps it
        }
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
        return subprocess.Popen(
            [sys.executable, "-m", "tests.policy.lease_worker", json.dumps(spec)], cwd=ROOT, env=env
        )

    def b_takes_it(self) -> Lease:
        """B's take, tried until A's lease has expired by the database's clock (A is stopped: no renewal)."""

        def take() -> Lease | None:
            token = uuid.uuid4().hex
            got = self.store.acquire(TABLE, OWNER_B, timedelta(hours=1), token, "")
            return got if got.token == token else None

        lease: Lease = wait_for(take, "run A's lease to expire")
        return lease


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


@pytest.fixture
def stopped_a(world: World, request: pytest.FixtureRequest) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    directory = world.tmp / "a"
    a = world.start_a(request.param, directory)
    try:
        wait_for(lambda: a.poll() is not None or ((directory / "paused").exists() and _stopped(a.pid)), "A to stop")
        assert a.poll() is None, f"run A ended before its stage (exit {a.returncode})"
        yield a, directory
    finally:
        if a.poll() is None:
            a.kill()
            a.wait()


def _result(a: subprocess.Popen[bytes], directory: Path) -> dict[str, Any]:
    os.kill(a.pid, signal.SIGCONT)
    assert a.wait(timeout=120) == 0
    result: dict[str, Any] = json.loads((directory / "result.json").read_text())
    return result


def _lost(before: str, b: Lease) -> dict[str, str]:
    return {
        "error": "LeaseLostError",
        "message": f"table {TABLE}: lease of run A lost before {before}: another maintenance run holds its lease "
        f"({OWNER_B}, until {b.expires_at.isoformat()}); the run stopped there, nothing more was deleted or committed",
    }


@pytest.mark.parametrize(
    ("stopped_a", "before"),
    [
        ("orphans", "a delete batch"),
        ("expire-commit", "the expiry's commit"),
        ("expire-delete", "a delete batch"),
        ("refresh", f"the commit of index {INDEX!r}"),
    ],
    indirect=["stopped_a"],
)
def test_a_run_stalled_past_its_ttl_stops_before_its_next_delete_batch_or_commit(
    world: World, stopped_a: tuple[subprocess.Popen[bytes], Path], before: str
) -> None:
    a, directory = stopped_a
    files = _files(world.wh)
    metadata = world.table().metadata_location
    index_version = IndexStore(world.table()).load(INDEX)[2]

    b = world.b_takes_it()
    result = _result(a, directory)

    assert result == _lost(before, b)
    # Nothing deleted after the stop, nothing committed (the expiry's own commit landed before a stop at
    # "planned"; the refresh removes only the files it wrote itself, which nothing references).
    assert {f for f in files if "/index/" not in f} <= _files(world.wh)
    assert world.table().metadata_location == metadata
    assert IndexStore(world.table()).load(INDEX)[2] == index_version
    assert world.orphans <= _files(world.wh)
    assert world.store.holder(TABLE) == b  # A's release at its end did not drop B's lease


@pytest.mark.parametrize("stopped_a", ["orphans"], indirect=True)
def test_a_state_store_outage_past_the_ttl_stops_the_run(
    world: World, stopped_a: tuple[subprocess.Popen[bytes], Path]
) -> None:
    a, directory = stopped_a
    files = _files(world.wh)
    outage = sqlite3.connect(world.tmp / "state.db", timeout=0)
    try:
        outage.execute("BEGIN EXCLUSIVE")  # no other connection can read or write the lease table now
        os.kill(a.pid, signal.SIGCONT)
        assert a.wait(timeout=120) == 0
    finally:
        outage.rollback()
        outage.close()
    result = json.loads((directory / "result.json").read_text())

    assert result["error"] == "LeaseLostError"
    assert result["message"].startswith(f"table {TABLE}: lease of run A lost before a delete batch: the state store ")
    assert "so it may have expired (" in result["message"] and "database is locked" in result["message"]
    assert result["message"].endswith("; the run stopped there, nothing more was deleted or committed")
    assert _files(world.wh) == files and world.orphans <= files
