"""Incremental refresh rewrites exactly the region files a change touches and reuses every other one."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from airflow_iceberg_maint.index.format.extract_files import RegionEntry, read_region_file, read_tracking_file
from airflow_iceberg_maint.index.metadata.builders import new_index_metadata
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.index.write.build import entry_layout
from airflow_iceberg_maint.index.write.refresh import RefreshResult
from tests.index.row_deletes import commit_position_deletes
from tests.index.test_incremental import refresh_and_compare

SCHEMA = pa.schema([("id", pa.int64()), ("payload", pa.string())])
#: About 50 entries per region file.
REGION_BYTES = "1000"


def _rows(ids: list[int], seed: int) -> pa.Table:
    shuffled = list(ids)
    random.Random(seed).shuffle(shuffled)  # unsorted inside data files
    return pa.table({"id": shuffled, "payload": [f"p{i}" for i in shuffled]}, schema=SCHEMA)


def _indexed_table(catalog: Catalog, properties: dict[str, str] | None = None) -> Table:
    table = catalog.create_table("db.keys", schema=SCHEMA)
    table.append(_rows(list(range(0, 10_000, 10)), seed=1))  # file A: 0, 10, ..., 9990
    table.append(_rows(list(range(10_000, 20_000, 10)), seed=2))  # file B: 10000, ..., 19990
    for name in ("ix", "full"):
        metadata = new_index_metadata(
            table, name, ["id"], [], True, {"write.region.target-file-size-bytes": REGION_BYTES, **(properties or {})}
        )
        IndexStore(table).create(metadata, name)
    return table


def _regions(table: Table, result: RefreshResult) -> list[RegionEntry]:
    return read_tracking_file(table.io, result.extract.tracking_file)


def _region_of(regions: list[RegionEntry], key: int) -> RegionEntry:
    return next(r for r in regions if r.stats[1].group_max_value >= key)


def _location(table: Table, key: int) -> tuple[str, int]:
    """The data file and position of the row holding ``key`` (read directly, not through the index)."""
    for path in table.inspect.files()["file_path"].to_pylist():
        with table.io.new_input(path).open() as stream:
            ids = pq.read_table(stream, columns=["id"]).column("id").to_pylist()
        if key in ids:
            return path, ids.index(key)
    raise AssertionError(f"no row holds {key}")


def test_untouched_regions_are_reused(sqlite_catalog: Catalog) -> None:
    table = _indexed_table(sqlite_catalog)
    base = refresh_and_compare(table, 2000)
    regions = _regions(table, base)
    assert base.mode == "full" and len(regions) > 20

    # Keys past the last region: a new region after it; every existing region file is reused.
    table.append(_rows(list(range(20_000, 20_020)), seed=3))
    appended = refresh_and_compare(table, 2020)
    after = _regions(table, appended)
    assert (appended.mode, appended.region_files_written, appended.region_files_reused) == (
        "incremental",
        1,
        len(regions),
    )
    assert [r.file_path for r in after[:-1]] == [r.file_path for r in regions]
    assert after[:-1] == regions  # tracking entries copied as they were

    # One position delete: only the region holding that key is rewritten.
    path_a, position = _location(table, 5000)
    table = commit_position_deletes(table, {path_a: [position]})
    deleted = refresh_and_compare(table, 2019)
    touched = _region_of(after, 5000)
    assert (deleted.region_files_written, deleted.region_files_reused) == (1, len(after) - 1)
    assert {r.file_path for r in after} - {r.file_path for r in _regions(table, deleted)} == {touched.file_path}

    # A key inside an existing range: again a single region rewritten (cut in two: it was full).
    table.append(_rows([2505], seed=4))
    inserted = refresh_and_compare(table, 2020)
    assert (inserted.region_files_written, inserted.region_files_reused) == (2, len(after) - 1)


def test_compaction_rewrites_only_regions_of_the_rewritten_file(sqlite_catalog: Catalog) -> None:
    table = _indexed_table(sqlite_catalog)
    regions = _regions(table, refresh_and_compare(table, 2000))
    path_b, _ = _location(table, 15_000)
    metadata, _, _ = IndexStore(table).load("ix")
    layout = entry_layout(metadata, metadata.current_schema())
    holding_b = set()
    for region in regions:
        entries = read_region_file(table.io, region.file_path, layout.region_schema)
        if path_b in pc.cast(entries.column("_file"), pa.string()).to_pylist():
            holding_b.add(region.file_path)
    assert 0 < len(holding_b) < len(regions)
    # Rewrite file B (same rows, new file): its entries change _file and _pos.
    with table.transaction() as tx:
        tx.delete("id >= 10000")
        tx.append(_rows(list(range(10_000, 20_000, 10)), seed=5))
    table = table.refresh()
    compacted = refresh_and_compare(table, 2000)
    assert compacted.mode == "incremental"
    assert compacted.region_files_reused == len(regions) - len(holding_b)
    kept = {r.file_path for r in _regions(table, compacted)} & {r.file_path for r in regions}
    assert kept == {r.file_path for r in regions} - holding_b


def test_region_growing_past_the_target_is_split(sqlite_catalog: Catalog) -> None:
    table = _indexed_table(sqlite_catalog)
    regions = _regions(table, refresh_and_compare(table, 2000))
    # 300 entries with keys 2501..2509 all fall in the region holding 2500 and 2510.
    table.append(_rows([2501 + i % 9 for i in range(300)], seed=6))
    grown = refresh_and_compare(table, 2300)
    after = _regions(table, grown)
    assert grown.region_files_reused == len(regions) - 1
    assert grown.region_files_written >= 5  # ~350 entries at ~50 per region
    assert len(after) == len(regions) - 1 + grown.region_files_written
    assert max(r.record_count for r in after) < 2 * max(r.record_count for r in regions)


def test_appends_at_the_end_merge_into_a_small_last_region(sqlite_catalog: Catalog) -> None:
    table = _indexed_table(sqlite_catalog)
    refresh_and_compare(table, 2000)
    table.append(_rows([30_000], seed=7))
    one = refresh_and_compare(table, 2001)
    assert one.region_files_written == 1  # a new one-entry region after the last
    table.append(_rows([30_001], seed=8))
    two = refresh_and_compare(table, 2002)
    # The one-entry region is under half the target: merged with the new entry, not followed by another.
    assert (two.region_files_written, two.region_files_reused) == (1, one.region_files_reused)
    assert _regions(table, two)[-1].record_count == 2


def test_hot_key_spanning_regions_only_rewrites_the_last_of_its_run(sqlite_catalog: Catalog) -> None:
    table = _indexed_table(sqlite_catalog, {"write.region.allow-key-spanning": "true"})
    table.append(_rows([7000] * 400, seed=9))
    base = refresh_and_compare(table, 2400)
    regions = _regions(table, base)
    run = [r for r in regions if r.stats[1].group_max_value == 7000]
    assert len(run) >= 3  # the hot key spans several region files
    table.append(_rows([7000] * 10, seed=10))
    more = refresh_and_compare(table, 2410)
    assert (more.region_files_written, more.region_files_reused) == (1, len(regions) - 1)
    assert {r.file_path for r in regions} - {r.file_path for r in _regions(table, more)} == {run[-1].file_path}
