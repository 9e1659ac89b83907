"""Rows read page by page through the offset index: exactly the rows a whole read gives, and the
usual reader for files it cannot serve."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.io import pyarrow as pyiceberg_pyarrow
from pyiceberg.io.pyarrow import PyArrowFileIO

from airflow_iceberg_maint.index.metadata.builders import new_index_metadata
from airflow_iceberg_maint.index.metadata.expressions import split_expression_list
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.index.read.lookup import lookup
from airflow_iceberg_maint.index.source import page_reads
from airflow_iceberg_maint.index.source.parquet_files import opened_parquet
from airflow_iceberg_maint.index.write.refresh import refresh_full
from tests.index.oracle_table import OracleTable, multiset

ROWS = 3000
GROUP_ROWS = 1000


def _data() -> pa.Table:
    """Columns of several kinds: nulls, a dictionary-encoded string, unique strings (dictionary
    fallback mid-chunk), a large string, and fixed-width values."""
    ids = list(range(ROWS))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "maybe": pa.array([None if i % 7 == 0 else i * 3 for i in ids], pa.int32()),
            "color": pa.array([("red", "green", None, "blue")[i % 4] for i in ids], pa.string()),
            "unique": pa.array([f"u{i:06d}-{'x' * (i % 13)}" for i in ids], pa.string()),
            "big": pa.array([f"b{i}" for i in ids], pa.large_string()),
            "ratio": pa.array([i / 7 for i in ids], pa.float64()),
            "flag": pa.array([i % 3 == 0 for i in ids], pa.bool_()),
            "day": pa.array([date(2024, 1, 1 + i % 28) for i in ids], pa.date32()),
            "at": pa.array([datetime(2024, 1, 1, i % 24, i % 60) for i in ids], pa.timestamp("us")),
            "amount": pa.array([Decimal(i) / 100 for i in ids], pa.decimal128(12, 2)),
        }
    )


def _write(path: Path, page_index: bool = True, **options: Any) -> str:
    options = {"compression": "zstd", **options}
    pq.write_table(
        _data(),
        path,
        row_group_size=GROUP_ROWS,
        write_page_index=page_index,
        data_page_size=256,
        write_batch_size=50,
        dictionary_pagesize_limit=2048,
        **options,
    )
    return str(path)


def _read(path: str, positions: list[int], columns: list[str]) -> pa.Table | None:
    with opened_parquet(PyArrowFileIO(), path) as handle:
        wanted: dict[int, list[int]] = {}
        for position in positions:
            group = position // GROUP_ROWS
            wanted.setdefault(group, []).append(position - group * GROUP_ROWS)
        return page_reads.read_positions(handle, path, wanted, columns)


# Row 0, the last row, neighbours in one page, rows of adjacent pages, rows in every row group, null rows.
POSITIONS = [0, 1, 2, 7, 49, 50, 51, 400, 999, 1000, 1001, 1700, 2093, 2999]


@pytest.mark.parametrize("compression", ["zstd", "snappy", "none"])
@pytest.mark.parametrize("version", ["1.0", "2.0"])
def test_pages_give_exactly_the_rows_of_a_whole_read(tmp_path: Path, compression: str, version: str) -> None:
    path = _write(tmp_path / "f.parquet", compression=compression, data_page_version=version)
    columns = _data().column_names
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).has_offset_index
    rows = _read(path, POSITIONS, columns)
    assert rows is not None
    assert rows.schema == pq.read_schema(path)
    assert rows.to_pylist() == pq.read_table(path).take(POSITIONS).to_pylist()


@pytest.mark.parametrize("version", ["1.0", "2.0"])
def test_row_groups_whose_every_page_holds_a_row_are_read_whole_with_the_same_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str
) -> None:
    path = _write(tmp_path / "f.parquet", data_page_version=version)
    copied: list[int] = []
    real = page_reads._decode
    monkeypatch.setattr(page_reads, "_decode", lambda *a: copied.append(1) or real(*a))  # type: ignore[func-returns-value]
    # Every 7th row: a row in each page of row groups 0 and 1; one row of row group 2.
    positions = [*range(0, 2000, 7), 2500]
    rows = _read(path, positions, _data().column_names)
    assert rows is not None and rows.schema == pq.read_schema(path)
    assert rows.to_pylist() == pq.read_table(path).take(positions).to_pylist()
    # Only row group 2's page went through a small file (once per column, or twice for a kept dictionary).
    assert 0 < len(copied) <= 2 * len(_data().column_names)


def test_a_column_subset_and_a_single_row(tmp_path: Path) -> None:
    path = _write(tmp_path / "f.parquet")
    rows = _read(path, [1234], ["unique", "maybe"])
    assert rows is not None
    assert rows.to_pylist() == [{"unique": "u001234-" + "x" * (1234 % 13), "maybe": 1234 * 3}]
    assert _read(path, [1400], ["maybe"]).to_pylist() == [{"maybe": None}]


def test_only_the_pages_holding_the_rows_are_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path / "f.parquet", compression="none")
    reads: list[int] = []
    real = page_reads._read
    monkeypatch.setattr(
        page_reads,
        "_read",
        lambda handle, offset, length: reads.append(length) or real(handle, offset, length),  # type: ignore[func-returns-value]
    )
    assert _read(path, [1500], ["id"]) is not None
    chunk = pq.ParquetFile(path).metadata.row_group(1).column(0)
    # The offset index, then one data page (PLAIN int64: no dictionary): a small share of the chunk.
    assert len(reads) == 2
    assert sum(reads) < chunk.total_compressed_size / 10


def test_files_without_an_offset_index_are_left_to_the_usual_reader(tmp_path: Path) -> None:
    path = _write(tmp_path / "f.parquet", page_index=False)
    assert _read(path, [5], ["id"]) is None


def test_nested_columns_are_left_to_the_usual_reader(tmp_path: Path) -> None:
    path = str(tmp_path / "nested.parquet")
    table = pa.table(
        {
            "id": [1, 2, 3],
            "point": [{"x": 1, "y": 2}, None, {"x": 5, "y": 6}],
            "tags": [["a"], [], None],
            "last": ["p", "q", "r"],
        }
    )
    pq.write_table(table, path, write_page_index=True)
    with opened_parquet(PyArrowFileIO(), path) as handle:
        assert page_reads.read_positions(handle, path, {0: [1]}, ["id", "point"]) is None
        assert page_reads.read_positions(handle, path, {0: [1]}, ["tags"]) is None
        # Flat columns after nested ones are found by their leaf position.
        assert page_reads.read_positions(handle, path, {0: [0, 2]}, ["last", "id"]).to_pylist() == [
            {"last": "p", "id": 1},
            {"last": "r", "id": 3},
        ]


# Lookups over data files pyiceberg writes with the page index (as Spark writes them by default).


@pytest.fixture
def page_indexed_writes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """pyiceberg's writer with the page index on; yields the outcome of each page read."""
    real_kwargs = pyiceberg_pyarrow._get_parquet_writer_kwargs
    monkeypatch.setattr(
        pyiceberg_pyarrow,
        "_get_parquet_writer_kwargs",
        lambda properties: {**real_kwargs(properties), "write_page_index": True},
    )
    outcomes: list[bool] = []
    real_read = page_reads.read_positions

    def counted(*args: Any) -> pa.Table | None:
        result = real_read(*args)
        outcomes.append(result is not None)
        return result

    monkeypatch.setattr(page_reads, "read_positions", counted)
    yield outcomes


