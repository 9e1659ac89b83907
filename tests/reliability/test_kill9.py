"""kill -9 at seeded random points of an orphan run mid-delete, an index refresh, an index expire and a snapshot expiry.

One long-lived table per test, many seeds on it (in a bounded run, as many as ``figures.Seeds`` lets run in
its time budget, at least one after the calibration; every seed under ``make soak``). Each seed forks a child
(see ``worker``) that runs the real library call, and SIGKILLs it at a seeded point: for the orphan run, once
a seeded number of planted orphans is seen gone from outside (or after a seeded delay, so listing and reading
are hit too); for refresh and expire, after a seeded delay spread over the whole operation, commit included.
Afterwards, against the oracle recorded before the kill: no live file is missing, every snapshot reads its
rows, index lookups equal a pyiceberg scan with a row filter, and a rerun succeeds (an orphan rerun deletes
exactly the oracle's orphans).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform

from airflow_iceberg_maint.index.lifecycle.expire import expire_extracts
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES
from airflow_iceberg_maint.index.metadata.builders import new_index_metadata
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.index.read.lookup import lookup
from airflow_iceberg_maint.index.write.incremental import refresh_index
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from tests.expiry.history import History
from tests.expiry.history import _statistics as statistics
from tests.orphans.scenario import SCHEMA, rows
from tests.reliability import oracle, worker
from tests.reliability.figures import Seeds, report, scale

pytestmark = pytest.mark.reliability

SEEDS = scale(20, 50)  # at most: a bounded run stops starting seeds once figures.SEED_SECONDS have passed
PLANTED = 800  # orphans per orphan-run seed: enough that deleting them takes a while
INDEX = "by_id"


@dataclass
class Setup:
    catalog_uri: str
    warehouse: str
    catalog: SqlCatalog
    tmp: Path
    ctx: Any = field(default_factory=worker.context)
    #: The lease store of the orphan runs and index refreshes, and of their reruns (finding 8 of issue 31).
    state_url: str = ""

    def table(self) -> Table:
        return self.catalog.load_table("db.events")


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    return make_setup(tmp_path)


def make_setup(tmp_path: Path) -> Setup:
    uri, warehouse = f"sqlite:///{tmp_path}/catalog.db", f"file://{tmp_path}/warehouse"
    catalog = SqlCatalog("default", uri=uri, warehouse=warehouse)
    catalog.create_namespace("db")
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "category"))
    table = catalog.create_table(
        "db.events", schema=SCHEMA, partition_spec=spec, properties={"write.metadata.previous-versions-max": "4"}
    )
    for i in range(4):
        table.append(rows(i * 30, 30))
    table.overwrite(rows(200, 12), overwrite_filter="id < 12")
    table.delete("id = 40")
    first = table.metadata.snapshots[0].snapshot_id
    table.maintenance.expire_snapshots().by_id(first).commit()
    table = catalog.load_table("db.events")
    IndexStore(table).create(
        new_index_metadata(
            table,
            INDEX,
            ["bucket(4, id)", "id"],
            [],
            True,
            {"write.metadata.delete-after-commit.enabled": "true", "write.metadata.previous-versions-max": "3"},
        ),
        INDEX,
    )
    refresh_index(table, INDEX)
    clean_orphans(table)  # the history's own orphans (expired snapshot, old metadata): every seed starts clean
    s = Setup(uri, warehouse, catalog, tmp_path, state_url=f"sqlite:///{tmp_path}/leases.db")
    warm = s.ctx.Process(target=time.sleep, args=(0,))  # start the fork server now, not inside a timed run
    warm.start()
    warm.join()
    return s


@dataclass
class Trigger:
    """When to kill: ``delay`` seconds after ``watch`` first holds (after the start when there is no watch)."""

    delay: float | None  # None: never, the run is let finish
    watch: Callable[[], bool] | None = None
    seen: float | None = None

    def __call__(self, elapsed: float) -> bool:
        if self.delay is None:
            return False
        if self.watch is None:
            return elapsed >= self.delay
        if self.seen is None and self.watch():
            self.seen = elapsed
        return self.seen is not None and elapsed >= self.seen + self.delay


def _gone_at_least(directory: str, total: int, count: int) -> bool:
    return total - len(os.listdir(directory)) >= count


def _changed(table: Table, before: frozenset[str]) -> bool:
    return index_files(table) != before


@dataclass
class Killed:
    killed: bool  # False: the child finished before its kill point
    seconds: float
    result: dict[str, Any] | None = None  # the child's JSON result, when it finished


def run_and_kill(s: Setup, target: Callable[..., None], args: tuple[Any, ...], kill_when: Trigger) -> Killed:
    """Run ``target`` in a forked child; SIGKILL it as soon as ``kill_when(elapsed)`` is true."""
    result = str(s.tmp / f"result-{time.monotonic_ns()}.json")
    child = s.ctx.Process(target=target, args=(*args, result))
    started = time.monotonic()
    child.start()
    try:
        while child.is_alive():
            if kill_when(time.monotonic() - started):
                with contextlib.suppress(ProcessLookupError):  # it may have just ended on its own
                    os.kill(child.pid, signal.SIGKILL)
                child.join()
                if child.exitcode == -signal.SIGKILL and not os.path.exists(result):
                    return Killed(True, time.monotonic() - started)
                break
            time.sleep(0.0002)
        child.join()
    finally:
        if child.exitcode is None:  # the test failed or was stopped at its time limit: no child outlives it
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)
            child.join()
    assert os.path.exists(result), f"the child failed on its own (exit {child.exitcode})"
    with open(result) as fh:
        return Killed(False, time.monotonic() - started, json.load(fh))


def check_lookups(table: Table, rng: random.Random) -> int:
    """Lookups on the current and on a random older snapshot equal a scan with a row filter."""
    ids = sorted(table.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist())
    probes = [*rng.sample(ids, min(4, len(ids))), -1]
    snapshots = [None, rng.choice(table.metadata.snapshots).snapshot_id]
    for snapshot_id in snapshots:
        got = lookup(table, INDEX, [(v,) for v in probes], snapshot_id, ["id", "category"]).rows.to_pylist()
        expected = sorted(r for v in probes for r in oracle.scan_rows(table, "id", v, snapshot_id))
        assert sorted(tuple(r.values()) for r in got) == expected, f"lookup of {probes} at {snapshot_id}"
    return len(probes) * len(snapshots)


def check_table(s: Setup, row_counts: dict[int, int], live: set[str]) -> Table:
    """Nothing live is missing and every snapshot reads the rows it read before."""
    assert oracle.missing(live) == []
    table = s.table()
    assert oracle.snapshot_rows(table) == {
        k: v for k, v in row_counts.items() if k in {x.snapshot_id for x in table.metadata.snapshots}
    }
    return table


def clean_orphans(table: Table) -> int:
    """A complete run with cutoff now deletes exactly the oracle's orphans; returns how many."""
    expected = oracle.listing(table.location()) - oracle.live_files(table)
    done = remove_orphan_files(table, OrphanOptions(older_than=datetime.now(UTC)), sources=[INDEX_FILES])
    assert sorted(done.orphan_files) == sorted(expected)
    assert done.deleted_file_count == len(expected) and done.failed == []
    assert oracle.listing(table.location()) == oracle.live_files(table) & oracle.listing(table.location())
    return len(expected)


