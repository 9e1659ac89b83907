"""Snapshot-expiry benchmark: ours against pyiceberg's expiry followed by an orphan scan, and a floor, in one run.

    .venv/bin/python bench/expire.py                  # 1,000 snapshots x 100 files; expire the 900 oldest
    .venv/bin/python bench/expire.py --without-naive  # leave out the pyiceberg-only scan (about 12 s a repetition)
    .venv/bin/python bench/expire.py --drop-every 10  # a second table: every 10th commit an overwrite (see below)
    scripts/services.sh run -- .venv/bin/python bench/expire.py --s3 moto --snapshots 300 --expire 270
                                                      # on a local S3-protocol server, requests counted: expire_s3.py

The table is the orphan bench's (built once by ``bench/orphans.py``'s builder, without planted
orphans: 1,000 fast appends of 100 files). Once built, the orphans its build left (metadata
files beyond ``write.metadata.previous-versions-max``) are removed and that property is raised,
so that no commit pushes a metadata file out of the log: then every way deletes exactly the
files the expiry left unreferenced, and the bench asserts they all deleted the same set. This
copy is kept aside; every timed run gets a fresh copy of it at the table's location (hard links
of the files, which nothing rewrites, and a copy of the SQLite catalog), made before the clock
starts. Each way runs in a forked child that loads the table first (untimed), so it starts as a
CLI run does (one thread: manifest workers are forked).

- ours: ``expire_snapshots`` as ``iceberg-maint expire-snapshots --older-than T --retain-last 1``
  runs it (index files and index pins included), a real run: it commits, then deletes the
  files only the expired snapshots reached, found from manifests without listing;
- baseline: pyiceberg's ``table.maintenance.expire_snapshots().older_than(T).commit()``, which
  only edits metadata, then this project's orphan removal (``remove_orphan_files``, a real run,
  cutoff now: every file of the copy is older) to delete the files it left; it decodes in
  this process, as the orphan run starts workers only for 400 manifest lists or more (the
  table keeps 100), so ``baseline_workers`` runs it again with one worker process a core;
- naive: the same pyiceberg expiry, then the orphan bench's naive scan (pyiceberg's ``inspect``
  tables, ``os.walk``, a set difference) and ``os.remove`` of what it found: a user with
  pyiceberg alone;
- ours_warm: ours with the digest cache (``ExpireOptions.cache``, S22) that an orphan dry run of
  the day before filled (run once on the fresh copy before the clock starts; the cache stays
  across repetitions, as it does across days);
- floor: the reads a correct expiry cannot skip, in parallel: every manifest list of the table
  (the expired ones name the candidates, the kept ones the kept manifests) and each unique
  manifest decoded once, one process a core (``bench/orphans.py``'s floor without its listing).

With ``--drop-every K`` the table is another (under ``--work``-dropping): every K-th commit is an
overwrite that deletes the files the commit K before it added, so the manifest holding them is
rewritten and the expired snapshots drop manifests and free data files; every way must still
delete the same set.

``T`` is the 901st oldest snapshot's time: the 900 oldest expire. Each way is timed ``--repeat``
times, interleaved, and the median is kept; CPU seconds count every process.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orphans import OLD, build, floor, in_child, naive, placeholder_data_file, timed
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table, TableProperties
from pyiceberg.types import LongType, NestedField

from airflow_iceberg_maint.expiry.run import expire_snapshots
from airflow_iceberg_maint.expiry.settings import ExpireOptions
from airflow_iceberg_maint.fs.locations import local_path
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES, INDEX_SNAPSHOTS
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from airflow_iceberg_maint.reachability.manifests import unique_manifest_paths

KEEP_METADATA_LOG = "100000"  # previous-versions-max of the prepared table


def load(work: Path) -> Table:
    return SqlCatalog("bench", uri=f"sqlite:///{work}/catalog.db").load_table("db.t")


def prepare(work: Path, snapshots: int, per_snapshot: int, drop_every: int = 0) -> Path:
    """The orphan bench's table without orphans (or ``build_dropping``'s), kept aside at ``work/pristine``;
    returns the live copy's root."""
    live, pristine = work / "table", work / "pristine"
    marker = pristine / f"prepared-{snapshots}-{per_snapshot}-{drop_every}"
    if not marker.exists():
        shutil.rmtree(pristine, ignore_errors=True)
        if drop_every:
            in_child(build_dropping, live, snapshots, per_snapshot, drop_every)
        else:
            build(live, snapshots, per_snapshot, 0)
        in_child(prepare_table, lambda: load(live))
        _copy(live, pristine)
        marker.touch()
    return live


