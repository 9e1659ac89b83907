"""The ``iceberg-maint orphans`` command as a user runs it: a subprocess with pyiceberg env config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

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
