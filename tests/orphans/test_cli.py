"""The ``iceberg-maint orphans`` command as a user runs it: a subprocess with pyiceberg env config."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from tests.orphans.scenario import SCHEMA, rows

CLI_KEYS = {
    "table",
    "location",
    "older_than",
    "dry_run",
    "orphan_file_count",
    "orphan_bytes",
    "deleted_file_count",
    "failed",
    "conflicts",
    "orphan_files",
}


def _env(tmp_path):
    return {
        **os.environ,
        "PYICEBERG_CATALOG__DEFAULT__TYPE": "sql",
        "PYICEBERG_CATALOG__DEFAULT__URI": f"sqlite:///{tmp_path}/catalog.db",
        "PYICEBERG_CATALOG__DEFAULT__WAREHOUSE": f"file://{tmp_path}/wh",
    }


def _run(env, *args):
    return subprocess.run(
        [str(Path(sys.executable).parent / "iceberg-maint"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _table_with_orphan(tmp_path):
    # The same catalog the subprocess reaches through its PYICEBERG_CATALOG__DEFAULT__* variables.
    catalog = SqlCatalog("default", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=SCHEMA)
    table.append(rows(0, 5))
    orphan = f"{tmp_path}/wh/db/t/data/orphan.parquet"
    with open(orphan, "wb") as fh:
        fh.write(b"12345")
    old = time.time() - 5 * 86400
    os.utime(orphan, (old, old))
    return orphan


def test_json_dry_run_then_removal(tmp_path):
    orphan = _table_with_orphan(tmp_path)
    env = _env(tmp_path)
    dry = _run(env, "orphans", "db.t", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    out = json.loads(dry.stdout)
    assert set(out) >= CLI_KEYS
    assert out["orphan_files"] == [f"file://{orphan}"]
    assert out["dry_run"] is True and out["orphan_bytes"] == 5 and out["deleted_file_count"] == 0
    assert os.path.exists(orphan)

    real = _run(env, "orphans", "db.t", "--older-than-days", "3", "--json")
    assert real.returncode == 0, real.stderr
    assert json.loads(real.stdout)["deleted_file_count"] == 1
    assert not os.path.exists(orphan)


def test_bad_input_gets_a_one_line_error_naming_it(tmp_path):
    orphan = _table_with_orphan(tmp_path)
    env = _env(tmp_path)
    cases = [
        (["orphans", "db.t", "--location", f"file://{tmp_path}/wh/db/t/../u"], "location"),
        (["orphans", "db.t", "--older-than", "2999-01-01T00:00:00Z"], "is in the future"),
        (["orphans", "db.t", "--older-than-days", "-2"], "--older-than-days -2.0"),
        (["orphans", "db.nope"], "table 'db.nope': not found"),
        (["orphans", "nonamespace"], "expected 'namespace.table'"),
    ]
    for args, message in cases:
        result = _run(env, *args, "--json")
        assert result.returncode != 0, args
        assert result.stdout == ""
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert os.path.exists(orphan)


@contextlib.contextmanager
def immutable(path: str) -> Iterator[None]:
    """The file cannot be deleted, even by root (the immutable attribute): a real failed delete on local disk."""
    done = subprocess.run(["chattr", "+i", path], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"chattr +i {path}: not possible here ({done.stderr.strip()})")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", path], check=True)


def test_exit_status_3_when_a_delete_fails_with_the_output_in_full(tmp_path):
    locked = _table_with_orphan(tmp_path)
    other = f"{tmp_path}/wh/db/t/data/other-orphan.parquet"
    with open(other, "wb") as fh:
        fh.write(b"123")
    old = time.time() - 5 * 86400
    os.utime(other, (old, old))
    env = _env(tmp_path)
    with immutable(locked):
        done = _run(env, "orphans", "db.t", "--json")
        text = _run(env, "orphans", "db.t")  # the same failure, told in text
    assert done.returncode == 3, done.stderr
    out = json.loads(done.stdout)
    assert set(out) >= CLI_KEYS
    assert sorted(out["orphan_files"]) == sorted([f"file://{locked}", f"file://{other}"])
    assert out["deleted_file_count"] == 1
    assert out["failed"] == [{"path": f"file://{locked}", "error": "PermissionError: Operation not permitted"}]
    assert done.stderr == "iceberg-maint orphans: 1 deletes failed (listed in the output)\n"
    assert os.path.exists(locked) and not os.path.exists(other)
    assert text.returncode == 3
    assert f"  failed: file://{locked}: PermissionError: Operation not permitted" in text.stdout.splitlines()

    clean = _run(env, "orphans", "db.t", "--json")  # the attribute gone, the next run deletes it: status 0
    assert clean.returncode == 0, clean.stderr
    assert json.loads(clean.stdout)["failed"] == [] and not os.path.exists(locked)
