"""The S3 mode of ``bench/expire.py``: ours, the baseline and the floor on a table stored on a local S3-protocol server.

    TEST_S3_PORT=... scripts/services.sh run -- .venv/bin/python bench/expire.py --s3 moto \\
        --snapshots 300 --expire 270

The table is ``bench/orphans.py``'s S3 table (``build_s3``: one-byte objects PUT through the
server, registered by fast appends of ``--files-per-snapshot`` files spread over 100
``data/p=NNNN/`` folders), prepared as the local one (every metadata file kept in the log, the
build's orphans removed). Built once per server (a marker object says so). Its state as prepared
is kept aside once: the key list, the bytes of every object under ``metadata/`` and the SQLite
catalog. Before each way the bench brings that state back, untimed: it PUTs again what the last
way deleted, deletes the metadata files the last way wrote, and copies the catalog back; so no
repetition uploads the table again and every way starts from the same state.

Requests are counted in a pass of their own before the timed repetitions, through a TCP proxy in
front of the server (``bench/scale.py``'s ``CountingProxy``), so that relaying costs no timed run
anything; the timed repetitions talk to the server directly. The ways (``bench/expire.py``'s):
ours, the baseline (pyiceberg's expiry, then this project's orphan removal: LIST calls over the
whole table location) and the floor (every manifest list and unique manifest read once, one
process a core). The naive way needs a local file system and is left out.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from expire import baseline, cutoff_for, floor_way, measure, ours, prepare_table, run_way, same_sets
from orphans import S3_BUCKET, build_s3, in_child, load_s3, s3_catalog_db, s3_client, s3_keys
from pyiceberg.table import Table
from scale import CountingProxy

from airflow_iceberg_maint.reachability.manifests import unique_manifest_paths

DATA_BODY = b"x"  # every data object build_s3 PUTs
PREFIXES = 100  # data/p=NNNN/ folders


class Pristine:
    """The table's objects and catalog as prepared, kept in ``folder``, and the way back to them."""

    def __init__(self, endpoint: str, folder: Path, db: Path, location: str) -> None:
        self.s3 = s3_client(endpoint)
        self.folder, self.db = folder, db
        self.prefix = location.removeprefix(f"s3://{S3_BUCKET}/").rstrip("/") + "/"
        self.keys: set[str] = set()

    def save(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
        keys = self._list("")
        for key in keys - self._data(keys):
            target = self.folder / "objects" / key
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(self.s3.get_object(Bucket=S3_BUCKET, Key=key)["Body"].read())
        shutil.copyfile(self.db, self.folder / "catalog.db")
        (self.folder / "keys.json").write_text(json.dumps(sorted(keys)))  # written last: marks the copy whole
        self.keys = keys

    def load(self) -> bool:
        saved = self.folder / "keys.json"
        self.keys = set(json.loads(saved.read_text())) if saved.exists() else set()
        return bool(self.keys)

    def restore(self, last: dict[str, Any] | None = None) -> None:
        """Undo the last way: its deletes (``last["deleted"]``, any object) and what it wrote under ``metadata/``.

        Only ``metadata/`` is listed (a way writes nothing else); deleted data objects come from the
        way's own report, which the bench checks against the other ways'.
        """
        listed = self._list("metadata/")
        deleted = {path.removeprefix(f"s3://{S3_BUCKET}/") for path in (last or {}).get("deleted", ())}
        missing = (self.keys - self._data(self.keys) - listed) | deleted
        unknown = missing - self.keys
        if unknown:
            raise SystemExit(
                f"a way deleted {len(unknown)} objects the prepared table did not hold: {sorted(unknown)[:3]}"
            )
        written = sorted(listed - self.keys)
        for start in range(0, len(written), 1000):
            batch = [{"Key": key} for key in written[start : start + 1000]]
            self.s3.delete_objects(Bucket=S3_BUCKET, Delete={"Objects": batch, "Quiet": True})
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(self._put_back, missing))
        shutil.copyfile(self.folder / "catalog.db", self.db)

    def _put_back(self, key: str) -> None:
        body = DATA_BODY if key.startswith(f"{self.prefix}data/") else (self.folder / "objects" / key).read_bytes()
        self.s3.put_object(Bucket=S3_BUCKET, Key=key, Body=body)

    def _data(self, keys: set[str]) -> set[str]:
        return {key for key in keys if key.startswith(f"{self.prefix}data/")}

    def _list(self, under: str) -> set[str]:
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=S3_BUCKET, Prefix=self.prefix + under)
        return {o["Key"] for page in pages for o in page.get("Contents", [])}


def _build(endpoint: str, work: Path, snapshots: int, per_snapshot: int) -> tuple[str, bool]:
    """The table built and prepared once per server (in a child: pyiceberg's threads).

    Returns its location, and whether it was prepared now.
    """
    table = build_s3(endpoint, work, snapshots * per_snapshot, PREFIXES, 0, per_snapshot)
    marker = f"prepared-{snapshots}-{per_snapshot}"
    s3 = s3_client(endpoint)
    if s3.list_objects_v2(Bucket=S3_BUCKET, Prefix=marker).get("KeyCount"):
        return table.location(), False
    prepare_table(lambda: load_s3(s3_catalog_db(work, endpoint), endpoint))
    s3.put_object(Bucket=S3_BUCKET, Key=marker, Body=b"")
    return table.location(), True


