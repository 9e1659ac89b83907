"""Orphan-removal benchmark: ours against the naive pyiceberg approach and two floors, in one run.

    .venv/bin/python bench/orphans.py            # 1,000 snapshots, 100,000 files, 10,000 orphans
    TEST_S3_PORT=... scripts/services.sh run -- .venv/bin/python bench/orphans.py --s3-files 100000

- ours:  ``remove_orphan_files`` (dry run, so every repetition sees the same table);
- naive: ``inspect.all_files()`` + ``all_manifests()`` + manifest lists + metadata log in a
  Python set, ``os.walk`` and a set difference (in a forked child, see ``in_child``);
- floor: the reads a correct scan cannot skip, in parallel: the listing (one thread) beside
  every manifest list and each unique manifest decoded once (both known up front) by one
  process a core, returning counts only;
- old floor: the listing, then each unique manifest read once in this process (no manifest list).

Each is timed ``--repeat`` times, interleaved, and the median is kept (the machine is noisy);
``--without-naive`` leaves the naive way out (30 s a repetition, and its memory churn slows
the others timed after it).
Also measured: bytes per referenced file of the referenced set at 1 million paths, the
DeleteObjects requests for orphans on a local S3-protocol server, and with ``--s3-files`` (on
the server at ``TEST_S3_ENDPOINT``) ours on an S3 table against parallel LIST calls alone.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import math
import multiprocessing
import os
import resource
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField

from airflow_iceberg_maint.fs.local import LocalStorage
from airflow_iceberg_maint.fs.locations import PathEquivalence, local_path
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES
from airflow_iceberg_maint.orphans.listing.candidates import hidden_filter
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from airflow_iceberg_maint.reachability.manifest_pool import worker_start_method
from airflow_iceberg_maint.reachability.manifests import live_file_paths, manifest_paths, unique_manifest_paths
from airflow_iceberg_maint.reachability.referenced import ReferencedSet

OLD = time.time() - 30 * 86400


def placeholder_data_file(path: str, size: int = 1) -> DataFile:
    """A data file entry for a file the benches only list and match, never read: one row, unpartitioned."""
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=1,
        file_size_in_bytes=size,
    )


def _touch(path: str) -> None:
    with open(path, "wb") as fh:
        fh.write(b"x")
    os.utime(path, (OLD, OLD))


def build(work: Path, snapshots: int, per_snapshot: int, orphans: int) -> Table:
    """A table of ``snapshots`` fast appends of ``per_snapshot`` one-byte files, plus old orphans.

    Built in a forked child: pyiceberg's appends start its shared thread pool, and with those
    threads alive ours would take forkserver workers, not the forked ones a CLI run gets.
    """
    marker = work / f"built-{snapshots}-{per_snapshot}-{orphans}"
    if not marker.exists():  # else built by an earlier run with the same sizes: reuse it
        in_child(_build, work, snapshots, per_snapshot, orphans)
    return SqlCatalog("bench", uri=f"sqlite:///{work}/catalog.db").load_table("db.t")


def _build(work: Path, snapshots: int, per_snapshot: int, orphans: int) -> None:
    marker = work / f"built-{snapshots}-{per_snapshot}-{orphans}"
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
            files.append(placeholder_data_file(path))
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


def ours(table: Table, cutoff: datetime) -> set[str]:
    return set(
        remove_orphan_files(table, OrphanOptions(older_than=cutoff, dry_run=True), sources=[INDEX_FILES]).orphan_files
    )


def ours_timed_workers(table: Table, cutoff: datetime, starts: set[str]) -> set[str]:
    """``ours``, noting how its workers start: forked while this process runs one thread, else forkserver."""
    starts.add(worker_start_method())
    return ours(table, cutoff)


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


def in_child(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a forked child: pyiceberg's shared thread pool, which ``inspect`` starts, ends with it.

    Otherwise its idle threads would outlive the naive way, and ours, which forks its workers
    only while its process runs one thread (as a CLI run does), would take the slower forkserver.
    """
    global _CHILD_CALL
    _CHILD_CALL = (fn, args)  # inherited by the fork: a table does not pickle
    # The parent's objects out of the collector's reach: else the child's first full collection
    # walks them all, copying every page it touches (90 ms of a 0.17 s expiry), which a CLI run,
    # started fresh, never pays.
    gc.freeze()
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as child:
        return child.submit(_child_call).result()


