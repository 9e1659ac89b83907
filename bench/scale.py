"""Orphan scan at scale on the local S3-protocol server: single task against sharded, requests counted by a proxy.

    .venv/bin/python bench/scale.py --files 100000 --orphans 10000 --shards 4 [--endpoint http://127.0.0.1:PORT] \
        [--budget-mb N]

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
import contextlib
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import boto3
from orphans import placeholder_data_file
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.orphans.inventories import bucket_objects, inventory_time, write_s3_inventory
from tests.reliability import fault_proxy
from tests.reliability.fault_proxy import FaultProxy, Request

BUCKET, SCRATCH = "scale", "scale-scratch"
INVENTORY_PATH = f"/{SCRATCH}/inventory/"  # the S3 Inventory of the table's bucket, in the scratch bucket
CREDS = {
    "s3.access-key-id": "testing",
    "s3.secret-access-key": "testing",
    "s3.region": "us-east-1",
    # pyarrow's filesystem (the commits' existence checks, an inventory's reads) gives up on a reply
    # slower than its default; moto's LIST at 10^6 keys on a loaded machine is slower.
    "s3.request-timeout": "600",
}
DIRS = 100


class CountingProxy(FaultProxy):
    """Counts requests by method and by what they touch: the table's bucket or the scratch bucket."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.kinds: Counter[str] = Counter()

    def _choose(self, request: Request) -> tuple[str, str | None]:
        place = (
            "inventory"
            if request.path.startswith(INVENTORY_PATH)
            else "scratch"
            if request.path.startswith(f"/{SCRATCH}")
            else "table"
        )
        if request.method == "GET" and request.query.get("list-type") == ["2"]:
            kind = "LIST"
        elif request.method == "POST" and "delete" in request.query:
            kind = "DeleteObjects"
        else:
            kind = request.method
        with self._lock:
            self.kinds[f"{kind} {place}"] += 1
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


def build(work: Path, endpoint: str, files: int, orphans: int, snapshots: int, fill) -> None:
    """The table once per server: ``fill`` creates the objects, pyiceberg's fast appends write the manifests."""
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
    fill([path.split("/", 3)[3] for path in keys + orphan_keys])
    put_seconds = time.perf_counter() - started
    per = files // snapshots
    for s in range(snapshots):
        with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
            for path in keys[s * per : (s + 1) * per]:
                append.append_data_file(placeholder_data_file(path))
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
        ),
        flush=True,
    )


def put_over_http(endpoint: str):
    """Objects PUT through the server by 32 threads (any server; about 150 a second on moto here)."""
    s3 = _s3(endpoint)

    def fill(keys: list[str]) -> None:
        with ThreadPoolExecutor(max_workers=32) as pool:
            list(pool.map(lambda key: s3.put_object(Bucket=BUCKET, Key=key, Body=b"x"), keys))

    return fill


def serve(args: argparse.Namespace) -> None:
    """moto's server in this process, its S3 backend filled directly; then it serves until killed.

    Only the one-byte objects are created in the backend (about 16,000 a second instead of 150
    PUTs); the table, its manifests and every request of the scans go through the server over HTTP.
    """
    from moto.moto_server.threaded_moto_server import ThreadedMotoServer
    from moto.s3.models import s3_backends

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line a request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=args.serve, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{args.serve}"
    backend = s3_backends["123456789012"]["aws"]  # moto's default account, which the test keys map to

    def fill(keys: list[str]) -> None:
        for key in keys:
            backend.put_object(BUCKET, key, b"x", disable_notification=True)

    build(Path(args.work).absolute(), endpoint, args.files, args.orphans, args.snapshots, fill)
    print(json.dumps({"serving": endpoint}), flush=True)
    threading.Event().wait()


def write_inventory(work: Path, endpoint: str, files: int, orphans: int, taken: datetime) -> str:
    """An S3 Inventory (Parquet, 100,000 objects a file) of the table's bucket, as AWS would deliver it; its manifest.

    Written straight to the server, not through the counting proxy: the inventory is AWS's work,
    not the scan's. Its rows are the objects the build made, named as ``build`` names them (listing
    10^6 keys from moto would take 20 minutes, ``docs/benchmarks/history.md``), each with the build marker's
    time, which is later than every one of them, and the table's metadata folder as listed.
    """
    s3 = _s3(endpoint)
    loc = catalog(work, endpoint).load_table("db.t").location().rstrip("/").split("/", 3)[3]
    built = max(o["LastModified"] for o in bucket_objects(s3, BUCKET, "built-"))
    keys = [f"{loc}/data/p={i % DIRS:03d}/f-{i:08d}.parquet" for i in range(files)]
    keys += [f"{loc}/data/p={i % DIRS:03d}/orphan-{i:08d}.parquet" for i in range(orphans)]
    objects = [{"Key": key, "Size": 1, "LastModified": built} for key in keys]
    objects += bucket_objects(s3, BUCKET, f"{loc}/metadata/")
    return write_s3_inventory(s3, SCRATCH, BUCKET, objects, "Parquet", taken, per_file=100_000)


