"""Many keys and ranges through an index (index/query.py): exact rows against a pyiceberg scan with
the same filter, and against the brute-force oracle where pyiceberg cannot read the deletes."""

from __future__ import annotations

import zlib
from collections import Counter
from datetime import date, datetime
from itertools import accumulate
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.expressions import (
    AlwaysTrue,
    And,
    BooleanExpression,
    GreaterThanOrEqual,
    In,
    IsNull,
    LessThanOrEqual,
    Or,
)
from pyiceberg.io.pyarrow import schema_to_pyarrow

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.index.format import extract_files
from airflow_iceberg_maint.index.metadata.builders import new_index_metadata
from airflow_iceberg_maint.index.metadata.expressions import split_expression_list
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.index.read import fetch as lookup_module
from airflow_iceberg_maint.index.read import region_reads
from airflow_iceberg_maint.index.read import regions as regions_module
from airflow_iceberg_maint.index.read.query import (
    lookup_keys,
    lookup_range,
    plan_keys,
    plan_range,
    query_keys,
    query_range,
)
from airflow_iceberg_maint.index.source import parquet_files
from airflow_iceberg_maint.index.source.live_rows import read_rows
from airflow_iceberg_maint.index.write.refresh import refresh_full
from tests.index.oracle_table import ABSENT, OracleTable, multiset

SMALL_REGIONS = {"write.region.target-file-size-bytes": "1500"}

# (ordering, the key column, a range on it)
RANGES = [
    ("k_int", "k_int", (-7, 8)),
    ("k_long", "k_long", (None, 99)),
    ("k_str", "k_str", ("ab", "b")),
    ("k_date", "k_date", (date(2000, 1, 1), None)),
    ("truncate(2, k_str), k_str", "k_str", ("abc", "é")),
    ("truncate(3, k_int), k_int", "k_int", (1, 13)),
    ("day(k_ts), k_ts", "k_ts", (datetime(1970, 1, 1), datetime(2024, 1, 1, 13, 0))),
    ("month(k_date), k_date", "k_date", (date(1970, 1, 1), date(2024, 1, 1))),
]
KEY_ORDERINGS = [
    ("k_long", "k_long"),
    ("k_str", "k_str"),
    ("bucket(8, k_long), k_long", "k_long"),
    ("truncate(2, k_str), k_str", "k_str"),
    ("day(k_ts), k_ts", "k_ts"),
]


def _index(oracle: OracleTable, ordering: str) -> None:
    metadata = new_index_metadata(oracle.table, "ix", split_expression_list(ordering), [], True, SMALL_REGIONS)
    IndexStore(oracle.table).create(metadata, "ix")
    refresh_full(oracle.table, "ix")


def _history(catalog: Catalog, seed: int, ordering: str, equality: bool) -> OracleTable:
    """Hot keys (few values over hundreds of rows) with nulls, deletes, and rows appended after the extract."""
    oracle = OracleTable.create(catalog, "t", seed=seed)
    for _ in range(4):
        oracle.append(70)
    oracle.delete_positions(20)
    if equality:
        oracle.delete_with_deletion_vector(8)
        oracle.delete_equality("k_str", ["abc", None])
    _index(oracle, ordering)
    oracle.append(40)  # lag: rows the extract does not hold
    oracle.delete_positions(10)
    if equality:
        oracle.delete_equality("k_int", [0])
    return oracle


def _in_filter(column: str, keys: list[Any]) -> BooleanExpression:
    present = [k for k in keys if k is not None]
    return Or(In(column, present), IsNull(column)) if None in keys else In(column, present)  # type: ignore[arg-type, call-arg]


def _range_filter(column: str, low: Any, high: Any) -> BooleanExpression:
    expression: BooleanExpression = AlwaysTrue()
    if low is not None:
        expression = And(expression, GreaterThanOrEqual(column, low))  # type: ignore[arg-type, call-arg]
    if high is not None:
        expression = And(expression, LessThanOrEqual(column, high))  # type: ignore[arg-type, call-arg]
    return expression


