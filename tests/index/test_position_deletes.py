"""The fast position delete reader agrees with pyiceberg's; a file's target comes from its bounds only when exact."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.typedef import Record

from airflow_iceberg_maint.index.source.position_deletes import (
    FILE_PATH_FIELD_ID,
    deleted_positions_by_file,
    single_target,
)
from airflow_iceberg_maint.pyiceberg_compat import read_position_deletes
from tests.index.row_deletes import POSITION_DELETE_SCHEMA

PATHS = st.sampled_from(["s3://b/t/data/a.parquet", "s3://b/t/data/b.parquet", "file:///t/data/é-c.parquet"])
PAIRS = st.lists(st.tuples(PATHS, st.integers(0, 10_000)), max_size=40, unique=True)


def _delete_file(path: str, pairs: list[tuple[str, int]], bounds: bool) -> DataFile:
    pairs = sorted(pairs)
    data = pa.table({"file_path": [p for p, _ in pairs], "pos": [q for _, q in pairs]}, schema=POSITION_DELETE_SCHEMA)
    pq.write_table(data, path)
    lower = {FILE_PATH_FIELD_ID: pairs[0][0].encode()} if bounds and pairs else None
    upper = {FILE_PATH_FIELD_ID: pairs[-1][0].encode()} if bounds and pairs else None
    return DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=len(pairs),
        file_size_in_bytes=Path(path).stat().st_size,
        lower_bounds=lower,
        upper_bounds=upper,
    )


def _as_lists(by_file: dict[str, pa.ChunkedArray]) -> dict[str, list[int]]:
    return {path: sorted(positions.to_pylist()) for path, positions in by_file.items() if len(positions)}


@settings(max_examples=60, deadline=None)
@given(pairs=PAIRS)
def test_positions_by_file_equal_pyiceberg_reader(pairs: list[tuple[str, int]]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        delete = _delete_file(f"{folder}/d.parquet", pairs, bounds=True)
        ours = _as_lists(deleted_positions_by_file(PyArrowFileIO(), delete))
        expected: dict[str, list[int]] = {}
        for path, pos in pairs:
            expected.setdefault(path, []).append(pos)
        assert ours == {path: sorted(p) for path, p in expected.items()}
        if pairs:
            assert ours == _as_lists(read_position_deletes(PyArrowFileIO(), delete))


@settings(max_examples=60, deadline=None)
@given(pairs=PAIRS, bounds=st.booleans())
def test_single_target_only_when_the_bounds_name_one_path(pairs: list[tuple[str, int]], bounds: bool) -> None:
    with tempfile.TemporaryDirectory() as folder:
        delete = _delete_file(f"{folder}/d.parquet", pairs, bounds=bounds)
        named = {path for path, _ in pairs}
        target = single_target(delete)
        if bounds and len(named) == 1:
            assert target == next(iter(named))
        else:
            assert target is None
