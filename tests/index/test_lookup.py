"""Lookups against a brute-force oracle: exact multisets of rows, at the extract's snapshot and after lag."""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.expressions import EqualTo, IsNull
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import LongType

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.index.format import extract_files
from airflow_iceberg_maint.index.format.extract_files import read_tracking_file, write_tracking_file
from airflow_iceberg_maint.index.lifecycle.expire import expire_extracts
from airflow_iceberg_maint.index.lifecycle.lag import index_lag
from airflow_iceberg_maint.index.metadata.builders import new_index_metadata
from airflow_iceberg_maint.index.metadata.expressions import split_expression_list
from airflow_iceberg_maint.index.metadata.model import EncryptionKey, IndexMetadata
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.index.read import fetch as lookup_module
from airflow_iceberg_maint.index.read import region_reads
from airflow_iceberg_maint.index.read import regions as regions_module
from airflow_iceberg_maint.index.read.keys import key_columns, parse_lookup_value
from airflow_iceberg_maint.index.read.lookup import LookupResult, lookup
from airflow_iceberg_maint.index.source.parquet_files import opened_parquet
from airflow_iceberg_maint.index.source.snapshot_files import plan_snapshot
from airflow_iceberg_maint.index.write.build import build_regions, entry_layout
from airflow_iceberg_maint.index.write.incremental import refresh_index
from airflow_iceberg_maint.index.write.refresh import commit_extract, refresh_full, tracking_file_location
from tests.index.oracle_table import POOLS, SCHEMA, OracleTable, multiset

SMALL_REGIONS = {"write.region.target-file-size-bytes": "1500"}

# (ordering as given to `index create`, the key column a lookup gives a value for)
ORDERINGS = [
    ("k_int", "k_int"),
    ("k_long", "k_long"),
    ("k_str", "k_str"),
    ("k_date", "k_date"),
    ("k_ts", "k_ts"),
    ("bucket(8, k_long), k_long", "k_long"),
    ("bucket(4, k_int)", "k_int"),
    ("truncate(2, k_str), k_str", "k_str"),
    ("truncate(3, k_int), k_int", "k_int"),
    ("day(k_ts), k_ts", "k_ts"),
]


@pytest.fixture(params=["sqlite", pytest.param("s3", marks=pytest.mark.s3)])
def catalog(request: pytest.FixtureRequest) -> Catalog:
    return request.getfixturevalue(f"{request.param}_catalog")


def _index(oracle: OracleTable, ordering: str, properties: dict[str, str] | None = None) -> str:
    metadata = new_index_metadata(
        oracle.table, "ix", split_expression_list(ordering), [], True, {**SMALL_REGIONS, **(properties or {})}
    )
    IndexStore(oracle.table).create(metadata, "ix")
    return "ix"


def _rows(result: LookupResult) -> Counter[tuple[Any, ...]]:
    return multiset(result.rows.to_pylist())


def _check_all(oracle: OracleTable, column: str, mode: str, snapshot_id: int | None = None) -> int:
    """Every probe gives exactly the oracle's rows; returns how many probes matched rows."""
    matched = 0
    for value in oracle.probes(column, 12):
        result = lookup(oracle.table, "ix", [(value,)], snapshot_id=snapshot_id)
        assert result.mode == mode, (value, result.mode)
        if snapshot_id is None:  # whichever way rows were found: pyiceberg's Arrow types of the schema
            assert result.rows.schema == schema_to_pyarrow(oracle.table.schema(), include_field_ids=False)
        expected = oracle.expected(column, value, snapshot_id)
        assert _rows(result) == expected, (column, value)
        matched += bool(expected)
    return matched


@pytest.mark.parametrize(("ordering", "column"), ORDERINGS)
def test_lookup_at_extract_snapshot_equals_oracle(catalog: Catalog, ordering: str, column: str) -> None:
    oracle = OracleTable.create(catalog, "t", seed=hash(ordering) % 1000)
    for _ in range(3):
        oracle.append(60)
    _index(oracle, ordering)
    refresh_full(oracle.table, "ix")
    assert _check_all(oracle, column, "index") > 0


@pytest.mark.parametrize(("ordering", "column"), ORDERINGS[::2] + ORDERINGS[5:6])
def test_lookup_with_position_and_equality_deletes(catalog: Catalog, ordering: str, column: str) -> None:
    oracle = OracleTable.create(catalog, "t", seed=7)
    for _ in range(3):
        oracle.append(50)
    oracle.delete_positions(25)
    oracle.delete_with_deletion_vector(10)
    oracle.delete_equality("k_str", ["abc", None])
    oracle.append(30)  # rows with k_str 'abc' after the equality delete are live
    oracle.delete_equality("k_int", [0])
    _index(oracle, ordering)
    refresh_full(oracle.table, "ix")
    assert _check_all(oracle, column, "index") > 0


