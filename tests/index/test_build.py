"""Building extracts: live rows with true positions, index order, region cuts, region and tracking files."""

from __future__ import annotations

import math
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from multiprocessing import get_context
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import IntegerType, LongType

from airflow_iceberg_maint.index.format.extract_files import (
    FieldStats,
    read_region_file,
    read_tracking_file,
    region_file_paths,
)
from airflow_iceberg_maint.index.metadata.builders import new_index_metadata
from airflow_iceberg_maint.index.metadata.expressions import Apply, Reference, split_expression_list
from airflow_iceberg_maint.index.metadata.model import StatsField
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.index.source.live_rows import live_rows_of_file, plan_schema
from airflow_iceberg_maint.index.source.snapshot_files import plan_snapshot
from airflow_iceberg_maint.index.write.build import cut_regions, entry_layout
from airflow_iceberg_maint.index.write.refresh import refresh_full
from airflow_iceberg_maint.sorting.ordering import comparable, key_changes, sort_indices
from tests.index.oracle_table import OracleTable


@pytest.fixture(params=["sqlite", pytest.param("s3", marks=pytest.mark.s3)])
def catalog(request: pytest.FixtureRequest) -> Catalog:
    return request.getfixturevalue(f"{request.param}_catalog")


def _field_ids(schema: pa.Schema) -> dict[str, int]:
    return {f.name: int(f.metadata[b"PARQUET:field_id"]) for f in schema}


def test_live_rows_apply_every_delete_and_keep_true_positions(catalog: Catalog) -> None:
    oracle = OracleTable.create(catalog, "t", seed=1)
    for _ in range(3):
        oracle.append(40)
    oracle.delete_positions(15)
    oracle.delete_with_deletion_vector(6)
    oracle.delete_equality("k_str", ["a", None])
    oracle.append(20)
    oracle.delete_equality("k_int", [1])
    oracle.delete_positions(5)
    table = oracle.table
    plan = plan_snapshot(table, table.current_snapshot())
    schema = plan_schema(table, plan)
    rows: list[dict[str, Any]] = []
    for path in plan.data_files:
        live = live_rows_of_file(table, plan, path, schema)
        with table.io.new_input(path).open() as stream:
            raw = pq.read_table(stream, columns=["rid"]).column("rid").to_pylist()
        for row in live.to_pylist():
            assert row.pop("_file") == path
            assert raw[row.pop("_pos")] == row["rid"]  # the position counts deleted rows too
            rows.append(row)
    assert Counter(tuple(r.values()) for r in rows) == Counter(tuple(r.values()) for r in oracle.rows.values())


def test_index_order_is_nulls_first_and_total_float_order() -> None:
    nan, neg_nan = float("nan"), -float("nan")
    values = pa.array([1.5, None, 0.0, -0.0, nan, -math.inf, neg_nan, math.inf, -2.0], type=pa.float64())
    ordered = values.take(sort_indices([values])).to_pylist()
    assert ordered[0] is None and math.isnan(ordered[1]) and math.copysign(1, ordered[1]) < 0
    assert ordered[2:8] == [-math.inf, -2.0, -0.0, 0.0, 1.5, math.inf]
    assert math.copysign(1, ordered[4]) < 0 and math.copysign(1, ordered[5]) > 0
    assert math.isnan(ordered[8]) and math.copysign(1, ordered[8]) > 0
    keys = [(None,), (-0.0,), (0.0,), (float("nan"),)]
    assert sorted(reversed(keys), key=lambda k: comparable(k, [pa.float64()])) == keys
    assert key_changes([pa.array([0.0, -0.0, -0.0, None, None])]).to_pylist() == [True, True, False, True, False]


