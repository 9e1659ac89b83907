"""Orphan scan at scale on the local S3-protocol server: single task against sharded, requests counted by a proxy.

    .venv/bin/python bench/scale.py --files 100000 --orphans 10000 --shards 4 [--endpoint http://127.0.0.1:PORT]

Builds once (cached while the server runs: the bucket holds a marker) a table of ``--files``
one-byte data files, committed by ``--snapshots`` fast appends that write the manifests, spread
over 100 directories ``data/p=NNN/``, plus ``--orphans`` files nobody references. Then runs,
each step in its own process (peak RSS: its ``VmHWM``): the single-task dry run, and the sharded dry run (plan, each
shard, each match, finish), with scratch in another bucket of the same server. For each step:
wall time, peak RSS, and the requests the server received, counted by a TCP proxy
in front of it (``tests/reliability/fault_proxy.py`` with no fault rules): LIST, GET of table
metadata and manifests, GET/PUT of scratch files, DeleteObjects. Without ``--endpoint`` it
starts moto's server itself (then nothing is cached across runs).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import boto3
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import contextlib

from tests.reliability.fault_proxy import FaultProxy, Request

BUCKET, SCRATCH = "scale", "scale-scratch"
CREDS = {"s3.access-key-id": "testing", "s3.secret-access-key": "testing", "s3.region": "us-east-1"}
DIRS = 100


class CountingProxy(FaultProxy):
    """Counts requests by method and by what they touch: the table's bucket or the scratch bucket."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.kinds: Counter[str] = Counter()

    def _choose(self, request: Request) -> tuple[str, str | None]:
        scratch = request.path.startswith(f"/{SCRATCH}")
        if request.method == "GET" and request.query.get("list-type") == ["2"]:
            kind = "LIST"
        elif request.method == "POST" and "delete" in request.query:
            kind = "DeleteObjects"
        else:
            kind = request.method
        with self._lock:
            self.kinds[f"{kind} {'scratch' if scratch else 'table'}"] += 1
        return super()._choose(request)


def _s3(endpoint: str):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )


def catalog(work: Path, endpoint: str) -> SqlCatalog:
    return SqlCatalog(
        "scale", uri=f"sqlite:///{work}/catalog.db", warehouse=f"s3://{BUCKET}/wh", **{"s3.endpoint": endpoint, **CREDS}
    )