@pytest.mark.parametrize(("ordering", "column"), [ORDERINGS[1], ORDERINGS[5], ORDERINGS[7]])
def test_lookup_reconciles_lag_after_new_commits(catalog: Catalog, ordering: str, column: str) -> None:
    oracle = OracleTable.create(catalog, "t", seed=11)
    for _ in range(8):
        oracle.append(80)
    _index(oracle, ordering)
    refresh_full(oracle.table, "ix")
    extract_snapshot = oracle.snapshot_id
    oracle.append(20)  # new data file: scanned with the key filter
    assert _check_all(oracle, column, "reconciled") > 0
    oracle.delete_positions(30)  # new position deletes applied to index hits
    assert _check_all(oracle, column, "reconciled") > 0
    oracle.delete_with_deletion_vector(20)  # a new deletion vector applied to index hits
    assert _check_all(oracle, column, "reconciled") > 0
    oracle.delete_copy_on_write(5)  # a data file rewritten: hits in the removed file dropped
    assert _check_all(oracle, column, "reconciled") > 0
    oracle.delete_equality("k_long", [0, 4])  # equality deletes applied to index hits
    assert _check_all(oracle, column, "reconciled") > 0
    # Time travel: the extract's own snapshot, and one older than the extract.
    _check_all(oracle, column, "index", snapshot_id=extract_snapshot)
    first = next(iter(oracle.history))
    assert _check_all(oracle, column, "reconciled", snapshot_id=first) >= 0


def test_lookup_falls_back_to_scan_when_lag_is_large(sqlite_catalog: Catalog) -> None:
    oracle = OracleTable.create(sqlite_catalog, "t", seed=3)
    oracle.append(40)
    _index(oracle, "k_long")
    refresh_full(oracle.table, "ix")
    for _ in range(3):
        oracle.append(40)  # 3 of 4 files are new: far over the reconciliation threshold
    _check_all(oracle, "k_long", "scan")


def test_lookup_without_extract_scans(sqlite_catalog: Catalog) -> None:
    oracle = OracleTable.create(sqlite_catalog, "t", seed=5)
    IndexStore(oracle.table).create(new_index_metadata(oracle.table, "empty", ["k_str"], [], True, {}), "empty")
    nothing = lookup(oracle.table, "empty", [("a",)], columns=["rid"])  # a table without snapshots
    assert (nothing.snapshot_id, nothing.mode, nothing.rows.column_names, nothing.rows.num_rows) == (
        None,
        "scan",
        ["rid"],
        0,
    )
    oracle.append(40)
    _index(oracle, "k_str")
    _check_all(oracle, "k_str", "scan")


def test_lookup_matches_pyiceberg_filtered_scan(sqlite_catalog: Catalog) -> None:
    oracle = OracleTable.create(sqlite_catalog, "t", seed=13)
    for _ in range(3):
        oracle.append(60)
    oracle.delete_positions(20)
    _index(oracle, "bucket(8, k_long), k_long")
    refresh_full(oracle.table, "ix")
    for value in oracle.probes("k_long", 8):
        row_filter = IsNull("k_long") if value is None else EqualTo("k_long", value)  # type: ignore[arg-type, call-arg]
        scanned = multiset(oracle.table.scan(row_filter=row_filter).to_arrow().to_pylist())
        assert _rows(lookup(oracle.table, "ix", [(value,)])) == scanned


def test_lookup_reads_one_region_file(sqlite_catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    oracle = OracleTable.create(sqlite_catalog, "t", seed=17)
    for _ in range(4):
        oracle.append(100)
    _index(oracle, "k_long")
    result = refresh_full(oracle.table, "ix")
    assert result.region_files_written > 3
    calls: list[str] = []
    original = regions_module.read_region_matches  # type: ignore[attr-defined]  # the name as the module imported it (patched there)

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[1])
        return original(*args, **kwargs)

    monkeypatch.setattr(regions_module, "read_region_matches", counting)
    value = oracle.probes("k_long", 1)[0]
    found = lookup(oracle.table, "ix", [(value,)])
    assert found.region_files_read == 1 and len(calls) == 1
    assert _rows(found) == oracle.expected("k_long", value)


