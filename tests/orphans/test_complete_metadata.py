"""Issue 21 case 7: maintenance works from the table's whole metadata file, whatever a catalog returns.

With pyiceberg's REST catalog property ``snapshot-loading-mode=refs`` a catalog's ``load_table``
holds only the snapshots refs point at; the files of the others then looked unreferenced and the
orphan scan deleted them. On every catalog type, the command must report and delete exactly the
files planted as orphans, and the loader must return every snapshot and the whole metadata log.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import Table

from airflow_iceberg_maint.catalog import complete_metadata, load_table, refresh_table
from airflow_iceberg_maint.errors import IncompleteMetadataError
from tests.orphans.catalog_cases import CatalogCase, cutoff_after_writes, hiding_history, older_than, whole_table
from tests.orphans.scenario import SCHEMA, Files, referenced_by_oracle, snapshot_row_counts

KINDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    pytest.param("rest", id="rest", marks=pytest.mark.rest),
]


@pytest.fixture(params=KINDS)
def case(request: pytest.FixtureRequest, tmp_path: Path, warehouse: Path) -> CatalogCase:
    kind = request.param
    if kind == "sqlite":
        catalog = request.getfixturevalue("sqlite_catalog")
        config = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{warehouse}"}
        return CatalogCase(kind, catalog, "default", config)
    if kind == "postgres":
        catalog = request.getfixturevalue("pg_catalog")
        config = {"type": "sql", "uri": catalog.properties["uri"], "warehouse": f"file://{warehouse}"}
        return CatalogCase(kind, catalog, catalog.name, config)
    catalog, config = request.getfixturevalue("rest_catalog_config")
    # The command's catalog answers with refs only; the fixture's catalog (which writes) loads everything.
    return CatalogCase(kind, catalog, "default", {**config, "snapshot-loading-mode": "refs"})


def _partial_view(case: CatalogCase, name: str) -> Table:
    """The table as the command's catalog answers it (refs only on REST), read by pyiceberg alone."""
    from pyiceberg.catalog import load_catalog

    return load_catalog(case.name, **case.config).load_table(name)


def test_loader_returns_every_snapshot_and_the_whole_metadata_log(case: CatalogCase) -> None:
    table = case.catalog.create_table("db.t", schema=SCHEMA, properties={"write.metadata.previous-versions-max": "4"})
    hiding_history(table)
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog(case.name, **case.config)
    loaded = load_table(catalog, "db.t")
    in_file = FromInputFile.table_metadata(table.io.new_input(table.metadata_location))

    assert loaded.metadata_location == table.metadata_location
    assert loaded.metadata == in_file
    assert [s.snapshot_id for s in loaded.metadata.snapshots] == [s.snapshot_id for s in in_file.snapshots]
    assert len(in_file.snapshots) == 8
    assert loaded.metadata.metadata_log == in_file.metadata_log and len(in_file.metadata_log) == 4
    if case.kind == "rest":
        # What the test is about: the catalog itself leaves 7 of the 8 snapshots out.
        assert len(catalog.load_table("db.t").metadata.snapshots) == 1
    # A reload in place (the orphan scan's re-check) holds everything too, after a new commit.
    table.append(table.scan().to_arrow().slice(0, 1))
    refresh_table(loaded)
    assert loaded.metadata == FromInputFile.table_metadata(table.io.new_input(table.metadata_location))
    assert len(loaded.metadata.snapshots) == 9


