"""Every delete kind applied by the rewrite, and concurrent writers during it: no row lost, no deleted row back.

Rows are compared with the oracle (``tests/index/oracle_table.py``), which tracks every live row in Python.
Concurrent commits are made by a real second writer at a chosen point of the run (after a group is written,
or just before the rewrite's commit), through hooks around the run's own functions.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from airflow_iceberg_maint import CommitOutcomeUnknownError, rewrite_data_files
from airflow_iceberg_maint.compaction import commit, group_reads, run
from airflow_iceberg_maint.errors import LeaseLostError
from airflow_iceberg_maint.fencing import fenced
from tests.compaction.helpers import MB, append_files, create, data_files, delete_files, read_live, scanned
from tests.index.oracle_table import OracleTable
from tests.index.row_deletes import commit_deletion_vector, commit_equality_deletes, commit_position_deletes

TARGET = 64 * 1024


def _rows(rows: Any) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(sorted(r.items())) for r in rows)


def _oracle(catalog: Catalog, seed: int = 11, appends: int = 8, format_version: str = "2") -> OracleTable:
    properties = {"write.target-file-size-bytes": str(TARGET), "format-version": format_version}
    oracle = OracleTable.create(catalog, "t", seed, properties)
    for _ in range(appends):
        oracle.append(300)
    return oracle


def _after_each_group(monkeypatch: pytest.MonkeyPatch, action: Any) -> None:
    real = run.rewrite_group  # type: ignore[attr-defined]  # the name as the module imported it (patched there)

    def rewrite_then_act(*args: Any, **kwargs: Any) -> Any:
        written = real(*args, **kwargs)
        action()
        return written

    monkeypatch.setattr(run, "rewrite_group", rewrite_then_act)


@pytest.mark.parametrize("kinds", [("positions",), ("vector",), ("equality",), ("positions", "vector", "equality")])
def test_every_delete_kind_is_applied(sqlite_catalog: Catalog, kinds: tuple[str, ...]) -> None:
    oracle = _oracle(sqlite_catalog)
    if "positions" in kinds:
        oracle.delete_positions(40)
    if "vector" in kinds:
        oracle.delete_with_deletion_vector(20)
    oracle.append(300)
    if "equality" in kinds:
        oracle.delete_equality("k_str", ["a", "日本"])
        oracle.delete_equality("k_int", [None])  # null-safe: rows whose k_int is null
    report = rewrite_data_files(oracle.table, dry_run=False, min_input_files=2)
    table = sqlite_catalog.load_table("db.t")
    assert report.failed == [] and report.rewritten_data_files == 9
    assert read_live(table) == _rows(oracle.rows.values())
    # Every delete applied is gone: the current snapshot reads through pyiceberg's own scan, deletes and all.
    assert delete_files(table) == []
    assert scanned(table) == _rows(oracle.rows.values())
    for snapshot_id, rows in oracle.history.items():
        assert read_live(table, snapshot_id) == _rows(rows)


def test_an_equality_delete_committed_during_the_rewrite_still_applies(
    sqlite_catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    oracle = _oracle(sqlite_catalog)
    start = oracle.table.current_snapshot()
    assert start is not None
    _after_each_group(monkeypatch, lambda: oracle.delete_equality("k_str", ["abc", ""]))
    report = rewrite_data_files(sqlite_catalog.load_table("db.t"), dry_run=False, min_input_files=2)
    assert report.failed == [] and len(report.commits) == 1
    table = sqlite_catalog.load_table("db.t")
    assert read_live(table) == _rows(oracle.rows.values())
    # Read from the manifests with pyiceberg: the new files hold rows the delete removes, and carry the
    # starting snapshot's data sequence number, below the delete's, so the delete applies to them (spec).
    snapshot = table.current_snapshot()
    assert snapshot is not None
    entries = [e for m in snapshot.manifests(table.io) for e in m.fetch_manifest_entry(table.io)]
    data = [e for e in entries if e.data_file.content == 0]
    (equality,) = [e for e in entries if e.data_file.content == 2]
    assert {e.sequence_number for e in data} == {start.sequence_number}
    assert equality.sequence_number is not None and equality.sequence_number > start.sequence_number
    held = [
        v
        for e in data
        for v in pq.read_table(e.data_file.file_path.removeprefix("file://"), columns=["k_str"])["k_str"].to_pylist()
    ]
    assert {"abc", ""} & set(held)


def test_a_position_delete_on_an_input_during_the_rewrite_fails_the_group(
    sqlite_catalog: Catalog, monkeypatch: pytest.MonkeyPatch, warehouse: Path
) -> None:
    oracle = _oracle(sqlite_catalog)
    _after_each_group(monkeypatch, lambda: oracle.delete_positions(5))
    report = rewrite_data_files(sqlite_catalog.load_table("db.t"), dry_run=False, min_input_files=2)
    assert report.commits == [] and report.rewritten_data_files == 0
    assert [f["group"] for f in report.failed] == ["0/{}"]
    assert (
        "position delete" in report.failed[0]["error"]
        and "was committed during the rewrite" in report.failed[0]["error"]
    )
    table = sqlite_catalog.load_table("db.t")
    assert scanned(table) == _rows(oracle.rows.values())  # the deleted rows did not come back
    live = {f["file_path"] for f in table.inspect.files().to_pylist()}
    on_disk = {f"file://{p}" for p in warehouse.rglob("*.parquet")}
    assert on_disk == live  # the group's new files were removed


@pytest.mark.parametrize("format_version", ["1", "2"])
def test_an_input_file_rewritten_during_the_rewrite_fails_the_group(
    sqlite_catalog: Catalog, monkeypatch: pytest.MonkeyPatch, format_version: str
) -> None:
    oracle = _oracle(sqlite_catalog, format_version=format_version)
    _after_each_group(monkeypatch, lambda: oracle.delete_copy_on_write(3))  # pyiceberg rewrites one input file
    report = rewrite_data_files(sqlite_catalog.load_table("db.t"), dry_run=False, min_input_files=2)
    assert report.commits == [] and [f["group"] for f in report.failed] == ["0/{}"]
    assert "is no longer live" in report.failed[0]["error"]
    assert scanned(sqlite_catalog.load_table("db.t")) == _rows(oracle.rows.values())


@pytest.mark.parametrize("format_version", ["1", "2"])
def test_an_append_during_the_rewrite_commits(
    sqlite_catalog: Catalog, monkeypatch: pytest.MonkeyPatch, format_version: str
) -> None:
    oracle = _oracle(sqlite_catalog, format_version=format_version)
    _after_each_group(monkeypatch, lambda: oracle.append(50))
    report = rewrite_data_files(sqlite_catalog.load_table("db.t"), dry_run=False, min_input_files=2)
    assert report.failed == [] and len(report.commits) == 1 and report.rewritten_data_files == 8
    table = sqlite_catalog.load_table("db.t")
    assert scanned(table) == _rows(oracle.rows.values())
    assert len(table.inspect.files()) == report.added_data_files + 1  # the appended file is still there


@pytest.mark.parametrize("format_version", ["1", "2"])
def test_an_append_racing_the_commit_is_retried(
    sqlite_catalog: Catalog, monkeypatch: pytest.MonkeyPatch, format_version: str
) -> None:
    oracle = _oracle(sqlite_catalog, format_version=format_version)
    real, calls = commit.commit_fenced, []  # type: ignore[attr-defined]  # the name as the module imported it (patched there)

    def append_first(table: Table, *args: Any) -> Any:
        calls.append(table.metadata_location)
        if len(calls) == 1:
            oracle.append(50)  # lands between the run's reload and its commit
        return real(table, *args)

    monkeypatch.setattr(commit, "commit_fenced", append_first)
    report = rewrite_data_files(sqlite_catalog.load_table("db.t"), dry_run=False, min_input_files=2)
    assert len(calls) == 2 and calls[0] != calls[1]  # refused once, then built again on the new metadata
    assert report.failed == [] and len(report.commits) == 1
    assert scanned(sqlite_catalog.load_table("db.t")) == _rows(oracle.rows.values())


def test_an_unknown_commit_outcome_keeps_every_file(
    sqlite_catalog: Catalog, monkeypatch: pytest.MonkeyPatch, warehouse: Path
) -> None:
    oracle = _oracle(sqlite_catalog)
    before = set(warehouse.rglob("*"))

    def lost_answer(table: Table, *args: Any) -> Any:
        raise ConnectionResetError("connection reset by peer")

    monkeypatch.setattr(commit, "commit_fenced", lost_answer)
    with pytest.raises(CommitOutcomeUnknownError, match="outcome unknown"):
        rewrite_data_files(sqlite_catalog.load_table("db.t"), dry_run=False, min_input_files=2)
    written = {p for p in set(warehouse.rglob("*")) - before if p.is_file()}
    assert any(p.suffix == ".parquet" for p in written) and any(p.name.startswith("snap-") for p in written)
    assert scanned(sqlite_catalog.load_table("db.t")) == _rows(oracle.rows.values())


@pytest.mark.parametrize("backend", ["pg_catalog", "s3_catalog", "rest_catalog"])
def test_every_delete_kind_on_each_catalog(backend: str, request: pytest.FixtureRequest) -> None:
    catalog: Catalog = request.getfixturevalue(backend)
    oracle = _oracle(catalog, appends=5)
    oracle.delete_positions(20)
    if backend != "rest_catalog":  # SeaweedFS's table bucket refuses the test helper's Puffin file (HTTP 403)
        oracle.delete_with_deletion_vector(10)
    oracle.delete_equality("k_str", ["b"])
    report = rewrite_data_files(oracle.table, dry_run=False, min_input_files=2)
    table = catalog.load_table(oracle.table.name())
    assert report.failed == [] and report.rewritten_data_files == 5 and len(report.commits) == 2
    assert delete_files(table) == [] and scanned(table) == _rows(oracle.rows.values())
    for snapshot_id, rows in oracle.history.items():
        assert read_live(table, snapshot_id) == _rows(rows)


class _LostLease:
    """The fence of a run whose lease another run took over (``state.lease_fence`` raises the same)."""

    def check(self, before: str) -> None:
        raise LeaseLostError(f"table db.t: the lease was taken over; stopped before {before}")


def test_a_lost_lease_stops_the_run_before_its_commit(sqlite_catalog: Catalog) -> None:
    oracle = _oracle(sqlite_catalog)
    location = oracle.table.metadata_location
    with fenced(_LostLease()), pytest.raises(LeaseLostError, match="stopped before the compaction commit"):
        rewrite_data_files(oracle.table, dry_run=False, min_input_files=2)
    assert sqlite_catalog.load_table("db.t").metadata_location == location


def test_files_larger_than_the_budget_stream_with_every_delete(
    sqlite_catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = append_files(create(sqlite_catalog, "t", False, target=MB), random.Random(5), 3, 40000, [1, 2, None])
    first, second = (f["file_path"] for f in data_files(table)[:2])
    table = commit_position_deletes(table, {first: list(range(0, 40000, 7))})
    table = commit_deletion_vector(table, second, list(range(3, 40000, 11)))
    expected = Counter({row: n for row, n in scanned(table).items() if ("day", 1) not in row})
    table = commit_equality_deletes(table, ["day"], [[1]])
    batches: list[int] = []
    real = group_reads.live_row_batches  # type: ignore[attr-defined]  # the name as the module imported it

    def counted(*args: Any) -> Any:
        for rows in real(*args):
            batches.append(rows.num_rows)
            yield rows

    monkeypatch.setattr(group_reads, "live_row_batches", counted)
    report = rewrite_data_files(table, dry_run=False, min_input_files=2, memory_budget_mb=1)
    table = sqlite_catalog.load_table("db.t")
    assert report.failed == [] and len(batches) > 3  # each input file read in several batches
    assert delete_files(table) == [] and scanned(table) == expected
