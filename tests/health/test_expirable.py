"""``expirable_snapshots`` and ``expirable_bytes`` are what ``expire-snapshots --dry-run`` with the table's defaults
reports on the same table: the same snapshots, the same bytes, the files the same."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from airflow_iceberg_maint import table_health
from tests.expiry.history import build_history
from tests.health.tables import partitioned_table
from tests.support.health import Ran


def _set(table: Table, **properties: str) -> None:
    with table.transaction() as tx:
        tx.set_properties(properties)


def test_the_expiry_dry_run_and_health_agree_on_a_table_with_deletes_refs_and_statistics(
    sqlite_catalog: SqlCatalog, cli: Callable[..., Ran]
) -> None:
    history = build_history(sqlite_catalog)  # a tag, a branch, statistics files, deletes of each kind
    # The table's own default: snapshots older than 1 ms expire, each branch keeps its head.
    _set(history.table, **{"history.expire.max-snapshot-age-ms": "1"})

    health = cli("health", "db.events", "--json")
    dry = cli("expire-snapshots", "db.events", "--dry-run", "--json")

    assert health.code == dry.code == 0, health.err + dry.err
    expected = dry.json
    assert len(expected["expired_snapshot_ids"]) == 8 and expected["deleted_bytes"] > 0  # the history's shape
    assert health.json["expirable_snapshots"] == len(expected["expired_snapshot_ids"])
    assert health.json["expirable_snapshot_ids"] == expected["expired_snapshot_ids"]
    assert health.json["expirable_bytes"] == expected["deleted_bytes"]
    # A second dry run after health: health changed nothing.
    assert (
        cli("expire-snapshots", "db.events", "--dry-run", "--json").json["deleted_bytes"] == expected["deleted_bytes"]
    )


def test_retain_last_and_the_default_age_are_the_tables(sqlite_catalog: SqlCatalog, cli: Callable[..., Ran]) -> None:
    table = partitioned_table(sqlite_catalog)
    table.overwrite(table.scan().to_arrow().slice(0, 3))  # the old files are reached by old snapshots only
    for properties, snapshots in (
        ({}, 0),  # the default maximum age, 5 days: nothing expires
        ({"history.expire.max-snapshot-age-ms": "1", "history.expire.min-snapshots-to-keep": "3"}, 2),
        ({"history.expire.min-snapshots-to-keep": "1"}, 4),
    ):
        _set(table, **properties)
        dry = cli("expire-snapshots", "db.parts", "--dry-run", "--json").json
        body = table_health("db.parts", catalog=sqlite_catalog).to_json()
        assert len(dry["expired_snapshot_ids"]) == body["expirable_snapshots"] == snapshots, properties
        assert body["expirable_bytes"] == dry["deleted_bytes"]


def test_a_table_without_gc_expires_nothing(sqlite_catalog: SqlCatalog, cli: Callable[..., Ran]) -> None:
    table = partitioned_table(sqlite_catalog)
    _set(table, **{"history.expire.max-snapshot-age-ms": "1", "gc.enabled": "false"})
    refused = cli("expire-snapshots", "db.parts", "--dry-run", "--json")
    assert refused.code == 2 and "gc.enabled" in refused.err
    body = table_health("db.parts", catalog=sqlite_catalog).to_json()
    assert (body["expirable_snapshots"], body["expirable_bytes"], body["expiry_refused"]) == (0, 0, "gc.enabled=false")


def test_what_expiry_would_free_is_the_same_cold_and_through_a_warm_digest_cache(
    sqlite_catalog: SqlCatalog, cli: Callable[..., Ran], tmp_path: Path
) -> None:
    history = build_history(sqlite_catalog)
    _set(history.table, **{"history.expire.max-snapshot-age-ms": "1"})
    cache = tmp_path / "health-digests"
    lists = {s.manifest_list for s in sqlite_catalog.load_table("db.events").metadata.snapshots}

    runs = [
        cli("health", "db.events", "--json", *flags) for flags in (("--no-cache",), ("--cache-location", str(cache)))
    ]
    assert len(list(cache.rglob("*.list"))) == len(lists)  # the second run filled it
    runs.append(cli("health", "db.events", "--json", "--cache-location", str(cache)))  # and the third read it
    assert [r.code for r in runs] == [0, 0, 0], [r.err for r in runs]
    freed = [(r.json["expirable_snapshot_ids"], r.json["expirable_bytes"], r.json["score"]) for r in runs]
    assert freed[0][1] > 0 and freed == [freed[0]] * 3
    python = table_health(sqlite_catalog.load_table("db.events"), cache=str(cache))
    assert python.to_json()["expirable_bytes"] == freed[0][1]
