"""``health --namespace`` / ``--all`` and ``fleet_health``: every table, nested namespaces too, worst first; a table
that cannot be read is listed with its error and the others are still reported. The command's contract keys."""

from __future__ import annotations

import os
from collections.abc import Callable

from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint import fleet_health
from airflow_iceberg_maint.fs.locations import local_path
from tests.health.tables import SCHEMA, batch
from tests.support.health import Ran

#: The keys of docs/cli.md's health section, in its order.
CLI_KEYS = [
    "table",
    "snapshot_id",
    "data_files",
    "data_bytes",
    "small_data_files",
    "file_size_histogram",
    "delete_files",
    "deleted_rows",
    "snapshots",
    "oldest_snapshot_at",
    "manifests",
    "manifest_bytes",
    "metadata_files",
    "expirable_snapshots",
    "expirable_bytes",
    "score",
    "deductions",
]


def _fleet(catalog: SqlCatalog) -> None:
    """db.good: 100; db.smalls: three small files together, 75; db.sub.deep: 100 (a nested namespace);
    other.t: 100; db.broken: its metadata file is gone."""
    catalog.create_table("db.good", schema=SCHEMA).append(batch("a", 0, 3))
    smalls = catalog.create_table("db.smalls", schema=SCHEMA)
    for i in range(3):
        smalls.append(batch("a", i, 1))
    catalog.create_namespace(("db", "sub"))
    catalog.create_table("db.sub.deep", schema=SCHEMA).append(batch("a", 0, 3))
    catalog.create_namespace("other")
    catalog.create_table("other.t", schema=SCHEMA)
    broken = catalog.create_table("db.broken", schema=SCHEMA)
    os.remove(local_path(broken.metadata_location))


def test_fleet_health_of_a_namespace_worst_first(sqlite_catalog: SqlCatalog) -> None:
    _fleet(sqlite_catalog)
    reports = fleet_health(sqlite_catalog, namespace="db", parallelism=2)
    assert [(r.table, r.score) for r in reports] == [("db.smalls", 75), ("db.good", 100), ("db.sub.deep", 100)]
    assert [name for name, _ in reports.failed] == ["db.broken"]
    everything = fleet_health(sqlite_catalog)
    assert [r.table for r in everything] == ["db.smalls", "db.good", "db.sub.deep", "other.t"]


def test_the_command_over_a_namespace_and_the_catalog(sqlite_catalog: SqlCatalog, cli: Callable[..., Ran]) -> None:
    _fleet(sqlite_catalog)
    ran = cli("health", "--namespace", "db", "--json", "--parallelism", "3")
    assert ran.code == 0, ran.err
    body = ran.json
    assert list(body) == ["tables", "failed"]
    assert [t["table"] for t in body["tables"]] == ["db.smalls", "db.good", "db.sub.deep"]
    assert all(list(t)[: len(CLI_KEYS)] == CLI_KEYS for t in body["tables"])
    assert body["tables"][0]["deductions"][0]["remedy"] == "rewrite-data-files"
    assert [f["table"] for f in body["failed"]] == ["db.broken"]
    one = cli("health", "db.smalls", "--json").json
    assert list(one)[: len(CLI_KEYS)] == CLI_KEYS
    assert {k: one[k] for k in CLI_KEYS} == {k: body["tables"][0][k] for k in CLI_KEYS}

    table = cli("health", "--all", "--format", "table")
    lines = table.out.splitlines()
    assert lines[0].split()[:2] == ["table", "score"]
    assert [line.split()[0] for line in lines[1:5]] == ["db.smalls", "db.good", "db.sub.deep", "other.t"]
    assert "db.broken: not read:" in lines[-1]
    text = cli("health", "db.smalls")
    assert text.out.startswith("db.smalls: score 75\n") and "-25: 3 of 3 data files" in text.out


def test_bad_input_is_one_line_and_exit_2(sqlite_catalog: SqlCatalog, cli: Callable[..., Ran]) -> None:
    for args, expected in (
        ((), "give a table"),
        (("db.x", "--all"), "give a table"),
        (("--namespace", "nope"), "namespace 'nope': not found"),
        (("db.missing",), "table 'db.missing': not found"),
        (("--all", "--parallelism", "65"), "--parallelism 65: expected a whole number from 1 to 64"),
    ):
        ran = cli("health", *args)
        assert (ran.code, ran.out) == (2, ""), args
        assert ran.err.count("\n") == 1 and expected in ran.err, (args, ran.err)