def test_lookup_several_values_and_columns(sqlite_catalog: Catalog) -> None:
    oracle = OracleTable.create(sqlite_catalog, "t", seed=19)
    oracle.append(80)
    _index(oracle, "k_str")
    refresh_full(oracle.table, "ix")
    values = ["a", "b", "a", None]
    result = lookup(oracle.table, "ix", [(v,) for v in values], columns=["rid", "k_str"])
    expected: Counter[Any] = Counter()
    for value in dict.fromkeys(values):
        expected.update(Counter({(k[0], k[3]): n for k, n in oracle.expected("k_str", value).items()}))
    assert result.rows.column_names == ["rid", "k_str"]
    assert multiset(result.rows.to_pylist(), ["rid", "k_str"]) == expected


def test_spanning_hot_key_is_found_in_every_region(sqlite_catalog: Catalog) -> None:
    oracle = OracleTable.create(sqlite_catalog, "t", seed=23)
    oracle.append(300)
    _index(oracle, "k_date", {"write.region.allow-key-spanning": "true", "write.region.target-file-size-bytes": "400"})
    refresh_full(oracle.table, "ix")
    for value in oracle.probes("k_date", 5):
        result = lookup(oracle.table, "ix", [(value,)])
        assert _rows(result) == oracle.expected("k_date", value)
        if value is not None and len(oracle.expected("k_date", value)) > 40:
            assert result.region_files_read > 1


def test_lookup_rejects_bad_values(sqlite_catalog: Catalog) -> None:
    oracle = OracleTable.create(sqlite_catalog, "t", seed=29)
    oracle.append(10)
    _index(oracle, "k_long")
    with pytest.raises(InvalidInputError, match="one value per key column"):
        lookup(oracle.table, "ix", [(1, 2)])
    with pytest.raises(InvalidInputError, match="no column"):
        lookup(oracle.table, "ix", [(1,)], columns=["nope"])


def test_lookup_fetches_rows_from_many_row_groups(sqlite_catalog: Catalog) -> None:
    # Tiny row groups: positions fall in many groups of each data file, at every offset in a group.
    oracle = OracleTable.create(sqlite_catalog, "t", seed=31, properties={"write.parquet.row-group-limit": "7"})
    for _ in range(2):
        oracle.append(120)
    oracle.delete_positions(30)
    _index(oracle, "k_str")
    refresh_full(oracle.table, "ix")
    files = oracle.table.inspect.files()
    assert len(files) == 3
    data_file = next(
        p for p, c in zip(files["file_path"].to_pylist(), files["content"].to_pylist(), strict=True) if c == 0
    )
    with oracle.table.io.new_input(data_file).open() as stream:
        assert pq.ParquetFile(stream).metadata.num_row_groups > 10
    _check_all(oracle, "k_str", "index")
    oracle.delete_positions(10)
    _check_all(oracle, "k_str", "reconciled")


def test_float_zero_lookup_finds_both_zeros_and_nan_is_refused(sqlite_catalog: Catalog) -> None:
    schema = pa.schema([("rid", pa.int64()), ("x", pa.float64())])
    table = sqlite_catalog.create_table("db.f", schema=schema)
    values = [0.0, -0.0, 1.5, float("nan"), None, -0.0, float("inf")]
    table.append(pa.table({"rid": list(range(len(values))), "x": values}, schema=schema))
    metadata = new_index_metadata(table, "ix", ["x"], [], True, {"write.region.target-file-size-bytes": "16"})
    IndexStore(table).create(metadata, "ix")
    assert refresh_full(table, "ix").region_files_written >= 4  # -0.0 and 0.0 are distinct keys
    for probe, rids in [(0.0, [0, 1, 5]), (-0.0, [0, 1, 5]), (1.5, [2]), (None, [4]), (float("inf"), [6])]:
        result = lookup(table, "ix", [(probe,)], columns=["rid"])
        assert (result.mode, sorted(result.rows.column("rid").to_pylist())) == ("index", rids)
    with pytest.raises(InvalidInputError, match="NaN"):
        lookup(table, "ix", [(float("nan"),)])


def test_extract_of_a_snapshot_without_live_rows(sqlite_catalog: Catalog) -> None:
    oracle = OracleTable.create(sqlite_catalog, "t", seed=37)
    oracle.append(20)
    oracle.delete_positions(20)
    _index(oracle, "k_int")
    result = refresh_full(oracle.table, "ix")
    assert (result.entries, result.region_files_written) == (0, 0)
    assert read_tracking_file(oracle.table.io, result.extract.tracking_file) == []
    found = lookup(oracle.table, "ix", [(1,)])
    assert (found.mode, found.rows.num_rows, found.region_files_read) == ("index", 0, 0)


