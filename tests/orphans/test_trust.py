"""Issue 9: files a live table still needs survive every spelling, symlink, nested table and odd name.

Each test builds real tables (pyiceberg SQL catalogs, Parquet and Avro files written by
pyiceberg), plants files, runs the engine and checks the exact files deleted against an
independent oracle: pyiceberg's own inspect tables and full reads of every snapshot.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from airflow_iceberg_maint.errors import CatalogListingError, LocationRefusedError
from airflow_iceberg_maint.fs.locations import local_path
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from airflow_iceberg_maint.orphans.report import OrphanReport
from airflow_iceberg_maint.reachability.other_tables import TablePaths, catalog_table_paths
from tests.orphans.scenario import SCHEMA, Files, referenced_by_oracle, rows, snapshot_row_counts

OLD = time.time() - 10 * 86400


def _table(catalog: Catalog, name: str = "db.t", **kwargs) -> Table:
    table = catalog.create_table(name, schema=SCHEMA, **kwargs)
    table.append(rows(0, 10))
    table.append(rows(10, 10))
    return catalog.load_table(name)


def _age(root: str) -> None:
    for dirpath, _, names in os.walk(root):
        for name in names:
            os.utime(os.path.join(dirpath, name), (OLD, OLD), follow_symlinks=False)


def _plant(path: str) -> str:
    os.makedirs(os.path.dirname(local_path(path)), exist_ok=True)
    Path(local_path(path)).write_bytes(b"orphan")
    return path


def _exists(path: str) -> bool:
    return os.path.lexists(local_path(path))


def _files(root: str) -> set[str]:
    return {os.path.join(d, n) for d, _, names in os.walk(root) for n in names}


def _live_files(table: Table) -> set[str]:
    """What pyiceberg itself says the table references, as local paths."""
    return {os.path.normpath(local_path(p)) for p in referenced_by_oracle(table) if os.path.exists(local_path(p))}


def _run(table: Table, **options) -> OrphanReport:
    return remove_orphan_files(table, OrphanOptions(older_than_days=1, **options), sources=[INDEX_FILES])


def _write_parquet(catalog_table: Table, fs_path: str, start: int) -> None:
    os.makedirs(os.path.dirname(fs_path), exist_ok=True)
    pq.write_table(rows(start, 5), fs_path)


# Item 1: a location that is, or passes through, a symlink inside the table.


def test_a_location_through_a_symlink_inside_the_table_is_refused_and_nothing_is_deleted(sqlite_catalog):
    table = _table(sqlite_catalog)
    root = local_path(table.location())
    os.symlink(f"{root}/metadata", f"{root}/data/alias")
    _age(root)
    before = _files(root)
    with pytest.raises(LocationRefusedError, match=r"data/alias': resolves through a symlink to '.*/t/metadata'"):
        _run(table, location=f"{table.location()}/data/alias")
    with pytest.raises(LocationRefusedError, match="resolves through a symlink"):
        _run(table, location=f"{table.location()}/data/alias/")
    assert _files(root) == before
    assert len(sqlite_catalog.load_table("db.t").scan().to_arrow()) == 20


def test_a_symlink_inside_the_table_is_neither_followed_nor_deleted_by_a_full_run(sqlite_catalog):
    table = _table(sqlite_catalog)
    root = local_path(table.location())
    os.symlink(f"{root}/metadata", f"{root}/data/alias")
    orphan = _plant(f"{table.location()}/data/orphan.parquet")
    _age(root)
    report = _run(table)
    assert report.orphan_files == [orphan]
    assert os.path.islink(f"{root}/data/alias")
    assert _live_files(table) <= _files(root)
    assert len(sqlite_catalog.load_table("db.t").scan().to_arrow()) == 20


# Item 2: other tables' files under the scan location.


def _nested_setup(catalog: Catalog) -> tuple[Table, Table, str]:
    outer = _table(catalog, "db.outer")
    inner = _table(catalog, "db.inner", location=f"{outer.location()}/data/inner")
    return outer, inner, f"{outer.location()}/data/inner"


@pytest.mark.parametrize("catalog_fixture", ["sqlite_catalog", "pg_catalog"])
def test_a_table_nested_in_the_data_folder_is_kept_whole_and_named(request, catalog_fixture):
    catalog = request.getfixturevalue(catalog_fixture)
    outer, inner, inner_location = _nested_setup(catalog)
    orphan = _plant(f"{outer.location()}/data/orphan.parquet")
    inner_orphan = _plant(f"{inner_location}/data/inner-orphan.parquet")
    _age(local_path(outer.location()))
    inner_files = _files(local_path(inner_location))
    report = _run(outer)
    assert report.orphan_files == [orphan]
    assert report.deleted_file_count == 1
    assert not _exists(orphan)
    assert _files(local_path(inner_location)) == inner_files  # its own orphan too: it is for its own run
    assert {p["location"] for p in report.protected_locations} == {inner_location}
    assert "table db.inner" in report.protected_locations[0]["reason"]
    assert report.kept_protected == len(inner_files)
    assert snapshot_row_counts(catalog.load_table("db.inner")) == snapshot_row_counts(inner)
    # The inner table lies in the outer one's data path, where the outer table may write anywhere:
    # its own run keeps everything, unless the user says the location holds the inner table only.
    inner_run = _run(catalog.load_table("db.inner"))
    assert inner_run.orphan_files == []
    assert inner_run.protected_locations == [
        {"location": inner_location, "reason": f"table db.outer writes under '{outer.location()}/data'"}
    ]
    assert _run(catalog.load_table("db.inner"), only_this_table=True).orphan_files == [inner_orphan]


def test_a_table_whose_write_data_path_points_under_the_location_is_kept(sqlite_catalog):
    outer = _table(sqlite_catalog, "db.outer")
    foreign_data = f"{outer.location()}/data/foreign"
    writer = sqlite_catalog.create_table("db.writer", schema=SCHEMA, properties={"write.data.path": foreign_data})
    writer.append(rows(0, 7))
    orphan = _plant(f"{outer.location()}/data/orphan.parquet")
    _age(local_path(outer.location()))
    written = _files(local_path(foreign_data))
    assert written  # the writer's data files really are under the outer table
    report = _run(outer)
    assert report.orphan_files == [orphan]
    assert _files(local_path(foreign_data)) == written
    assert report.protected_locations == [
        {"location": foreign_data, "reason": f"table db.writer writes under {foreign_data!r}"}
    ]
    assert len(sqlite_catalog.load_table("db.writer").scan().to_arrow()) == 7


def test_a_table_of_another_catalog_is_found_by_its_metadata_folder(sqlite_catalog, tmp_path):
    outer = _table(sqlite_catalog, "db.outer")
    other = SqlCatalog("other", uri=f"sqlite:///{tmp_path}/other.db", warehouse=f"file://{tmp_path}/other")
    other.create_namespace("db")
    stranger_location = f"{outer.location()}/misc/stranger"
    stranger = _table(other, "db.stranger", location=stranger_location)
    orphan = _plant(f"{outer.location()}/misc/orphan.txt")
    _age(local_path(outer.location()))
    stranger_files = _files(local_path(stranger_location))
    report = _run(outer)  # the catalog pass cannot see the other catalog: the listing does
    assert report.orphan_files == [orphan]
    assert _files(local_path(stranger_location)) == stranger_files
    [protected] = report.protected_locations
    assert protected["location"] == stranger_location
    assert protected["reason"].startswith(f"holds the metadata of another table ({stranger_location}/metadata/")
    assert len(other.load_table("db.stranger").scan().to_arrow()) == len(stranger.scan().to_arrow()) == 20


def test_stale_metadata_of_the_table_itself_is_not_taken_for_another_table(sqlite_catalog):
    table = _table(sqlite_catalog, properties={"write.metadata.previous-versions-max": "1"})
    table.append(rows(20, 5))
    table = sqlite_catalog.load_table("db.t")
    _age(local_path(table.location()))
    report = _run(table, dry_run=True)
    dropped = [p for p in report.orphan_files if p.endswith(".metadata.json")]
    assert dropped and report.protected_locations == []


class _UnlistableCatalog(SqlCatalog):
    def list_namespaces(self, namespace=()):
        raise ConnectionError("catalog endpoint unreachable")


def test_a_catalog_that_cannot_be_listed_refuses_unless_the_location_holds_this_table_only(tmp_path):
    catalog = _UnlistableCatalog("default", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("db")
    table = _table(catalog)
    orphan = _plant(f"{table.location()}/data/orphan.parquet")
    _age(local_path(table.location()))
    with pytest.raises(
        CatalogListingError,
        match=(
            r"table db\.t: catalog 'default': its tables cannot be listed .*ConnectionError: catalog endpoint "
            r"unreachable\); nothing was deleted\. If the location holds this table only, say so with only_this_table"
        ),
    ):
        _run(table)
    assert _exists(orphan)
    assert _run(table, only_this_table=True).orphan_files == [orphan]
    # A catalog pass made once for many tables is taken as given: no listing of its own.
    assert _run(catalog.load_table("db.t"), other_tables=[]).orphan_files == []


def test_one_catalog_pass_serves_every_table_of_a_run(sqlite_catalog):
    outer, _, inner_location = _nested_setup(sqlite_catalog)
    paths = catalog_table_paths(sqlite_catalog)
    assert sorted(p.table for p in paths) == ["db.inner", "db.outer"]
    assert TablePaths.from_json(json.loads(json.dumps(paths[0].to_json()))) == paths[0]
    _age(local_path(outer.location()))
    report = _run(outer, other_tables=paths)
    assert [p["location"] for p in report.protected_locations] == [inner_location]


def test_a_nested_table_on_s3_is_kept_whole(s3_catalog):
    outer = _table(s3_catalog, "db.outer")
    inner = _table(s3_catalog, "db.inner", location=f"{outer.location()}/data/inner")
    files = Files(outer)
    orphan = files.put(f"{outer.location()}/data/orphan.parquet")
    inner_files = files.all_files(inner.location())
    time.sleep(1.2)
    report = remove_orphan_files(outer, OrphanOptions(older_than_days=0), sources=[INDEX_FILES])
    assert report.orphan_files == [orphan]
    assert files.all_files(inner.location()) == inner_files
    assert [p["location"] for p in report.protected_locations] == [inner.location()]
    assert len(s3_catalog.load_table("db.inner").scan().to_arrow()) == 20


# Item 3: spellings that name the same file.


@pytest.mark.parametrize("spelling", ["data/./added.parquet", "data//added.parquet", "data/sub/../added.parquet"])
def test_an_added_file_referenced_under_another_spelling_is_kept(sqlite_catalog, spelling):
    table = _table(sqlite_catalog)
    root = local_path(table.location())
    os.makedirs(f"{root}/data/sub", exist_ok=True)
    _write_parquet(table, f"{root}/data/added.parquet", 100)
    table.add_files([f"{table.location()}/{spelling}"])
    table = sqlite_catalog.load_table("db.t")
    assert f"{table.location()}/{spelling}" in referenced_by_oracle(table)
    orphan = _plant(f"{table.location()}/data/orphan.parquet")
    _age(root)
    report = _run(table)
    assert report.orphan_files == [orphan]
    assert os.path.exists(f"{root}/data/added.parquet")
    assert len(sqlite_catalog.load_table("db.t").scan().to_arrow()) == 25


@pytest.mark.parametrize("metadata_side", ["link", "real"])
def test_a_warehouse_reached_through_a_symlink_keeps_files_named_on_the_other_side(tmp_path, metadata_side):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    os.symlink(real, link)
    table_side, added_side = (link, real) if metadata_side == "link" else (real, link)
    catalog = SqlCatalog("default", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{table_side}")
    catalog.create_namespace("db")
    table = _table(catalog)
    _write_parquet(table, f"{table_side}/db/t/data/added.parquet", 100)
    table.add_files([f"{added_side}/db/t/data/added.parquet"])
    table = catalog.load_table("db.t")
    orphan = _plant(f"{table.location()}/data/orphan.parquet")
    _age(str(real))
    report = _run(table)
    assert report.orphan_files == [orphan]
    assert os.path.exists(f"{real}/db/t/data/added.parquet")
    assert len(catalog.load_table("db.t").scan().to_arrow()) == 25


def test_a_referenced_symlink_keeps_the_file_it_points_at(sqlite_catalog):
    table = _table(sqlite_catalog)
    root = local_path(table.location())
    _write_parquet(table, f"{root}/data/target.parquet", 100)
    os.symlink(f"{root}/data/target.parquet", f"{root}/data/link.parquet")
    table.add_files([f"{table.location()}/data/link.parquet"])
    table = sqlite_catalog.load_table("db.t")
    _age(root)
    report = _run(table)
    assert report.orphan_files == []
    assert os.path.exists(f"{root}/data/target.parquet")
    assert len(sqlite_catalog.load_table("db.t").scan().to_arrow()) == 25


@pytest.mark.parametrize("processes", [0, 2])
def test_a_hard_link_of_a_referenced_file_is_kept(sqlite_catalog, processes):
    """The referenced name is listed, so its identity comes from the listing, not from a stat of its own."""
    table = _table(sqlite_catalog)
    root = local_path(table.location())
    _write_parquet(table, f"{root}/data/added.parquet", 100)
    table.add_files([f"{table.location()}/data/added.parquet"])
    os.link(f"{root}/data/added.parquet", f"{root}/data/other-name.parquet")
    table = sqlite_catalog.load_table("db.t")
    orphan = _plant(f"{table.location()}/data/orphan.parquet")
    _age(root)
    report = _run(table, reader_processes=processes)
    assert report.orphan_files == [orphan]
    assert report.kept_equivalent == 1
    assert os.path.exists(f"{root}/data/other-name.parquet")
    assert len(sqlite_catalog.load_table("db.t").scan().to_arrow()) == 25


def test_a_relative_table_location_is_refused_and_nothing_is_deleted(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    catalog = SqlCatalog("default", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("db")
    table = catalog.create_table("db.rel", schema=SCHEMA, location="./rel")
    table.append(rows(0, 5))
    table = catalog.load_table("db.rel")
    _age(str(tmp_path / "rel"))
    before = _files(str(tmp_path / "rel"))
    assert before
    for location in (None, "./rel/data"):
        with pytest.raises(
            LocationRefusedError,
            match=(
                r"table location '\./rel': is not an absolute local path, so the files it names depend on the "
                r"working directory of each reader"
            ),
        ):
            _run(table, location=location)
    assert _files(str(tmp_path / "rel")) == before


# Item 4: names that are not UTF-8.


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYICEBERG_CATALOG__DEFAULT__TYPE": "sql",
        "PYICEBERG_CATALOG__DEFAULT__URI": f"sqlite:///{tmp_path}/catalog.db",
        "PYICEBERG_CATALOG__DEFAULT__WAREHOUSE": f"file://{tmp_path}/warehouse",
    }
    return subprocess.run(
        [str(Path(sys.executable).parent / "iceberg-maint"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("dry_run", [True, False])
def test_names_that_are_not_utf8_are_kept_and_reported_without_a_crash(sqlite_catalog, tmp_path, dry_run):
    table = _table(sqlite_catalog)
    root = os.fsencode(local_path(table.location()))
    odd_file = root + b"/data/odd-\xff.parquet"
    odd_dir_file = root + b"/data/dir-\xfe\xfd/x.parquet"
    os.makedirs(os.path.dirname(odd_dir_file))
    for path in (odd_file, odd_dir_file):
        with open(path, "wb") as f:
            f.write(b"orphan")
    orphan = _plant(f"{table.location()}/data/orphan.parquet")
    _age(local_path(table.location()))
    result = _cli(tmp_path, "orphans", "db.t", "--older-than-days", "1", "--json", *(["--dry-run"] if dry_run else []))
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    assert body["orphan_files"] == [orphan]
    assert sorted(body["kept_undecodable"]) == [
        f"{table.location()}/data/dir-\\xfe\\xfd/x.parquet",
        f"{table.location()}/data/odd-\\xff.parquet",
    ]
    assert os.path.exists(odd_file) and os.path.exists(odd_dir_file)
    assert _exists(orphan) == dry_run


# Item 7: cutoffs that are not a number of days.


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("1e10", "--older-than-days 1e+10: expected at most "),
        ("inf", "--older-than-days inf: expected a finite number of days >= 0"),
        ("nan", "--older-than-days nan: expected a finite number of days >= 0"),
        ("-1", "--older-than-days -1.0: expected a finite number of days >= 0"),
    ],
)
def test_a_cutoff_out_of_range_is_a_one_line_error(tmp_path, value, message):
    result = _cli(tmp_path, "orphans", "db.t", f"--older-than-days={value}")
    assert result.returncode == 2
    assert result.stderr.startswith(f"iceberg-maint orphans: {message}")
    assert result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr


def test_the_command_line_makes_a_catalog_pass_unless_told_the_location_holds_this_table_only(tmp_path):
    catalog = SqlCatalog("default", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/warehouse")
    catalog.create_namespace("db")
    outer = _table(catalog, "db.outer")
    writer = catalog.create_table(
        "db.writer", schema=SCHEMA, properties={"write.data.path": f"{outer.location()}/data/foreign"}
    )
    writer.append(rows(0, 3))
    _age(local_path(outer.location()))
    foreign = sorted(f"file://{p}" for p in _files(local_path(f"{outer.location()}/data/foreign")))
    kept = json.loads(_cli(tmp_path, "orphans", "db.outer", "--dry-run", "--json").stdout)
    assert kept["orphan_files"] == []
    assert [p["location"] for p in kept["protected_locations"]] == [f"{outer.location()}/data/foreign"]
    # Only this table: the user's word is taken, and the other table's data files look like orphans.
    told = json.loads(_cli(tmp_path, "orphans", "db.outer", "--dry-run", "--json", "--only-this-table").stdout)
    assert sorted(told["orphan_files"]) == foreign
