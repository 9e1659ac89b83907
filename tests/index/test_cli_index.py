"""``iceberg-maint index`` as a user runs it: a subprocess configured through pyiceberg env variables."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from airflow_iceberg_maint.fs.locations import local_path
from airflow_iceberg_maint.index.metadata.store import IndexStore
from tests.orphans.test_cli import immutable

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("day", pa.date32()), ("ts", pa.timestamp("us"))])
ROWS = [
    {"id": 1, "name": "ann", "day": date(2024, 1, 1), "ts": datetime(2024, 1, 1, 8)},
    {"id": 2, "name": "bob", "day": date(2024, 1, 2), "ts": datetime(2024, 1, 2, 9)},
    {"id": 2, "name": "bea", "day": None, "ts": datetime(2024, 1, 3, 10)},
    {"id": None, "name": "nil", "day": date(2024, 1, 4), "ts": None},
]
LIST_KEYS = {"name", "metadata_location", "index_uuid", "ordering", "extracts", "newest_extract_snapshot_id"}
REFRESH_KEYS = {
    "index",
    "extract_id",
    "source_table_snapshot_id",
    "mode",
    "region_files_written",
    "region_files_reused",
    "entries",
}
LAG_KEYS = {
    "index",
    "table_snapshot_id",
    "extract_snapshot_id",
    "snapshots_behind",
    "lag_seconds",
    "added_files",
    "removed_files",
    "stale",
}
LOOKUP_KEYS = {"index", "snapshot_id", "rows", "region_files_read", "reconciled_files"}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYICEBERG_CATALOG__DEFAULT__TYPE": "sql",
        "PYICEBERG_CATALOG__DEFAULT__URI": f"sqlite:///{tmp_path}/catalog.db",
        "PYICEBERG_CATALOG__DEFAULT__WAREHOUSE": f"file://{tmp_path}/wh",
    }


@pytest.fixture
def table(tmp_path: Path) -> Table:
    # The same catalog the subprocess reaches through its PYICEBERG_CATALOG__DEFAULT__* variables.
    catalog = SqlCatalog("default", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=SCHEMA)
    table.append(pa.Table.from_pylist(ROWS, schema=SCHEMA))
    return table


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "iceberg-maint"), "index", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _json(env: dict[str, str], *args: str) -> dict[str, Any]:
    done = _run(env, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _fails(env: dict[str, str], *args: str, message: str) -> None:
    done = _run(env, *args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr


def test_index_lifecycle_through_the_command(env: dict[str, str], table: Table) -> None:
    created = _json(
        env,
        "create",
        "db.t",
        "by_id",
        "--ordering",
        "bucket(4, id), id",
        "--identity",
        "name",
        "--with-row-location",
        "--property",
        # Below two entries' size (about 31 bytes each), so the refresh writes several regions.
        "write.region.target-file-size-bytes=40",
    )
    assert created["ordering"] == ["bucket(4, id)", "id"]

    listed = _json(env, "list", "db.t")["indexes"]
    assert [set(i) >= LIST_KEYS for i in listed] == [True]
    assert (listed[0]["name"], listed[0]["extracts"], listed[0]["newest_extract_snapshot_id"]) == ("by_id", 0, None)
    assert listed[0]["index_uuid"] == created["index_uuid"]

    lag = _json(env, "lag", "db.t", "by_id")
    assert set(lag) >= LAG_KEYS
    assert (lag["extract_snapshot_id"], lag["stale"], lag["added_files"]) == (None, True, {"data": 1, "delete": 0})

    first = table.current_snapshot().snapshot_id
    refreshed = _json(env, "refresh", "db.t", "by_id", "--full")
    assert set(refreshed) >= REFRESH_KEYS
    assert (refreshed["source_table_snapshot_id"], refreshed["mode"], refreshed["entries"]) == (first, "full", 4)
    assert refreshed["region_files_written"] >= 2 and refreshed["region_files_reused"] == 0

    lag = _json(env, "lag", "db.t", "by_id")
    assert (lag["table_snapshot_id"], lag["extract_snapshot_id"], lag["snapshots_behind"], lag["stale"]) == (
        first,
        first,
        0,
        False,
    )

    found = _json(env, "lookup", "db.t", "by_id", "--eq", "2")
    assert set(found) >= LOOKUP_KEYS
    assert sorted(found["rows"], key=lambda r: r["name"]) == [
        {"id": 2, "name": "bea", "day": None, "ts": "2024-01-03T10:00:00"},
        {"id": 2, "name": "bob", "day": "2024-01-02", "ts": "2024-01-02T09:00:00"},
    ]
    assert (found["snapshot_id"], found["region_files_read"], found["reconciled_files"]) == (first, 1, 0)

    nulls = _json(env, "lookup", "db.t", "by_id", "--is-null", "--columns", "name,day")
    assert nulls["rows"] == [{"name": "nil", "day": "2024-01-04"}]
    several = _json(env, "lookup", "db.t", "by_id", "--eq", "1", "--eq", "7", "--columns", "name")
    assert several["rows"] == [{"name": "ann"}]

    table.append(pa.Table.from_pylist([{"id": 1, "name": "amy", "day": None, "ts": None}], schema=SCHEMA))
    lagging = _json(env, "lag", "db.t", "by_id")
    assert (lagging["snapshots_behind"], lagging["stale"], lagging["added_files"], lagging["removed_files"]) == (
        1,
        True,
        {"data": 1, "delete": 0},
        {"data": 0, "delete": 0},
    )
    reconciled = _json(env, "lookup", "db.t", "by_id", "--eq", "1", "--columns", "name")
    assert sorted(r["name"] for r in reconciled["rows"]) == ["amy", "ann"]
    # The new file is half of the table's bytes, over the reconciliation threshold: a plain scan.
    assert (reconciled["mode"], reconciled["reconciled_files"], reconciled["region_files_read"]) == ("scan", 2, 0)
    old = _json(env, "lookup", "db.t", "by_id", "--eq", "1", "--columns", "name", "--snapshot-id", str(first))
    assert old["rows"] == [{"name": "ann"}] and old["reconciled_files"] == 0

    second = _json(env, "refresh", "db.t", "by_id")  # incremental: reuses the untouched regions
    assert (second["mode"], second["entries"]) == ("incremental", 5)
    expired = _json(env, "expire", "db.t", "by_id", "--retain-last", "1")
    # The first extract's tracking file and its regions the second one did not reuse.
    assert expired["expired_extract_ids"] == [refreshed["extract_id"]]
    assert expired["deleted_files"] == 1 + refreshed["region_files_written"] - second["region_files_reused"]
    assert _json(env, "list", "db.t")["indexes"][0]["newest_extract_snapshot_id"] == second["source_table_snapshot_id"]
    assert sorted(r["name"] for r in _json(env, "lookup", "db.t", "by_id", "--eq", "1")["rows"]) == ["amy", "ann"]


def test_index_command_errors_name_the_input(env: dict[str, str], table: Table) -> None:
    _json(env, "create", "db.t", "by_day", "--ordering", "day", "--with-row-location")
    _fails(env, "lookup", "db.t", "by_day", "--eq", "yesterday", message="'yesterday'")
    _json(env, "create", "db.t", "by_id", "--ordering", "id", "--with-row-location")
    _fails(env, "lookup", "db.t", "by_id", "--eq", str(2**63), message="out of range")
    _fails(env, "lookup", "db.t", "nope", "--eq", "1", message="'nope'")
    _fails(env, "create", "db.t", "bad", "--ordering", "bucket(4, missing)", message="missing")
    _fails(env, "create", "db.t", "by_day", "--ordering", "day", message="already exists")
    _fails(env, "refresh", "db.t", "by_day", "--snapshot-id", "12345", message="12345")
    assert _json(env, "lookup", "db.t", "by_day", "--eq", "2024-01-04", "--columns", "name")["rows"] == [
        {"name": "nil"}
    ]


def test_remove_unreferenced_exits_3_when_a_delete_fails(env: dict[str, str], table: Table) -> None:
    _json(env, "create", "db.t", "by_id", "--ordering", "id")
    directory = local_path(IndexStore(table).index_dir("by_id"))
    stray, locked = f"{directory}/stray-1.bin", f"{directory}/stray-2.bin"
    old = time.time() - 5 * 86400
    for path in (stray, locked):
        with open(path, "wb") as fh:
            fh.write(b"x")
        os.utime(path, (old, old))
    with immutable(locked):
        done = _run(env, "remove-unreferenced", "db.t", "--older-than-days", "1", "--json")
    assert done.returncode == 3, done.stderr
    out = json.loads(done.stdout)
    assert sorted(out["unreferenced_files"]) == [f"file://{stray}", f"file://{locked}"]
    assert out["deleted_file_count"] == 1
    assert out["failed"] == [{"path": f"file://{locked}", "error": "PermissionError: Operation not permitted"}]
    assert done.stderr == "iceberg-maint index: 1 deletes failed (listed in the output)\n"
    assert os.path.exists(locked) and not os.path.exists(stray)
    again = _run(env, "remove-unreferenced", "db.t", "--older-than-days", "1", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["failed"] == [] and not os.path.exists(locked)


def test_lookup_in_file_and_range_through_the_command(env: dict[str, str], table: Table, tmp_path: Path) -> None:
    table.append(pa.Table.from_pylist([{"id": 5, "name": "eve", "day": date(2024, 1, 5), "ts": None}], schema=SCHEMA))
    _json(env, "create", "db.t", "by_id", "--ordering", "id", "--with-row-location")
    _json(env, "create", "db.t", "by_day_id", "--ordering", "day, id", "--with-row-location")
    _json(env, "refresh", "db.t", "by_id")
    _json(env, "refresh", "db.t", "by_day_id")
    table.append(pa.Table.from_pylist([{"id": 2, "name": "bo2", "day": None, "ts": None}], schema=SCHEMA))  # lag
    keys = tmp_path / "keys.txt"
    keys.write_text("5\n\n2\r\n  \n7\n2\n")
    found = _json(env, "lookup", "db.t", "by_id", "--in-file", str(keys), "--columns", "name,id")
    assert set(found) >= LOOKUP_KEYS | {"keys"} and found["keys"] == 3
    assert found["reconciled_files"] >= 1  # the file appended after the extract
    assert sorted(found["rows"], key=lambda r: r["name"]) == [
        {"name": "bea", "id": 2},
        {"name": "bo2", "id": 2},
        {"name": "bob", "id": 2},
        {"name": "eve", "id": 5},
    ]
    assert [r["id"] for r in found["rows"]] == [2, 2, 2, 5]  # index order
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("2024-01-02\t2\n2024-01-05\t5\n2024-01-05\t6\n")
    by_pair = _json(env, "lookup", "db.t", "by_day_id", "--in-file", str(pairs), "--columns", "name")
    assert (by_pair["keys"], by_pair["rows"]) == (3, [{"name": "bob"}, {"name": "eve"}])
    ranged = _json(env, "lookup", "db.t", "by_id", "--from", "2", "--columns", "name")
    assert "keys" not in ranged
    assert [r["name"] for r in ranged["rows"]][-1] == "eve"
    assert sorted(r["name"] for r in ranged["rows"]) == ["bea", "bo2", "bob", "eve"]
    assert _json(env, "lookup", "db.t", "by_day_id", "--to", "2024-01-02", "--columns", "name")["rows"] == [
        {"name": "ann"},
        {"name": "bob"},
    ]


def test_lookup_forms_errors_name_the_input(env: dict[str, str], table: Table, tmp_path: Path) -> None:
    _json(env, "create", "db.t", "by_bucket", "--ordering", "bucket(4, id), id", "--with-row-location")
    _json(env, "create", "db.t", "by_day_id", "--ordering", "day, id", "--with-row-location")
    keys = tmp_path / "keys.txt"
    keys.write_text("1\n")
    _fails(env, "lookup", "db.t", "by_bucket", "--from", "1", "--to", "3", message="bucket(4, id)")
    _fails(env, "lookup", "db.t", "by_bucket", message="give --eq, --is-null, --in-file, or --from and/or --to")
    _fails(env, "lookup", "db.t", "by_bucket", "--eq", "1", "--in-file", str(keys), message="--eq and --in-file cannot")
    _fails(env, "lookup", "db.t", "by_bucket", "--in-file", str(keys), "--to", "3", message="--in-file and --from/--to")
    blank = tmp_path / "blank.txt"
    blank.write_text("\n \n")
    _fails(env, "lookup", "db.t", "by_bucket", "--in-file", str(blank), message=f"--in-file {blank}: no keys")
    bad = tmp_path / "bad.txt"
    bad.write_text("1\n\nx1\n")
    _fails(env, "lookup", "db.t", "by_bucket", "--in-file", str(bad), message=f"--in-file {bad} line 3: 'x1'")
    short = tmp_path / "short.txt"
    short.write_text("2024-01-02\t2\n2024-01-03\n")
    _fails(env, "lookup", "db.t", "by_day_id", "--in-file", str(short), message=f"--in-file {short} line 2: 1 value")
    _fails(env, "lookup", "db.t", "by_day_id", "--from", "soon", message="--from 'soon'")
    _fails(env, "lookup", "db.t", "by_bucket", "--in-file", str(tmp_path / "none.txt"), message="none.txt")
