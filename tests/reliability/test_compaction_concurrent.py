"""Compaction (``rewrite_data_files``, S19) while other writers commit: no row lost, no deleted row back.

``test_compaction_commits_under_steady_appends``: a writer process appends a small batch every second
while the rewrite runs on a table of many small files; after each group is rewritten the test waits
(on the writer's log, bounded) for one more append, so every group's commit is made on metadata newer
than the snapshot it read, and each group's first commit attempt waits for one more append after
the table was read (so the catalog refuses it). Every group must commit (an append never conflicts: a refused commit is
validated and built again on the new metadata), and the table must read the rows before plus every row
appended. The peer iceberg-zamboni refuses its commit whenever anything was appended meanwhile.

``test_compaction_beside_writers_of_each_kind``: a writer thread makes, between the rewrite of one group
and its commit, one change of each kind in turn (append, position delete, deletion vector, overwrite, a
new column, equality deletes), each retried on the new metadata when the compaction's commit landed
first. The table's rows must equal the oracle's (``tests/index/oracle_table.py``: every write applied in
its commit order), on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.expressions import In
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.table.snapshots import Operation
from pyiceberg.transforms import BucketTransform, IdentityTransform
from pyiceberg.types import StringType

from airflow_iceberg_maint import commit_fence, rewrite_data_files
from airflow_iceberg_maint.compaction import commit, rewriter, run, snapshot
from tests.compaction.helpers import read_live
from tests.index.oracle_table import SCHEMA as ORACLE_SCHEMA
from tests.index.oracle_table import OracleTable
from tests.orphans.scenario import SCHEMA, rows
from tests.reliability import oracle, steady_appender, worker
from tests.reliability.figures import report

pytestmark = pytest.mark.reliability

DEADLINE = 60.0  # seconds a wait on the other writer may take before the test fails


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _count_refusals(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the compaction commits the catalog refused (the table moved on): each is a retry."""
    refused = [0]
    real = commit_fence.commit_fenced  # what ``commit`` calls

    def counted(*args: Any, **kwargs: Any) -> Any:
        try:
            return real(*args, **kwargs)
        except CommitFailedException:
            refused[0] += 1
            raise

    monkeypatch.setattr(commit, "commit_fenced", counted)
    return refused


def _after_each_group(monkeypatch: pytest.MonkeyPatch, action: Callable[[], None]) -> None:
    real = rewriter.rewrite_group  # what ``run`` calls

    def rewrite_then_act(*args: Any, **kwargs: Any) -> Any:
        written = real(*args, **kwargs)
        action()
        return written

    monkeypatch.setattr(run, "rewrite_group", rewrite_then_act)


def test_compaction_commits_under_steady_appends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri, warehouse = f"sqlite:///{tmp_path}/catalog.db", f"file://{tmp_path}/warehouse"
    catalog = SqlCatalog("default", uri=uri, warehouse=warehouse)
    catalog.create_namespace("db")
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "category"))
    table = catalog.create_table("db.stream", schema=SCHEMA, partition_spec=spec)
    for i in range(30):  # 180 small files, 30 in each of 6 partitions
        table.append(rows(i * 12, 12))
    before = sorted(table.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist())
    log, stop = str(tmp_path / "appends.jsonl"), str(tmp_path / "stop")
    ctx = worker.context()
    writer = ctx.Process(target=steady_appender.run, args=(uri, warehouse, "db.stream", 10_000, 1.0, log, stop))
    writer.start()
    try:
        wait_for(lambda: len(steady_appender.appended(log)) >= 1, "the writer's first append")
        started_with = len(steady_appender.appended(log))
        refused = _count_refusals(monkeypatch)
        waited = [started_with]

        def one_more_append() -> None:
            wait_for(lambda: len(steady_appender.appended(log)) > waited[0], "an append during the rewrite")
            waited[0] = len(steady_appender.appended(log))

        _after_each_group(monkeypatch, one_more_append)
        # Each group's first commit attempt waits for an append after the table was read: the catalog refuses
        # it, and the group must be validated and committed again on the new metadata.
        real_replace, built = snapshot.replace_snapshot, [0]  # what ``commit`` calls

        def replace_then_append(*args: Any, **kwargs: Any) -> Any:
            replace = real_replace(*args, **kwargs)
            built[0] += 1
            if built[0] % 2:
                one_more_append()
            return replace

        monkeypatch.setattr(commit, "replace_snapshot", replace_then_append)
        result = rewrite_data_files(catalog.load_table("db.stream"), dry_run=False)
        during = len(steady_appender.appended(log)) - started_with
    finally:
        Path(stop).touch()
        writer.join(DEADLINE)
        if writer.exitcode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(writer.pid, 9)
            writer.join()
    with open(f"{log}.done") as fh:
        done = json.load(fh)
    assert done["ok"], done.get("error")
    appends = steady_appender.appended(log)
    appended_ids = [i for entry in appends for i in entry["ids"]]

    assert result.failed == [], result.failed  # no group gave up
    # Each group lost the race the test forces, and committed on the new metadata; a retry can lose one more
    # to the writer's own appends (one a second) when the machine is slow: that is the same path again.
    assert refused[0] >= 6
    assert len(result.commits) == 6  # one replace commit a partition
    table = catalog.load_table("db.stream")
    operations = {s.snapshot_id: s.summary.operation for s in table.metadata.snapshots if s.summary}
    assert all(operations[c] == Operation.REPLACE for c in result.commits)
    got = sorted(table.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist())
    assert got == sorted(before + appended_ids)  # no row lost, none twice, every appended row present
    assert oracle.missing(oracle.live_files(table)) == []
    oracle.snapshot_ids(table)  # every snapshot still reads
    report(
        "compaction_under_steady_appends",
        groups=len(result.commits),
        replace_commits=len(result.commits),
        appends_during_rewrite=during,
        commits_refused_and_retried=refused[0],
        writer_appends_refused=sum(e["refused"] for e in appends),
        rows_lost=0,
    )


