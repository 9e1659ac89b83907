"""Parquet readers kept open per process: reused, bounded, closed on eviction, per IO settings, not
inherited by a forked child."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO

from airflow_iceberg_maint.index.source import parquet_files
from airflow_iceberg_maint.index.source.parquet_files import OPEN_FILES, opened_parquet


@pytest.fixture(autouse=True)
def _empty_cache() -> None:
    parquet_files._handles.clear()


def _write(path: Path, groups: list[int]) -> str:
    with pq.ParquetWriter(path, pa.schema([("n", pa.int64())])) as writer:
        start = 0
        for rows in groups:
            writer.write_table(pa.table({"n": list(range(start, start + rows))}))
            start += rows
    return f"file://{path}"


def _open_fds_to(paths: set[str]) -> int:
    fds = Path("/proc/self/fd")
    targets = [os.path.realpath(fds / fd) for fd in os.listdir(fds)]
    return sum(t in paths for t in targets)


def test_a_reader_is_opened_once_with_its_row_group_starts(tmp_path: Path) -> None:
    uri = _write(tmp_path / "a.parquet", [3, 5, 2])
    io = PyArrowFileIO()
    with opened_parquet(io, uri) as first:
        assert first.starts == [0, 3, 8, 10]
    with opened_parquet(io, uri) as second:
        assert second is first
        assert second.file.read_row_group(1).column("n").to_pylist() == [3, 4, 5, 6, 7]


def test_readers_beyond_the_limit_are_evicted_and_their_files_closed(tmp_path: Path) -> None:
    io = PyArrowFileIO()
    paths = [tmp_path / f"f{i}.parquet" for i in range(OPEN_FILES + 8)]
    for path in paths:
        with opened_parquet(io, _write(path, [1])) as handle:
            assert handle.file.read().num_rows == 1
    assert len(parquet_files._handles) == OPEN_FILES
    assert _open_fds_to({str(p) for p in paths}) == OPEN_FILES
    assert _open_fds_to({str(p) for p in paths[:8]}) == 0  # the oldest were closed


def test_a_forked_child_starts_without_the_parents_readers(tmp_path: Path) -> None:
    uri = _write(tmp_path / "a.parquet", [1])
    with opened_parquet(PyArrowFileIO(), uri) as parents:
        pass
    pid = os.fork()
    if pid == 0:
        code = 99
        try:  # the child must never return into the test session
            with opened_parquet(PyArrowFileIO(), uri) as childs:
                code = len(parquet_files._handles) * 10 + (childs is parents)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 10  # one reader, opened anew in the child
    assert len(parquet_files._handles) == 1


def test_a_reader_can_be_reentered_by_its_thread(tmp_path: Path) -> None:
    uri = _write(tmp_path / "a.parquet", [2])
    io = PyArrowFileIO()
    same: list[bool] = []

    def nested() -> None:
        with opened_parquet(io, uri) as outer, opened_parquet(io, uri) as inner:
            same.append(inner is outer)

    thread = threading.Thread(target=nested, daemon=True)
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive(), "a nested use of the same reader deadlocked"
    assert same == [True]


def test_other_io_settings_open_the_file_anew(tmp_path: Path) -> None:
    # New credentials (a catalog vending short-lived ones) must not reuse a reader opened with old ones.
    uri = _write(tmp_path / "a.parquet", [2])
    with opened_parquet(PyArrowFileIO({"s3.session-token": "old"}), uri) as old:
        pass
    with opened_parquet(PyArrowFileIO({"s3.session-token": "new"}), uri) as new:
        assert new is not old
    with opened_parquet(PyArrowFileIO({"s3.session-token": "new"}), uri) as again:
        assert again is new
