"""A sharded build: key ranges from a sample, one shard per range, one atomic commit, clean retries."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.expressions import EqualTo
from pyiceberg.table import Table

from airflow_iceberg_maint.fs.backends import storage_for
from airflow_iceberg_maint.index.format.extract_files import RegionEntry, read_region_file, read_tracking_file
from airflow_iceberg_maint.index.metadata.builders import new_index_metadata
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.index.read.lookup import lookup
from airflow_iceberg_maint.index.source.snapshot_files import plan_snapshot
from airflow_iceberg_maint.index.write.build import (
    build_regions,
    cut_regions,
    entries_for_files,
    sort_entries,
    write_region,
)
from airflow_iceberg_maint.index.write.key_ranges import KeyRanges
from airflow_iceberg_maint.index.write.refresh import refresh_target
from airflow_iceberg_maint.index.write.sharded_build import (
    BUILD_ID_PROPERTY,
    ShardedBuildPlan,
    ShardResultsMissingError,
    build_directory,
    build_shard,
    commit_sharded_build,
    plan_sharded_build,
)

HOT = 500
FILES = 6
ROWS_PER_FILE = 120


@pytest.fixture(params=["sqlite", pytest.param("s3", marks=pytest.mark.s3)])
def catalog(request: pytest.FixtureRequest) -> Catalog:
    return request.getfixturevalue(f"{request.param}_catalog")


def _hot_key_table(catalog: Catalog, spanning: bool) -> Table:
    """Keys 0..999 spread over the files, plus a hot key (HOT) that holds a third of the rows of every file."""
    schema = pa.schema([("rid", pa.int64()), ("k", pa.int64()), ("s", pa.string())])
    table = catalog.create_table("db.t", schema=schema)
    rid = 0
    for f in range(FILES):
        keys = [HOT if i % 3 == 0 else (f * 7919 + i * 104729) % 1000 for i in range(ROWS_PER_FILE)]
        keys[5] = None  # nulls sort first and must land in the first shard
        rows = pa.table(
            {
                "rid": pa.array(range(rid, rid + len(keys)), pa.int64()),
                "k": pa.array(keys, pa.int64()),
                "s": pa.array([f"v{r}" for r in range(rid, rid + len(keys))]),
            },
            schema=schema,
        )
        table.append(rows)
        rid += len(keys)
    properties = {
        "write.region.target-file-size-bytes": "600",
        "write.region.allow-key-spanning": "true" if spanning else "false",
    }
    IndexStore(table).create(new_index_metadata(table, "ix", ["k"], ["s"], True, properties), "ix")
    return table


def _regions_content(table: Table, regions: list[RegionEntry], schema: pa.Schema) -> pa.Table:
    return pa.concat_tables([read_region_file(table.io, r.file_path, schema) for r in regions])


def _without_path(region: RegionEntry) -> tuple[Any, ...]:
    return region.file_format, region.record_count, region.stats


def _build_all(table: Table, build: ShardedBuildPlan) -> list[Any]:
    return [build_shard(table, build, shard) for shard in range(build.shards)]


@pytest.mark.parametrize("spanning", [True, False])
def test_sharded_build_equals_a_single_build_entry_for_entry(catalog: Catalog, spanning: bool) -> None:
    table = _hot_key_table(catalog, spanning)
    build = plan_sharded_build(table, "ix", shards=3)
    # The hot key holds a third of the rows: a quantile falls on it, and it is a boundary.
    assert build.shards == 3
    assert HOT in build.ranges.boundaries.column("k0").to_pylist()
    results = _build_all(table, build)
    outcome = commit_sharded_build(table, build, results)
    assert outcome.committed and outcome.result.entries == FILES * ROWS_PER_FILE

    target = refresh_target(table, "ix")
    layout = target.layout
    plan = plan_snapshot(table, target.snapshot)
    # The single-worker build, same snapshot and region size, into a scratch directory.
    single, count = build_regions(
        table, plan, layout, rows_per_region=build.rows_per_region, directory=f"{target.metadata.location}/scratch"
    )
    sharded = read_tracking_file(table.io, outcome.result.extract.tracking_file)
    assert count == sum(r.record_count for r in sharded) == FILES * ROWS_PER_FILE
    single_rows = _regions_content(table, single, layout.region_schema)
    sharded_rows = _regions_content(table, sharded, layout.region_schema)
    assert sharded_rows.to_pylist() == single_rows.to_pylist()  # same entries, same order, _file/_pos included

    # Regions: the single build's cut within each range; each range boundary is a region boundary.
    entries, keys = sort_entries(entries_for_files(table, plan, sorted(plan.data_files), layout), layout)
    assert entries.to_pylist() == single_rows.to_pylist()
    cuts = []
    for shard in range(build.shards):
        inside = pc.indices_nonzero(build.ranges.mask(shard, keys)).to_pylist()
        assert inside == list(range(inside[0], inside[-1] + 1))  # a range is one contiguous run of the order
        part = [k.slice(inside[0], len(inside)) for k in keys]
        cuts += [(inside[0] + a, inside[0] + b) for a, b in cut_regions(part, build.rows_per_region, spanning)]
    expected = [
        write_region(
            table.io,
            layout,
            entries.slice(a, b - a),
            [k.slice(a, b - a) for k in keys],
            f"{target.metadata.location}/scratch",
        )
        for a, b in cuts
    ]
    assert [_without_path(r) for r in sharded] == [_without_path(r) for r in expected]
    # Every entry of the hot key is in one shard: the one whose range ends at it.
    hot_shard = build.ranges.boundaries.column("k0").to_pylist().index(HOT)
    hot_rows = pc.equal(keys[0], HOT)
    assert pc.all(pc.or_(pc.invert(hot_rows), build.ranges.mask(hot_shard, keys))).as_py()
    assert results[hot_shard].entries >= FILES * ROWS_PER_FILE // 3
    assert sum(r.entries for r in results) == FILES * ROWS_PER_FILE
    if spanning:
        hot_regions = [r for r in sharded if r.stats[layout.ordering[0].field_id].group_max_value == HOT]
        assert len(hot_regions) > 1  # the hot key spans regions, all inside its shard

    # Only the committed files are left under the build directory.
    directory = build_directory(target.metadata, build.build_id)
    left = {f.path for f in storage_for(directory, table.io.properties).list_files(directory, lambda _: True)}
    assert left == {r.file_path for r in sharded}
    assert outcome.deleted_files == build.shards  # the manifests
    _assert_lookups_exact(table)


def test_one_shard_equals_the_single_build_region_for_region(sqlite_catalog: Catalog) -> None:
    table = _hot_key_table(sqlite_catalog, spanning=True)
    build = plan_sharded_build(table, "ix", shards=1)
    assert build.shards == 1
    outcome = commit_sharded_build(table, build, _build_all(table, build))
    target = refresh_target(table, "ix")
    single, _ = build_regions(
        table,
        plan_snapshot(table, target.snapshot),
        target.layout,
        rows_per_region=build.rows_per_region,
        directory=f"{target.metadata.location}/scratch",
    )
    sharded = read_tracking_file(table.io, outcome.result.extract.tracking_file)
    assert [_without_path(r) for r in sharded] == [_without_path(r) for r in single]


def _assert_lookups_exact(table: Table) -> None:
    for key in [HOT, 0, 1, 999, 123, 2000]:
        found = lookup(table, "ix", [(key,)])
        expected = table.scan(row_filter=EqualTo("k", key)).to_arrow()  # type: ignore[arg-type, call-arg]
        assert found.mode == "index"
        assert sorted(found.rows.column("rid").to_pylist()) == sorted(expected.column("rid").to_pylist())
    nulls = lookup(table, "ix", [(None,)])
    assert sorted(nulls.rows.column("rid").to_pylist()) == [f * ROWS_PER_FILE + 5 for f in range(FILES)]


def test_a_retried_commit_commits_once(sqlite_catalog: Catalog) -> None:
    table = _hot_key_table(sqlite_catalog, spanning=False)
    build = plan_sharded_build(table, "ix", shards=2)
    results = _build_all(table, build)
    first = commit_sharded_build(table, build, results)
    versions = IndexStore(table).versions("ix")
    again = commit_sharded_build(table, build, results)
    assert (first.committed, again.committed) == (True, False)
    assert again.result.extract == first.result.extract
    assert IndexStore(table).versions("ix") == versions


def test_missing_shard_result_commits_nothing(sqlite_catalog: Catalog) -> None:
    table = _hot_key_table(sqlite_catalog, spanning=False)
    build = plan_sharded_build(table, "ix", shards=3)
    results = [build_shard(table, build, 0), build_shard(table, build, 2)]
    with pytest.raises(ShardResultsMissingError, match=r"no successful result of shard\(s\) \[1\]; nothing committed"):
        commit_sharded_build(table, build, results)
    assert IndexStore(table).load("ix")[0].extracts == ()


def test_key_ranges_follow_the_total_float_order() -> None:
    boundaries = pa.table({"k0": pa.array([-0.0, float("nan")], pa.float64())})
    ranges = KeyRanges.from_text(KeyRanges(boundaries).to_text())
    values = pa.array([None, -math.inf, -0.0, 0.0, 1.0, math.inf, float("nan"), -float("nan")], pa.float64())
    shard_of = [[s for s in range(3) if ranges.mask(s, [values])[i].as_py()] for i in range(len(values))]
    # -NaN sorts first, NaN last; -0.0 (the boundary) ends range 0, 0.0 starts range 1.
    assert shard_of == [[0], [0], [0], [1], [1], [1], [1], [0]]


_KILLED_SHARD = textwrap.dedent("""
    import sys, time
    from pyiceberg.catalog.sql import SqlCatalog
    from airflow_iceberg_maint.index.write import build as build_module
    from airflow_iceberg_maint.index.write.sharded_build import ShardedBuildPlan, build_shard

    write = build_module.write_region_file
    def slow_write(*args, **kwargs):
        size = write(*args, **kwargs)
        time.sleep(0.2)  # a slow store: the parent kills the shard between two region files
        return size
    build_module.write_region_file = slow_write
    build_module.IO_THREADS = 1
    catalog = SqlCatalog("default", uri=sys.argv[1], warehouse=sys.argv[2])
    build_shard(catalog.load_table("db.t"), ShardedBuildPlan.from_json(eval(sys.argv[3])), int(sys.argv[4]))
