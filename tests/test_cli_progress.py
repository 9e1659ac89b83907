"""``iceberg-maint --version``, ``--quiet`` and the progress display, run as a user runs them.

The display is checked on real terminals (pseudo-terminals for stdout and stderr), through pipes,
and forced on with ``--progress on``.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import pty
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from airflow_iceberg_maint import __version__
from tests.orphans.scenario import SCHEMA, rows

SCRIPT = Path(sys.executable).with_name("iceberg-maint")
CUTOFF = "2024-06-01T00:00:00+00:00"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
ZERO_DAYS = (
    "WARNING airflow_iceberg_maint.orphans.removal: older_than_days is 0: every unreferenced file is "
    "eligible, including files of in-flight writes"
)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("PYICEBERG_")},
        "PYICEBERG_CATALOG__DEFAULT__TYPE": "sql",
        "PYICEBERG_CATALOG__DEFAULT__URI": f"sqlite:///{tmp_path}/catalog.db",
        "PYICEBERG_CATALOG__DEFAULT__WAREHOUSE": f"file://{tmp_path}/wh",
    }


@pytest.fixture
def table(tmp_path: Path) -> Table:
    """Two appends and one orphan older than ``CUTOFF``."""
    catalog = SqlCatalog("default", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=SCHEMA)
    table.append(rows(0, 5))
    table.append(rows(5, 5))
    orphan = tmp_path / "wh/db/t/data/orphan.parquet"
    orphan.write_bytes(b"12345")
    os.utime(orphan, (1_600_000_000, 1_600_000_000))  # 2020
    return table


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=120)


def _on_terminals(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    """Run with stdout and stderr each on a pseudo-terminal; their text with the terminal's CRLF undone."""
    masters, slaves = zip(*(pty.openpty() for _ in range(2)), strict=True)
    process = subprocess.Popen(
        [str(SCRIPT), *args],
        env={**env, "TERM": "xterm", "COLUMNS": "120"},
        stdin=subprocess.DEVNULL,
        stdout=slaves[0],
        stderr=slaves[1],
    )
    for fd in slaves:
        os.close(fd)
    outputs: list[bytes] = [b"", b""]

    def drain(i: int) -> None:
        while True:
            try:
                data = os.read(masters[i], 65536)
            except OSError:  # EIO: the process closed the terminal
                return
            if not data:
                return
            outputs[i] += data

    readers = [threading.Thread(target=drain, args=(i,)) for i in range(2)]
    for reader in readers:
        reader.start()
    returncode = process.wait(timeout=120)
    for reader in readers:
        reader.join(timeout=30)
    for fd in masters:
        os.close(fd)
    out, err = (o.decode().replace("\r\n", "\n") for o in outputs)
    return returncode, out, err


def _bar(name: str, done: int, total: int) -> re.Pattern[str]:
    """A phase's line in the display (ANSI codes removed): its name, a bar, and done/total."""
    return re.compile(rf"{name} +[━╺╸]+ +{done}/{total} ")