def test_cut_regions_only_where_the_key_changes() -> None:
    keys = [pa.array([1, 1, 1, 2, 3, 3, 3, 3, 3, 3, 3, 4])]
    assert cut_regions(keys, 2, allow_key_spanning=False) == [(0, 3), (3, 11), (11, 12)]
    assert cut_regions(keys, 5, allow_key_spanning=False) == [(0, 11), (11, 12)]
    # A hot key (3, seven entries) may span regions only with the writer option.
    assert cut_regions(keys, 2, allow_key_spanning=True) == [(0, 3), (3, 4), (4, 6), (6, 8), (8, 11), (11, 12)]
    assert cut_regions([pa.array([], type=pa.int64())], 2, allow_key_spanning=False) == []


@pytest.mark.parametrize("ordering", ["k_long", "bucket(4, k_long), k_long", "truncate(1, k_str), k_str"])
def test_extract_files_follow_the_spec(catalog: Catalog, ordering: str) -> None:
    oracle = OracleTable.create(catalog, "t", seed=2)
    for _ in range(3):
        oracle.append(70)
    oracle.delete_positions(10)
    table = oracle.table
    metadata = new_index_metadata(
        table, "ix", split_expression_list(ordering), [], True, {"write.region.target-file-size-bytes": "800"}
    )
    IndexStore(table).create(metadata, "ix")
    result = refresh_full(table, "ix")

    committed, _, _ = IndexStore(table).load("ix")
    (extract,) = committed.extracts
    assert (extract.extract_id, extract.source_table_snapshot_id) == (result.extract.extract_id, oracle.snapshot_id)
    assert extract.tracking_file_size_in_bytes == len(table.io.new_input(extract.tracking_file))
    layout = entry_layout(committed, committed.extract_schema(extract))
    entries = read_tracking_file(table.io, extract.tracking_file)
    assert region_file_paths(table.io, extract.tracking_file) == [e.file_path for e in entries]
    assert len(entries) == result.region_files_written > 2
    assert sum(e.record_count for e in entries) == result.entries == len(oracle.rows)

    with table.io.new_input(extract.tracking_file).open() as stream:
        tracking_schema = pq.read_schema(stream)
    assert _field_ids(tracking_schema) == {
        "file_path": 100,
        "file_format": 101,
        "record_count": 103,
        "file_size_in_bytes": 104,
        "content_stats": 146,
    }
    stats_ids = {int(f.metadata[b"PARQUET:field_id"]) for f in tracking_schema.field("content_stats").type}
    assert stats_ids >= {10_000 + 200 * fid for fid in committed.ordering_key}

    ordering_fields = layout.ordering
    types = [c.arrow_type for c in layout.stats_columns[: len(ordering_fields)]]
    previous = None
    seen_keys: set[tuple[Any, ...]] = set()
    for entry in entries:
        with table.io.new_input(entry.file_path).open() as stream:
            region = pq.read_table(stream)
        assert _field_ids(region.schema) == {f.name: f.field_id for f in committed.extract_schema(extract).fields}
        assert (region.num_rows, entry.file_size_in_bytes) == (
            entry.record_count,
            len(table.io.new_input(entry.file_path)),
        )
        keys = [o.expression.evaluate(region, layout.extract_schema).to_pylist() for o in ordering_fields]
        tuples = [comparable(k, types) for k in zip(*keys, strict=True)]
        assert tuples == sorted(tuples)  # index order inside the region
        last = tuple(k[-1] for k in keys)
        assert last == tuple(entry.stats[o.field_id].group_max_value for o in ordering_fields)
        for o, column in zip(ordering_fields, keys, strict=True):
            present = [v for v in column if v is not None]
            stats = entry.stats[o.field_id]
            assert (stats.lower_bound, stats.upper_bound) == ((min(present), max(present)) if present else (None, None))
            assert stats.null_value_count == column.count(None)
        if previous is not None:
            assert tuples[0] > previous  # regions hold disjoint key ranges: no key spans two regions
        previous = tuples[-1]
        assert not seen_keys & set(tuples)
        seen_keys |= set(tuples)
        assert read_region_file(table.io, entry.file_path, layout.region_schema).to_pylist() == region.to_pylist()


