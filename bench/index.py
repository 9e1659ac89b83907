"""Index benchmark: lookups against a pyiceberg filtered scan, build against a pure pyarrow sort, in one run.

    .venv/bin/python bench/index.py              # 10,000,000 rows, unsorted int64 key, 10 data files

- table: ``id`` (random int64, unsorted, almost unique) and a ``payload`` string, written by
  pyiceberg into a SQLite catalog on the local disk, ``--files`` appends of equal size, with
  ``write.parquet.row-group-limit`` = ``--row-group-rows`` (a row fetch decodes part of one row
  group of a data file, so its cost grows with the row-group size; pyiceberg's default is 1M rows);
- build: ``refresh_full`` of an index ordered by ``id`` with ``_file``/``_pos`` (read, apply
  deletes, sort, cut, write region files and the tracking file, commit), in entries per second,
  against the floor: ``pyarrow.compute.sort_indices`` of the same keys already in memory;
- lookup: ``lookup`` of ``--probes`` present keys, warm (caches filled by one warm-up lookup),
  p50 and p95, against ``table.scan(row_filter=EqualTo("id", key)).to_arrow()`` for
  ``--scan-probes`` of the same keys; both return the same rows (checked);
- region files read per lookup (target 1 for a non-spanning key).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import EqualTo
from pyiceberg.table import Table

from airflow_iceberg_maint.index.lookup import lookup
from airflow_iceberg_maint.index.metadata import new_index_metadata
from airflow_iceberg_maint.index.refresh import refresh_full
from airflow_iceberg_maint.index.store import IndexStore

SCHEMA = pa.schema([("id", pa.int64()), ("payload", pa.string())])


def _batch(rows: int, seed_offset: int) -> pa.Table:
    keys = pc.cast(pc.floor(pc.multiply(pc.random(rows, initializer=seed_offset), float(2**40))), pa.int64())
    return pa.table({"id": keys, "payload": pc.binary_join_element_wise("p", pc.cast(keys, pa.string()), "")},
                    schema=SCHEMA)


def make_table(root: Path, rows: int, files: int, row_group_rows: int) -> Table:
    shutil.rmtree(root, ignore_errors=True)
    (root / "wh").mkdir(parents=True)
    catalog = SqlCatalog("bench", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/wh")
    catalog.create_namespace("db")
    table = catalog.create_table("db.events", schema=SCHEMA,
                                 properties={"write.parquet.row-group-limit": str(row_group_rows)})
    for i in range(files):
        table.append(_batch(rows // files, seed_offset=i + 1))
    return table


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def bench_build(table: Table) -> dict[str, Any]:
    keys = table.scan(selected_fields=("id",)).to_arrow().column("id")
    started = time.perf_counter()
    pc.sort_indices(keys)
    floor_seconds = time.perf_counter() - started
    started = time.perf_counter()
    result = refresh_full(table, "by_id")
    build_seconds = time.perf_counter() - started
    return {
        "entries": result.entries,
        "region_files": result.region_files_written,
        "build_seconds": round(build_seconds, 3),
        "build_entries_per_second": round(result.entries / build_seconds),
        "floor_sort_seconds": round(floor_seconds, 3),
        "floor_entries_per_second": round(len(keys) / floor_seconds),
        "build_vs_floor": round(build_seconds / floor_seconds, 2),
        "keys": keys,
    }


def bench_lookups(table: Table, keys: pa.ChunkedArray, probes: int, scan_probes: int) -> dict[str, Any]:
    positions = pc.cast(pc.floor(pc.multiply(pc.random(probes, initializer=99), len(keys) - 1)), pa.int64())
    sample = pc.take(keys, positions)
    values = sample.to_pylist()
    lookup(table, "by_id", [(values[0],)])  # warm-up: plan, tracking file and OS caches
    timings, regions = [], []
    for value in values:
        started = time.perf_counter()
        result = lookup(table, "by_id", [(value,)])
        timings.append(time.perf_counter() - started)
        regions.append(result.region_files_read)
        assert result.mode == "index" and result.rows.num_rows >= 1
    scans = []
    for value in values[:scan_probes]:
        started = time.perf_counter()
        scanned = table.scan(row_filter=EqualTo("id", value)).to_arrow()
        scans.append(time.perf_counter() - started)
        found = lookup(table, "by_id", [(value,)]).rows
        assert sorted(scanned.to_pylist(), key=str) == sorted(found.to_pylist(), key=str)
    lookup_p50, scan_p50 = _percentile(timings, 0.5), _percentile(scans, 0.5)
    return {
        "lookup_probes": len(values),
        "lookup_warm_p50_ms": round(lookup_p50 * 1000, 2),
        "lookup_warm_p95_ms": round(_percentile(timings, 0.95) * 1000, 2),
        "scan_probes": len(scans),
        "scan_p50_ms": round(scan_p50 * 1000, 1),
        "scan_p95_ms": round(_percentile(scans, 0.95) * 1000, 1),
        "lookup_speedup_p50": round(scan_p50 / lookup_p50, 1),
        "region_files_read_per_lookup_mean": round(statistics.fmean(regions), 3),
        "region_files_read_per_lookup_max": max(regions),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--probes", type=int, default=200)
    parser.add_argument("--scan-probes", type=int, default=5)
    parser.add_argument("--row-group-rows", type=int, default=65_536)
    parser.add_argument("--root", type=Path, default=Path(".bench/index"))
    args = parser.parse_args(argv)

    started = time.perf_counter()
    table = make_table(args.root, args.rows, args.files, args.row_group_rows)
    setup_seconds = time.perf_counter() - started
    metadata = new_index_metadata(table, "by_id", ["id"], [], True, {})
    IndexStore(table).create(metadata, "by_id")
    build = bench_build(table)
    keys = build.pop("keys")
    table = table.refresh()
    lookups = bench_lookups(table, keys, args.probes, args.scan_probes)
    report = {"rows": args.rows, "data_files": args.files, "data_row_group_rows": args.row_group_rows,
              "setup_seconds": round(setup_seconds, 1), **build, **lookups,
              "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    shutil.rmtree(args.root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