def test_tracking_file_without_group_max_value_means_a_scan(sqlite_catalog: Catalog) -> None:
    oracle = OracleTable.create(sqlite_catalog, "t", seed=41)
    oracle.append(50)
    _index(oracle, "k_long")
    store = IndexStore(oracle.table)
    metadata, _, _ = store.load("ix")
    layout = entry_layout(metadata, metadata.current_schema())
    plan = plan_snapshot(oracle.table, oracle.table.current_snapshot())
    regions, _ = build_regions(oracle.table, plan, layout)
    no_group_max = [replace(c, ordering=False) for c in layout.stats_columns]
    tracking = tracking_file_location(metadata)
    size = write_tracking_file(oracle.table.io, tracking, no_group_max, regions)
    commit_extract(store, "ix", oracle.table, oracle.snapshot_id, tracking, size)
    _check_all(oracle, "k_long", "scan")


def test_lookup_on_an_evolved_partitioned_table(sqlite_catalog: Catalog) -> None:
    # Spec 0 unpartitioned, spec 1 bucket(2, k_int): deletes must match data files by partition.
    oracle = OracleTable.create(sqlite_catalog, "t", seed=43)
    oracle.append(40)
    with oracle.table.update_spec() as update:
        update.add_field("k_int", BucketTransform(2), "k_int_bucket")
    oracle.table = oracle.table.refresh()
    for _ in range(2):
        oracle.append(60)
    oracle.delete_positions(25)
    oracle.delete_with_deletion_vector(5)
    oracle.delete_equality("k_long", [0])
    _index(oracle, "k_int")
    refresh_full(oracle.table, "ix")
    assert _check_all(oracle, "k_int", "index") > 0
    oracle.delete_positions(10)
    assert _check_all(oracle, "k_int", "reconciled") > 0


def test_lookup_after_renaming_the_key_column(sqlite_catalog: Catalog) -> None:
    oracle = OracleTable.create(sqlite_catalog, "t", seed=47)
    for _ in range(3):
        oracle.append(40)
    _index(oracle, "k_str")
    refresh_full(oracle.table, "ix")
    with oracle.table.update_schema() as update:
        update.rename_column("k_str", "name")
    oracle.table = oracle.table.refresh()
    value = oracle.probes("k_str", 1)[0]
    expected = Counter({k: n for k, n in oracle.expected("k_str", value).items()})
    result = lookup(oracle.table, "ix", [(value,)])
    assert result.rows.column_names[3] == "name"
    assert multiset(result.rows.rename_columns(SCHEMA.names).to_pylist()) == expected


def test_composite_key_lookups(sqlite_catalog: Catalog) -> None:
    oracle = OracleTable.create(sqlite_catalog, "t", seed=53)
    for _ in range(3):
        oracle.append(80)
    oracle.delete_positions(20)
    _index(oracle, "truncate(1, k_str), k_int")
    refresh_full(oracle.table, "ix")
    pairs = {(r["k_str"], r["k_int"]) for r in oracle.rows.values()}
    probes = [*sorted(pairs, key=str)[:15], ("a", 4), (None, None), ("zz", None)]
    for probe in probes:
        result = lookup(oracle.table, "ix", [probe])
        expected = multiset(r for r in oracle.rows.values() if (r["k_str"], r["k_int"]) == probe)
        assert (result.mode, _rows(result)) == ("index", expected), probe