def _same_report(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert {k: v for k, v in a.items() if k != "phase_seconds"} == {k: v for k, v in b.items() if k != "phase_seconds"}


def test_version_prints_the_package_version():
    done = subprocess.run([str(SCRIPT), "--version"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"iceberg-maint {__version__}\n", "")
    assert __version__ == importlib.metadata.version("airflow-iceberg-maint")


def test_quiet_silences_warnings_but_not_errors(env, table):
    loud = _run(env, "orphans", "db.t", "--older-than-days", "0", "--dry-run", "--json")
    assert loud.returncode == 0
    assert [line.split(" ", 2)[2] for line in loud.stderr.splitlines()] == [ZERO_DAYS]

    quiet = _run(env, "--quiet", "orphans", "db.t", "--older-than-days", "0", "--dry-run", "--json")
    assert (quiet.returncode, quiet.stderr) == (0, "")
    assert quiet.stdout.count("\n") == 1
    _same_report({**json.loads(quiet.stdout), "older_than": None}, {**json.loads(loud.stdout), "older_than": None})

    missing = _run(env, "-q", "orphans", "db.nope", "--json")
    assert (missing.returncode, missing.stdout) == (2, "")
    assert missing.stderr == "iceberg-maint orphans: table 'db.nope': not found in catalog 'default'\n"

    both = _run(env, "-q", "-v", "orphans", "db.t")
    assert both.returncode == 2
    assert "argument -v/--verbose: not allowed with argument -q/--quiet" in both.stderr


def test_no_display_through_pipes_with_json_or_quiet(env, table):
    piped = _run(env, "orphans", "db.t", "--older-than", CUTOFF, "--dry-run", "--json")
    assert (piped.returncode, piped.stderr) == (0, "")
    report = json.loads(piped.stdout)
    assert report["orphan_file_count"] == 1

    # On terminals, --json and --quiet each keep stderr empty, and stdout holds the same one object.
    code, out, err = _on_terminals(env, "orphans", "db.t", "--older-than", CUTOFF, "--dry-run", "--json")
    assert (code, err) == (0, "")
    assert out.count("\n") == 1
    _same_report(json.loads(out), report)
    code, out, err = _on_terminals(env, "--quiet", "orphans", "db.t", "--older-than", CUTOFF, "--dry-run")
    assert (code, err) == (0, "")
    assert out.startswith(f"table db.t: 1 orphan files (5 bytes) under {report['location']}")

    text = _run(env, "orphans", "db.t", "--older-than", CUTOFF, "--dry-run")
    assert (text.returncode, text.stderr) == (0, "")
    assert text.stdout == out


def test_display_on_terminals_shows_each_orphan_phase(env, table):
    code, out, err = _on_terminals(env, "orphans", "db.t", "--older-than", CUTOFF)
    assert code == 0
    assert out.startswith("table db.t: 1 orphan files (5 bytes) under ")
    listed = int(re.search(r"listed (\d+) files", out).group(1))
    shown = ANSI.sub("", err)
    for name, done, total in [("listing", listed, listed), ("reading manifests", 2, 2), ("deleting", 1, 1)]:
        assert _bar(name, done, total).search(shown), (name, shown)


def test_forced_display_shows_phases_and_leaves_stdout_alone(env, table):
    dry = _run(env, "--progress", "on", "orphans", "db.t", "--older-than", CUTOFF, "--dry-run", "--json")
    assert dry.returncode == 0
    assert "deleting" not in dry.stderr  # a dry run deletes nothing
    real = _run(env, "--progress", "on", "orphans", "db.t", "--older-than", CUTOFF, "--json")
    assert real.returncode == 0 and real.stdout.count("\n") == 1
    report = json.loads(real.stdout)
    _same_report({**json.loads(dry.stdout), "dry_run": False, "deleted_file_count": 1, "delete_requests": 1}, report)
    shown = ANSI.sub("", real.stderr)
    listed, manifests = report["files_listed"], report["manifests_read"]
    for name, done, total in [
        ("listing", listed, listed),
        ("reading manifests", manifests, manifests),
        ("deleting", 1, 1),
    ]:
        assert _bar(name, done, total).search(shown), (name, shown)


def test_forced_display_shows_index_refresh_phases(env, table):
    created = _run(env, "index", "create", "db.t", "ix", "--ordering", "id", "--with-row-location")
    assert created.returncode == 0, created.stderr
    full = _run(env, "--progress", "on", "index", "refresh", "db.t", "ix", "--json")
    assert full.returncode == 0 and full.stdout.count("\n") == 1
    assert json.loads(full.stdout)["mode"] == "full"
    shown = ANSI.sub("", full.stderr)
    assert _bar("reading data files", 2, 2).search(shown), shown
    assert _bar("building regions", 1, 1).search(shown), shown

    table.append(pa.Table.from_pylist([{"id": 99, "category": "a/b"}], schema=rows(0, 1).schema))
    incremental = _run(env, "--progress", "on", "index", "refresh", "db.t", "ix", "--json")
    assert incremental.returncode == 0
    assert json.loads(incremental.stdout)["mode"] == "incremental"
    shown = ANSI.sub("", incremental.stderr)
    assert _bar("reading data files", 1, 1).search(shown), shown
    assert _bar("building regions", 1, 1).search(shown), shown


def test_auto_display_is_off_when_only_stderr_is_a_terminal(env, table):
    master, slave = pty.openpty()
    done = subprocess.run(
        [str(SCRIPT), "orphans", "db.t", "--older-than", CUTOFF, "--dry-run"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=slave,
        text=True,
        timeout=120,
    )
    os.close(slave)
    try:
        err = os.read(master, 65536)
    except OSError:  # EIO: the terminal is closed and nothing was written to it
        err = b""
    os.close(master)
    assert done.returncode == 0
    assert err == b""
    assert done.stdout.startswith("table db.t: 1 orphan files")
