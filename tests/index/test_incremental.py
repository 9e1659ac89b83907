"""Incremental refresh: after random histories, every extract equals a full build of its snapshot.

Each history runs on a real SQLite catalog, two of them with the table and the index on the
local S3-protocol server. A twin index with the same definition is always
built fully, so the incremental extract of index ``ix`` is compared entry for entry (as a
multiset) with a full build of the same snapshot, its layout is checked against the spec
(sorted regions, disjoint key ranges, exact ``group_max_value`` and bounds), and lookups through
it are compared with the brute-force oracle.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.expressions import In
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.table import Table

from airflow_iceberg_maint.index.format.extract_files import read_region_file, read_tracking_file, region_stats
from airflow_iceberg_maint.index.metadata.builders import new_index_metadata
from airflow_iceberg_maint.index.metadata.expressions import split_expression_list
from airflow_iceberg_maint.index.metadata.model import Extract
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.index.read.lookup import lookup
from airflow_iceberg_maint.index.source.snapshot_files import plan_snapshot
from airflow_iceberg_maint.index.write.build import entry_layout, ordering_columns
from airflow_iceberg_maint.index.write.incremental import refresh_index
from airflow_iceberg_maint.index.write.refresh import RefreshResult
from airflow_iceberg_maint.sorting.ordering import comparable
from tests.index.oracle_table import POOLS, SCHEMA, OracleTable, multiset

SMALL_REGIONS = {"write.region.target-file-size-bytes": "500"}


def create_index(oracle: OracleTable, name: str, ordering: str, properties: dict[str, str] | None = None) -> None:
    metadata = new_index_metadata(
        oracle.table, name, split_expression_list(ordering), [], True, {**SMALL_REGIONS, **(properties or {})}
    )
    IndexStore(oracle.table).create(metadata, name)


def extract_entries(table: Table, name: str, extract: Extract) -> Counter[tuple[Any, ...]]:
    """The entries of an extract as a multiset of tuples (``_file`` decoded)."""
    metadata, _, _ = IndexStore(table).load(name)
    layout = entry_layout(metadata, metadata.extract_schema(extract))
    entries: Counter[tuple[Any, ...]] = Counter()
    for region in read_tracking_file(table.io, extract.tracking_file):
        rows = read_region_file(table.io, region.file_path, layout.region_schema).to_pylist()
        entries.update(tuple(r.values()) for r in rows)
    return entries


def check_layout(table: Table, name: str, extract: Extract) -> None:
    """Regions sorted, ranges disjoint (equal only for a spanning key), stats exact and recomputable."""
    metadata, _, _ = IndexStore(table).load(name)
    layout = entry_layout(metadata, metadata.extract_schema(extract))
    types = [c.arrow_type for c in layout.stats_columns[: len(layout.ordering)]]
    spanning = metadata.allow_key_spanning()
    previous = None
    for region in read_tracking_file(table.io, extract.tracking_file):
        rows = read_region_file(table.io, region.file_path, layout.region_schema)
        assert rows.num_rows == region.record_count > 0
        keys = ordering_columns(rows, layout)
        tuples = [comparable(k, types) for k in zip(*(c.to_pylist() for c in keys), strict=True)]
        assert tuples == sorted(tuples)
        if previous is not None:
            assert tuples[0] >= previous if spanning else tuples[0] > previous
        previous = tuples[-1]
        values = {o.field_id: k for o, k in zip(layout.ordering, keys, strict=True)}
        names = {f.field_id: f.name for f in layout.extract_schema.fields}
        expressions = {f.field_id: f.expr for f in metadata.stats_fields}
        for column in layout.stats_columns:
            if column.field_id not in values:
                values[column.field_id] = (
                    expressions[column.field_id].evaluate(rows, layout.extract_schema)
                    if column.field_id in expressions
                    else rows.column(names[column.field_id])
                )
        assert region.stats == region_stats(layout.stats_columns, values)


def refresh_and_compare(
    table: Table, live_rows: int, name: str = "ix", twin: str = "full", snapshot_id: int | None = None
) -> RefreshResult:
    """Refresh ``name`` (default mode) and ``twin`` fully to a snapshot; both must hold the same entries."""
    result = refresh_index(table, name, snapshot_id)
    reference = refresh_index(table, twin, snapshot_id, full=True)
    assert reference.mode == "full"
    assert result.extract.source_table_snapshot_id == reference.extract.source_table_snapshot_id
    got = extract_entries(table, name, result.extract)
    assert got == extract_entries(table, twin, reference.extract)
    assert result.entries == sum(got.values()) == live_rows
    check_layout(table, name, result.extract)
    return result


def compact(oracle: OracleTable, count: int) -> None:
    """Rewrite ``count`` data files into one (their live rows, deletes applied): new ``_file`` and ``_pos``."""
    where = oracle._locations()
    files = sorted({path for path, _ in where.values()})
    chosen = set(oracle.rng.sample(files, min(count, len(files))))
    rows = [oracle.rows[rid] for rid in sorted(rid for rid, (path, _) in where.items() if path in chosen)]
    table = oracle.table
    plan = plan_snapshot(table, table.current_snapshot())
    with table.transaction() as tx, tx.update_snapshot().overwrite() as overwrite:
        for path in sorted(chosen):
            overwrite.delete_data_file(plan.data_files[path].data_file)
        if rows:
            for data_file in _dataframe_to_data_files(
                tx.table_metadata, pa.Table.from_pylist(rows, schema=SCHEMA), table.io
            ):
                overwrite.append_data_file(data_file)
    oracle._remember()


def overwrite(oracle: OracleTable, count: int) -> None:
    """pyiceberg copy-on-write overwrite: replace some rows by new ones (files rewritten)."""
    victims = oracle.sample_rids(count)
    new = []
    for rid in victims:
        row = dict(oracle.rows.pop(rid))
        row.update(rid=oracle.next_rid, k_long=oracle.rng.choice(POOLS["k_long"]), payload=f"o{oracle.next_rid}")
        oracle.next_rid += 1
        new.append(row)
    oracle.table.overwrite(pa.Table.from_pylist(new, schema=SCHEMA), overwrite_filter=In("rid", victims))  # type: ignore[arg-type, call-arg]
    oracle.rows.update((r["rid"], r) for r in new)
    oracle._remember()


ORDERINGS = ["k_long", "bucket(4, k_long), k_long", "k_str", "truncate(1, k_str), k_str", "day(k_ts)"]


@pytest.mark.parametrize(
    ("kind", "seed"),
    [*(("sqlite", seed) for seed in range(10)), *(pytest.param("s3", seed, marks=pytest.mark.s3) for seed in (1, 3))],
)
def test_random_histories_equal_full_builds(request: pytest.FixtureRequest, kind: str, seed: int) -> None:
    oracle = OracleTable.create(request.getfixturevalue(f"{kind}_catalog"), f"t{seed}", seed=500 + seed)
    ordering = ORDERINGS[seed % len(ORDERINGS)]
    spanning = {"write.region.allow-key-spanning": "true"} if seed % 3 == 0 else {}
    create_index(oracle, "ix", ordering, spanning)
    create_index(oracle, "full", ordering, spanning)
    oracle.append(oracle.rng.randint(0, 150))
    first = refresh_and_compare(oracle.table, len(oracle.rows))
    assert first.mode == "full"  # no extract yet
    cow_allowed = True  # pyiceberg cannot delete or overwrite through equality deletes
    steps: Counter[str] = Counter()
    for _ in range(14):
        step = oracle.rng.choice(
            ["append", "append", "positions", "vector", "equality", "cow", "overwrite", "compact", "refresh"]
        )
        if step == "append":
            oracle.append(oracle.rng.randint(1, 60))
        elif step == "positions" and len(oracle.rows) > 10:
            oracle.delete_positions(oracle.rng.randint(1, 8))
        elif step == "vector" and len(oracle.rows) > 10:
            oracle.delete_with_deletion_vector(2)
        elif step == "equality":
            column = oracle.rng.choice(["k_str", "k_long", "k_int"])
            oracle.delete_equality(column, [oracle.rng.choice(POOLS[column])])
            cow_allowed = False
        elif step == "cow" and cow_allowed and len(oracle.rows) > 10:
            oracle.delete_copy_on_write(3)
        elif step == "overwrite" and cow_allowed and len(oracle.rows) > 10:
            overwrite(oracle, 4)
        elif step == "compact" and oracle.rows:
            compact(oracle, 2)
        else:
            step = "refresh"
        steps[step] += 1
        if step == "refresh" or oracle.rng.random() < 0.5:
            result = refresh_and_compare(oracle.table, len(oracle.rows))
            assert result.mode == "incremental"
    result = refresh_and_compare(oracle.table, len(oracle.rows))
    assert result.mode == "incremental"
    # Time travel: an earlier snapshot, from the extract of its nearest ancestor (or the newest).
    earlier = oracle.rng.choice(sorted(oracle.history))
    assert refresh_and_compare(oracle.table, len(oracle.history[earlier]), snapshot_id=earlier).mode == "incremental"
    column = split_expression_list(ordering)[-1].split("(")[-1].split(",")[-1].strip(" )")
    for value in oracle.probes(column, 6):
        found = lookup(oracle.table, "ix", [(value,)])
        assert found.mode == "index"
        assert multiset(found.rows.to_pylist()) == oracle.expected(column, value)