""")


def test_a_killed_shard_retried_yields_one_clean_commit(
    sqlite_catalog: Catalog, tmp_path: Path, warehouse: Path
) -> None:
    table = _hot_key_table(sqlite_catalog, spanning=True)
    build = plan_sharded_build(table, "ix", shards=2)
    directory = build_directory(IndexStore(table).load("ix")[0], build.build_id)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _KILLED_SHARD,
            f"sqlite:///{tmp_path}/catalog.db",
            f"file://{warehouse}",
            repr(build.to_json()),
            "1",
        ],
        env=env,
    )
    local = Path(directory.removeprefix("file://"))
    deadline = time.monotonic() + 60
    while len(list(local.glob("shard-00001-*/region-*.parquet"))) < 2:
        assert child.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    child.send_signal(signal.SIGKILL)
    child.wait()
    (killed,) = local.glob("shard-00001-*")
    assert not (killed / "manifest.parquet").exists()  # killed mid-write, before its manifest

    results = _build_all(table, build)  # shard 1 retried: a new attempt directory
    outcome = commit_sharded_build(table, build, results)
    metadata = IndexStore(table).load("ix")[0]
    (extract,) = metadata.extracts
    assert extract.properties[BUILD_ID_PROPERTY] == build.build_id and outcome.committed
    regions = read_tracking_file(table.io, extract.tracking_file)
    assert not any(killed.iterdir())  # every file of the killed attempt is deleted
    left = sorted(str(p) for p in local.rglob("*") if p.is_file())
    assert left == sorted(r.file_path.removeprefix("file://") for r in regions)
    assert sum(r.record_count for r in regions) == FILES * ROWS_PER_FILE
    _assert_lookups_exact(table)