def _plan(load_table: Callable[[], Table], expire: int) -> tuple[Any, list[str], list[str], int]:
    table = load_table()
    manifest_lists = [s.manifest_list for s in table.metadata.snapshots]
    manifests = unique_manifest_paths(table.io, manifest_lists)
    return cutoff_for(table, expire), manifest_lists, manifests, len(manifest_lists)


def _ways(load_table: Callable[[], Table], plan: tuple[Any, list[str], list[str], int]) -> dict[str, Any]:
    cutoff, manifest_lists, manifests, _ = plan
    return {
        "floor": lambda: in_child(floor_way, load_table, manifest_lists, manifests),
        "ours": lambda: in_child(run_way, load_table, ours, cutoff),
        "baseline": lambda: in_child(run_way, load_table, baseline, cutoff),
    }


def main_s3(args: argparse.Namespace) -> int:
    endpoint = os.environ["TEST_SEAWEED_S3_ENDPOINT" if args.s3 == "seaweed" else "TEST_S3_ENDPOINT"]
    keys = s3_keys(endpoint)
    work = args.work.resolve() / f"s3-{args.s3}"
    db = s3_catalog_db(work, endpoint)
    print(f"preparing on {args.s3}: {args.snapshots} snapshots x {args.files_per_snapshot} files", file=sys.stderr)
    location, prepared_now = in_child(_build, endpoint, work, args.snapshots, args.files_per_snapshot)
    pristine = Pristine(endpoint, work / "pristine", db, location)
    if prepared_now or not pristine.load():
        pristine.save()
    pristine.restore()  # a run stopped midway may have left a way's changes
    direct = lambda: load_s3(db, endpoint, keys)  # noqa: E731
    plan = in_child(_plan, direct, args.expire)

    # The request counts, one pass through the proxy (untimed).
    requests: dict[str, dict[str, int]] = {}
    counted: dict[str, dict[str, Any]] = {}
    with CountingProxy(endpoint) as proxy:
        for name, way in _ways(lambda: load_s3(db, proxy.url, keys), plan).items():
            pristine.restore(counted.get("last"))
            before = Counter(proxy.kinds)
            counted[name] = counted["last"] = way()
            requests[name] = {k.removesuffix(" table"): v - before[k] for k, v in proxy.kinds.items() if v > before[k]}
    pristine.restore(counted.pop("last"))

    times, cpu, parts, results = measure(_ways(direct, plan), pristine.restore, args.repeat)
    pristine.restore(results["last"])
    for label, found in (("counting pass", counted), ("timed runs", results)):
        problem = same_sets(found, args.expire, ("baseline",))
        if problem:
            print(f"MISMATCH ({label}): {problem}", file=sys.stderr)
            return 1
    median = {k: statistics.median(v) for k, v in times.items()}
    median_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    summary: dict[str, Any] = {
        "server": f"{args.s3} at {endpoint}",
        "table": {
            "snapshots": plan[3],
            "expired_snapshots": len(results["ours"]["expired"]),
            "unique_manifests": len(plan[2]),
            "data_files": args.snapshots * args.files_per_snapshot,
            "objects": len(pristine.keys),
            "deleted_files": len(results["ours"]["deleted"]),
            "cores": os.cpu_count(),
        },
        "seconds_median": {k: round(v, 3) for k, v in median.items()},
        "seconds_all": {k: [round(x, 3) for x in v] for k, v in times.items()},
        "cpu_seconds_median": {k: round(v, 3) for k, v in median_cpu.items()},
        "parts_seconds_median": {k: round(statistics.median(v), 3) for k, v in parts.items()},
        "requests": requests,
        "baseline_over_ours": round(median["baseline"] / median["ours"], 2),
        "baseline_over_ours_cpu": round(median_cpu["baseline"] / median_cpu["ours"], 2),
        "ours_over_floor": round(median["ours"] / median["floor"], 2),
    }
    print(json.dumps(summary, indent=2))
    print(
        f"s3 ({args.s3}): ours {median['ours']:.2f} s | baseline {median['baseline']:.2f} s (pyiceberg expiry "
        f"{summary['parts_seconds_median']['baseline.pyiceberg_expiry']:.2f} s, then orphan removal) | floor "
        f"{median['floor']:.2f} s  ->  baseline/ours {summary['baseline_over_ours']} (target >= 5), "
        f"ours/floor {summary['ours_over_floor']}; CPU seconds: ours {median_cpu['ours']:.2f}, baseline "
        f"{median_cpu['baseline']:.2f}; requests: "
        + "; ".join(f"{n} {dict(sorted(r.items()))}" for n, r in requests.items())
    )
    return 0
