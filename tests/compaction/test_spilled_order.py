"""Sort and z-order of a group larger than the memory budget: sorted runs spilled to local disk and merged.

Each table holds position deletes, a deletion vector and equality deletes; its rows after the
rewrite are compared with pyiceberg's own scan taken before the equality deletes (filtered in
Python), its order with keys computed here in Python, and with the order of the same rewrite held in
memory (a large budget) of an identical table.
"""

from __future__ import annotations

import random
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from airflow_iceberg_maint import rewrite_data_files
from airflow_iceberg_maint.compaction import run, writer
from airflow_iceberg_maint.compaction.rewriter import GroupOutput
from tests.compaction.helpers import ARROW, MB, create, data_files, delete_files, scanned
from tests.index.row_deletes import commit_deletion_vector, commit_equality_deletes, commit_position_deletes

ROWS = 5000  # a file; each row ~300 bytes: 4 files of live rows take several times the 1 MB budget
LAYOUTS: dict[str, dict[str, Any]] = {
    "sort": {"strategy": "sort", "sort": ["day desc nulls last", "id"]},
    "zorder": {"strategy": "zorder", "zorder": ["id", "day"]},
}


def _table(catalog: Catalog, name: str, nulls: bool) -> tuple[Table, Counter[tuple[Any, ...]]]:
    """Four files of wide rows with deletes of every kind, and the rows that stay live (read independently)."""
    table = create(catalog, name, False, target=MB // 2)
    rng = random.Random(7)
    days: list[int | None] = [1, 2, 3, 4, None] if nulls else [1, 2, 3, 4]
    for n in range(4):
        rows = [
            {"id": rng.randrange(10**6), "day": rng.choice(days), "payload": f"{rng.getrandbits(1200):x}-{n}-{i}"}
            for i in range(ROWS)
        ]
        table.append(pa.Table.from_pylist(rows, schema=ARROW))
    first, second = (f["file_path"] for f in data_files(table)[:2])
    table = commit_position_deletes(table, {first: list(range(0, ROWS, 7))})
    table = commit_deletion_vector(table, second, list(range(3, ROWS, 11)))
    expected = Counter({row: n for row, n in scanned(table).items() if ("day", 1) not in row})
    return commit_equality_deletes(table, ["day"], [[1]]), expected


def _written_rows(table: Table) -> list[tuple[int, int | None]]:
    """(id, day) of every row of the files written, files in the order they were written."""
    rows: list[tuple[int, int | None]] = []
    for f in sorted(data_files(table), key=lambda f: int(f["file_path"].rsplit("-", 6)[-6])):
        read = pq.read_table(f["file_path"].removeprefix("file://"), columns=["id", "day"])
        rows += list(zip(read.column("id").to_pylist(), read.column("day").to_pylist(), strict=True))
    return rows


def _zorder_keys(rows: list[tuple[int, int | None]]) -> list[int]:
    """The z-order key of each row, computed in Python: dense ranks scaled to 21 bits, bits interleaved."""
    bits = 21
    scaled = []
    for column in range(2):
        values = sorted({r[column] for r in rows})  # no nulls in these tables
        rank = {v: i for i, v in enumerate(values)}
        scale = ((1 << bits) - 1) / (len(values) - 1)
        scaled.append([int(rank[r[column]] * scale) for r in rows])
    keys = []
    for a, b in zip(*scaled, strict=True):
        keys.append(sum(((a >> bit) & 1) << (2 * bit) | ((b >> bit) & 1) << (2 * bit + 1) for bit in range(bits)))
    return keys


def _keys(strategy: str, rows: list[tuple[int, int | None]]) -> list[tuple[Any, ...]]:
    if strategy == "sort":  # day desc nulls last, id
        return [(d is None, -(d or 0), i) for i, d in rows]
    return [(k,) for k in _zorder_keys(rows)]


def _outputs(monkeypatch: pytest.MonkeyPatch) -> list[GroupOutput]:
    outputs: list[GroupOutput] = []
    real = run.rewrite_group  # type: ignore[attr-defined]  # the name as the module imported it (patched there)

    def kept(*args: Any, **kwargs: Any) -> GroupOutput:
        output: GroupOutput = real(*args, **kwargs)
        outputs.append(output)
        return output

    monkeypatch.setattr(run, "rewrite_group", kept)
    return outputs


@pytest.fixture
def spill_parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary directory (``TMPDIR``) the runs are spilled under, private to the test."""
    parent = tmp_path / "spill"
    parent.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(parent))
    return parent


@pytest.mark.parametrize("strategy", sorted(LAYOUTS))
def test_a_group_beyond_the_budget_spills_sorted_runs_with_every_delete(
    sqlite_catalog: Catalog, monkeypatch: pytest.MonkeyPatch, spill_parent: Path, strategy: str
) -> None:
    nulls = strategy == "sort"
    spilled, expected = _table(sqlite_catalog, "spilled", nulls)
    in_memory, _ = _table(sqlite_catalog, "in_memory", nulls)
    outputs = _outputs(monkeypatch)
    report = rewrite_data_files(spilled, dry_run=False, memory_budget_mb=1, **LAYOUTS[strategy])
    assert report.failed == [] and len(outputs) == 1 and outputs[0].spilled_runs > 1
    assert list(spill_parent.iterdir()) == []  # the runs and their directory are removed
    spilled = sqlite_catalog.load_table("db.spilled")
    assert delete_files(spilled) == [] and scanned(spilled) == expected and report.added_data_files > 1
    rows = _written_rows(spilled)
    key = _keys(strategy, rows)
    assert key == sorted(key)  # in each file, and across the files in the order they were written

    rewrite_data_files(in_memory, dry_run=False, memory_budget_mb=1024, **LAYOUTS[strategy])
    assert outputs[1].spilled_runs == 0
    assert _written_rows(sqlite_catalog.load_table("db.in_memory")) == rows  # the in-memory order, row for row


def test_a_failure_while_merging_removes_the_runs_and_changes_nothing(
    sqlite_catalog: Catalog, monkeypatch: pytest.MonkeyPatch, spill_parent: Path
) -> None:
    table, _ = _table(sqlite_catalog, "t", False)
    location = table.metadata_location
    spilled: list[int] = []

    def fail(sized: Any, rows: pa.Table) -> None:
        spilled.extend(len(list(p.iterdir())) for p in spill_parent.iterdir())
        raise OSError("disk full")

    monkeypatch.setattr(writer.SizedWriter, "write", fail)
    report = rewrite_data_files(table, dry_run=False, memory_budget_mb=1, **LAYOUTS["zorder"])
    assert len(report.failed) == 1 and "disk full" in str(report.failed[0])
    assert spilled and spilled[0] > 1  # runs were on disk when the write failed
    assert list(spill_parent.iterdir()) == []
    assert sqlite_catalog.load_table("db.t").metadata_location == location
