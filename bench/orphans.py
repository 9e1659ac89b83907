"""Orphan-removal benchmark: ours against the naive pyiceberg approach and a floor, in one run.

    .venv/bin/python bench/orphans.py            # 1,000 snapshots, 100,000 files, 10,000 orphans

- ours:  ``remove_orphan_files`` (dry run, so every repetition sees the same table);
- naive: ``inspect.all_files()`` + ``all_manifests()`` + manifest lists + metadata log in a
  Python set, ``os.walk`` and a set difference;
- floor: listing alone, plus reading each unique manifest's paths once (manifests known up front).

Each is timed ``--repeat`` times, interleaved, and the median is kept (the machine is noisy).
Also measured: bytes per referenced file of the referenced set at 1 million paths, and the
DeleteObjects requests for orphans on a local S3-protocol server.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField

from airflow_iceberg_maint.fs.local import LocalStorage
from airflow_iceberg_maint.fs.locations import PathEquivalence, local_path
from airflow_iceberg_maint.index.references import INDEX_FILES
from airflow_iceberg_maint.orphans.manifests import live_file_paths
from airflow_iceberg_maint.orphans.referenced import ReferencedSet
from airflow_iceberg_maint.orphans.removal import OrphanOptions, hidden_filter, remove_orphan_files

OLD = time.time() - 30 * 86400


def _touch(path: str) -> None:
    with open(path, "wb") as fh:
        fh.write(b"x")
    os.utime(path, (OLD, OLD))


def build(work: Path, snapshots: int, per_snapshot: int, orphans: int) -> Table:
    """A table of ``snapshots`` fast appends of ``per_snapshot`` one-byte files, plus old orphans."""
    marker = work / f"built-{snapshots}-{per_snapshot}-{orphans}"
    if marker.exists():  # built by an earlier run with the same sizes: reuse it
        return SqlCatalog("bench", uri=f"sqlite:///{work}/catalog.db").load_table("db.t")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    catalog = SqlCatalog("bench", uri=f"sqlite:///{work}/catalog.db", warehouse=f"file://{work}/wh")
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=Schema(NestedField(1, "id", LongType())))
    data_dir = local_path(table.location()) + "/data"
    os.makedirs(data_dir, exist_ok=True)
    started = time.perf_counter()
    for s in range(snapshots):
        files = []
        for i in range(per_snapshot):
            path = f"{table.location()}/data/{s:05d}-{i:04d}-{uuid.uuid4()}.parquet"
            _touch(local_path(path))
            files.append(
                DataFile.from_args(
                    content=DataFileContent.DATA,
                    file_path=path,
                    file_format=FileFormat.PARQUET,
                    partition=Record(),
                    record_count=1,
                    file_size_in_bytes=1,
                )
            )
        with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
            for data_file in files:
                append.append_data_file(data_file)
        if (s + 1) % 100 == 0:
            print(f"  built {s + 1}/{snapshots} snapshots ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    for i in range(orphans):
        _touch(f"{data_dir}/orphan-{i:06d}.parquet")
    for dirpath, _, names in os.walk(local_path(table.location())):  # everything committed is old too
        for name in names:
            os.utime(os.path.join(dirpath, name), (OLD, OLD))
    marker.touch()
    return catalog.load_table("db.t")


def ours(table: Table, cutoff: datetime) -> set[str]:
    return set(
        remove_orphan_files(table, OrphanOptions(older_than=cutoff, dry_run=True), sources=[INDEX_FILES]).orphan_files
    )


def naive(table: Table, cutoff: datetime) -> set[str]:
    md = table.metadata
    refs = {table.metadata_location, f"{md.location}/metadata/version-hint.text"}
    refs |= {e.metadata_file for e in md.metadata_log} | {s.manifest_list for s in md.snapshots}
    refs |= set(table.inspect.all_manifests()["path"].to_pylist())
    refs |= set(table.inspect.all_files()["file_path"].to_pylist())
    root = local_path(table.location())
    listed = set()
    for dirpath, _, names in os.walk(root):
        for name in names:
            full = os.path.join(dirpath, name)
            if os.stat(full).st_mtime < cutoff.timestamp():
                listed.add(f"{table.location()}{full[len(root) :]}")
    return listed - refs


def floor(table: Table, cutoff: datetime, manifests: list[str]) -> int:
    listed = sum(1 for _ in LocalStorage().list_files(table.location(), hidden_filter(table)))
    return listed + sum(len(live_file_paths(table.io, m)) for m in manifests)


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def referenced_set_bytes(count: int) -> dict[str, float]:
    """Bytes a referenced path costs: held after de-duplication, and at the peak while building."""
    pool = pa.default_memory_pool()
    refs = ReferencedSet(PathEquivalence())
    before, peak_before = pool.bytes_allocated(), pool.max_memory()
    batch = 100_000
    for start in range(0, count, batch):
        refs.add(
            [
                f"s3://bucket/warehouse/db/t/data/day={i % 365}/{i:09d}-{uuid.UUID(int=i)}.parquet"
                for i in range(start, min(count, start + batch))
            ]
        )
    held = len(refs)  # de-duplicates: the transient peak of that step is in max_memory
    return {
        "files": count,
        "held_bytes_per_file": refs.nbytes / held,
        "arrow_bytes_per_file_after_build": (pool.bytes_allocated() - before) / held,
        "peak_arrow_bytes_per_file_while_building": (pool.max_memory() - max(before, 0)) / held
        if pool.max_memory() > peak_before
        else None,
    }


def s3_delete_requests(orphans: int) -> dict[str, int]:
    """Plant orphans on a local S3-protocol server and count the DeleteObjects requests."""
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line a request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        props = {
            "s3.endpoint": endpoint,
            "s3.access-key-id": "k",
            "s3.secret-access-key": "s",
            "s3.region": "us-east-1",
        }
        s3 = boto3.client(
            "s3", endpoint_url=endpoint, aws_access_key_id="k", aws_secret_access_key="s", region_name="us-east-1"
        )
        s3.create_bucket(Bucket="bench")
        work = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-s3-{uuid.uuid4().hex[:8]}"
        work.mkdir()
        catalog = SqlCatalog("s3bench", uri=f"sqlite:///{work}/c.db", warehouse="s3://bench/wh", **props)
        catalog.create_namespace("db")
        table = catalog.create_table("db.t", schema=Schema(NestedField(1, "id", LongType())))
        table.append(pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
        for i in range(orphans):
            s3.put_object(Bucket="bench", Key=f"wh/db/t/data/orphan-{i:06d}.parquet", Body=b"x")
        time.sleep(1.1)
        report = remove_orphan_files(
            catalog.load_table("db.t"), OrphanOptions(older_than=datetime.now(UTC)), sources=[INDEX_FILES]
        )
        return {
            "orphans": orphans,
            "deleted": report.deleted_file_count,
            "delete_requests": report.delete_requests,
            "expected_requests": math.ceil(orphans / 1000),
            "list_calls": report.list_calls,
        }
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--snapshots", type=int, default=1000)
    parser.add_argument("--files-per-snapshot", type=int, default=100)
    parser.add_argument("--orphans", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--memory-files", type=int, default=1_000_000)
    parser.add_argument("--s3-orphans", type=int, default=2_500)
    parser.add_argument("--work", type=Path, default=Path(__file__).parent / ".work" / "orphans")
    args = parser.parse_args()

    print(
        f"building: {args.snapshots} snapshots x {args.files_per_snapshot} files, {args.orphans} orphans",
        file=sys.stderr,
    )
    table = build(args.work, args.snapshots, args.files_per_snapshot, args.orphans)
    cutoff = datetime.now(UTC)
    manifests = list(dict.fromkeys(table.inspect.all_manifests()["path"].to_pylist()))
    times: dict[str, list[float]] = {"ours": [], "naive": [], "floor": []}
    results = {}
    for _ in range(args.repeat):
        for name, fn in (
            ("floor", lambda: floor(table, cutoff, manifests)),
            ("ours", lambda: ours(table, cutoff)),
            ("naive", lambda: naive(table, cutoff)),
        ):
            seconds, results[name] = timed(fn)
            times[name].append(seconds)
    if results["ours"] != results["naive"]:
        print("MISMATCH: ours and naive found different orphans", file=sys.stderr)
        return 1
    median = {k: statistics.median(v) for k, v in times.items()}
    summary = {
        "table": {
            "snapshots": len(table.metadata.snapshots),
            "unique_manifests": len(manifests),
            "referenced_data_files": args.snapshots * args.files_per_snapshot,
            "orphans_found": len(results["ours"]),
        },
        "seconds_median": {k: round(v, 3) for k, v in median.items()},
        "ours_over_floor": round(median["ours"] / median["floor"], 2),
        "naive_over_ours": round(median["naive"] / median["ours"], 2),
        "referenced_set": referenced_set_bytes(args.memory_files),
        "s3": s3_delete_requests(args.s3_orphans) if args.s3_orphans else None,
    }
    print(json.dumps(summary, indent=2))
    print(
        f"ours {median['ours']:.2f} s | floor {median['floor']:.2f} s | naive {median['naive']:.2f} s  ->  "
        f"ours/floor {summary['ours_over_floor']} (target <= 1.5), naive/ours {summary['naive_over_ours']} "
        f"(target >= 5)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