SMALL_PAGES = {
    "write.parquet.page-size-bytes": "64",
    "write.parquet.page-row-limit": "8",
    "write.parquet.row-group-limit": "24",
}


@pytest.fixture(params=["sqlite", pytest.param("s3", marks=pytest.mark.s3)])
def catalog(request: pytest.FixtureRequest) -> Catalog:
    return request.getfixturevalue(f"{request.param}_catalog")


@pytest.mark.parametrize("column", ["k_long", "k_str"])
def test_lookups_through_pages_with_deletes_equal_the_oracle(
    catalog: Catalog, page_indexed_writes: list[bool], column: str
) -> None:
    oracle = OracleTable.create(catalog, "t", seed=5, properties=SMALL_PAGES)
    for _ in range(3):
        oracle.append(70)
    oracle.delete_positions(20)
    oracle.delete_with_deletion_vector(10)
    oracle.delete_equality("k_str", ["abc", None])
    metadata = new_index_metadata(oracle.table, "ix", split_expression_list(column), [], True, {})
    IndexStore(oracle.table).create(metadata, "ix")
    refresh_full(oracle.table, "ix")
    extract_snapshot = oracle.snapshot_id
    for value in oracle.probes(column, 8):
        result = lookup(oracle.table, "ix", [(value,)])
        assert result.mode == "index"
        assert multiset(result.rows.to_pylist()) == oracle.expected(column, value)
    oracle.delete_positions(15)  # new deletes: applied to the rows fetched page by page
    for value in oracle.probes(column, 8):
        result = lookup(oracle.table, "ix", [(value,)])
        assert result.mode == "reconciled"
        assert multiset(result.rows.to_pylist()) == oracle.expected(column, value)
    assert extract_snapshot != oracle.snapshot_id
    assert page_indexed_writes and all(page_indexed_writes)  # every fetch went through the pages


@pytest.mark.parametrize("compression", ["zstd", "snappy", "gzip", "none"])
@pytest.mark.parametrize("version", ["1.0", "2.0"])
def test_a_dictionary_page_is_decoded_once_per_column_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compression: str, version: str
) -> None:
    path = _write(tmp_path / "f.parquet", compression=compression, data_page_version=version)
    dictionary_reads: list[tuple[Any, ...]] = []
    by_index: list[pa.Array | None] = []
    read_dictionary, decode_by_index = page_reads._dictionary_page, page_reads._decode_by_index
    monkeypatch.setattr(page_reads, "_dictionary_page", lambda *a: dictionary_reads.append(a) or read_dictionary(*a))  # type: ignore[func-returns-value]
    monkeypatch.setattr(page_reads, "_decode_by_index", lambda *a: by_index.append(decode_by_index(*a)) or by_index[-1])  # type: ignore[func-returns-value]
    whole = pq.read_table(path)
    for position in POSITIONS:  # one fetch at a time, as single-key lookups do
        rows = _read(path, [position], ["color", "unique"])
        assert rows is not None and rows.to_pylist() == whole.select(["color", "unique"]).take([position]).to_pylist()
    # "color" is dictionary-encoded throughout; "unique" only in its first pages (then plain)
    assert len(dictionary_reads) == 2 * (ROWS // GROUP_ROWS)
    assert len(by_index) > len(POSITIONS) and all(values is not None for values in by_index)