def build_dropping(work: Path, snapshots: int, per_snapshot: int, drop_every: int) -> None:
    """Fast appends of ``per_snapshot`` one-byte files; every ``drop_every``-th commit an overwrite that
    also deletes the files the commit ``drop_every`` before it added (their manifest is rewritten)."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    catalog = SqlCatalog("bench", uri=f"sqlite:///{work}/catalog.db", warehouse=f"file://{work}/wh")
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=Schema(NestedField(1, "id", LongType())))
    os.makedirs(local_path(table.location()) + "/data", exist_ok=True)
    written = []
    for s in range(snapshots):
        files = [
            placeholder_data_file(f"{table.location()}/data/{s:05d}-{i:04d}-{uuid.uuid4()}.parquet")
            for i in range(per_snapshot)
        ]
        for data_file in files:
            Path(local_path(data_file.file_path)).write_bytes(b"x")
            data_file.spec_id = table.spec().spec_id  # an overwrite that deletes it reads its spec
        written.append(files)
        with table.transaction() as tx:
            if s >= drop_every and s % drop_every == 0:
                with tx.update_snapshot().overwrite() as overwrite:
                    for data_file in written[s - drop_every]:
                        overwrite.delete_data_file(data_file)
                    for data_file in files:
                        overwrite.append_data_file(data_file)
            else:
                with tx.update_snapshot().fast_append() as append:
                    for data_file in files:
                        append.append_data_file(data_file)
    for dirpath, _, names in os.walk(local_path(table.location())):  # everything committed is old
        for name in names:
            os.utime(os.path.join(dirpath, name), (OLD, OLD))


def prepare_table(load_table: Callable[[], Table]) -> None:
    """Keep every metadata file in the log, then remove the orphans the build left (in a child: pyiceberg's threads)."""
    with load_table().transaction() as tx:
        tx.set_properties({TableProperties.METADATA_PREVIOUS_VERSIONS_MAX: KEEP_METADATA_LOG})
    options = OrphanOptions(older_than=datetime.now(UTC))
    removed = remove_orphan_files(load_table(), options, sources=[INDEX_FILES])
    print(f"  prepared: removed {removed.deleted_file_count} orphans the build left", file=sys.stderr)


def fresh_copy(work: Path) -> None:
    """``work/table`` made again from ``work/pristine``."""
    _copy(work / "pristine", work / "table")


def _copy(source: Path, target: Path) -> None:
    """Hard links of the table's files (never rewritten, only deleted); a copy of the catalog (updated in place)."""
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target, copy_function=os.link, ignore=shutil.ignore_patterns("catalog.db", "prepared-*"))
    shutil.copyfile(source / "catalog.db", target / "catalog.db")


def cutoff_for(table: Table, expire: int) -> datetime:
    """The time before which exactly the ``expire`` oldest snapshots were committed."""
    times = sorted(s.timestamp_ms for s in table.metadata.snapshots)
    if not 0 < expire < len(times) or times[expire - 1] == times[expire]:
        raise SystemExit(f"--expire {expire}: cannot expire that many of {len(times)} snapshots by time")
    return datetime.fromtimestamp(times[expire] / 1000, UTC)


def ours(table: Table, cutoff: datetime, parts: dict[str, float]) -> tuple[set[int], set[str]]:
    return _expire(table, cutoff, parts, None)


def ours_warm(table: Table, cutoff: datetime, cache: str, parts: dict[str, float]) -> tuple[set[int], set[str]]:
    """Ours with the digest cache an orphan run of the day before filled (``warm_cache``)."""
    return _expire(table, cutoff, parts, cache)


def warm_cache(load_table: Callable[[], Table], cache: str) -> None:
    """The day before's orphan dry run, which leaves a digest of every manifest list and manifest in ``cache``."""
    options = OrphanOptions(older_than=datetime.now(UTC), dry_run=True, cache=cache)
    remove_orphan_files(load_table(), options, sources=[INDEX_FILES])


def _expire(table: Table, cutoff: datetime, parts: dict[str, float], cache: str | None) -> tuple[set[int], set[str]]:
    report = expire_snapshots(
        table,
        ExpireOptions(older_than=cutoff, retain_last=1, cache=cache),
        sources=[INDEX_FILES],
        pins=[INDEX_SNAPSHOTS],
    )
    assert not report.failed and report.committed, report.to_json()
    parts.update(report.phase_seconds)
    return set(report.expired_snapshot_ids), set(report.deleted_files)