def test_kill9_orphan_run_mid_delete(setup: Setup) -> None:
    s = setup
    table = s.table()
    loc = table.location().rstrip("/")
    planted_dir = oracle.fs_path(f"{loc}/data/planted")
    partition = sorted(d for d in os.listdir(oracle.fs_path(f"{loc}/data")) if d.startswith("category="))[0]
    kills = by_count = completed = deleted_at_kill = 0
    duration = None
    live = oracle.live_files(table)  # the orphan run commits nothing: the oracle holds for every seed
    row_counts = oracle.snapshot_rows(table)
    seeds = Seeds(SEEDS + 1, lambda: kills >= seeds.ran // 2)
    for seed in seeds:  # seed 0 calibrates: a full run, never killed
        rng = random.Random(seed)
        os.makedirs(planted_dir, exist_ok=True)
        planted = {f"{loc}/data/planted/orphan-{seed}-{i}.parquet" for i in range(PLANTED)}
        planted |= {f"{loc}/metadata/orphan-{seed}.avro", f"{loc}/data/{partition}/orphan-{seed}.parquet"}
        for path in planted:
            with open(oracle.fs_path(path), "wb") as fh:
                fh.write(b"orphan")
        cutoff = datetime.now(UTC)
        assert oracle.listing(loc) - live == planted  # the oracle's orphans are exactly the planted files

        if seed == 0 or duration is None:
            kill_when = Trigger(None)
        elif seed % 2:
            kill_when = Trigger(0.0, partial(_gone_at_least, planted_dir, PLANTED, rng.randint(1, PLANTED - 1)))
        else:
            kill_when = Trigger(rng.uniform(0, duration))
        outcome = run_and_kill(
            s,
            worker.leased_orphan_run,
            (s.state_url, s.catalog_uri, s.warehouse, "db.events", cutoff.isoformat()),
            kill_when,
        )
        if seed == 0:
            duration = outcome.seconds
        gone = planted - oracle.listing(loc)
        assert oracle.listing(loc) >= live
        if outcome.killed:
            kills += 1
            by_count += seed % 2
            deleted_at_kill += len(gone)
        else:
            completed += 1
            assert gone == planted

        with worker.leased(s.state_url, "db.events"):  # at once: a lease the killed run held is taken over
            rerun = remove_orphan_files(table, OrphanOptions(older_than=cutoff), sources=[INDEX_FILES])
        assert set(rerun.orphan_files) == planted - gone and rerun.failed == []
        assert oracle.listing(loc) == live
        check_table(s, row_counts, live)
        check_lookups(table, rng)
    assert kills >= seeds.ran // 2, f"only {kills} of {seeds.ran} seeds were killed before the run finished"
    report(
        "kill9_orphan_run",
        seeds=seeds.ran,
        kills=kills,
        kills_by_deleted_count=by_count,
        finished_before_kill=completed - 1,
        orphans_deleted_before_kill=deleted_at_kill,
        calibration_seconds=round(duration or 0, 2),
        files_lost=0,
    )


def _index_state(table: Table) -> tuple[int, int]:
    """(newest metadata version, extracts in it), read by hand."""
    store = IndexStore(table)
    metadata, _, version = store.load(INDEX)
    return version, len(metadata.extracts)


def index_files(table: Table) -> frozenset[str]:
    """Every file under the index directory, temporary ones included: the kill trigger watches it."""
    return frozenset(oracle.listing(f"{table.metadata.location.rstrip('/')}/index", hidden=True))


def trim_snapshots(table: Table, keep: int = 5) -> None:
    """Expire all but the newest snapshots, so reading every snapshot stays cheap as seeds add more."""
    old = [x.snapshot_id for x in sorted(table.metadata.snapshots, key=lambda x: x.timestamp_ms)[:-keep]]
    if old:
        table.maintenance.expire_snapshots().by_ids(old).commit()


MODES = ("delay", "first_change", "after_commit")


def _kill_index_op(
    s: Setup,
    name: str,
    prepare: Callable[[Table, random.Random], None],
    target: Callable[..., None],
    args: Callable[[random.Random], tuple[Any, ...]],
    rerun: Callable[[Table, tuple[Any, ...]], None],
) -> None:
    """Kill the operation per seed in one of three ways, each observed from outside the child.

    ``delay``: after a seeded delay over the whole operation; ``first_change``: a seeded few
    milliseconds after the first file appears or vanishes under the index directory (files being
    written, or a commit's temporary file); ``after_commit``: a seeded few milliseconds after the
    next numbered metadata file appears (the post-commit clean-up: dropped metadata, expired files).
    """
    table = s.table()
    kills = completed = committed_before_kill = lookups = 0
    by_mode = dict.fromkeys(MODES, 0)
    duration = 0.0
    seeds = Seeds(
        SEEDS + 1, lambda: kills >= seeds.ran // 2 and bool(committed_before_kill and kills - committed_before_kill)
    )
    for seed in seeds:
        rng = random.Random(seed)
        prepare(table, rng)
        table = s.table()
        trim_snapshots(table)
        table = s.table()
        live_table = oracle.live_files(table) - oracle.index_references(table.metadata.location)
        row_counts = oracle.snapshot_rows(table)
        version_before, _ = _index_state(table)
        files_before = index_files(table)
        next_version = f"{IndexStore(table).version_location(INDEX, version_before + 1)}"
        op_args = args(rng)
        mode = MODES[seed % len(MODES)] if seed else "never"
        kill_when = {
            "never": Trigger(None),
            "delay": Trigger(rng.uniform(0, 1.1 * duration)),
            "first_change": Trigger(rng.uniform(0, 0.02), partial(_changed, table, files_before)),
            "after_commit": Trigger(0.0, partial(os.path.exists, oracle.fs_path(next_version))),
        }[mode]
        outcome = run_and_kill(s, target, (s.catalog_uri, s.warehouse, "db.events", INDEX, *op_args), kill_when)
        # The delay mode spreads its kills over the longest run seen so far, commit included.
        duration = max(duration, outcome.seconds if mode == "never" else kill_when.seen or 0.0)
        table = s.table()
        version_after, _ = _index_state(table)
        if outcome.killed:
            kills += 1
            by_mode[mode] += 1
            committed_before_kill += version_after > version_before
        else:
            completed += 1
        # The table's files are all there, and so is everything the index references now, whether
        # the kill landed before the commit (old metadata) or after it (new metadata).
        check_table(s, row_counts, live_table)
        assert oracle.missing(oracle.live_files(table)) == []
        lookups += check_lookups(table, rng)
        # An orphan dry run finds exactly the oracle's orphans (files a killed child left behind).
        dry = remove_orphan_files(
            table, OrphanOptions(older_than=datetime.now(UTC), dry_run=True), sources=[INDEX_FILES]
        )
        assert sorted(dry.orphan_files) == sorted(oracle.listing(table.location()) - oracle.live_files(table))
        rerun(table, op_args)
        table = s.table()
        lookups += check_lookups(table, rng)
    table = s.table()
    cleaned = clean_orphans(table)
    check_table(s, oracle.snapshot_rows(table), oracle.live_files(table))
    lookups += check_lookups(table, random.Random(-1))
    assert kills >= seeds.ran // 2, f"only {kills} of {seeds.ran} seeds were killed before the operation finished"
    assert committed_before_kill and kills - committed_before_kill, f"kills before and after a commit: {by_mode}"
    report(
        name,
        seeds=seeds.ran,
        kills=kills,
        **{f"kills_by_{m}": n for m, n in by_mode.items()},
        kills_after_commit=committed_before_kill,
        kills_before_commit=kills - committed_before_kill,
        finished_before_kill=completed - 1,
        lookups_checked=lookups,
        leftovers_cleaned=cleaned,
        files_lost=0,
    )


def test_kill9_index_refresh_mid_commit(setup: Setup) -> None:
    def prepare(table: Table, rng: random.Random) -> None:
        table.append(rows(1000 + 100 * rng.randint(0, 10_000), rng.randint(5, 40)))

    def rerun(table: Table, _: tuple[Any, ...]) -> None:
        with worker.leased(setup.state_url, "db.events"):  # at once: a lease the killed run held is taken over
            result = refresh_index(table, INDEX)
        assert result.extract.source_table_snapshot_id == table.current_snapshot().snapshot_id

    refresh = partial(worker.leased_index_refresh, setup.state_url)
    _kill_index_op(setup, "kill9_index_refresh", prepare, refresh, lambda rng: (), rerun)


def test_kill9_index_expire_mid_commit(setup: Setup) -> None:
    def prepare(table: Table, rng: random.Random) -> None:
        for _ in range(rng.randint(1, 3)):
            table.append(rows(1000 + 100 * rng.randint(0, 10_000), 10))
            refresh_index(setup.table(), INDEX)

    def rerun(table: Table, args: tuple[Any, ...]) -> None:
        (retain_last,) = args
        expire_extracts(table, INDEX, retain_last=retain_last, older_than=None)
        assert _index_state(table)[1] <= retain_last

    _kill_index_op(setup, "kill9_index_expire", prepare, worker.index_expire, lambda rng: (rng.randint(1, 3),), rerun)


EXPIRY_MODES = ("delay", "commit", "deleted")
EXPIRY_SEEDS = scale(12, 50)  # a seed grows the table by 4 to 8 commits first: fewer than the others at bounded size


def _grow(table: Table, seed: int, rng: random.Random) -> None:
    """Appends, then an overwrite of every older row (so the older data files stay only in older snapshots),
    sometimes a row delete, an index refresh, a tag moved to a random snapshot, a statistics file."""
    base = 10_000 * (seed + 1)
    for i in range(rng.randint(2, 4)):
        table.append(rows(base + 100 * i, rng.randint(12, 36)))
    table.overwrite(rows(base + 900, 12), overwrite_filter=f"id < {base}")
    if rng.random() < 0.5:
        table.delete(f"id = {base + 1}")
    if rng.random() < 0.3:
        refresh_index(table, INDEX)  # moves the index pin (S13)
    if rng.random() < 0.3:
        manage = table.manage_snapshots()
        if "keep" in table.metadata.refs:
            manage = manage.remove_tag("keep")
        manage.create_tag(rng.choice(table.metadata.snapshots).snapshot_id, "keep").commit()
    with_statistics = {x.snapshot_id for x in table.metadata.statistics}
    bare = [x.snapshot_id for x in table.metadata.snapshots if x.snapshot_id not in with_statistics]
    if rng.random() < 0.3:  # a snapshot without one: a second would replace the first, leaving it unreferenced
        statistics(History(table), f"stats-{seed}", rng.choice(bare))


def _metadata_files_over(directory: str, count: int) -> bool:
    return sum(n.endswith(".metadata.json") for n in os.listdir(directory)) > count


def _gone_of(paths: list[str], count: int) -> bool:
    return sum(not os.path.exists(p) for p in paths) >= count


def test_kill9_snapshot_expiry_around_commit_and_mid_delete(setup: Setup) -> None:
    """kill -9 of ``expire_snapshots`` (what ``iceberg-maint expire-snapshots`` runs) per seed, in one of three ways.

    ``delay``: after a seeded delay over the whole run; ``commit``: a seeded few milliseconds after a new
    metadata file appears (the commit is being made); ``deleted``: once a seeded number of the files before
    the run are gone (mid-delete). A kill before the commit must change nothing; after it, every kept
    snapshot reads the same ids, nothing the new metadata, its log, statistics or the index reach is gone,
    and what is left of the files only the expired snapshots reached is exactly what the next orphan run
    removes. A run not killed must have deleted exactly those files (metadata files aside: expiry never
    deletes those; the one the commit drops from the metadata log is left to the orphan run).
    """
    s = setup
    kills = completed = files_deleted = mid_delete = left_by_kills = cleaned = 0
    by_mode = dict.fromkeys(EXPIRY_MODES, 0)
    before_commit = after_commit = 0
    duration, typical = 0.0, 2
    seeds = Seeds(
        EXPIRY_SEEDS + 1,
        lambda: kills >= seeds.ran // 2 and bool(before_commit and after_commit and mid_delete),
    )
    for seed in seeds:
        rng = random.Random(seed)
        _grow(s.table(), seed, rng)
        table = s.table()
        loc = table.location().rstrip("/")
        location, snapshots = table.metadata_location, {x.snapshot_id for x in table.metadata.snapshots}
        ids_before = oracle.snapshot_ids(table)
        live_before, listing_before = oracle.live_files(table), oracle.listing(loc)
        stale = listing_before - live_before  # the metadata files the history's commits dropped from the log
        assert all(p.endswith(".metadata.json") for p in stale), sorted(stale)
        deletable = sorted(oracle.fs_path(p) for p in listing_before if not p.endswith(".metadata.json"))
        metadata_files = sum(p.endswith(".metadata.json") for p in oracle.listing(f"{loc}/metadata"))
        mode = EXPIRY_MODES[seed % len(EXPIRY_MODES)] if seed else "never"
        kill_when = {
            "never": Trigger(None),
            "delay": Trigger(rng.uniform(0, 1.1 * duration)),
            "commit": Trigger(
                rng.uniform(0, 0.004),
                partial(_metadata_files_over, oracle.fs_path(f"{loc}/metadata"), metadata_files),
            ),
            "deleted": Trigger(0.0, partial(_gone_of, deletable, rng.randint(1, max(1, typical - 1)))),
        }[mode]
        retain_last = rng.randint(1, 3)
        args = (s.catalog_uri, s.warehouse, "db.events", datetime.now(UTC).isoformat(), retain_last)
        outcome = run_and_kill(s, worker.snapshot_expiry, args, kill_when)
        if not outcome.killed:
            duration = outcome.seconds  # the last whole run (the first one, cold, takes longer)
        table = s.table()
        listing = oracle.listing(loc)
        if table.metadata_location == location:
            # Before the commit: nothing changed; at most the metadata file of a commit not made is left.
            assert {x.snapshot_id for x in table.metadata.snapshots} == snapshots
            assert listing >= listing_before
            assert all(
                p.startswith(f"{loc}/metadata/") and p.endswith(".metadata.json") for p in listing - listing_before
            )
            assert outcome.killed, "a run that finished committed nothing"
            before_commit += 1
            only_expired: set[str] = set()
        else:
            live = oracle.live_files(table)
            assert oracle.missing(live) == []
            kept = {x.snapshot_id for x in table.metadata.snapshots}
            assert kept < snapshots
            assert oracle.snapshot_ids(table) == {k: v for k, v in ids_before.items() if k in kept}
            only_expired = live_before - live  # files only the expired snapshots reached, and a dropped log entry
            planned = {p for p in only_expired if not p.endswith(".metadata.json")}
            gone = planned - listing
            assert listing - live <= only_expired | stale, "a leftover that is not a file of the expired snapshots"
            assert listing_before - listing == gone, "a file that was not only the expired snapshots' is gone"
            files_deleted += len(gone)
            typical = len(planned)
            if outcome.killed:
                after_commit += 1
                mid_delete += 0 < len(gone) < len(planned)
                left_by_kills += len(planned - gone)
            else:
                assert outcome.result is not None
                assert sorted(outcome.result["deleted_files"]) == sorted(planned) and outcome.result["failed"] == []
        kills += outcome.killed
        completed += not outcome.killed
        if outcome.killed:
            by_mode[mode] += 1
        cleaned += clean_orphans(table)  # the next orphan run removes exactly the oracle's orphans
        assert not only_expired & oracle.listing(loc)
        check_table(s, oracle.snapshot_rows(table), oracle.live_files(table))
    assert kills >= seeds.ran // 2, f"only {kills} of {seeds.ran} seeds were killed before the run finished"
    assert before_commit and after_commit and mid_delete, (before_commit, after_commit, mid_delete, by_mode)
    report(
        "kill9_snapshot_expiry",
        seeds=seeds.ran,
        kills=kills,
        **{f"kills_by_{m}": n for m, n in by_mode.items()},
        kills_before_commit=before_commit,
        kills_after_commit=after_commit,
        kills_mid_delete=mid_delete,
        finished_before_kill=completed - 1,
        files_deleted=files_deleted,
        expired_files_left_by_kills=left_by_kills,
        orphans_cleaned=cleaned,
        files_lost=0,
    )
