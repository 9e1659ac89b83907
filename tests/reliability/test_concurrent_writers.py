"""Orphan runs with cutoff 0 loop while a writer commits appends, overwrites, row deletes and expiry; and
this project's snapshot expiry loops while the writer commits appends, overwrites and row deletes.

The writer (``writer.py``, its own process) logs every commit with the files it added to and
dropped from the committed metadata, read with the oracle. Each deleted file is then judged by
when it was live: a file that committed metadata referenced before the run's re-check reloaded
the table, and still referenced when the run ended, is a LIVE FILE LOST (required: 0). A file
first referenced by a commit that finished after the re-check was an in-flight file: cutoff 0
makes every unreferenced file eligible, so deleting it is allowed; the writer then undoes that
commit as a failed one (counted). At the end the final metadata references no deleted file and
every retained snapshot reads exactly the rows the writer's model says.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.transforms import IdentityTransform

from airflow_iceberg_maint.errors import CatalogListingError, ExpiryConflictError, MaintenanceError, MetadataReadError
from airflow_iceberg_maint.expiry.run import expire_snapshots
from airflow_iceberg_maint.expiry.settings import ExpireOptions
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES, INDEX_SNAPSHOTS
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from tests.orphans.scenario import SCHEMA, rows
from tests.reliability import oracle, worker, writer
from tests.reliability.figures import report, scale

pytestmark = pytest.mark.reliability

SECONDS = scale(25, 150)  # per backend


@dataclass
class Run:
    start: float
    recheck: float  # no later than the moment the run's re-check reloaded the table
    end: float
    deleted: list[str]


@dataclass
class Interval:
    """A file referenced by committed metadata from ``since`` (commit finished) until ``until`` (dropped)."""

    since: float
    until: float | None = None


def _intervals(log: list[dict[str, Any]]) -> dict[str, list[Interval]]:
    live: dict[str, list[Interval]] = {}
    for entry in log:
        for path in entry["added"]:
            live.setdefault(path, []).append(Interval(entry["done"]))
        for path in entry["dropped"]:
            open_ = [i for i in live.get(path, []) if i.until is None]
            assert open_, f"{path} dropped by commit {entry['seq']} but never added"
            open_[-1].until = entry["start"]  # conservative: dropped no earlier than the commit began
    return live


def _verdict(path: str, run: Run, live: dict[str, list[Interval]]) -> str:
    """Why a run deleted ``path``, from when committed metadata referenced it.

    ``lost``: committed before the run's re-check reloaded the table, and not dropped before the
    run ended: a live file (required: never). ``race``: first committed after the re-check but
    before the run ended (listed while in flight, committed, then deleted: the window only a cutoff
    longer than a write closes). ``in_flight``: committed only after the run ended (deleted before
    its commit). ``orphan``: no committed metadata referenced it during the run.
    """
    intervals = live.get(path, [])
    if any(i.since < run.recheck and (i.until is None or i.until > run.end) for i in intervals):
        return "lost"
    if any(run.recheck <= i.since < run.end for i in intervals):
        return "race"
    if any(i.since >= run.end for i in intervals):
        return "in_flight"
    return "orphan"


def _explain_rows(table: Any, wrong: dict[int, tuple[int, int]], log: list[dict[str, Any]], runs: list[Run]) -> str:
    """Why retained snapshots read other row counts than the model: which of the possible causes it is.

    More rows than modelled with a delete file gone is a deleted delete file; a commit that raised
    (``landed_after_error``) is an outcome the writer had to guess; neither, with every file present,
    is the writer's row model."""
    by_snapshot = {int(k): e for e in log for k in e["rows"]}
    deleted_by = {p: i for i, run in enumerate(runs) for p in run.deleted}
    outcomes: dict[str, int] = {}
    for e in log[1:]:
        kind = "undo" if e["rolled_back"] else e.get("outcome", "committed")
        outcomes[kind] = outcomes.get(kind, 0) + 1
    irregular = [
        (e["seq"], e["op"], e.get("outcome"), e.get("error", ""))
        for e in log
        if e.get("outcome") in ("failed", "landed_after_error") or e["rolled_back"]
    ]
    lines = [f"retained snapshots read other row counts than the writer's model: {len(wrong)}"]
    for sid, (want, got) in sorted(wrong.items()):
        entry = by_snapshot[sid]
        snapshot = table.metadata.snapshot_by_id(sid)
        data: set[str] = set()
        deletes: set[str] = set()
        for manifest in snapshot.manifests(table.io):
            for e in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                (data if e.data_file.content == 0 else deletes).add(e.data_file.file_path)
        missing = set(oracle.missing(data | deletes))
        by_run = (data | deletes) & set(deleted_by)
        if missing & deletes:
            cause = "a delete file of the snapshot is missing (deleted delete file)"
        elif entry.get("outcome") == "landed_after_error":
            cause = "its commit raised but landed: the outcome the writer had to decide"
        elif missing:
            cause = "a data file of the snapshot is missing"
        else:
            cause = "every file present and the commit's outcome known: the writer's row model is wrong"
        lines += [
            f"snapshot {sid} ({snapshot.summary.operation.value if snapshot.summary else '?'}): model {want}, "
            f"read {got}; cause: {cause}",
            f"  commit seq {entry['seq']} {entry['op']} outcome {entry.get('outcome', 'committed')} "
            f"{entry.get('error', '')}; its snapshots {entry.get('snapshots')}",
            f"  data files: {len(data)} present {len(data - missing)} missing {sorted(data & missing)}",
            f"  delete files: {sorted((p, p not in missing) for p in deletes)} (path, exists)",
            f"  its files a run deleted (path, run): {[(p, deleted_by[p]) for p in sorted(by_run)]}",
        ]
    lines.append(f"writer's commit outcomes: {outcomes}; failed, landed after an error or undone: {irregular[:20]}")
    return "\n".join(lines)