def pyiceberg_expiry(table: Table, cutoff: datetime, parts: dict[str, float]) -> set[int]:
    started = time.perf_counter()
    before = {s.snapshot_id for s in table.metadata.snapshots}
    table.maintenance.expire_snapshots().older_than(cutoff).commit()
    parts["pyiceberg_expiry"] = time.perf_counter() - started
    return before - {s.snapshot_id for s in table.metadata.snapshots}


def baseline(
    table: Table, cutoff: datetime, parts: dict[str, float], processes: int | None = None
) -> tuple[set[int], set[str]]:
    expired = pyiceberg_expiry(table, cutoff, parts)
    options = OrphanOptions(older_than=datetime.now(UTC), reader_processes=processes)
    report = remove_orphan_files(table, options, sources=[INDEX_FILES])
    assert not report.failed and report.deleted_file_count == len(report.orphan_files), report.to_json()
    return expired, set(report.orphan_files)


def baseline_workers(table: Table, cutoff: datetime, parts: dict[str, float]) -> tuple[set[int], set[str]]:
    """The baseline with one manifest worker a core: by default the orphan run starts none for 100 manifest lists."""
    return baseline(table, cutoff, parts, os.cpu_count() or 1)


def naive_baseline(table: Table, cutoff: datetime, parts: dict[str, float]) -> tuple[set[int], set[str]]:
    expired = pyiceberg_expiry(table, cutoff, parts)
    found = naive(table, datetime.now(UTC))
    for path in found:
        os.remove(local_path(path))
    return expired, found


def run_way(
    load_table: Callable[[], Table], fn: Callable[..., tuple[set[int], set[str]]], *args: Any
) -> dict[str, Any]:
    """In a forked child: load the table, then time ``fn(table, *args)``."""
    table = load_table()
    parts: dict[str, float] = {}
    seconds, cpu, (expired, deleted) = timed(lambda: fn(table, *args, parts))
    return {"seconds": seconds, "cpu": cpu, "expired": expired, "deleted": deleted, "parts": parts}


Results = dict[str, dict[str, Any]]


def measure(
    ways: dict[str, Callable[[], dict[str, Any]]], reset: Callable[[dict[str, Any] | None], object], repeat: int
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, list[float]], Results]:
    """Each way ``repeat`` times, interleaved, ``reset(the previous way's result)`` before each.

    Returns the seconds, CPU seconds and parts ("way.part") of each repetition, and each way's
    last result (``"last"``: the last way's, for the final reset).
    """
    times: dict[str, list[float]] = {name: [] for name in ways}
    cpu: dict[str, list[float]] = {name: [] for name in ways}
    parts: dict[str, list[float]] = {}
    results: Results = {}
    for repetition in range(repeat):
        for name, fn in ways.items():
            reset(results.get("last"))
            results[name] = results["last"] = fn()
            times[name].append(results[name]["seconds"])
            cpu[name].append(results[name]["cpu"])
            for part, seconds in results[name].get("parts", {}).items():
                parts.setdefault(f"{name}.{part}", []).append(seconds)
        done = ", ".join(f"{n} {t[-1]:.2f} s" for n, t in times.items())
        print(f"  repetition {repetition + 1}/{repeat}: {done}", file=sys.stderr)
    return times, cpu, parts, results