def step(args: argparse.Namespace) -> None:
    """One task, in this process (run by the parent under wait4)."""
    from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES
    from airflow_iceberg_maint.orphans.options import DEFAULT_MEMORY_BUDGET_MB, OrphanOptions
    from airflow_iceberg_maint.orphans.removal import remove_orphan_files
    from airflow_iceberg_maint.orphans.sharded.finish import finish_sharded_scan
    from airflow_iceberg_maint.orphans.sharded.match import match_shard
    from airflow_iceberg_maint.orphans.sharded.scan import plan_sharded_scan, run_shard

    table = catalog(Path(args.work), args.endpoint).load_table("db.t")
    io = dict(table.io.properties)
    scratch = f"s3://{SCRATCH}/{args.run}"
    listing = args.listing if args.step == "inventory" else None
    cutoff = datetime.fromisoformat(args.cutoff)
    options = OrphanOptions(
        older_than=cutoff,
        dry_run=not args.real,
        only_this_table=True,
        listing=listing,
        memory_budget_mb=args.budget_mb or DEFAULT_MEMORY_BUDGET_MB,  # the sharded plan carries it to the matches
    )
    out: dict = {}
    if args.step in ("single", "inventory"):
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
        out = {"orphans": report.orphan_file_count, "listed": report.files_listed, "deleted": report.deleted_file_count}
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
        "--budget-mb",
        str(args.budget_mb),
        *(["--listing", args.listing] if args.listing else []),
        *(["--real"] if args.real else []),
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
    parser.add_argument("--endpoint", help="a running server (one started by --serve keeps the table between runs)")
    parser.add_argument("--serve", type=int, metavar="PORT", help="build the table in moto in this process and serve")
    parser.add_argument(
        "--runs", default="single,sharded", help="single, sharded and/or inventory (one task reading an S3 Inventory)"
    )
    parser.add_argument("--listing", help=argparse.SUPPRESS)  # the inventory's manifest, for the inventory step
    parser.add_argument("--real", action="store_true", help="delete (the table must then be built again)")
    parser.add_argument("--work", default=".bench-scale")
    parser.add_argument(
        "--budget-mb", type=int, default=0, help="the scan's memory_budget_mb (0: the default) for every task"
    )
    parser.add_argument("--step")
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--cutoff")
    parser.add_argument("--run")
    args = parser.parse_args()
    if args.step:
        step(args)
        return
    if args.serve:
        serve(args)
        return
    server = None
    if not args.endpoint:
        sizes = ["--files", str(args.files), "--orphans", str(args.orphans), "--snapshots", str(args.snapshots)]
        server = subprocess.Popen(
            [sys.executable, __file__, "--serve", "31999", "--work", args.work, *sizes], stdout=subprocess.PIPE
        )
        args.endpoint = "http://127.0.0.1:31999"
        for line in server.stdout or []:  # the build's figures, then the line saying it serves
            print(line.decode().rstrip(), flush=True)
            if b'"serving"' in line:
                break
    else:
        fill = put_over_http(args.endpoint)
        build(Path(args.work).absolute(), args.endpoint, args.files, args.orphans, args.snapshots, fill)
    fault_proxy.UPSTREAM_SECONDS = 600.0  # moto reads every key of the bucket for each LIST: seconds at 10^5 keys
    try:
        args.work = str(Path(args.work).absolute())
        args.cutoff = inventory_time().isoformat()  # whole milliseconds, as an inventory's time
        args.run = f"run-{int(time.time())}"
        runs = args.runs.split(",")
        steps = []
        if "inventory" in runs:
            args.listing = write_inventory(
                Path(args.work), args.endpoint, args.files, args.orphans, datetime.fromisoformat(args.cutoff)
            )
        with CountingProxy(args.endpoint) as proxy:
            if "inventory" in runs:
                steps.append(measure(args, proxy, "inventory"))
            if "single" in runs:
                steps.append(measure(args, proxy, "single"))
            if "sharded" in runs:
                steps.append(measure(args, proxy, "plan"))
                steps += [measure(args, proxy, "shard", "--index", str(i)) for i in range(args.shards)]
                steps += [measure(args, proxy, "match", "--index", str(i)) for i in range(args.shards)]
                steps.append(measure(args, proxy, "finish"))
        if args.real:  # the orphans are gone: the next run builds again
            _s3(args.endpoint).delete_object(Bucket=BUCKET, Key=f"built-{args.files}-{args.orphans}-{args.snapshots}")
        summary: dict = {
            "files": args.files,
            "orphans": args.orphans,
            "shards": args.shards,
            "real": args.real,
            "budget_mb": args.budget_mb,
        }
        for one in ("single", "inventory"):
            for s in (s for s in steps if s["step"] == one):
                summary.update(
                    {
                        f"{one}_seconds": s["seconds"],
                        f"{one}_peak_rss_mb": s["peak_rss_mb"],
                        f"{one}_requests": s["requests"],
                    }
                )
        sharded = [s for s in steps if s["step"] not in ("single", "inventory")]
        if sharded:
            names = ("plan", "shard", "match", "finish")
            by = {name: [s for s in sharded if s["step"].startswith(name)] for name in names}
            total: Counter[str] = Counter()
            for s in sharded:
                total.update(s["requests"])
            summary.update(
                sharded_critical_path_seconds=round(sum(max(s["seconds"] for s in by[n]) for n in by), 2),
                sharded_task_seconds=round(sum(s["seconds"] for s in sharded), 2),
                sharded_peak_rss_mb_per_task=max(s["peak_rss_mb"] for s in sharded),
                sharded_requests=dict(total),
            )
        print(json.dumps({"summary": summary}))
    finally:
        if server is not None:
            server.terminate()


if __name__ == "__main__":
    main()