@pytest.mark.parametrize("region_row_group_rows", [4096, 2])
def test_timestamptz_and_decimal_keys(
    sqlite_catalog: Catalog, monkeypatch: pytest.MonkeyPatch, region_row_group_rows: int
) -> None:
    # With 2-entry region row groups the row groups are found by binary search over
    # timezone-aware datetimes and Decimals.
    monkeypatch.setattr(extract_files, "REGION_ROW_GROUP_ROWS", region_row_group_rows)
    searches: list[Any] = []
    monkeypatch.setattr(region_reads, "bisect_right", lambda *a: searches.append(a[1]) or bisect_right(*a))  # type: ignore[func-returns-value]
    schema = pa.schema([("rid", pa.int64()), ("at", pa.timestamp("us", tz="UTC")), ("amount", pa.decimal128(9, 2))])
    table = sqlite_catalog.create_table("db.z", schema=schema)
    moments = [datetime(2024, 3, 1, 12, tzinfo=UTC), datetime(2024, 3, 1, 13, tzinfo=UTC), None]
    amounts = [Decimal("1.50"), Decimal("-2.00"), None]
    rows = [{"rid": i, "at": moments[i % 3], "amount": amounts[(i // 3) % 3]} for i in range(60)]
    table.append(pa.Table.from_pylist(rows, schema=schema))
    found = []
    for name, ordering, column in [("by_at", "hour(at), at", "at"), ("by_amount", "amount", "amount")]:
        IndexStore(table).create(
            new_index_metadata(
                table, name, split_expression_list(ordering), [], True, {"write.region.target-file-size-bytes": "200"}
            ),
            name,
        )
        refresh_full(table, name)
        key = key_columns(IndexStore(table).load(name)[0])[0]
        for text in ["2024-03-01T13:00:00+00:00", "2024-03-01T14:00:00+01:00", "1.50", "-2.00", "3.00"]:
            try:
                value = parse_lookup_value(text, key)
            except InvalidInputError:
                continue  # a value of the other column's type
            result = lookup(table, name, [(value,)], columns=["rid"])
            expected = sorted(r["rid"] for r in rows if r[column] == value)  # type: ignore[type-var]  # the rows' rid values are ints
            assert (result.mode, sorted(result.rows.column("rid").to_pylist())) == ("index", expected), text
            found.append((text, len(expected)))
    assert found == [
        ("2024-03-01T13:00:00+00:00", 20),
        ("2024-03-01T14:00:00+01:00", 20),
        ("1.50", 21),
        ("-2.00", 21),
        ("3.00", 0),
    ]
    if region_row_group_rows == 2:
        assert {type(v) for v in searches} == {datetime, Decimal}


def test_time_travel_uses_the_extract_of_that_snapshot(sqlite_catalog: Catalog) -> None:
    oracle = OracleTable.create(sqlite_catalog, "t", seed=59)
    oracle.append(60)
    oracle.delete_positions(10)
    first = oracle.snapshot_id
    for _ in range(3):
        oracle.append(60)
    _index(oracle, "k_long")
    refresh_full(oracle.table, "ix", snapshot_id=first)
    assert _check_all(oracle, "k_long", "index", snapshot_id=first) > 0
    _check_all(oracle, "k_long", "scan")  # three new files of four: past the reconciliation threshold
    refresh_full(oracle.table, "ix")
    assert _check_all(oracle, "k_long", "index") > 0
    assert _check_all(oracle, "k_long", "index", snapshot_id=first) > 0


def test_extract_of_an_expired_snapshot_means_a_scan(sqlite_catalog: Catalog) -> None:
    oracle = OracleTable.create(sqlite_catalog, "t", seed=61)
    for _ in range(4):
        oracle.append(50)
    _index(oracle, "k_long")
    refresh_full(oracle.table, "ix")
    extract_snapshot = oracle.snapshot_id
    oracle.append(10)
    oracle.table.maintenance.expire_snapshots().by_id(extract_snapshot).commit()
    oracle.table = oracle.table.refresh()
    assert oracle.table.snapshot_by_id(extract_snapshot) is None
    _check_all(oracle, "k_long", "scan")  # the extract's files are unknown: never trust it
    metadata, _, _ = IndexStore(oracle.table).load("ix")
    lag = index_lag(oracle.table, "ix", metadata)
    assert (lag.extract_snapshot_id, lag.removed_files, lag.lag_seconds, lag.stale) == (
        extract_snapshot,
        None,
        None,
        True,
    )
    assert lag.added_files.data == 5


@pytest.mark.parametrize("seed", range(6))
def test_random_histories_never_miss_or_return_a_dead_row(sqlite_catalog: Catalog, seed: int) -> None:
    """S5 soak: random appends, deletes of every kind and refreshes; every snapshot stays exact."""
    oracle = OracleTable.create(sqlite_catalog, f"t{seed}", seed=100 + seed)
    oracle.append(60)
    ordering = "bucket(4, k_long), k_long" if seed % 2 else "k_str"
    column = "k_long" if seed % 2 else "k_str"
    # The extract also holds rid: lookups of rid and the key answer from it at its own snapshot.
    metadata = new_index_metadata(oracle.table, "ix", split_expression_list(ordering), ["rid"], True, SMALL_REGIONS)
    IndexStore(oracle.table).create(metadata, "ix")
    refresh_full(oracle.table, "ix")
    equality_deleted = False
    for _ in range(10):
        step = oracle.rng.choice(["append", "positions", "vector", "equality", "rewrite", "refresh"])
        if step == "append":
            oracle.append(oracle.rng.randint(5, 40))
        elif step == "positions" and len(oracle.rows) > 20:
            oracle.delete_positions(5)
        elif step == "vector" and len(oracle.rows) > 20:
            oracle.delete_with_deletion_vector(3)
        elif step == "equality":
            oracle.delete_equality(column, [oracle.rng.choice(POOLS[column])])
            equality_deleted = True
        elif step == "rewrite" and not equality_deleted and len(oracle.rows) > 20:
            oracle.delete_copy_on_write(2)  # pyiceberg cannot rewrite files once equality deletes exist
        elif step == "refresh":
            refresh_full(oracle.table, "ix")
        for snapshot_id in [None, oracle.rng.choice(list(oracle.history))]:
            for value in oracle.probes(column, 4):
                result = lookup(oracle.table, "ix", [(value,)], snapshot_id=snapshot_id)
                expected = oracle.expected(column, value, snapshot_id)
                assert _rows(result) == expected, (step, snapshot_id, value)
                covered = lookup(oracle.table, "ix", [(value,)], snapshot_id=snapshot_id, columns=["rid", column])
                rids = Counter({(row[0], row[SCHEMA.names.index(column)]): n for row, n in expected.items()})
                assert multiset(covered.rows.to_pylist(), ["rid", column]) == rids, (step, snapshot_id, value)


def test_encrypted_extract_means_a_scan(sqlite_catalog: Catalog) -> None:
    oracle = OracleTable.create(sqlite_catalog, "t", seed=67)
    oracle.append(50)
    _index(oracle, "k_long")
    refresh_full(oracle.table, "ix")
    _check_all(oracle, "k_long", "index")

    def add_encrypted_extract(base: IndexMetadata) -> IndexMetadata:
        (plain,) = base.extracts
        encrypted = replace(plain, extract_id=base.new_extract_id(), timestamp_ms=plain.timestamp_ms + 1, key_id="k1")
        return replace(base, encryption_keys=(EncryptionKey("k1", "opaque"),), extracts=(plain, encrypted))

    IndexStore(oracle.table).commit("ix", add_encrypted_extract)
    _check_all(oracle, "k_long", "index")  # the readable extract of the snapshot is used
    expire_extracts(oracle.table, "ix", retain_last=1, older_than=None)  # keeps only the encrypted one
    assert [e.key_id for e in IndexStore(oracle.table).load("ix")[0].extracts] == ["k1"]
    _check_all(oracle, "k_long", "scan")  # an encrypted extract is not readable here


def test_repeated_lookups_keep_column_order_renames_and_promotions(sqlite_catalog: Catalog) -> None:
    # A data file's projection is reused once seen to only rename in place; other projections
    # (columns swapped, a type widened) must come out right on every call, not only the first.
    # Keyed on k_str, so rid and k_long (both int64) are read from the data files, not the extract.
    oracle = OracleTable.create(sqlite_catalog, "t", seed=59)
    oracle.append(60)
    _index(oracle, "k_str")
    refresh_full(oracle.table, "ix")
    value = next(v for v in oracle.probes("k_str", 12) if oracle.expected("k_str", v))
    rows = [r for r in oracle.rows.values() if r["k_str"] == value]
    for columns in (["rid", "k_long"], ["k_long", "rid"], ["rid", "k_long"], ["k_long", "rid"]):
        result = lookup(oracle.table, "ix", [(value,)], columns=columns)
        assert result.rows.column_names == columns
        assert multiset(result.rows.to_pylist(), columns) == multiset(rows, columns)
    with oracle.table.update_schema() as update:
        update.rename_column("rid", "row_id")
        update.update_column("k_int", LongType())
    oracle.table = oracle.table.refresh()
    for _ in range(2):
        result = lookup(oracle.table, "ix", [(value,)], columns=["row_id", "k_int"])
        assert result.rows.schema.field("k_int").type == pa.int64()
        assert multiset(result.rows.to_pylist(), ["row_id", "k_int"]) == Counter((r["rid"], r["k_int"]) for r in rows)


@pytest.mark.parametrize(
    ("ordering", "column", "searched"),
    [
        ("k_str", "k_str", True),
        ("k_ts", "k_ts", True),
        ("k_date", "k_date", True),
        ("truncate(3, k_int), k_int", "k_int", False),  # k_int does not ascend where the truncated value ties
        ("bucket(8, k_long), k_long", "k_long", False),
    ],
)
def test_lookups_in_regions_of_many_row_groups(
    sqlite_catalog: Catalog, monkeypatch: pytest.MonkeyPatch, ordering: str, column: str, searched: bool
) -> None:
    # Region row groups of 3 entries: row groups are pruned by binary search where the looked-up
    # column ascends through the region, else by comparing every row group's bounds.
    monkeypatch.setattr(extract_files, "REGION_ROW_GROUP_ROWS", 3)
    oracle = OracleTable.create(sqlite_catalog, "t", seed=61)
    for _ in range(3):
        oracle.append(60)
    oracle.delete_positions(20)
    _index(oracle, ordering, {"write.region.target-file-size-bytes": "100000"})
    tracking = read_tracking_file(oracle.table.io, refresh_full(oracle.table, "ix").extract.tracking_file)
    assert len(tracking) == 1
    region = tracking[0].file_path
    with opened_parquet(oracle.table.io, region) as handle:
        assert handle.file.metadata.num_row_groups > 20
        field_id = next(i for i, (_, f) in region_reads._columns_by_id(handle.file, region).items() if f.name == column)
        column_index, arrow_field = region_reads._columns_by_id(handle.file, region)[field_id]
        stats = region_reads._column_group_stats(handle.file, region, column_index, arrow_field)
    assert (stats.ascending is not None) == searched
    assert _check_all(oracle, column, "index") > 0


def _covering_index(oracle: OracleTable) -> None:
    metadata = new_index_metadata(oracle.table, "ix", ["k_long"], ["rid", "k_str", "k_int"], True, SMALL_REGIONS)
    IndexStore(oracle.table).create(metadata, "ix")
    refresh_full(oracle.table, "ix")


def _data_file_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[str]]]:
    """The data files a lookup reads rows from, with the columns read, recorded (and still read)."""
    reads: list[tuple[str, list[str]]] = []
    original = lookup_module.read_rows  # type: ignore[attr-defined]  # the name as the module imported it (patched there)

    def recording(table: Any, data_file: Any, schema: Schema, *args: Any, **kwargs: Any) -> Any:
        reads.append((data_file.file_path, [f.name for f in schema.fields]))
        return original(table, data_file, schema, *args, **kwargs)

    monkeypatch.setattr(lookup_module, "read_rows", recording)
    return reads


def test_index_only_lookup_answers_from_the_extract(sqlite_catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    oracle = OracleTable.create(sqlite_catalog, "t", seed=67)
    for _ in range(3):
        oracle.append(60)
    oracle.delete_positions(20)
    oracle.delete_equality("k_str", ["abc"])
    _covering_index(oracle)
    reads = _data_file_reads(monkeypatch)
    columns = ["k_str", "rid", "k_long"]
    probes = oracle.probes("k_long", 12)
    for value in probes:
        result = lookup(oracle.table, "ix", [(value,)], columns=columns)
        assert result.mode == "index"
        assert result.rows.schema == schema_to_pyarrow(
            Schema(*map(oracle.table.schema().find_field, columns)), include_field_ids=False
        )
        expected = multiset((r for r in oracle.rows.values() if r["k_long"] == value), columns)
        assert multiset(result.rows.to_pylist(), columns) == expected, value
    assert reads == []
    several = lookup(oracle.table, "ix", [(v,) for v in probes], columns=["rid"])
    assert sorted(several.rows.column("rid").to_pylist()) == sorted(
        r["rid"] for r in oracle.rows.values() if r["k_long"] in probes
    )
    assert reads == []


def test_lookup_fetches_columns_the_extract_does_not_hold_or_after_new_commits(
    sqlite_catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    oracle = OracleTable.create(sqlite_catalog, "t", seed=71)
    for _ in range(3):
        oracle.append(60)
    _covering_index(oracle)
    reads = _data_file_reads(monkeypatch)
    value = next(v for v in oracle.probes("k_long", 12) if oracle.expected("k_long", v))
    result = lookup(oracle.table, "ix", [(value,)], columns=["rid", "payload"])
    assert result.mode == "index" and reads
    assert all(c == ["payload"] for _, c in reads)  # rid comes from the extract
    assert multiset(result.rows.to_pylist(), ["rid", "payload"]) == multiset(
        (r for r in oracle.rows.values() if r["k_long"] == value), ["rid", "payload"]
    )
    reads.clear()
    oracle.delete_positions(15)
    result = lookup(oracle.table, "ix", [(value,)], columns=["rid", "k_str"])
    assert result.mode == "reconciled" and all(c == ["rid", "k_str"] for _, c in reads) and reads
    assert multiset(result.rows.to_pylist(), ["rid", "k_str"]) == multiset(
        (r for r in oracle.rows.values() if r["k_long"] == value), ["rid", "k_str"]
    )
    reads.clear()
    refresh_full(oracle.table, "ix")
    with oracle.table.update_schema() as update:
        update.update_column("k_int", LongType())  # the extract holds k_int as int: fetched as long
    oracle.table = oracle.table.refresh()
    reads.clear()
    result = lookup(oracle.table, "ix", [(value,)], columns=["rid", "k_int"])
    assert result.mode == "index" and reads and all(c == ["k_int"] for _, c in reads)  # no snapshot: still exact
    assert result.rows.schema.field("k_int").type == pa.int64()
    assert multiset(result.rows.to_pylist(), ["rid", "k_int"]) == multiset(
        (r for r in oracle.rows.values() if r["k_long"] == value), ["rid", "k_int"]
    )


def test_lookups_over_regions_written_before_and_after_a_promotion(sqlite_catalog: Catalog) -> None:
    # An incremental refresh reuses region files that hold k_int as int beside new ones holding
    # long: a lookup reading both (several probes) combines them.
    oracle = OracleTable.create(sqlite_catalog, "t", seed=73)
    for _ in range(3):
        oracle.append(60)
    IndexStore(oracle.table).create(
        new_index_metadata(oracle.table, "ix", ["k_long"], ["rid", "k_int"], True, SMALL_REGIONS), "ix"
    )
    refresh_full(oracle.table, "ix")
    with oracle.table.update_schema() as update:
        update.update_column("k_int", LongType())
    oracle.table = oracle.table.refresh()
    oracle.append(5)
    result = refresh_index(oracle.table, "ix")
    assert result.mode == "incremental" and result.region_files_reused and result.region_files_written
    regions = read_tracking_file(oracle.table.io, result.extract.tracking_file)
    kinds = set()
    for region in regions:
        with oracle.table.io.new_input(region.file_path).open() as stream:
            kinds.add(pq.read_schema(stream).field("k_int").type)
    assert kinds == {pa.int32(), pa.int64()}
    values = sorted({r["k_long"] for r in oracle.rows.values()}, key=lambda v: (v is None, v))
    found = lookup(oracle.table, "ix", [(v,) for v in values], columns=["rid", "k_int"])
    assert (found.mode, found.region_files_read) == ("index", len(regions))
    assert found.rows.schema.field("k_int").type == pa.int64()
    assert multiset(found.rows.to_pylist(), ["rid", "k_int"]) == multiset(oracle.rows.values(), ["rid", "k_int"])


def test_lookups_return_list_map_and_struct_columns_like_a_scan(sqlite_catalog: Catalog) -> None:
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("tags", pa.list_(pa.string())),
            ("attrs", pa.map_(pa.string(), pa.int64())),
            ("pos", pa.struct([("x", pa.int32())])),
        ]
    )
    table = sqlite_catalog.create_table("db.nested", schema=schema)
    rows = [
        {
            "id": i % 4,
            "tags": [f"t{i}", None][: 1 + i % 2],
            "attrs": [("a", i)] if i % 3 else [],
            "pos": {"x": i} if i % 5 else None,
        }
        for i in range(2000)
    ]
    table.append(pa.Table.from_pylist(rows, schema=schema))
    IndexStore(table).create(new_index_metadata(table, "ix", ["id"], [], True, {}), "ix")
    refresh_full(table, "ix")

    def same_as_scan(mode: str) -> None:
        for value in (1, 3, 7):
            found = lookup(table, "ix", [(value,)])
            scanned = table.scan(row_filter=EqualTo("id", value)).to_arrow()  # type: ignore[arg-type, call-arg]
            assert found.mode == mode
            assert sorted(map(str, found.rows.to_pylist())) == sorted(map(str, scanned.to_pylist())), value

    same_as_scan("index")
    table.append(pa.Table.from_pylist(rows[:4], schema=schema))
    same_as_scan("reconciled")
    with pytest.raises(InvalidInputError, match="'id' given more than once"):
        lookup(table, "ix", [(1,)], columns=["id", "tags", "id"])