def same_sets(results: Results, expire: int, others: tuple[str, ...]) -> str | None:
    """What is wrong, if the other ways did not expire and delete what ours did, or ours not ``expire`` snapshots."""
    expired, deleted = results["ours"]["expired"], results["ours"]["deleted"]
    for name in others:
        if name in results and (results[name]["expired"], results[name]["deleted"]) != (expired, deleted):
            return f"ours and {name} expired or deleted different sets"
    if len(expired) != expire:
        return f"{len(expired)} snapshots expired, expected {expire}"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--snapshots", type=int, default=1000)
    parser.add_argument("--files-per-snapshot", type=int, default=100)
    parser.add_argument("--expire", type=int, default=900, help="how many of the oldest snapshots expire")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path(__file__).parent / ".work" / "expire")
    parser.add_argument(
        "--drop-every", type=int, default=0, help="the second table: every K-th commit an overwrite (0: fast appends)"
    )
    parser.add_argument(
        "--without-naive", action="store_true", help="leave out pyiceberg's expiry + the naive orphan scan"
    )
    parser.add_argument(
        "--s3",
        choices=("moto", "seaweed"),
        help="the table on the services script's S3 server (TEST_S3_ENDPOINT) or SeaweedFS's: bench/expire_s3.py",
    )
    args = parser.parse_args()
    if args.s3:
        from expire_s3 import main_s3

        return main_s3(args)
    work = args.work.resolve()
    if args.drop_every:
        work = work.with_name(f"{work.name}-dropping")

    print(f"preparing: {args.snapshots} snapshots x {args.files_per_snapshot} files", file=sys.stderr)
    live = prepare(work, args.snapshots, args.files_per_snapshot, args.drop_every)
    fresh_copy(work)
    table = load(live)
    cutoff = cutoff_for(table, args.expire)
    manifest_lists = [s.manifest_list for s in table.metadata.snapshots]
    manifests = unique_manifest_paths(table.io, manifest_lists)
    load_live = lambda: load(live)  # noqa: E731
    cache = work / "digests"
    shutil.rmtree(cache, ignore_errors=True)
    in_child(warm_cache, load_live, str(cache))  # on the fresh copy, which every reset restores
    ways: dict[str, Callable[[], dict[str, Any]]] = {
        "floor": lambda: in_child(floor_way, load_live, manifest_lists, manifests),
        "ours": lambda: in_child(run_way, load_live, ours, cutoff),
        "ours_warm": lambda: in_child(run_way, load_live, ours_warm, cutoff, str(cache)),
        "baseline": lambda: in_child(run_way, load_live, baseline, cutoff),
        "baseline_workers": lambda: in_child(run_way, load_live, baseline_workers, cutoff),
        "naive": lambda: in_child(run_way, load_live, naive_baseline, cutoff),
    }
    if args.without_naive:
        del ways["naive"]
    times, cpu, parts, results = measure(ways, lambda _: fresh_copy(work), args.repeat)
    problem = same_sets(results, args.expire, ("ours_warm", "baseline", "baseline_workers", "naive"))
    if problem:
        print(f"MISMATCH: {problem}", file=sys.stderr)
        return 1
    expired, deleted = results["ours"]["expired"], results["ours"]["deleted"]
    median = {k: statistics.median(v) for k, v in times.items()}
    median_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    summary: dict[str, Any] = {
        "table": {
            "snapshots": len(table.metadata.snapshots),
            "expired_snapshots": len(expired),
            "unique_manifests": len(manifests),
            "data_files": args.snapshots * args.files_per_snapshot,
            "deleted_files": len(deleted),
            "cores": os.cpu_count(),
        },
        "seconds_median": {k: round(v, 3) for k, v in median.items()},
        "seconds_all": {k: [round(x, 3) for x in v] for k, v in times.items()},
        "cpu_seconds_median": {k: round(v, 3) for k, v in median_cpu.items()},
        # ours: its report's phase_seconds (cumulative: commit, plan_files, done); the others: pyiceberg's expiry alone
        "parts_seconds_median": {k: round(statistics.median(v), 3) for k, v in parts.items()},
        "baseline_over_ours": round(median["baseline"] / median["ours"], 2),
        "baseline_over_ours_cpu": round(median_cpu["baseline"] / median_cpu["ours"], 2),
        "baseline_over_ours_warm": round(median["baseline"] / median["ours_warm"], 2),
        "baseline_over_ours_warm_cpu": round(median_cpu["baseline"] / median_cpu["ours_warm"], 2),
        "baseline_workers_over_ours": round(median["baseline_workers"] / median["ours"], 2),
        "ours_over_floor": round(median["ours"] / median["floor"], 2),
        "naive_over_ours": round(median["naive"] / median["ours"], 2) if "naive" in median else None,
    }
    print(json.dumps(summary, indent=2))
    naive_seconds = f"{median['naive']:.2f} s" if "naive" in median else "not timed"
    print(
        f"ours {median['ours']:.2f} s | baseline {median['baseline']:.2f} s (pyiceberg expiry "
        f"{summary['parts_seconds_median']['baseline.pyiceberg_expiry']:.2f} s, then orphan removal) | floor "
        f"{median['floor']:.2f} s | naive {naive_seconds}  ->  baseline/ours {summary['baseline_over_ours']} "
        f"(target >= 2.5), with a warm digest cache {summary['baseline_over_ours_warm']} (target >= 10), "
        f"baseline with workers/ours {summary['baseline_workers_over_ours']}, "
        f"ours/floor {summary['ours_over_floor']}, naive/ours {summary['naive_over_ours']}; "
        f"CPU seconds: ours {median_cpu['ours']:.2f}, baseline {median_cpu['baseline']:.2f}"
    )
    return 0


def floor_way(load_table: Callable[[], Table], manifest_lists: list[str], manifests: list[str]) -> dict[str, Any]:
    table = load_table()
    seconds, cpu, _ = timed(lambda: floor(table, manifest_lists, manifests, listing=False))
    return {"seconds": seconds, "cpu": cpu}


if __name__ == "__main__":
    sys.exit(main())
