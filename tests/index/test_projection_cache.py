"""Projections are cached per file schema: files alike share one, files whose field IDs differ never do."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField

from airflow_iceberg_maint.index.source.live_rows import POS_COLUMN, read_rows

SCHEMA = Schema(NestedField(1, "a", LongType(), required=False), NestedField(2, "b", LongType(), required=False))


def _file(folder: Path, name: str, ids: dict[str, int], a: list[int], b: list[int]) -> DataFile:
    fields = [pa.field(c, pa.int64(), metadata={b"PARQUET:field_id": str(ids[c]).encode()}) for c in ("a", "b")]
    path = folder / name
    pq.write_table(pa.table({"a": a, "b": b}, schema=pa.schema(fields)), path)
    data_file = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=str(path),
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=len(a),
        file_size_in_bytes=path.stat().st_size,
    )
    data_file.spec_id = 0
    return data_file


def test_files_with_the_same_names_but_other_field_ids_are_projected_by_their_ids(
    sqlite_catalog: SqlCatalog, tmp_path: Path
) -> None:
    table = sqlite_catalog.create_table("db.t", SCHEMA, properties={"format-version": "2"})
    plain = [_file(tmp_path, f"plain-{i}.parquet", {"a": 1, "b": 2}, [i, i], [10 + i, 10 + i]) for i in range(3)]
    # Same column names and types, the IDs swapped: a writer that renamed a to b and b to a.
    swapped = _file(tmp_path, "swapped.parquet", {"a": 2, "b": 1}, [7, 8], [70, 80])

    for i, data_file in enumerate(plain):
        rows = read_rows(table, data_file, SCHEMA).drop_columns([POS_COLUMN])
        assert rows.to_pydict() == {"a": [i, i], "b": [10 + i, 10 + i]}
    rows = read_rows(table, swapped, SCHEMA).drop_columns([POS_COLUMN])
    assert rows.to_pydict() == {"a": [70, 80], "b": [7, 8]}
    rows = read_rows(table, plain[0], SCHEMA).drop_columns([POS_COLUMN])
    assert rows.to_pydict() == {"a": [0, 0], "b": [10, 10]}