def test_stats_only_field_outside_the_ordering_key_gets_bounds(sqlite_catalog: Catalog) -> None:
    table = sqlite_catalog.create_table("db.s", schema=pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": pa.array(range(100), pa.int64())}))
    metadata = new_index_metadata(table, "ix", ["id"], [], True, {})
    bucket = StatsField(9, IntegerType(), Apply("bucket", Reference(1), 8))
    IndexStore(table).create(replace(metadata, stats_fields=(bucket,)), "ix")
    result = refresh_full(table, "ix")
    (entry,) = read_tracking_file(table.io, result.extract.tracking_file)
    expected = {BucketTransform(8).transform(LongType())(i) for i in range(100)}
    assert entry.stats[9] == FieldStats(min(expected), max(expected), 0, None, False)
    assert entry.stats[1] == FieldStats(0, 99, 0, 99, True)


def _refresh_in_process(uri: str, warehouse: str) -> int:
    catalog = SqlCatalog("default", uri=uri, warehouse=warehouse)
    return refresh_full(catalog.load_table("db.t"), "ix").extract.extract_id


def test_concurrent_refreshes_all_commit(sqlite_catalog: Catalog) -> None:
    oracle = OracleTable.create(sqlite_catalog, "t", seed=4)
    oracle.append(50)
    IndexStore(oracle.table).create(new_index_metadata(oracle.table, "ix", ["k_long"], [], True, {}), "ix")
    uri, warehouse = sqlite_catalog.properties["uri"], sqlite_catalog.properties["warehouse"]
    with ProcessPoolExecutor(max_workers=3, mp_context=get_context("spawn")) as pool:
        ids = list(pool.map(_refresh_in_process, [uri] * 3, [warehouse] * 3))
    metadata, _, version = IndexStore(oracle.table).load("ix")
    assert sorted(e.extract_id for e in metadata.extracts) == sorted(ids)  # no extract lost
    assert version == 4 and [e.metadata_file.rsplit("/", 1)[1] for e in metadata.metadata_log] == [
        "00001.metadata.json",
        "00002.metadata.json",
        "00003.metadata.json",
    ]
    for extract in metadata.extracts:
        entries = read_tracking_file(oracle.table.io, extract.tracking_file)
        assert sum(e.record_count for e in entries) == 50


_floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.0, -0.0, math.nan, -math.nan])
_keys = st.lists(st.one_of(st.none(), _floats), max_size=60)


@settings(max_examples=150, deadline=None)
@given(_keys)
def test_arrow_and_python_orders_agree(values: list[float | None]) -> None:
    # The sort (Arrow) and the group_max_value binary search (Python) must see one order.
    column = pa.array(values, type=pa.float64())
    ordered = column.take(sort_indices([column])).to_pylist()
    ranks = [comparable((v,), [pa.float64()]) for v in ordered]
    assert ranks == sorted(ranks)
    changes = key_changes([pa.array(ordered, type=pa.float64())]).to_pylist()
    assert changes == [i == 0 or ranks[i] != ranks[i - 1] for i in range(len(ordered))]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 6) | st.none(), max_size=80), st.integers(1, 12), st.booleans())
def test_region_cuts_partition_entries_at_key_changes(values: list[int | None], target: int, spanning: bool) -> None:
    column = pa.array(values, type=pa.int64())
    ordered = column.take(sort_indices([column])).to_pylist()
    regions = cut_regions([pa.array(ordered, type=pa.int64())], target, spanning)
    starts = [start for start, _ in regions]
    assert starts == [0, *(stop for _, stop in regions[:-1])] if regions else values == []
    assert not regions or regions[-1][1] == len(values)
    changes = [i for i in range(1, len(ordered)) if ordered[i] != ordered[i - 1]]
    for start, stop in regions:
        if not spanning:
            # The first key change at or after `target` entries ends the region.
            expected = next((c for c in changes if c >= start + target), len(ordered))
            assert stop == expected
        else:
            assert stop - start <= 2 * target
            if stop < len(ordered) and stop not in changes:
                run = ordered.count(ordered[stop])  # the key is cut inside only when it is a hot key
                assert run > target