def test_orphans_dry_and_real_run_delete_exactly_the_planted_files(case: CatalogCase) -> None:
    table = case.catalog.create_table("db.t", schema=SCHEMA)
    hiding_history(table)
    whole = whole_table(table)
    files = Files(whole)
    loc = whole.location().rstrip("/")
    planted = {
        files.put(f"{loc}/data/orphan-1.parquet"),
        files.put(f"{loc}/data/deeper/orphan-2.parquet"),
        files.put(f"{loc}/metadata/orphan-3.avro"),
    }
    cutoff = cutoff_after_writes()
    before = files.all_files(loc)
    # The oracle, from the metadata file: everything listed but the planted files is referenced.
    assert before - referenced_by_oracle(whole) == planted
    hidden_only = referenced_by_oracle(whole) - referenced_by_oracle(_partial_view(case, "db.t"))
    if case.kind == "rest":
        # 7 hidden snapshots: each one's manifest list, and the 5 appends' manifests and data files.
        assert len(hidden_only) >= 17
    rows_before = snapshot_row_counts(whole)

    dry = case.orphans("db.t", "--dry-run", *older_than(cutoff))
    assert sorted(dry["orphan_files"]) == sorted(planted)
    assert dry["deleted_file_count"] == 0 and dry["failed"] == [] and dry["conflicts"] == []
    assert files.all_files(loc) == before

    real = case.orphans("db.t", *older_than(cutoff))
    assert sorted(real["orphan_files"]) == sorted(planted)
    assert real["deleted_file_count"] == 3 and real["failed"] == []
    assert files.all_files(loc) == before - planted
    assert snapshot_row_counts(whole_table(table)) == rows_before


def test_a_metadata_file_that_is_not_the_catalogs_state_is_refused(sqlite_catalog: SqlCatalog) -> None:
    table = sqlite_catalog.create_table("db.t", schema=SCHEMA)
    hiding_history(table)
    first = table.metadata.metadata_log[0].metadata_file
    stale = Table(table.name(), table.metadata, first, table.io, sqlite_catalog)
    with pytest.raises(IncompleteMetadataError) as caught:
        complete_metadata("db.t", stale)
    assert str(caught.value) == (
        f"table 'db.t': its metadata file {first} differs from the catalog's answer in current snapshot, refs, "
        f"snapshots {sorted(s.snapshot_id for s in table.metadata.snapshots)}; nothing was done"
    )


def test_an_unreadable_metadata_file_is_refused(sqlite_catalog: SqlCatalog, warehouse: Path) -> None:
    table = sqlite_catalog.create_table("db.t", schema=SCHEMA)
    missing = f"file://{warehouse}/db/t/metadata/gone.metadata.json"
    view: Any = Table(table.name(), table.metadata, missing, table.io, sqlite_catalog)
    with pytest.raises(IncompleteMetadataError, match=r"its metadata file .*gone\.metadata\.json cannot be read"):
        complete_metadata("db.t", view)
    assert IncompleteMetadataError.retryable


def test_every_table_is_loaded_through_the_complete_loader() -> None:
    """No code calls a catalog's ``load_table`` or a table's ``refresh`` but the loader itself, and the
    pass that reads other tables' locations and write paths (no snapshots: a partial answer has them
    all, and a table whose metadata file cannot be read must not stop the scan of another)."""
    import ast
    import inspect
    import textwrap

    import airflow_iceberg_maint
    from airflow_iceberg_maint.airflow.hooks.maintenance import IcebergMaintenanceHook

    root = Path(airflow_iceberg_maint.__file__).parent
    hook = {"self.hook", "self"}  # the Airflow hook's load_table, which is the loader's (checked below)
    calls = set()
    for source in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(source.read_text(), str(source))):
            called = node.func if isinstance(node, ast.Call) else None
            if isinstance(called, ast.Attribute) and called.attr in ("load_table", "refresh", "refresh_table"):
                if called.attr == "load_table" and ast.unparse(called.value) in hook:
                    assert str(source.relative_to(root)).startswith("airflow/"), ast.unparse(node)
                    continue
                calls.add((str(source.relative_to(root)), ast.unparse(node)))
    assert calls == {
        # The loader's call, and its renewal of vended credentials, which takes only the FileIO properties.
        ("catalog.py", "catalog.load_table(parts)"),
        ("reachability/other_tables.py", "catalog.load_table(identifier)"),
        # A REST commit's look at the current metadata location just before it commits (S18): the location only.
        ("commit_fence.py", "table.catalog.load_table(table.name())"),
    }
    method = ast.parse(textwrap.dedent(inspect.getsource(IcebergMaintenanceHook.load_table)))
    assert [ast.unparse(n) for n in ast.walk(method) if isinstance(n, ast.Call)] == [
        "load_table(self.catalog, table_name)"
    ]
