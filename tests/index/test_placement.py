"""Indexes outside their table's folder (``write.index.path``, set by ``index create --location``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from airflow_iceberg_maint.catalog import load_table
from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.fs.locations import local_path
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES, INDEX_SNAPSHOTS
from airflow_iceberg_maint.index.metadata.builders import new_index_metadata
from airflow_iceberg_maint.index.metadata.placement import use_index_location
from airflow_iceberg_maint.index.metadata.spec import INDEX_PATH_PROPERTY
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.index.write.incremental import refresh_index
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from tests.commit_race import race_into_commit
from tests.orphans.scenario import SCHEMA, rows

OLD = 946684800  # 2000-01-01: older than any cutoff


def _table(catalog: SqlCatalog, name: str = "db.t") -> Table:
    table = catalog.create_table(name, schema=SCHEMA)
    table.append(rows(0, 10))
    return catalog.load_table(name)


def _indexed(table: Table, name: str = "by_id") -> Table:
    IndexStore(table).create(new_index_metadata(table, name, ["id"], [], True, {}), name)
    refresh_index(table, name)
    return table


def _files(root: str) -> set[str]:
    return {os.path.join(d, n) for d, _, names in os.walk(local_path(root)) for n in names}


def _age(root: str) -> None:
    for path in _files(root):
        os.utime(path, (OLD, OLD))


def test_the_indexes_live_at_the_recorded_location_and_every_rule_follows_them(
    sqlite_catalog: SqlCatalog, tmp_path: Path
) -> None:
    table = _table(sqlite_catalog)
    root = f"file://{tmp_path}/indexes/t"
    table = _indexed(use_index_location(table, f"{root}/"))
    assert sqlite_catalog.load_table("db.t").properties[INDEX_PATH_PROPERTY] == root
    store = IndexStore(sqlite_catalog.load_table("db.t"))
    metadata, location, _ = store.load("by_id")
    assert (store.names(), metadata.location) == (["by_id"], f"{root}/by_id")
    assert location == f"{root}/by_id/metadata/00002.metadata.json"
    assert not os.path.exists(local_path(f"{table.location()}/index"))
    # Expiry keeps the newest extract's snapshot; the orphan run references every index file.
    assert set(INDEX_SNAPSHOTS.snapshot_ids(table)) == {metadata.extracts[0].source_table_snapshot_id}
    referenced = {local_path(p) for batch in INDEX_FILES.path_batches(table) for p in batch}
    assert referenced == _files(root) and len(referenced) == 4  # two versions, a tracking and a region file


def test_bad_locations_are_refused_and_change_nothing(sqlite_catalog: SqlCatalog, tmp_path: Path) -> None:
    table = _table(sqlite_catalog)
    for bad, message in [
        ("relative/folder", "must be an absolute location naming a folder"),
        ("/", "must be an absolute location naming a folder"),
        ("s3://", "must be an absolute location naming a folder"),
        (table.location(), "is the table location"),
    ]:
        with pytest.raises(InvalidInputError, match=f"^index location: {bad!r} {message}"):
            use_index_location(table, bad)
    assert INDEX_PATH_PROPERTY not in sqlite_catalog.load_table("db.t").properties
    # Indexes already under the table cannot be hidden by a new folder.
    _indexed(table)
    with pytest.raises(InvalidInputError, match=r"has indexes at '.*/t/index' \(by_id\); they cannot be moved"):
        use_index_location(table, f"file://{tmp_path}/elsewhere")
    other = _table(sqlite_catalog, "db.u")
    use_index_location(other, f"file://{tmp_path}/a")
    assert use_index_location(other, f"file://{tmp_path}/a/").properties[INDEX_PATH_PROPERTY] == f"file://{tmp_path}/a"
    with pytest.raises(InvalidInputError, match=r"live at '.*/a' \(table property write.index.path\), not '.*/b'"):
        use_index_location(other, f"file://{tmp_path}/b")
    assert sqlite_catalog.load_table("db.t").properties.get(INDEX_PATH_PROPERTY) is None


def test_another_tables_indexes_under_the_scan_location_are_kept_whole(sqlite_catalog: SqlCatalog) -> None:
    outer = _table(sqlite_catalog, "db.outer")
    folder = f"{outer.location()}/data/other-indexes"
    _indexed(use_index_location(_table(sqlite_catalog, "db.other"), folder))
    orphan = f"{outer.location()}/data/orphan.parquet"
    Path(local_path(orphan)).write_bytes(b"orphan")
    index_files = _files(folder)
    assert len(index_files) == 4  # two metadata versions, a tracking file, a region file
    _age(outer.location())
    report = remove_orphan_files(outer, OrphanOptions(older_than_days=1), sources=[INDEX_FILES])
    assert report.orphan_files == [orphan] and report.deleted_file_count == 1
    assert _files(folder) == index_files
    assert report.protected_locations == [{"location": folder, "reason": f"table db.other writes under {folder!r}"}]


@pytest.mark.parametrize("catalog_kind", ["sqlite", pytest.param("rest", marks=pytest.mark.rest)])
def test_a_location_another_writer_records_meanwhile_is_kept_and_ours_refused(
    request: pytest.FixtureRequest, catalog_kind: str, tmp_path: Path
) -> None:
    """S18: the other writer's ``write.index.path`` lands between our checks and our commit; it stays, and
    ours is refused naming it (SQL: the commit is refused and the checks run again; REST: found after it)."""
    catalog = request.getfixturevalue(f"{catalog_kind}_catalog")
    table = load_table(catalog, ".".join(_table(catalog).name()))
    theirs, ours = f"file://{tmp_path}/theirs", f"file://{tmp_path}/ours"

    def other_writer() -> None:
        with catalog.load_table(".".join(table.name())).transaction() as tx:
            tx.set_properties({INDEX_PATH_PROPERTY: theirs})

    race_into_commit(catalog, other_writer, lambda updates: True)
    with pytest.raises(InvalidInputError, match="theirs"):
        use_index_location(table, ours)

    assert catalog.load_table(".".join(table.name())).properties[INDEX_PATH_PROPERTY] == theirs