def _busy_table_and_writer(
    catalog: SqlCatalog, tmp_path: Path, seed: int, beside_expiry: bool = False
) -> tuple[BaseProcess, tuple[str, str, str]]:
    """Create ``db.busy`` (partitioned, 30 rows) and start the writer on it: its process, log, stop and result paths."""
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "category"))
    table = catalog.create_table(
        "db.busy", schema=SCHEMA, partition_spec=spec, properties={"write.metadata.previous-versions-max": "5"}
    )
    table.append(rows(0, 30))
    log_path, stop_path, result_path = (str(tmp_path / n) for n in ("writer.jsonl", "stop", "writer.json"))
    props = catalog.properties
    child = worker.context().Process(
        target=writer.run,
        args=(catalog.name, props["uri"], props["warehouse"], "db.busy", log_path, stop_path, seed, result_path)
        + ((True,) if beside_expiry else ()),
    )
    child.start()
    return child, (log_path, stop_path, result_path)


def _stop_writer(child: BaseProcess, stop_path: str) -> None:
    """Ask the writer to stop, and kill it if it has not within two minutes: a test that fails, or is stopped
    at its time limit (tests/watchdog.py), leaves no writer running."""
    Path(stop_path).touch()
    child.join(timeout=120)
    if child.is_alive():
        child.kill()
        child.join()