def _overwrite(o: OracleTable, count: int) -> None:
    """Replace ``count`` live rows by new ones through pyiceberg's copy-on-write overwrite."""
    victims = o.sample_rids(count)
    new = [{**o.rows[v], "rid": o.next_rid + n, "payload": f"p{o.next_rid + n}"} for n, v in enumerate(victims)]
    o.table.overwrite(pa.Table.from_pylist(new, schema=ORACLE_SCHEMA), overwrite_filter=In("rid", victims))  # type: ignore[arg-type, call-arg]
    o.next_rid += len(new)
    for v in victims:
        del o.rows[v]
    o.rows.update((r["rid"], r) for r in new)


def _add_column(o: OracleTable) -> None:
    o.table.update_schema().add_column("note", StringType()).commit()


OPS: list[tuple[str, Callable[[OracleTable], None]]] = [
    ("append", lambda o: o.append(50)),
    ("position_delete", lambda o: o.delete_positions(6)),
    ("deletion_vector", lambda o: o.delete_with_deletion_vector(4)),
    ("overwrite", lambda o: _overwrite(o, 5)),  # before any equality delete: pyiceberg cannot read past one
    ("equality_delete", lambda o: o.delete_equality("k_str", ["abc"])),  # during the rewrite of the last group
    ("add_column", _add_column),
    ("append", lambda o: o.append(50)),
    ("position_delete", lambda o: o.delete_positions(6)),
    ("equality_delete", lambda o: o.delete_equality("k_int", [None])),
    ("append", lambda o: o.append(50)),
]


class GatedWriter(threading.Thread):
    """Makes the next change of ``OPS`` each time ``go()`` is called; ``go()`` returns once it committed."""

    def __init__(self, oracle_table: OracleTable) -> None:
        super().__init__(daemon=True)
        self.o, self.gate, self.done = oracle_table, threading.Semaphore(0), 0
        self.retries, self.errors = 0, list[BaseException]()

    def go(self) -> None:
        target = self.done + 1
        if target <= len(OPS):
            self.gate.release()
            wait_for(lambda: self.done >= target or bool(self.errors), f"the writer's change {target}")

    def run(self) -> None:
        try:
            for _, op in OPS:
                self.gate.acquire()
                for _ in range(20):
                    try:
                        op(self.o)
                        break
                    except (CommitFailedException, ValidationException):  # the compaction committed first: plan
                        # again on its metadata (pyiceberg's overwrite refuses when data files it matches went)
                        self.retries += 1
                        self.o.table = self.o.table.refresh()
                else:
                    raise RuntimeError("a change was refused 20 times")
                self.done += 1
        except BaseException as exc:
            self.errors.append(exc)


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_compaction_beside_writers_of_each_kind(
    backend: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog: Catalog = request.getfixturevalue(f"{'sqlite' if backend == 'sqlite' else 'pg'}_catalog")
    # No commit retry inside pyiceberg: it would re-apply a position delete planned on files the compaction
    # has since replaced, without checking they are still live (the delete then names a removed file and its
    # rows come back, the writer's fault, not the rewrite's). The writer plans each refused change again.
    o = OracleTable.create(catalog, "mixed", 23, {"commit.retry.num-retries": "0"})
    for _ in range(6):  # unpartitioned files (spec 0, which equality deletes need) ...
        o.append(120)
    o.table.update_spec().add_field("rid", BucketTransform(4), "rid_bucket").commit()
    o.table = o.table.refresh()
    for _ in range(6):  # ... and 4 buckets of small files: 5 groups
        o.append(120)
    writer = GatedWriter(o)
    writer.start()
    refused = _count_refusals(monkeypatch)
    _after_each_group(monkeypatch, writer.go)  # one change between each group's rewrite and its commit
    result = rewrite_data_files(catalog.load_table("db.mixed"), dry_run=False, min_input_files=2)
    while writer.done < len(OPS) and not writer.errors:  # the rest of the changes, after the run
        writer.go()
    writer.join(DEADLINE)
    assert writer.errors == [], writer.errors
    table = catalog.load_table("db.mixed")
    live = Counter(tuple(dict(r)[n] for n in ORACLE_SCHEMA.names) for r in read_live(table))
    expected = Counter(tuple(r[n] for n in ORACLE_SCHEMA.names) for r in o.rows.values())
    assert live == expected  # every write applied in its commit order: no row lost, no deleted row back
    assert oracle_columns(table) == [*ORACLE_SCHEMA.names, "note"]
    assert result.commits, result.failed  # at least one group committed beside the writer
    report(
        f"compaction_beside_writers_{backend}",
        writer_changes=len(OPS),
        groups=len(result.groups),
        groups_committed=len(result.groups) - len(result.failed),
        groups_failed_on_conflict=len(result.failed),
        compaction_commits_refused_and_retried=refused[0],
        writer_changes_retried=writer.retries,
        rows=sum(live.values()),
        rows_lost=0,
        deleted_rows_back=0,
    )


def oracle_columns(table: Any) -> list[str]:
    return [f.name for f in table.schema().fields]
