"""The concurrent-writer test's writer, held to its own claims: its row model and its commit outcomes.

The writer's model is what ``test_concurrent_writers`` judges the engine by, so a wrong model is a
failure that blames the engine. Here the writer commits alone (no orphan run) and every snapshot
it logs is read right after its commit; commits are made to raise before or after they land (the
catalog's real commit runs, then the error comes, as a connection lost after the server committed),
and the writer must log each as what the catalog holds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.table import CommitTableResponse, Table
from pyiceberg.transforms import IdentityTransform

from tests.orphans.scenario import SCHEMA, rows
from tests.reliability import writer

pytestmark = pytest.mark.reliability


class _Flaky(SqlCatalog):
    """The SQL catalog, whose commit number ``n`` raises before it lands (``refuse``) or after (``lose``)."""

    def __init__(self, name: str, refuse: set[int], lose: set[int], **properties: str) -> None:
        super().__init__(name, **properties)
        self.refuse, self.lose, self.calls = refuse, lose, 0

    def commit_table(self, table: Table, requirements: Any, updates: Any) -> CommitTableResponse:
        self.calls += 1
        if self.calls in self.refuse:
            raise TimeoutError("connection lost before the commit reached the catalog (injected)")
        response = super().commit_table(table, requirements, updates)
        if self.calls in self.lose:
            raise TimeoutError("connection lost after the commit landed (injected)")
        return response


def _writer(tmp_path: Path, refuse: set[int], lose: set[int]) -> tuple[writer.Writer, Path]:
    catalog = _Flaky("default", refuse, lose, uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("db")
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "category"))
    table = catalog.create_table("db.busy", schema=SCHEMA, partition_spec=spec)
    table.append(rows(0, 30))
    catalog.calls = 0
    log = tmp_path / "writer.jsonl"
    return writer.Writer(catalog.load_table("db.busy"), catalog, str(log), seed=7), log


def _entries(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_every_snapshot_reads_what_the_model_says_right_after_its_commit(tmp_path: Path) -> None:
    """Seed 7's third commit is an overwrite of three snapshots whose DELETE read 8 rows where the
    model said 3 (the concurrent-writer failure on a loaded machine, when that snapshot was retained)."""
    w, log = _writer(tmp_path, set(), set())
    wrong, multi = [], 0
    while w.seq <= 30:
        seen = w.seq
        w.step()
        if w.seq == seen:
            continue
        entry = _entries(log)[-1]
        multi += len(entry["snapshots"]) > 2
        for sid, want in entry["rows"].items():
            got = len(w.table.scan(snapshot_id=int(sid)).to_arrow())
            if got != want:
                wrong.append((entry["seq"], entry["op"], entry["snapshots"], sid, want, got))
    assert wrong == []
    assert multi > 0  # the case that was modelled wrong was exercised
    first = _entries(log)[2]
    assert (first["op"], [op for _, op in first["snapshots"]]) == ("overwrite", ["delete", "overwrite", "append"])


def test_a_commit_that_raised_is_logged_as_what_the_catalog_holds(tmp_path: Path) -> None:
    refuse, lose = {4, 11}, {3, 5, 9, 14}
    w, log = _writer(tmp_path, refuse, lose)
    while w.seq <= 16:
        w.step()
    outcomes = [e["outcome"] for e in _entries(log)[1:17]]
    assert outcomes == [
        "failed" if n in refuse else "landed_after_error" if n in lose else "committed" for n in range(1, 17)
    ]
    entries = _entries(log)
    expected = {int(k): v for e in entries for k, v in e["rows"].items()}
    table = w.catalog.load_table("db.busy")
    retained = {s.snapshot_id: len(table.scan(snapshot_id=s.snapshot_id).to_arrow()) for s in table.metadata.snapshots}
    # The snapshot of the initial append before the writer started is not the writer's to model.
    assert {k: expected[k] for k in retained if k in expected} == {k: v for k, v in retained.items() if k in expected}
    assert len(set(retained) - set(expected)) <= 1
    landed = [e for e in entries if e.get("outcome") == "landed_after_error"]
    assert all(e["snapshots"] or e["op"] == "expire" for e in landed)
    assert all(e["error"].startswith("TimeoutError") for e in landed)