@pytest.mark.parametrize("backend", ["sqlite_catalog", "pg_catalog"])
def test_cutoff_zero_runs_never_delete_a_committed_live_file(
    request: pytest.FixtureRequest, backend: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    catalog: SqlCatalog = request.getfixturevalue(backend)
    caplog.set_level(logging.ERROR)  # one cutoff-0 warning a run is expected; keep the log small
    child, (log_path, stop_path, result_path) = _busy_table_and_writer(catalog, tmp_path, seed=7)
    runs: list[Run] = []
    failed_closed: list[str] = []
    try:
        while not os.path.exists(log_path):
            time.sleep(0.05)
        deadline = time.monotonic() + SECONDS
        while time.monotonic() < deadline and child.is_alive():
            start = time.monotonic()
            try:
                # The catalog may name a metadata file a run deleted before that commit: the writer
                # writes it again right away; loading meanwhile fails like a failed-closed run.
                busy = catalog.load_table("db.busy")
            except FileNotFoundError as exc:
                failed_closed.append(f"{MetadataReadError.__name__}: loading the table: {exc}")
                continue
            try:
                done = remove_orphan_files(busy, OrphanOptions(older_than_days=0), sources=[INDEX_FILES])
            except MaintenanceError as exc:  # must be a fail-closed refusal: judged below
                failed_closed.append(f"{type(exc).__name__}: {exc}")
                continue
            assert done.failed == []
            recheck = start + done.phase_seconds["list_and_reference"] + done.phase_seconds["match"]
            runs.append(Run(start, recheck, time.monotonic(), list(done.orphan_files)))
    finally:
        _stop_writer(child, stop_path)
    with open(result_path) as fh:
        result = json.load(fh)
    assert result["ok"], result.get("error")
    with open(log_path) as fh:
        log = [json.loads(line) for line in fh]

    live = _intervals(log)
    verdicts: dict[str, list[str]] = {"lost": [], "race": [], "in_flight": [], "orphan": []}
    for run in runs:
        for path in run.deleted:
            verdicts[_verdict(path, run, live)].append(path)
    deleted = {p for run in runs for p in run.deleted}
    undone = [e for e in log if e["rolled_back"]]
    failed_writes = [e for e in log if e["op"].startswith("failed_")]
    log_lost = {p for e in log if e["op"] == "metadata_log_lost" for p in e["lost"]}
    assert verdicts["lost"] == [], f"live files deleted: {verdicts['lost'][:5]}"
    # A file deleted around its commit is either found missing by the writer, which undoes that
    # commit, or dropped by the writer's own next commit (an expiry) first: the final checks below
    # hold either way (no deleted file referenced, every retained snapshot reads).
    # A run fails closed (reading metadata, or loading the catalog's tables to find nested ones) only
    # while a commit names an in-flight file that was deleted, before the writer's undo.
    closed_kinds = (MetadataReadError.__name__, CatalogListingError.__name__)
    assert all(f.startswith(closed_kinds) for f in failed_closed), failed_closed[:3]
    assert not failed_closed or undone or log_lost, failed_closed[:3]

    final = catalog.load_table("db.busy")
    assert not (oracle.live_files(final) & deleted - log_lost)
    assert set(oracle.missing(oracle.live_files(final))) <= log_lost
    expected = {int(k): v for e in log if not e["rolled_back"] for k, v in e["rows"].items()}
    retained = oracle.snapshot_rows(final)  # every retained snapshot reads: no file it needs is gone
    assert set(retained) <= set(expected)
    # Every retained snapshot reads exactly the rows the writer's model says (the model follows the
    # catalog: a commit that raised but landed is modelled as landed). Once seen off (8 rows read where
    # it said 3): the model gave a DELETE snapshot that pyiceberg commits before its OVERWRITE rewrite the
    # rows the commit keeps; it now counts the rows that snapshot still holds.
    wrong = {k: (expected[k], v) for k, v in retained.items() if v != expected[k]}
    assert not wrong, _explain_rows(final, wrong, log, runs)
    # A last run with the writer stopped removes exactly the oracle's orphans.
    expected_orphans = oracle.listing(final.location()) - oracle.live_files(final)
    last = remove_orphan_files(final, OrphanOptions(older_than=datetime.now(UTC)), sources=[INDEX_FILES])
    assert set(last.orphan_files) <= expected_orphans, sorted(set(last.orphan_files) - expected_orphans)
    assert sorted(last.orphan_files) == sorted(expected_orphans)
    assert oracle.snapshot_rows(catalog.load_table("db.busy")) == retained

    # A write that failed on a deleted in-flight file committed nothing; so did every other run of the loop.
    ops = Counter(e["op"] for e in log[1:])
    report(
        f"concurrent_writers[{backend}]",
        seconds=SECONDS,
        commits=len(log) - 1,
        **{f"commits_{k}": v for k, v in sorted(ops.items())},
        orphan_runs=len(runs),
        runs_failed_closed=len(failed_closed),
        files_deleted=len(deleted),
        orphans_deleted=len(verdicts["orphan"]),
        in_flight_files_deleted=len(verdicts["in_flight"]),
        race_files_deleted=len(verdicts["race"]),
        writes_failed_in_flight=len(failed_writes),
        undos=len(undone),
        commits_landed_after_error=sum(e.get("outcome") == "landed_after_error" for e in log),
        metadata_log_files_lost=len(log_lost),
        retained_snapshots_read=len(retained),
        live_files_lost=0,
    )


EXPIRY_SECONDS = scale(8, 150)  # per backend


@pytest.mark.parametrize("backend", ["sqlite_catalog", "pg_catalog"])
def test_snapshot_expiry_loop_beside_a_writer_loses_no_live_file(
    request: pytest.FixtureRequest, backend: str, tmp_path: Path
) -> None:
    """This project's snapshot expiry (older than now, retain 2) loops while the writer commits appends,
    overwrites and row deletes (it expires nothing itself here, and follows the expiry's commits).

    After every run nothing it deleted is referenced by the catalog's metadata and nothing that metadata
    references is missing (the writer only adds references meanwhile). The writer's own loss accounting
    (a committed file found missing: ``lost``, undone commits) must stay empty. At the end every snapshot
    present scans, those the writer's model covers read its row counts, and an orphan run removes exactly
    the oracle's orphans."""
    catalog: SqlCatalog = request.getfixturevalue(backend)
    child, (log_path, stop_path, result_path) = _busy_table_and_writer(catalog, tmp_path, seed=11, beside_expiry=True)
    deleted: set[str] = set()
    runs = committed = kept_all = kept_by_recheck = 0
    failed_closed: list[str] = []
    try:
        while not os.path.exists(log_path):
            time.sleep(0.05)
        deadline = time.monotonic() + EXPIRY_SECONDS
        while time.monotonic() < deadline and child.is_alive():
            busy = catalog.load_table("db.busy")
            try:
                # Every other run through the digest cache, as the command line runs by default (S22).
                cache = str(tmp_path / "digests") if runs % 2 else None
                done = expire_snapshots(
                    busy,
                    ExpireOptions(older_than=datetime.now(UTC), retain_last=2, cache=cache),
                    sources=[INDEX_FILES],
                    pins=[INDEX_SNAPSHOTS],
                )
            except MaintenanceError as exc:  # must be a refusal after refs moved on every attempt: judged below
                failed_closed.append(f"{type(exc).__name__}: {exc}")
                continue
            runs += 1
            committed += done.committed
            kept_all += done.kept_all_files is not None
            kept_by_recheck += done.kept_by_recheck
            assert done.failed == []
            deleted |= set(done.deleted_files)
            live = oracle.live_files(catalog.load_table("db.busy"))  # raises if a manifest list it needs is gone
            assert not live & set(done.deleted_files), sorted(live & set(done.deleted_files))[:5]
            assert oracle.missing(live) == []
    finally:
        _stop_writer(child, stop_path)
    with open(result_path) as fh:
        result = json.load(fh)
    assert result["ok"], result.get("error")
    with open(log_path) as fh:
        log = [json.loads(line) for line in fh]

    found_missing = [(e["seq"], e["op"], e["lost"][:3]) for e in log if e.get("lost") or e["rolled_back"]]
    assert found_missing == [], f"the writer found committed files missing: {found_missing[:5]}"
    assert all(f.startswith(ExpiryConflictError.__name__) for f in failed_closed), failed_closed[:3]
    final = catalog.load_table("db.busy")
    live = oracle.live_files(final)
    assert not live & deleted and oracle.missing(live) == []
    retained = oracle.snapshot_rows(final)  # every snapshot present scans
    expected = {int(k): v for e in log for k, v in e["rows"].items()}
    unmodelled = {int(k) for e in log for k in e.get("unmodelled", {})}
    assert set(retained) <= set(expected) | unmodelled
    wrong = {k: (expected[k], v) for k, v in retained.items() if k in expected and v != expected[k]}
    assert not wrong, _explain_rows(final, wrong, log, [])
    expected_orphans = oracle.listing(final.location()) - live
    last = remove_orphan_files(final, OrphanOptions(older_than=datetime.now(UTC)), sources=[INDEX_FILES])
    assert sorted(last.orphan_files) == sorted(expected_orphans)
    assert oracle.snapshot_rows(catalog.load_table("db.busy")) == retained

    ops = Counter(e["op"] for e in log[1:])
    report(
        f"concurrent_writers_snapshot_expiry[{backend}]",
        seconds=EXPIRY_SECONDS,
        commits=sum(n for op, n in ops.items() if op != "external"),
        **{f"commits_{k}": v for k, v in sorted(ops.items())},
        expiry_runs=runs,
        runs_committed=committed,
        runs_failed_closed=len(failed_closed),
        runs_kept_all_files=kept_all,
        files_kept_by_recheck=kept_by_recheck,
        files_deleted=len(deleted),
        commits_landed_after_error=sum(e.get("outcome") == "landed_after_error" for e in log),
        retained_snapshots_read=len(retained),
        retained_unmodelled=len(set(retained) - set(expected)),
        orphans_after=len(expected_orphans),
        live_files_lost=0,
    )