_CHILD_CALL: tuple[Callable[..., Any], tuple[Any, ...]] | None = None


def _child_call() -> Any:
    assert _CHILD_CALL is not None
    fn, args = _CHILD_CALL
    return fn(*args)


def _listed(table: Table) -> int:
    return sum(1 for _ in LocalStorage().list_files(table.location(), hidden_filter(table)))


def old_floor(table: Table, manifests: list[str]) -> int:
    return _listed(table) + sum(len(live_file_paths(table.io, m)) for m in manifests)


_FLOOR_TABLE: Table | None = None  # inherited by the floor's forked workers


def _floor_read(files: list[tuple[bool, str]]) -> int:
    assert _FLOOR_TABLE is not None
    io = _FLOOR_TABLE.io
    return sum(len(manifest_paths(io, f) if is_list else live_file_paths(io, f)) for is_list, f in files)


def floor(table: Table, manifest_lists: list[str], manifests: list[str], listing: bool = True) -> int:
    """Listing beside every manifest list and each unique manifest decoded once, one process a core.

    Workers are forked (the cheapest start) inside the timed region, as ours starts its own.
    ``listing=False``: the decoding alone (bench/expire.py's floor).
    """
    global _FLOOR_TABLE
    _FLOOR_TABLE = table
    files = [(True, m) for m in manifest_lists] + [(False, m) for m in manifests]
    workers = os.cpu_count() or 1
    chunks = [files[i :: workers * 4] for i in range(workers * 4)]  # dealt: later lists are longer
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        counts = pool.map(_floor_read, chunks)  # submitted (and workers forked) before the lister thread starts
        if not listing:
            return sum(counts)
        with ThreadPoolExecutor(1) as lister:
            listed = lister.submit(_listed, table)
            return sum(counts) + listed.result()


def _cpu_seconds() -> float:
    """CPU time of this process and of its children that have ended (the forked workers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed(fn: Callable[[], object]) -> tuple[float, float, object]:
    """Wall seconds, CPU seconds (every process's), and the result."""
    started, cpu = time.perf_counter(), _cpu_seconds()
    result = fn()
    return time.perf_counter() - started, _cpu_seconds() - cpu, result


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


S3_BUCKET = "bench-scan"


def s3_keys(endpoint: str) -> tuple[str, str]:
    """The key pair for ``endpoint``: SeaweedFS's from the services script, else any (moto takes every pair)."""
    if endpoint == os.environ.get("TEST_SEAWEED_S3_ENDPOINT"):
        return os.environ["TEST_SEAWEED_ACCESS_KEY_ID"], os.environ["TEST_SEAWEED_SECRET_ACCESS_KEY"]
    return "k", "s"


def _s3_props(endpoint: str, keys: tuple[str, str] | None = None) -> dict[str, str]:
    key_id, secret = keys or s3_keys(endpoint)
    return {
        "s3.endpoint": endpoint,
        "s3.access-key-id": key_id,
        "s3.secret-access-key": secret,
        "s3.region": "us-east-1",
    }


def s3_client(endpoint: str) -> Any:
    import boto3
    from botocore.config import Config

    key_id, secret = s3_keys(endpoint)
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(max_pool_connections=32),
    )


def s3_catalog_db(work: Path, endpoint: str) -> Path:
    """The SQLite catalog of ``build_s3``'s table on ``endpoint``."""
    return work / f"s3-catalog-{endpoint.rsplit(':', 1)[-1]}.db"


def load_s3(db: Path, endpoint: str, keys: tuple[str, str] | None = None) -> Table:
    """``build_s3``'s table, read through ``endpoint`` (the server or a proxy before it; ``keys``: the server's)."""
    return SqlCatalog("s3scan", uri=f"sqlite:///{db}", **_s3_props(endpoint, keys)).load_table("db.t")