def build(work: Path, endpoint: str, files: int, orphans: int, snapshots: int) -> None:
    s3 = _s3(endpoint)
    marker = f"built-{files}-{orphans}-{snapshots}"
    try:
        s3.head_object(Bucket=BUCKET, Key=marker)
        if (work / marker).exists():
            print(f"reusing the table built earlier ({marker})", file=sys.stderr)
            return
    except Exception:
        pass
    started = time.perf_counter()
    for bucket in (BUCKET, SCRATCH):
        with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
            s3.create_bucket(Bucket=bucket)
    work.mkdir(parents=True, exist_ok=True)
    (work / "catalog.db").unlink(missing_ok=True)
    cat = catalog(work, endpoint)
    cat.create_namespace("db")
    table = cat.create_table("db.t", schema=Schema(NestedField(1, "id", LongType())))
    loc = table.location().rstrip("/")
    keys = [f"{loc}/data/p={i % DIRS:03d}/f-{i:08d}.parquet" for i in range(files)]
    orphan_keys = [f"{loc}/data/p={i % DIRS:03d}/orphan-{i:08d}.parquet" for i in range(orphans)]

    def put(path: str) -> None:
        s3.put_object(Bucket=BUCKET, Key=path.split("/", 3)[3], Body=b"x")

    with ThreadPoolExecutor(max_workers=32) as pool:
        for n, _ in enumerate(pool.map(put, keys + orphan_keys), 1):
            if n % 50_000 == 0:
                print(f"  {n} objects put ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    put_seconds = time.perf_counter() - started
    per = files // snapshots
    for s in range(snapshots):
        with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
            for path in keys[s * per : (s + 1) * per]:
                append.append_data_file(
                    DataFile.from_args(
                        content=DataFileContent.DATA,
                        file_path=path,
                        file_format=FileFormat.PARQUET,
                        partition=Record(),
                        record_count=1,
                        file_size_in_bytes=1,
                    )
                )
    s3.put_object(Bucket=BUCKET, Key=marker, Body=b"")
    (work / marker).touch()
    print(
        json.dumps(
            {
                "build": {
                    "files": files,
                    "orphans": orphans,
                    "snapshots": snapshots,
                    "put_seconds": round(put_seconds, 1),
                    "total_seconds": round(time.perf_counter() - started, 1),
                }
            }
        )
    )


def step(args: argparse.Namespace) -> None:
    """One task, in this process (run by the parent under wait4)."""
    from airflow_iceberg_maint.index.references import INDEX_FILES
    from airflow_iceberg_maint.orphans.removal import OrphanOptions, remove_orphan_files
    from airflow_iceberg_maint.orphans.sharded import finish_sharded_scan, match_shard, plan_sharded_scan, run_shard

    table = catalog(Path(args.work), args.endpoint).load_table("db.t")
    io = dict(table.io.properties)
    scratch = f"s3://{SCRATCH}/{args.run}"
    options = OrphanOptions(older_than=datetime.fromisoformat(args.cutoff), dry_run=True, only_this_table=True)
    out: dict = {}
    if args.step == "single":
        report = remove_orphan_files(table, options, sources=[INDEX_FILES])
        out = {"orphans": report.orphan_file_count, "listed": report.files_listed}
    elif args.step == "plan":
        out = plan_sharded_scan(
            table, options, shards=args.shards, scratch=scratch, io_properties=io, sources=[INDEX_FILES]
        ).to_json()
    elif args.step == "shard":
        out = run_shard(table, scratch, args.index, io)
    elif args.step == "match":
        out = match_shard(scratch, args.index, io)
    else:
        report = finish_sharded_scan(table, scratch, io, sources=[INDEX_FILES])
        out = {"orphans": report.orphan_file_count, "listed": report.files_listed}
    # This process's own peak (wait4's ru_maxrss would include the parent's, inherited through fork and exec).
    peak = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmHWM"))
    print(json.dumps({**out, "peak_rss_mb": round(int(peak.split()[1]) / 1024)}))


def measure(args: argparse.Namespace, proxy: CountingProxy, name: str, *extra: str) -> dict:
    before = Counter(proxy.kinds)
    started = time.perf_counter()
    command = [
        sys.executable,
        __file__,
        "--work",
        args.work,
        "--endpoint",
        proxy.url,
        "--cutoff",
        args.cutoff,
        "--run",
        args.run,
        "--shards",
        str(args.shards),
        "--step",
        name,
        *extra,
    ]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": "src"})
    out = child.stdout.read() if child.stdout else b""
    status = child.wait()
    if status:
        raise SystemExit(f"step {name} {extra} failed ({status})")
    requests = {k: v - before.get(k, 0) for k, v in proxy.kinds.items() if v - before.get(k, 0)}
    found = json.loads(out.decode().strip().splitlines()[-1])
    result = {
        "step": name + (f" {extra[1]}" if extra else ""),
        "seconds": round(time.perf_counter() - started, 2),
        "peak_rss_mb": found.pop("peak_rss_mb"),
        "requests": requests,
        "result": found,
    }
    print(json.dumps(result), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--orphans", type=int, default=10_000)
    parser.add_argument("--snapshots", type=int, default=100)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--endpoint")
    parser.add_argument("--work", default=".bench-scale")
    parser.add_argument("--step")
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--cutoff")
    parser.add_argument("--run")
    args = parser.parse_args()
    if args.step:
        step(args)
        return
    server = None
    if not args.endpoint:
        server = subprocess.Popen(
            [str(Path(sys.executable).parent / "moto_server"), "-p", "31999"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        args.endpoint = "http://127.0.0.1:31999"
        time.sleep(3)
    try:
        args.work = str(Path(args.work).absolute())
        build(Path(args.work), args.endpoint, args.files, args.orphans, args.snapshots)
        args.cutoff = datetime.now(UTC).isoformat()
        args.run = f"run-{int(time.time())}"
        with CountingProxy(args.endpoint) as proxy:
            steps = [measure(args, proxy, "single")]
            steps.append(measure(args, proxy, "plan"))
            steps += [measure(args, proxy, "shard", "--index", str(i)) for i in range(args.shards)]
            steps += [measure(args, proxy, "match", "--index", str(i)) for i in range(args.shards)]
            steps.append(measure(args, proxy, "finish"))
        sharded = steps[1:]
        by = {name: [s for s in sharded if s["step"].startswith(name)] for name in ("plan", "shard", "match", "finish")}
        total: Counter[str] = Counter()
        for s in sharded:
            total.update(s["requests"])
        print(
            json.dumps(
                {
                    "summary": {
                        "files": args.files,
                        "orphans": args.orphans,
                        "shards": args.shards,
                        "single_seconds": steps[0]["seconds"],
                        "single_peak_rss_mb": steps[0]["peak_rss_mb"],
                        "single_requests": steps[0]["requests"],
                        "sharded_critical_path_seconds": round(sum(max(s["seconds"] for s in by[n]) for n in by), 2),
                        "sharded_task_seconds": round(sum(s["seconds"] for s in sharded), 2),
                        "sharded_peak_rss_mb_per_task": max(s["peak_rss_mb"] for s in sharded),
                        "sharded_requests": dict(total),
                    }
                }
            )
        )
    finally:
        if server is not None:
            server.terminate()


if __name__ == "__main__":
    main()
