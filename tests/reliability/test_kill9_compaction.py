"""kill -9 at seeded random points of a compaction (``rewrite_data_files``, S19-S21).

One table, many seeds (as many as ``figures.Seeds`` lets run in its time budget; every seed under
``make soak``). Each seed appends small files, then forks a child (``worker.compaction``, the call
``iceberg-maint rewrite-data-files`` makes) and SIGKILLs it in one of three ways, each observed from
outside: ``delay`` (a seeded delay over the whole run), ``written`` (a seeded few milliseconds after the
first new file appears under ``data/``: groups being written), ``commit`` (a seeded few milliseconds after a
new metadata file appears: a group's commit made, the next being written or the dangling-delete commit).
Afterwards the table reads exactly the rows it read before, every snapshot reads what it read before,
nothing referenced is missing, and an orphan dry run with the cutoff at now (after the kill) finds exactly the files
nothing references (what the killed run wrote and did not commit), none of them referenced.
"""

from __future__ import annotations

import os
import random
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.table.snapshots import Operation
from pyiceberg.transforms import IdentityTransform

from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from tests.orphans.scenario import SCHEMA, rows
from tests.reliability import oracle, worker
from tests.reliability.figures import Seeds, report, scale
from tests.reliability.test_kill9 import Setup, Trigger, clean_orphans, run_and_kill, trim_snapshots

pytestmark = pytest.mark.reliability

SEEDS = scale(20, 60)
MODES = ("delay", "written", "commit")


def _new_under(directory: str, before: frozenset[str]) -> bool:
    return any(f not in before for _, _, names in os.walk(directory) for f in names)


def _metadata_files_over(directory: str, count: int) -> bool:
    return sum(n.endswith(".metadata.json") for n in os.listdir(directory)) > count


def test_kill9_compaction(tmp_path: Path) -> None:
    uri, warehouse = f"sqlite:///{tmp_path}/catalog.db", f"file://{tmp_path}/warehouse"
    catalog = SqlCatalog("default", uri=uri, warehouse=warehouse)
    catalog.create_namespace("db")
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "category"))
    catalog.create_table("db.events", schema=SCHEMA, partition_spec=spec)
    s = Setup(uri, warehouse, catalog, tmp_path)
    kills = completed = before_commit = after_commit = leftovers = 0
    by_mode = dict.fromkeys(MODES, 0)
    duration, next_id = 0.0, 0
    seeds = Seeds(SEEDS + 1, lambda: kills >= seeds.ran // 2 and bool(before_commit and after_commit))
    for seed in seeds:  # seed 0 calibrates: a whole run, never killed
        rng = random.Random(seed)
        table = s.table()
        for _ in range(rng.randint(4, 10)):  # 6 small files an append, one a partition
            table.append(rows(next_id, 12))
            next_id += 12
        trim_snapshots(s.table())
        clean_orphans(s.table())  # the expired snapshots' files: every seed starts with no orphan
        table = s.table()
        loc = table.location().rstrip("/")
        ids_before = oracle.snapshot_ids(table)
        current_before = table.metadata.current_snapshot_id
        data_before = frozenset(f for _, _, names in os.walk(oracle.fs_path(f"{loc}/data")) for f in names)
        metadata_files = sum(p.endswith(".metadata.json") for p in oracle.listing(f"{loc}/metadata"))
        mode = MODES[seed % len(MODES)] if seed else "never"
        kill_when = {
            "never": Trigger(None),
            "delay": Trigger(rng.uniform(0, 1.1 * duration)),
            "written": Trigger(rng.uniform(0, 0.05), partial(_new_under, oracle.fs_path(f"{loc}/data"), data_before)),
            "commit": Trigger(
                rng.uniform(0, 0.01), partial(_metadata_files_over, oracle.fs_path(f"{loc}/metadata"), metadata_files)
            ),
        }[mode]
        outcome = run_and_kill(s, worker.compaction, (uri, warehouse, "db.events"), kill_when)
        if not outcome.killed:
            duration = max(duration, outcome.seconds)
            completed += 1
            assert outcome.result is not None and outcome.result["failed"] == []
        table = s.table()
        # Exact: the current snapshot reads the rows it read before, and so does every older snapshot.
        after = oracle.snapshot_ids(table)
        assert {k: after[k] for k in ids_before} == ids_before
        assert all(after[k] == ids_before[current_before] for k in after.keys() - ids_before.keys())
        new = [x for x in table.metadata.snapshots if x.snapshot_id not in ids_before]
        assert all(x.summary is not None and x.summary.operation == Operation.REPLACE for x in new)
        live = oracle.live_files(table)
        assert oracle.missing(live) == []
        # What the killed run wrote and did not commit is an orphan, and nothing referenced is one.
        # The cutoff is now, after the child is dead, so every file it wrote is older (a future one is refused).
        now = datetime.now(UTC)
        dry = remove_orphan_files(table, OrphanOptions(older_than=now, dry_run=True), sources=[INDEX_FILES])
        assert sorted(dry.orphan_files) == sorted(oracle.listing(loc) - live)
        assert not set(dry.orphan_files) & live
        if outcome.killed:
            kills += 1
            by_mode[mode] += 1
            after_commit += bool(new)
            before_commit += not new
            leftovers += len(dry.orphan_files)
    clean_orphans(s.table())
    assert kills >= seeds.ran // 2, f"only {kills} of {seeds.ran} seeds were killed before the run finished"
    assert before_commit and after_commit, (before_commit, after_commit, by_mode)
    report(
        "kill9_compaction",
        seeds=seeds.ran,
        kills=kills,
        **{f"kills_by_{m}": n for m, n in by_mode.items()},
        kills_before_any_commit=before_commit,
        kills_after_a_commit=after_commit,
        finished_before_kill=completed - 1,
        orphans_left_by_kills=leftovers,
        rows_changed=0,
        files_lost=0,
    )