def _in_range(value: Any, low: Any, high: Any) -> bool:
    return value is not None and (low is None or value >= low) and (high is None or value <= high)


def _sorted_nulls_first(values: list[Any]) -> bool:
    return values == sorted(values, key=lambda v: (v is not None, v))


@pytest.mark.parametrize(("ordering", "column"), KEY_ORDERINGS)
def test_many_keys_equal_a_pyiceberg_scan_with_in(sqlite_catalog: Catalog, ordering: str, column: str) -> None:
    oracle = _history(sqlite_catalog, zlib.crc32(ordering.encode()) % 997, ordering, equality=False)
    keys = [*oracle.probes(column, 6), *ABSENT[column]]
    result = query_keys(oracle.table, "ix", pa.array(keys * 2))  # repeated keys: rows still once
    scanned = oracle.table.scan(row_filter=_in_filter(column, keys)).to_arrow()
    assert result.mode == "reconciled" and result.reconciled_files >= 1
    assert multiset(result.rows.to_pylist()) == multiset(scanned.to_pylist())
    assert result.rows.schema == schema_to_pyarrow(oracle.table.schema(), include_field_ids=False)
    if ordering == column:
        assert _sorted_nulls_first(result.rows.column(column).to_pylist())


@pytest.mark.parametrize(("ordering", "column"), KEY_ORDERINGS[::2])
def test_many_keys_with_every_kind_of_delete_equal_the_oracle(
    sqlite_catalog: Catalog, ordering: str, column: str
) -> None:
    oracle = _history(sqlite_catalog, 31, ordering, equality=True)
    keys = [*oracle.probes(column, 6), *ABSENT[column]]
    found = lookup_keys(oracle.table, "ix", pa.array(keys), columns=["payload", "rid"])
    expected: Counter[tuple[Any, ...]] = Counter()
    for key in keys:
        expected += oracle.expected(column, key)
    assert found.column_names == ["payload", "rid"]
    assert multiset(found.to_pylist(), ["rid", "payload"]) == Counter({(k[0], k[-1]): n for k, n in expected.items()})


@pytest.mark.parametrize(("ordering", "column", "bounds"), RANGES)
def test_range_equals_a_pyiceberg_scan_with_the_bounds(
    sqlite_catalog: Catalog, ordering: str, column: str, bounds: tuple[Any, Any]
) -> None:
    oracle = _history(sqlite_catalog, zlib.crc32(ordering.encode()) % 991, ordering, equality=False)
    low, high = bounds
    result = query_range(oracle.table, "ix", low, high)
    scanned = oracle.table.scan(row_filter=_range_filter(column, low, high)).to_arrow()
    assert scanned.num_rows > 0
    assert multiset(result.rows.to_pylist()) == multiset(scanned.to_pylist())
    assert _sorted_nulls_first(result.rows.column(column).to_pylist())


@pytest.mark.parametrize(("ordering", "column", "bounds"), RANGES[::3])
def test_range_with_every_kind_of_delete_equals_the_oracle(
    sqlite_catalog: Catalog, ordering: str, column: str, bounds: tuple[Any, Any]
) -> None:
    oracle = _history(sqlite_catalog, 37, ordering, equality=True)
    low, high = bounds
    found = lookup_range(oracle.table, "ix", low, high)
    assert multiset(found.to_pylist()) == multiset(r for r in oracle.rows.values() if _in_range(r[column], low, high))


