"""The build within a memory budget: spilled sorted runs give the regions of one in-memory sort, entry for entry."""

from __future__ import annotations

import math
import os
import random
import struct
import subprocess
import sys
import tempfile
from itertools import pairwise
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from airflow_iceberg_maint.index.format.extract_files import read_region_file, read_tracking_file, region_stats
from airflow_iceberg_maint.index.metadata.builders import new_index_metadata
from airflow_iceberg_maint.index.metadata.expressions import split_expression_list
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.index.source.snapshot_files import plan_snapshot
from airflow_iceberg_maint.index.write.build import (
    cut_regions,
    entries_for_files,
    entry_bytes,
    entry_layout,
    sort_entries,
    target_rows,
)
from airflow_iceberg_maint.index.write.refresh import refresh_full
from airflow_iceberg_maint.sorting import sorted_runs
from airflow_iceberg_maint.sorting.ordering import sort_indices
from airflow_iceberg_maint.sorting.sorted_runs import SortedRuns

SCHEMA = pa.schema([("k_long", pa.int64()), ("k_str", pa.string()), ("k_float", pa.float64())])
_FLOATS = [None, 0.0, -0.0, math.nan, -math.nan, math.inf, -math.inf, 1.5, -2.5, 1e-300]
_HOT = 7  # a key held by one row in three: a hot key that spans regions when allowed


def _rows(rng: random.Random, count: int) -> pa.Table:
    longs = [
        None if rng.random() < 0.1 else _HOT if rng.random() < 0.33 else rng.randrange(-50, 50) for _ in range(count)
    ]
    strings = [
        None if rng.random() < 0.1 else rng.choice(["", "a", "ab", "b", "é", "日本", "z" * 20, "hot", "hot"])
        for _ in range(count)
    ]
    return pa.table(
        {"k_long": longs, "k_str": strings, "k_float": [rng.choice(_FLOATS) for _ in range(count)]}, schema=SCHEMA
    )


def _table(catalog: Catalog) -> Table:
    table = catalog.create_table("db.keys", schema=SCHEMA)
    rng = random.Random(11)
    for count in (300, 17, 450, 1, 260, 390):
        table.append(_rows(rng, count))
    return table


def _bits(value: Any) -> Any:
    """Floats by their bits, so NaN equals itself and -0.0 differs from 0.0."""
    if isinstance(value, float):
        return struct.pack(">d", value)
    if isinstance(value, dict):
        return {k: _bits(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_bits(v) for v in value]
    return value


def _stats(stats: dict[int, Any]) -> dict[int, Any]:
    return {
        fid: _bits([s.lower_bound, s.upper_bound, s.null_value_count, s.group_max_value, s.has_group_max_value])
        for fid, s in stats.items()
    }


@pytest.mark.parametrize(
    "ordering", ["k_long", "k_str", "k_float", "k_str, k_float, k_long", "bucket(4, k_long), k_long"]
)
@pytest.mark.parametrize("spanning", [False, True])
@pytest.mark.parametrize("budget", ["2000", "9000"])  # runs of about 30 and 150 entries
def test_bounded_build_equals_one_in_memory_sort(
    sqlite_catalog: Catalog,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    ordering: str,
    spanning: bool,
    budget: str,
) -> None:
    table = _table(sqlite_catalog)
    properties = {
        "write.region.target-file-size-bytes": "600",
        "write.build.memory-budget-bytes": budget,
        "write.region.allow-key-spanning": str(spanning).lower(),
    }
    metadata = new_index_metadata(table, "ix", split_expression_list(ordering), [], True, properties)
    IndexStore(table).create(metadata, "ix")
    spill = tmp_path / "spill"
    spill.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spill))
    result = refresh_full(table, "ix")
    assert list(spill.iterdir()) == []  # the runs are gone with the build

    committed, _, _ = IndexStore(table).load("ix")
    (extract,) = committed.extracts
    layout = entry_layout(committed, committed.extract_schema(extract))
    # Today's build, all in memory: every entry read, one stable sort, regions cut over all of them.
    plan = plan_snapshot(table, table.snapshot_by_id(extract.source_table_snapshot_id))
    entries = entries_for_files(table, plan, sorted(plan.data_files), layout)
    entries, keys = sort_entries(entries, layout)
    target = target_rows(entry_bytes(entries), entries.num_rows, committed.region_target_size_bytes())
    expected = cut_regions(keys, target, spanning)

    regions = read_tracking_file(table.io, extract.tracking_file)
    assert result.entries == entries.num_rows == 1418
    assert len(regions) == len(expected) > 5
    if spanning and ordering == "k_long":
        spans = [a.stats[1].group_max_value == b.stats[1].group_max_value == _HOT for a, b in pairwise(regions)]
        assert any(spans)  # the hot key spans regions
    for region, (start, stop) in zip(regions, expected, strict=True):
        rows = entries.slice(start, stop - start)
        stored = read_region_file(table.io, region.file_path, layout.region_schema)
        assert _bits(stored.to_pylist()) == _bits(rows.to_pylist())
        values = {o.field_id: k.slice(start, stop - start) for o, k in zip(layout.ordering, keys, strict=True)}
        values.update({c.field_id: rows.column(c.name) for c in layout.stats_columns if c.field_id not in values})
        assert _stats(region.stats) == _stats(region_stats(layout.stats_columns, values))