def build_s3(endpoint: str, work: Path, files: int, prefixes: int, orphans: int, per_snapshot: int = 1000) -> Table:
    """An S3 table of ``files`` one-byte data files spread over ``prefixes`` partition-like folders.

    Objects are PUT directly (16 at a time) and registered by fast appends of ``per_snapshot``
    files, not written through pyiceberg. Built once per server: a marker object says so.
    """
    s3 = s3_client(endpoint)
    marker = f"built-{files}-{prefixes}-{orphans}"
    db = s3_catalog_db(work, endpoint)
    buckets = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
    if S3_BUCKET in buckets and db.exists() and s3.list_objects_v2(Bucket=S3_BUCKET, Prefix=marker).get("KeyCount"):
        return load_s3(db, endpoint)
    if S3_BUCKET in buckets:  # a build from another run that did not finish: start over
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=S3_BUCKET):
            objects = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if objects:
                s3.delete_objects(Bucket=S3_BUCKET, Delete={"Objects": objects, "Quiet": True})
    else:
        s3.create_bucket(Bucket=S3_BUCKET)
    work.mkdir(parents=True, exist_ok=True)
    db.unlink(missing_ok=True)
    catalog = SqlCatalog("s3scan", uri=f"sqlite:///{db}", warehouse=f"s3://{S3_BUCKET}/wh", **_s3_props(endpoint))
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=Schema(NestedField(1, "id", LongType())))
    base = table.location().split(f"s3://{S3_BUCKET}/", 1)[1]
    started = time.perf_counter()
    with ThreadPoolExecutor(16) as pool:
        for s in range(math.ceil(files / per_snapshot)):
            keys = [
                f"{base}/data/p={i % prefixes:04d}/{s:05d}-{i:06d}.parquet"
                for i in range(s * per_snapshot, min(files, (s + 1) * per_snapshot))
            ]
            list(pool.map(lambda k: s3.put_object(Bucket=S3_BUCKET, Key=k, Body=b"x"), keys))
            with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
                for key in keys:
                    append.append_data_file(placeholder_data_file(f"s3://{S3_BUCKET}/{key}"))
            print(
                f"  s3: {min(files, (s + 1) * per_snapshot)}/{files} files ({time.perf_counter() - started:.0f} s)",
                file=sys.stderr,
            )
        list(
            pool.map(
                lambda i: s3.put_object(
                    Bucket=S3_BUCKET, Key=f"{base}/data/p={i % prefixes:04d}/orphan-{i:06d}", Body=b"x"
                ),
                range(orphans),
            )
        )
    s3.put_object(Bucket=S3_BUCKET, Key=marker, Body=b"")
    return catalog.load_table("db.t")


def s3_list_floor(endpoint: str, table: Table, prefixes: int) -> int:
    """Parallel LIST calls alone: every leaf prefix (known up front) listed flat, 8 at a time, keys counted."""
    s3 = s3_client(endpoint)
    base = table.location().split(f"s3://{S3_BUCKET}/", 1)[1]
    leaves = [f"{base}/metadata/"] + [f"{base}/data/p={i:04d}/" for i in range(prefixes)]

    def count(prefix: str) -> int:
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=S3_BUCKET, Prefix=prefix)
        return sum(page.get("KeyCount", 0) for page in pages)

    with ThreadPoolExecutor(8) as pool:
        return sum(pool.map(count, leaves))