def test_each_region_file_is_read_once_and_each_data_file_fetched_once(
    sqlite_catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    oracle = OracleTable.create(sqlite_catalog, "t", seed=41)
    for _ in range(3):
        oracle.append(120)
    _index(oracle, "k_str")
    regions: list[str] = []
    fetched: list[str] = []
    read_matches, read = regions_module.read_region_matches, lookup_module.read_rows  # type: ignore[attr-defined]  # the names as the module imported them (patched there)

    def counting_regions(*args: Any, **kwargs: Any) -> Any:
        regions.append(args[1])
        return read_matches(*args, **kwargs)

    def counting_fetches(table: Any, data_file: Any, *args: Any) -> Any:
        fetched.append(data_file.file_path)
        return read(table, data_file, *args)

    monkeypatch.setattr(regions_module, "read_region_matches", counting_regions)
    monkeypatch.setattr(lookup_module, "read_rows", counting_fetches)
    keys = sorted({r["k_str"] for r in oracle.rows.values()}, key=str)  # every key: hot keys spanning regions
    result = query_keys(oracle.table, "ix", pa.array(keys))
    assert result.mode == "index" and result.rows.num_rows == len(oracle.rows)
    assert len(regions) == len(set(regions)) == result.region_files_read > 3
    assert len(fetched) == len(set(fetched)) == 3


def test_composite_keys_as_a_table(sqlite_catalog: Catalog) -> None:
    oracle = OracleTable.create(sqlite_catalog, "t", seed=43)
    for _ in range(2):
        oracle.append(80)
    _index(oracle, "truncate(1, k_str), k_int")
    pairs = [*sorted({(r["k_str"], r["k_int"]) for r in oracle.rows.values()}, key=str)[:10], ("a", 4), (None, None)]
    keys = pa.table({"k_int": [p[1] for p in pairs], "k_str": [p[0] for p in pairs]})
    found = lookup_keys(oracle.table, "ix", keys)
    assert multiset(found.to_pylist()) == multiset(r for r in oracle.rows.values() if (r["k_str"], r["k_int"]) in pairs)
    with pytest.raises(InvalidInputError, match=r"needs columns \(k_str, k_int\)"):
        lookup_keys(oracle.table, "ix", pa.table({"k_str": ["a"]}))


def _rows_of_plan(oracle: OracleTable, plan: Any) -> list[dict[str, Any]]:
    """Rows an engine would read from a plan: positions of the planned files, filtered scans of the others."""
    rows: list[dict[str, Any]] = []
    data_files = {task.file.file_path: task.file for task in oracle.table.scan().plan_files()}
    for planned in plan.files:
        assert not planned.delete_files
        fetched = read_rows(oracle.table, data_files[planned.path], oracle.table.schema(), planned.positions)
        rows += fetched.drop_columns(["_pos"]).to_pylist()
    for path in plan.scan_files:
        scanned = oracle.table.scan(row_filter=plan.filter).to_arrow()  # the whole filtered scan, then this file's
        rows += [r for r in scanned.to_pylist() if data_files[path] and r["rid"] in _rids_of(oracle, path)]
    return rows


def _rids_of(oracle: OracleTable, path: str) -> set[int]:
    with oracle.table.io.new_input(path).open() as stream:
        return set(pa.parquet.read_table(stream, columns=["rid"]).column("rid").to_pylist())


def test_plans_point_at_exactly_the_rows_without_reading_data_files(
    sqlite_catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    oracle = OracleTable.create(sqlite_catalog, "t", seed=47)
    for _ in range(3):
        oracle.append(60)
    oracle.delete_positions(15)
    _index(oracle, "k_long")
    oracle.append(30)  # lag: one data file to scan
    keys = oracle.probes("k_long", 4)
    read_data: list[Any] = []
    monkeypatch.setattr(lookup_module, "read_rows", lambda *a: read_data.append(a))
    by_keys = plan_keys(oracle.table, "ix", pa.array(keys))
    by_range = plan_range(oracle.table, "ix", -3, 99)
    monkeypatch.undo()
    assert not read_data and by_keys.mode == by_range.mode == "reconciled"
    assert len(by_keys.scan_files) == len(by_range.scan_files) == 1
    assert multiset(_rows_of_plan(oracle, by_keys)) == multiset(r for r in oracle.rows.values() if r["k_long"] in keys)
    assert multiset(_rows_of_plan(oracle, by_range)) == multiset(
        r for r in oracle.rows.values() if _in_range(r["k_long"], -3, 99)
    )


def test_range_errors_name_the_input_and_read_nothing(sqlite_catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    oracle = OracleTable.create(sqlite_catalog, "t", seed=53)
    oracle.append(40)
    _index(oracle, "bucket(4, k_int), k_int")
    monkeypatch.setattr(region_reads, "opened_parquet", lambda *a: pytest.fail("a region file was read"))
    with pytest.raises(InvalidInputError, match=r"ordered by bucket\(4, k_int\), which does not preserve order"):
        lookup_range(oracle.table, "ix", 1, 5)
    with pytest.raises(InvalidInputError, match="give --from, --to or both"):
        lookup_range(oracle.table, "ix")
    with pytest.raises(InvalidInputError, match="NaN"):
        lookup_range(oracle.table, "ix", float("nan"))


def test_empty_and_inverted_ranges_return_no_rows(sqlite_catalog: Catalog) -> None:
    oracle = OracleTable.create(sqlite_catalog, "t", seed=59)
    oracle.append(60)
    _index(oracle, "k_int")
    assert lookup_range(oracle.table, "ix", 9, 3).num_rows == 0
    assert lookup_range(oracle.table, "ix", 4, 4).num_rows == 0  # a value no row has
    only = lookup_range(oracle.table, "ix", 5, 5, columns=["rid"])
    assert sorted(only.column("rid").to_pylist()) == sorted(r["rid"] for r in oracle.rows.values() if r["k_int"] == 5)


@pytest.mark.parametrize(("ordering", "searched"), [("k_long", True), ("bucket(8, k_long), k_long", False)])
def test_sorted_key_columns_are_searched_and_others_masked_with_the_same_rows(
    sqlite_catalog: Catalog, monkeypatch: pytest.MonkeyPatch, ordering: str, searched: bool
) -> None:
    oracle = _history(sqlite_catalog, 61, ordering, equality=False)
    keys = [*oracle.probes("k_long", 8), *ABSENT["k_long"]]
    answers: list[tuple[int, bool]] = []  # per region read: keys, and whether it was searched
    search = region_reads._sorted_matches

    def spy(column: pa.ChunkedArray, values: list[Any]) -> pa.Array | None:
        found = search(column, values)
        answers.append((len(values), found is not None))
        return found

    monkeypatch.setattr(region_reads, "_sorted_matches", spy)
    result = query_keys(oracle.table, "ix", pa.array(keys))
    scanned = oracle.table.scan(row_filter=_in_filter("k_long", keys)).to_arrow()
    assert multiset(result.rows.to_pylist()) == multiset(scanned.to_pylist())
    # Regions of an index ordered by the key column are searched (one key: masked, as cheap).
    # Ordered by a bucket first, a region spanning several buckets is not sorted by the key, and
    # the check sees it (a region within one bucket is, and may be searched).
    several = [s for n, s in answers if n > 1]
    assert several and all(several) == searched


def _search(column: pa.ChunkedArray, values: list[Any]) -> list[int] | None:
    found = region_reads._sorted_matches(column, values)
    return None if found is None else found.to_pylist()


def test_sorted_matches_find_each_run_and_refuse_what_they_cannot_search() -> None:
    column = pa.chunked_array([[None, None, 1, 3, 3], [3, 7, 9, 9]], type=pa.int64())
    assert _search(column, [9, 3, 4, 3]) == [3, 4, 5, 7, 8]
    assert _search(column, [None, 1]) == [0, 1, 2]
    assert _search(column, [None, 100]) == [0, 1]
    assert _search(column, [2**70, 1]) is None  # not an int64: the mask compares it
    assert _search(pa.chunked_array([[1, None, 2]]), [1, 2]) is None  # a null after values
    assert _search(pa.chunked_array([[2, 1]]), [1, 2]) is None  # not ascending
    assert _search(pa.chunked_array([[0.0, 1.0]]), [0.0, 1.0]) is None  # floats: -0.0, NaN
    assert _search(column, [3]) is None  # one key: the mask is as cheap
    intervals = pa.chunked_array([pa.array([(1, 2, 3), (1, 2, 4)], pa.month_day_nano_interval())])
    assert _search(intervals, [(1, 2, 3), (1, 2, 4)]) is None  # temporal, but with no NumPy form
    dates = pa.chunked_array([[date(2000, 1, 1), date(2000, 1, 2), date(2000, 1, 2)]])
    assert _search(dates, [date(2000, 1, 2), date(1999, 1, 1)]) == [1, 2]


class _CountingFile:
    """A local file counting the reads pyarrow makes through it."""

    def __init__(self, path: str, reads: list[int]) -> None:
        self.file = open(path, "rb")  # noqa: SIM115 - closed by pyarrow through close()
        self.reads = reads
        self.closed = False

    def read(self, size: int = -1) -> bytes:
        data = self.file.read(size)
        self.reads.append(len(data))
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.file.seek(offset, whence)

    def tell(self) -> int:
        return self.file.tell()

    def close(self) -> None:
        self.closed = True
        self.file.close()


def test_a_region_file_of_many_wanted_row_groups_is_read_in_one_coalesced_read(
    sqlite_catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(extract_files, "REGION_ROW_GROUP_ROWS", 16)
    oracle = OracleTable.create(sqlite_catalog, "t", seed=67)
    for _ in range(2):
        oracle.append(150)
    IndexStore(oracle.table).create(new_index_metadata(oracle.table, "ix", ["k_long"], [], True, {}), "ix")
    refresh_full(oracle.table, "ix")
    reads: dict[str, list[int]] = {}  # per region file: the size of each read
    opening: dict[str, int] = {}  # per region file: the reads that opened it (its footer)
    sources: list[pa.PythonFile] = []
    real_open = parquet_files._open

    def counting_open(io: Any, path: str) -> Any:
        if "/index/" not in path:
            return real_open(io, path)
        sizes = reads.setdefault(path, [])
        sources.append(pa.PythonFile(_CountingFile(path.removeprefix("file://"), sizes), mode="r"))
        parquet = pa.parquet.ParquetFile(sources[-1], pre_buffer=False)
        opening[path] = len(sizes)
        groups = parquet.metadata.num_row_groups
        starts = [0, *accumulate(parquet.metadata.row_group(i).num_rows for i in range(groups))]
        return parquet_files.ParquetHandle(parquet, sources[-1], starts)

    monkeypatch.setattr(parquet_files, "_handles", parquet_files.LRUCache(maxsize=parquet_files.OPEN_FILES))  # type: ignore[attr-defined]  # the cache class the module imported
    monkeypatch.setattr(parquet_files, "_open", counting_open)
    keys = sorted({r["k_long"] for r in oracle.rows.values()}, key=lambda v: (v is not None, v))
    try:
        result = query_keys(oracle.table, "ix", pa.array(keys))
    finally:
        for source in sources:
            source.close()
    assert multiset(result.rows.to_pylist()) == multiset(oracle.rows.values())
    [(path, sizes)] = reads.items()
    assert pa.parquet.ParquetFile(path.removeprefix("file://")).metadata.num_row_groups >= 16
    # After the footer, one read of every column chunk of the wanted row groups (every one
    # here): three columns a row group were read one by one before.
    assert len(sizes) == opening[path] + 1


def test_short_gaps_between_wanted_row_groups_are_read_too() -> None:
    assert region_reads._gaps_filled([1, 3, 7, 8, 11]) == [1, 2, 3, 7, 8, 9, 10, 11]
    assert region_reads._gaps_filled([0, 4]) == [0, 4]  # a gap of three: two reads
