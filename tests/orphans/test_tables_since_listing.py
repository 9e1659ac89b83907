"""A table created inside the scan location after the listing was taken keeps every file (S8, S17).

Issue 31, finding 2: Parquet files sit under ``t/data/legacy/``; the files of ``t`` are listed
(an S3 Inventory, a partial one, a live listing, a sharded scan's shards); afterwards another
catalog creates a table at ``t/data/legacy`` and registers those files in place with
``add_files``. The listed rows show no ``metadata/`` folder there, so only a look at storage as
it is when deleting can tell that the files are another table's now. Exactly the true orphans
elsewhere are deleted (one in a sibling folder whose name starts with ``legacy``), every file of
the nested table stays and it reads all its rows, and every snapshot of ``t`` still reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from airflow_iceberg_maint.orphans.report import OrphanReport
from airflow_iceberg_maint.orphans.sharded.finish import finish_sharded_scan
from airflow_iceberg_maint.orphans.sharded.match import match_shard
from airflow_iceberg_maint.orphans.sharded.scan import plan_sharded_scan, run_shard
from tests.orphans.catalog_cases import cutoff_after_writes
from tests.orphans.inventories import bucket_objects, inventory_time, s3_client_of, write_s3_inventory
from tests.orphans.scenario import SCHEMA, Files, rows, snapshot_row_counts

LEGACY_ROWS = 7  # rows in the legacy Parquet files, which the nested table registers


@dataclass
class Scene:
    table: Table
    other: Catalog  # another catalog, of which the outer table's catalog knows nothing
    files: Files
    legacy: str  # the nested table's location
    legacy_files: list[str]
    orphans: set[str]

    def create_nested(self) -> None:
        nested = self.other.create_table("db.legacy", schema=SCHEMA, location=self.legacy)
        nested.add_files(self.legacy_files)  # registered in place

    def nested_rows(self) -> int:
        return len(self.other.load_table("db.legacy").scan().to_arrow())


def _scene(catalog: SqlCatalog, tmp_path: Path) -> Scene:
    table = catalog.create_table("db.t", schema=SCHEMA)
    table.append(rows(0, 10))
    table.append(rows(10, 5))
    loc = table.location().rstrip("/")
    legacy = f"{loc}/data/legacy"
    legacy_files = [f"{legacy}/part-0.parquet", f"{legacy}/sub/part-1.parquet"]
    for path, part in zip(legacy_files, (rows(100, 4), rows(104, LEGACY_ROWS - 4)), strict=True):
        with table.io.new_output(path).create() as out:
            pq.write_table(part, out)
    files = Files(table)
    orphans = {
        files.put(f"{loc}/data/orphan-1.parquet"),
        files.put(f"{loc}/data/legacy-sibling/orphan-2.parquet"),  # shares the nested folder's name as a prefix
        files.put(f"{loc}/data/deep/er/orphan-3.parquet"),
        files.put(f"{loc}/metadata/stray.avro"),
    }
    other = SqlCatalog("other", **{**catalog.properties, "uri": f"sqlite:///{tmp_path}/other.db"})
    other.create_namespace("db")
    return Scene(catalog.load_table("db.t"), other, files, legacy, legacy_files, orphans)


def _options(**given: object) -> OrphanOptions:
    return OrphanOptions(only_this_table=True, **given)  # type: ignore[arg-type]


def _inventory(scene: Scene, leave_out: Callable[[str], bool] = lambda _: False) -> tuple[str, object]:
    s3 = s3_client_of(scene.table)
    bucket = scene.files.uri.authority
    objects = [o for o in bucket_objects(s3, bucket) if not leave_out(o["Key"])]
    created = inventory_time()
    return write_s3_inventory(s3, bucket, bucket, objects, "CSV", created), created


def _by_inventory(scene: Scene, tmp_path: Path) -> OrphanReport:
    """The finding as reported: the inventory is taken, then the nested table is created."""
    manifest, created = _inventory(scene)
    scene.create_nested()
    dry = remove_orphan_files(
        scene.table, _options(older_than=created, dry_run=True, listing=manifest), sources=[INDEX_FILES]
    )
    real = remove_orphan_files(scene.table, _options(older_than=created, listing=manifest), sources=[INDEX_FILES])
    assert sorted(dry.orphan_files) == sorted(real.orphan_files)
    return real


def _by_partial_inventory(scene: Scene, tmp_path: Path) -> OrphanReport:
    """The nested table exists when the inventory is taken, but the inventory leaves its metadata folder out."""
    scene.create_nested()
    legacy_metadata = scene.legacy.split("/", 3)[3] + "/metadata/"
    manifest, created = _inventory(scene, lambda key: key.startswith(legacy_metadata))
    return remove_orphan_files(scene.table, _options(older_than=created, listing=manifest), sources=[INDEX_FILES])


def _created_once(scene: Scene) -> Callable[[OrphanReport, str], None]:
    def hook(report: OrphanReport, stage: str) -> None:
        if stage == "matched":  # the listing is complete and matched; nothing deleted yet
            scene.create_nested()

    return hook


def _by_live_listing(scene: Scene, tmp_path: Path) -> OrphanReport:
    """Listed live; the nested table is created after the listing passed its folder."""
    options = _options(older_than=cutoff_after_writes())
    return remove_orphan_files(scene.table, options, sources=[INDEX_FILES], on_stage=_created_once(scene))


def _by_sharded_scan(scene: Scene, tmp_path: Path) -> OrphanReport:
    """Planned, listed and matched in shards; the nested table is created before the finish."""
    io = dict(scene.table.io.properties)
    local = scene.files.s3 is None
    scratch = f"file://{tmp_path}/scratch" if local else f"s3://{scene.files.uri.authority}/scratch"
    options = _options(older_than=cutoff_after_writes())
    plan = plan_sharded_scan(scene.table, options, shards=3, scratch=scratch, io_properties=io, sources=[INDEX_FILES])
    for index in range(plan.shards):
        run_shard(scene.table, plan.scratch, index, io)
    for index in range(plan.shards):
        match_shard(plan.scratch, index, io)
    scene.create_nested()
    return finish_sharded_scan(scene.table, plan.scratch, io, sources=[INDEX_FILES])


MODES = {
    "inventory": ("s3_catalog", _by_inventory),
    "partial_inventory": ("s3_catalog", _by_partial_inventory),
    "live_s3": ("s3_catalog", _by_live_listing),
    "live_local": ("sqlite_catalog", _by_live_listing),
    "sharded_s3": ("s3_catalog", _by_sharded_scan),
    "sharded_local": ("sqlite_catalog", _by_sharded_scan),
}


@pytest.mark.parametrize(
    "mode",
    [pytest.param(m, marks=pytest.mark.s3) if MODES[m][0] == "s3_catalog" else m for m in MODES],
)
def test_a_table_created_after_the_listing_keeps_its_files(
    mode: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    fixture, run = MODES[mode]
    scene = _scene(request.getfixturevalue(fixture), tmp_path)
    counts = snapshot_row_counts(scene.table)

    report = run(scene, tmp_path)

    assert set(report.orphan_files) == scene.orphans
    assert (report.deleted_file_count, report.failed) == (len(scene.orphans), [])
    assert not any(scene.files.exists(p) for p in scene.orphans)
    assert all(scene.files.exists(p) for p in scene.legacy_files)
    assert scene.legacy in [p["location"] for p in report.protected_locations]
    assert report.kept_protected >= len(scene.legacy_files)
    assert scene.nested_rows() == LEGACY_ROWS
    assert snapshot_row_counts(scene.table) == counts


@pytest.mark.s3
def test_an_inventory_run_looks_at_each_folder_it_deletes_from_once(s3_catalog: SqlCatalog, tmp_path: Path) -> None:
    """The cost: one LIST a folder below the root holding a file to delete (its ``metadata/``), none else."""
    scene = _scene(s3_catalog, tmp_path)
    manifest, created = _inventory(scene)
    report = remove_orphan_files(scene.table, _options(older_than=created, listing=manifest), sources=[INDEX_FILES])
    # No nested table: the legacy files are orphans too. Folders: data, data/legacy, data/legacy/sub,
    # data/legacy-sibling, data/deep, data/deep/er, metadata.
    assert set(report.orphan_files) == scene.orphans | set(scene.legacy_files)
    assert (report.list_calls, report.protected_locations) == (7, [])