def s3_scan(endpoint: str, work: Path, files: int, prefixes: int, orphans: int, repeat: int) -> dict[str, Any]:
    table = build_s3(endpoint, work, files, prefixes, orphans)
    times: dict[str, list[float]] = {"ours": [], "list_floor": []}
    found: object = None
    listed = 0
    for _ in range(repeat):
        seconds, _, listed = timed(lambda: s3_list_floor(endpoint, table, prefixes))  # type: ignore[assignment]
        times["list_floor"].append(seconds)
        seconds, _, found = timed(lambda: ours(table, datetime.now(UTC)))
        times["ours"].append(seconds)
    median = {k: statistics.median(v) for k, v in times.items()}
    assert isinstance(found, set)
    return {
        "files_listed": listed,
        "prefixes": prefixes,
        "orphans_found": len(found),
        "seconds_median": {k: round(v, 3) for k, v in median.items()},
        "seconds_all": {k: [round(x, 3) for x in v] for k, v in times.items()},
        "ours_over_list_floor": round(median["ours"] / median["list_floor"], 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--snapshots", type=int, default=1000)
    parser.add_argument("--files-per-snapshot", type=int, default=100)
    parser.add_argument("--orphans", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--memory-files", type=int, default=1_000_000)
    parser.add_argument("--s3-orphans", type=int, default=2_500)
    parser.add_argument("--work", type=Path, default=Path(__file__).parent / ".work" / "orphans")
    parser.add_argument("--s3-files", type=int, default=0, help="S3 scan bench on TEST_S3_ENDPOINT (0: skip)")
    parser.add_argument("--s3-prefixes", type=int, default=100)
    parser.add_argument(
        "--without-naive",
        action="store_true",
        help="time ours and the floors only (the naive way takes 30 s a repetition and churns memory between them)",
    )
    args = parser.parse_args()

    print(
        f"building: {args.snapshots} snapshots x {args.files_per_snapshot} files, {args.orphans} orphans",
        file=sys.stderr,
    )
    table = build(args.work, args.snapshots, args.files_per_snapshot, args.orphans)
    cutoff = datetime.now(UTC)
    manifest_lists = [s.manifest_list for s in table.metadata.snapshots]
    manifests = unique_manifest_paths(table.io, manifest_lists)
    starts: set[str] = set()  # how ours started its workers (see ``ours_timed_workers``)
    ways: dict[str, Callable[[], object]] = {
        "floor": lambda: floor(table, manifest_lists, manifests),
        "old_floor": lambda: old_floor(table, manifests),
        "ours": lambda: ours_timed_workers(table, cutoff, starts),
        "naive": lambda: in_child(naive, table, cutoff),
    }
    if args.without_naive:
        del ways["naive"]
    times: dict[str, list[float]] = {name: [] for name in ways}
    cpu: dict[str, list[float]] = {name: [] for name in ways}
    results = {}
    for _ in range(args.repeat):
        for name, fn in ways.items():
            seconds, cpu_seconds, results[name] = timed(fn)
            times[name].append(seconds)
            cpu[name].append(cpu_seconds)
    if "naive" in results and results["ours"] != results["naive"]:
        print("MISMATCH: ours and naive found different orphans", file=sys.stderr)
        return 1
    median = {k: statistics.median(v) for k, v in times.items()}
    median_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    summary: dict[str, Any] = {
        "table": {
            "snapshots": len(table.metadata.snapshots),
            "manifest_lists": len(manifest_lists),
            "unique_manifests": len(manifests),
            "referenced_data_files": args.snapshots * args.files_per_snapshot,
            "orphans_found": len(results["ours"]),  # type: ignore[arg-type]
            "cores": os.cpu_count(),
            "ours_workers_started_by": sorted(starts),
        },
        "seconds_median": {k: round(v, 3) for k, v in median.items()},
        "seconds_all": {k: [round(x, 3) for x in v] for k, v in times.items()},
        "cpu_seconds_median": {k: round(v, 3) for k, v in median_cpu.items()},
        "ours_over_floor": round(median["ours"] / median["floor"], 2),
        "ours_over_floor_cpu": round(median_cpu["ours"] / median_cpu["floor"], 2),
        "ours_over_old_floor": round(median["ours"] / median["old_floor"], 2),
        "naive_over_ours": round(median["naive"] / median["ours"], 2) if "naive" in median else None,
        "referenced_set": referenced_set_bytes(args.memory_files) if args.memory_files else None,
        "s3": s3_delete_requests(args.s3_orphans) if args.s3_orphans else None,
        "s3_scan": s3_scan(
            os.environ["TEST_S3_ENDPOINT"],
            args.work.parent / "orphans-s3",
            args.s3_files,
            args.s3_prefixes,
            args.s3_files // 10,
            args.repeat,
        )
        if args.s3_files
        else None,
    }
    print(json.dumps(summary, indent=2))
    naive_seconds = f"{median['naive']:.2f} s" if "naive" in median else "not timed"
    print(
        f"ours {median['ours']:.2f} s | floor {median['floor']:.2f} s | old floor {median['old_floor']:.2f} s | "
        f"naive {naive_seconds}  ->  ours/floor {summary['ours_over_floor']} (target <= 1.1), "
        f"ours/old floor {summary['ours_over_old_floor']}, naive/ours {summary['naive_over_ours']} (target >= 10); "
        f"CPU seconds: ours {median_cpu['ours']:.2f}, floor {median_cpu['floor']:.2f}, "
        f"ours/floor {summary['ours_over_floor_cpu']}"
    )
    if summary["s3_scan"]:
        scan = summary["s3_scan"]
        print(
            f"s3: {scan['files_listed']} files over {scan['prefixes']} prefixes: ours "
            f"{scan['seconds_median']['ours']:.2f} s | parallel LIST floor {scan['seconds_median']['list_floor']:.2f}"
            f" s  ->  ours/floor {scan['ours_over_list_floor']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