def _keys_of(entries: pa.Table) -> list[pa.Array]:
    return [entries.column("k")]


@pytest.mark.parametrize(
    ("budget", "batch_rows", "run_count"),
    # Many runs of one batch (20 written: 16 merged into one, then 4); few runs of many batches, read several at once.
    [(3_000, 8_192, 5), (30_000, 5, 2)],
)
def test_runs_merge_stably_and_leave_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget: int, batch_rows: int, run_count: int
) -> None:
    monkeypatch.setattr(sorted_runs, "RUN_BATCH_ROWS", batch_rows)
    rng = random.Random(3)
    parts = [
        pa.table({"k": [rng.choice([None, 1, 2, 2, 2, 3]) for _ in range(count)], "seq": range(at, at + count)})
        for at, count in ((0, 500), (500, 3), (503, 700), (1203, 40))
    ]
    with SortedRuns(_keys_of, budget_bytes=budget, spill_dir=str(tmp_path)) as runs:
        for part in parts:
            runs.add(part)
        (directory,) = tmp_path.iterdir()
        assert directory.name.startswith(f"iceberg-index-build-{os.getpid()}-")
        merged = pa.concat_tables([entries for entries, _ in runs.sorted()])
        assert len(runs.runs) == run_count and runs.rows == 1243
    everything = pa.concat_tables(parts)
    assert merged.to_pylist() == everything.take(sort_indices([everything.column("k")])).to_pylist()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fan_in", [2, 3, 16])
def test_runs_merged_in_levels_keep_every_entry_in_stable_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fan_in: int
) -> None:
    """Hundreds of runs merged level by level (with 2: up to 8 levels) give a stable sort of every entry,
    and never more than fan_in - 1 runs a level are left for the final merge."""
    monkeypatch.setattr(sorted_runs, "FAN_IN", fan_in)
    monkeypatch.setattr(sorted_runs, "RUN_BATCH_ROWS", 7)
    rng = random.Random(fan_in)
    keys = [rng.choice([None, *range(40)]) for _ in range(6_000)]
    everything = pa.table({"k": pa.array(keys, pa.int64()), "seq": range(len(keys))})
    with SortedRuns(_keys_of, budget_bytes=2_000, spill_dir=str(tmp_path)) as runs:
        for start in range(0, len(keys), 37):
            runs.add(everything.slice(start, 37))
        levels = runs._levels
        assert max(levels) >= 1 and all(levels.count(level) < fan_in for level in set(levels))
        assert len(list(next(tmp_path.iterdir()).iterdir())) == len(runs.runs)  # merged runs are removed
        merged = pa.concat_tables([entries for entries, _ in runs.sorted()])
    assert merged.to_pylist() == everything.take(sort_indices([everything.column("k")])).to_pylist()
    assert list(tmp_path.iterdir()) == []


def test_runs_are_removed_when_the_build_fails(tmp_path: Path) -> None:
    with (
        pytest.raises(RuntimeError, match="region write failed"),
        SortedRuns(_keys_of, budget_bytes=100, spill_dir=str(tmp_path)) as runs,
    ):
        runs.add(pa.table({"k": range(1000)}))
        assert len(list(tmp_path.iterdir())) == 1
        raise RuntimeError("region write failed")
    assert list(tmp_path.iterdir()) == []


def test_runs_of_a_killed_build_are_removed_by_the_next(tmp_path: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    abandoned = tmp_path / f"iceberg-index-build-{int(dead.stdout)}-x1"
    (abandoned / "run-00000.arrow").parent.mkdir()
    (abandoned / "run-00000.arrow").write_bytes(b"left by a killed build")
    running = tmp_path / f"iceberg-index-build-{os.getpid()}-x2"  # a live process's: kept
    running.mkdir()
    other = tmp_path / "unrelated"
    other.mkdir()
    with SortedRuns(_keys_of, budget_bytes=100, spill_dir=str(tmp_path)) as runs:
        runs.add(pa.table({"k": range(1000)}))
        assert not abandoned.exists() and running.exists() and other.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([running.name, "unrelated"])
