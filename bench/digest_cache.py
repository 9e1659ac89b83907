"""Digest cache benchmark (S22): orphan and expiry dry runs after 1% new commits, warm cache against none.

    .venv/bin/python bench/digest_cache.py                    # 500 snapshots x 100 files, 5 new commits
    .venv/bin/python bench/digest_cache.py --snapshots 1000   # the orphan bench's table

The table is built by the orphan bench's builder (``bench/orphans.py``: fast appends of one-byte
placeholder files, plus old orphans) in a folder of its own, and built again on the next run
(the bench's commits change it). A first orphan dry run fills the cache (the day before); then ``--new-percent`` of the
snapshot count is appended, and on that table each way runs ``--repeat`` times, interleaved, in a
forked child (as a CLI run starts): the orphan dry run and the expiry dry run (the oldest 90%
expire), each with ``--no-cache`` (cold: every list and manifest decoded) and with the warm
cache, and a floor: listing the table's files, which every orphan run does whatever it knows.
The runs with and without the cache must find the same files; medians are printed as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orphans import _listed, build, in_child, placeholder_data_file, timed
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from airflow_iceberg_maint.expiry.run import expire_snapshots
from airflow_iceberg_maint.expiry.settings import ExpireOptions
from airflow_iceberg_maint.fs.locations import local_path
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES, INDEX_SNAPSHOTS
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files


def orphan_run(table: Table, cache: str | None) -> set[str]:
    options = OrphanOptions(older_than=datetime.now(UTC), dry_run=True, only_this_table=True, cache=cache)
    return set(remove_orphan_files(table, options, sources=[INDEX_FILES]).orphan_files)


def expiry_run(table: Table, cache: str | None, cutoff: datetime) -> set[str]:
    options = ExpireOptions(older_than=cutoff, retain_last=1, dry_run=True, cache=cache)
    report = expire_snapshots(table, options, sources=[INDEX_FILES], pins=[INDEX_SNAPSHOTS])
    return set(report.deleted_files)


def listing(table: Table) -> int:
    """The floor of any orphan run, warm or not: listing the table's files (the orphan bench's listing)."""
    return _listed(table)


def _append(table: Table, commits: int) -> None:
    for s in range(commits):
        paths = [f"{table.location()}/data/new-{s:05d}-{i:04d}-{uuid.uuid4()}.parquet" for i in range(100)]
        for path in paths:
            Path(local_path(path)).write_bytes(b"x")
        with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
            for path in paths:
                append.append_data_file(placeholder_data_file(path))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--snapshots", type=int, default=500)
    parser.add_argument("--files-per-snapshot", type=int, default=100)
    parser.add_argument("--orphans", type=int, default=1000)
    parser.add_argument("--new-percent", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path(__file__).parent / ".work" / "digest-cache")
    args = parser.parse_args()
    built = build(args.work, args.snapshots, args.files_per_snapshot, args.orphans)
    times = sorted(s.timestamp_ms for s in built.metadata.snapshots)
    cutoff = datetime.fromtimestamp((times[len(times) * 9 // 10] + 1) / 1000, UTC)
    with tempfile.TemporaryDirectory(dir=args.work.parent) as folder:
        cache = f"{folder}/digests"
        first = timed(lambda: in_child(orphan_run, built, cache))  # the day before: fills the cache
        new = max(1, round(args.snapshots * args.new_percent / 100))
        in_child(_append, built, new)
        (args.work / f"built-{args.snapshots}-{args.files_per_snapshot}-{args.orphans}").unlink()  # rebuilt next time
        table = SqlCatalog("bench", uri=f"sqlite:///{args.work}/catalog.db").load_table("db.t")
        seconds: dict[str, list[float]] = {
            "orphans_cold": [],
            "orphans_warm": [],
            "expiry_cold": [],
            "expiry_warm": [],
            "listing_floor": [],
        }
        found: dict[str, set[str]] = {}
        for _ in range(args.repeat):
            for way, run in (
                ("orphans_cold", lambda: in_child(orphan_run, table, None)),
                ("orphans_warm", lambda: in_child(orphan_run, table, cache)),
                ("expiry_cold", lambda: in_child(expiry_run, table, None, cutoff)),
                ("expiry_warm", lambda: in_child(expiry_run, table, cache, cutoff)),
                ("listing_floor", lambda: in_child(listing, table)),
            ):
                wall, _, result = timed(run)
                seconds[way].append(wall)
                found.setdefault(way, result)  # type: ignore[arg-type]
        assert found["orphans_cold"] == found["orphans_warm"] and found["expiry_cold"] == found["expiry_warm"]
        medians = {way: round(statistics.median(s), 3) for way, s in seconds.items()}
        out: dict[str, Any] = {
            "snapshots": args.snapshots,
            "files_per_snapshot": args.files_per_snapshot,
            "new_commits": new,
            "first_run_filling_the_cache_s": round(first[0], 3),
            "median_s": medians,
            "orphans_warm_speedup": round(medians["orphans_cold"] / medians["orphans_warm"], 2),
            "expiry_warm_speedup": round(medians["expiry_cold"] / medians["expiry_warm"], 2),
            # An orphan run lists the table whatever it knows of the metadata: cold over listing bounds the speedup.
            "orphans_warm_over_listing_floor": round(medians["orphans_warm"] / medians["listing_floor"], 2),
            "orphans_cold_over_listing_floor": round(medians["orphans_cold"] / medians["listing_floor"], 2),
            "orphans_found": len(found["orphans_cold"]),
            "expiry_deletes": len(found["expiry_cold"]),
        }
    json.dump(out, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
