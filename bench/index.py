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
  p50 and p95, against ``table.scan(row_filter=EqualTo("id", key)).to_arrow()`` of one key in
  each of ``--rounds`` rounds (both return the same rows, checked), and against the fetch
  floor: pyarrow decoding the row from its row group of an already open data file, the part of
  a lookup no Parquet reader without page skipping avoids. Scans, lookups and floors are
  interleaved round by round, so a slow stretch of a noisy machine weighs on all of them;
- index-only lookup: the same keys through a second index whose extract also stores
  ``payload`` (``--identity payload``), answered from its region file alone;
- region files read per lookup (target 1 for a non-spanning key).

    .venv/bin/python bench/index.py --refresh    # incremental refresh against a full rebuild

- refresh (``--refresh``, instead of the above): the same table, fully indexed; then
  ``--append-fraction`` (1%) new rows are appended twice, and after each append the refresh is
  timed both ways on the same snapshot: ``refresh_full`` of a twin index with the same
  definition, then ``refresh_index`` (incremental) of the index. First append: new keys above
  every existing one (ids or times that grow); second: keys spread over the whole range (the
  worst case, every region is touched). Reported per case: seconds and region bytes written
  by each, and the ratios incremental / full (targets: at most 0.1 for both).
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
import pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import EqualTo
from pyiceberg.table import Table

from airflow_iceberg_maint.index.extract_files import read_tracking_file
from airflow_iceberg_maint.index.incremental import refresh_index
from airflow_iceberg_maint.index.lookup import lookup
from airflow_iceberg_maint.index.metadata.builders import new_index_metadata
from airflow_iceberg_maint.index.refresh import RefreshResult, refresh_full
from airflow_iceberg_maint.index.store import IndexStore

SCHEMA = pa.schema([("id", pa.int64()), ("payload", pa.string())])
#: A second index on ``id`` whose extract also holds ``payload``: its lookups read no data file.
COVERING = "by_id_with_payload"


def _batch(rows: int, seed_offset: int, low: int = 0) -> pa.Table:
    """Random keys in ``[low, low + 2**40)``."""
    keys = pc.cast(pc.add(pc.floor(pc.multiply(pc.random(rows, initializer=seed_offset), float(2**40))), float(low)),
                   pa.int64())
    return pa.table({"id": keys, "payload": pc.binary_join_element_wise("p", pc.cast(keys, pa.string()), "")},
                    schema=SCHEMA)


def make_table(root: Path, rows: int, files: int, row_group_rows: int) -> Table:
    root = root.resolve()  # a relative path would make a ``file://`` URI whose first part is a host
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


def _row_locations(table: Table, values: list[Any]) -> dict[Any, tuple[pq.ParquetFile, int, int]]:
    """Where each value's first row is: an open data file, its row group and the row in it.

    Found by reading the key column of every data file, independently of the index.
    """
    wanted = pa.array(values, type=pa.int64())
    found: dict[Any, tuple[pq.ParquetFile, int, int]] = {}
    for task in table.scan().plan_files():
        parquet = pq.ParquetFile(table.io.new_input(task.file.file_path).open(), pre_buffer=False)
        for group in range(parquet.metadata.num_row_groups):
            ids = parquet.read_row_group(group, columns=["id"]).column("id")
            for row in pc.indices_nonzero(pc.is_in(ids, value_set=wanted)).to_pylist():
                found.setdefault(ids[row].as_py(), (parquet, group, row))
    return found


def _fetch_floor(location: tuple[pq.ParquetFile, int, int]) -> float:
    """Seconds pyarrow takes to decode one row from its row group of an already open data file:
    the row group's column chunks up to the row, on Arrow's threads, as any Parquet reader
    without page skipping must."""
    parquet, group, row = location
    started = time.perf_counter()
    next(parquet.iter_batches(batch_size=row + 1, row_groups=[group], use_threads=True))
    return time.perf_counter() - started


def bench_lookups(table: Table, keys: pa.ChunkedArray, probes: int, rounds: int) -> dict[str, Any]:
    """Lookups, filtered scans and the fetch floor, interleaved in ``rounds`` so that a slower
    stretch of a noisy machine weighs on all three alike."""
    positions = pc.cast(pc.floor(pc.multiply(pc.random(probes, initializer=99), len(keys) - 1)), pa.int64())
    values = pc.take(keys, positions).to_pylist()
    locations = _row_locations(table, values)
    lookup(table, "by_id", [(values[0],)])  # warm-up: plan, tracking file and OS caches
    _fetch_floor(locations[values[0]])
    timings, regions, scans, floors, index_only = [], [], [], [], []
    per_round = -(-len(values) // rounds)
    for start in range(0, len(values), per_round):
        chunk = values[start:start + per_round]
        started = time.perf_counter()
        scanned = table.scan(row_filter=EqualTo("id", chunk[0])).to_arrow()
        scans.append(time.perf_counter() - started)
        assert sorted(scanned.to_pylist(), key=str) == sorted(lookup(table, "by_id", [(chunk[0],)]).rows.to_pylist(),
                                                             key=str)
        for value in chunk:
            started = time.perf_counter()
            result = lookup(table, "by_id", [(value,)])
            timings.append(time.perf_counter() - started)
            regions.append(result.region_files_read)
            assert result.mode == "index" and result.rows.num_rows >= 1
        floors.extend(_fetch_floor(locations[value]) for value in chunk)
        for value in chunk:
            started = time.perf_counter()
            covered = lookup(table, COVERING, [(value,)])
            index_only.append(time.perf_counter() - started)
            assert covered.mode == "index" and covered.rows.num_rows >= 1
    lookup_p50, scan_p50, floor_p50, only_p50 = (_percentile(t, 0.5) for t in (timings, scans, floors, index_only))
    return {
        "lookup_probes": len(values),
        "lookup_warm_p50_ms": round(lookup_p50 * 1000, 2),
        "lookup_warm_p95_ms": round(_percentile(timings, 0.95) * 1000, 2),
        "scan_probes": len(scans),
        "scan_p50_ms": round(scan_p50 * 1000, 1),
        "scan_p95_ms": round(_percentile(scans, 0.95) * 1000, 1),
        "lookup_speedup_p50": round(scan_p50 / lookup_p50, 1),
        "fetch_floor_p50_ms": round(floor_p50 * 1000, 2),
        "lookup_vs_fetch_floor_p50": round(lookup_p50 / floor_p50, 2),
        "index_only_lookup_p50_ms": round(only_p50 * 1000, 2),
        "index_only_speedup_p50": round(scan_p50 / only_p50, 1),
        "region_files_read_per_lookup_mean": round(statistics.fmean(regions), 3),
        "region_files_read_per_lookup_max": max(regions),
    }


def _region_bytes(table: Table, result: RefreshResult) -> dict[str, int]:
    """Region file sizes of the committed extract, by path."""
    return {r.file_path: r.file_size_in_bytes for r in read_tracking_file(table.io, result.extract.tracking_file)}


def _timed_refreshes(table: Table, before: dict[str, int]) -> tuple[dict[str, Any], dict[str, int]]:
    """A full rebuild (twin index) and an incremental refresh of the same snapshot, measured."""
    started = time.perf_counter()
    full = refresh_index(table, "by_id_full", full=True)
    full_seconds = time.perf_counter() - started
    started = time.perf_counter()
    incremental = refresh_index(table, "by_id")
    incremental_seconds = time.perf_counter() - started
    assert incremental.mode == "incremental" and incremental.entries == full.entries
    full_bytes = sum(_region_bytes(table, full).values())
    after = _region_bytes(table, incremental)
    written_bytes = sum(size for path, size in after.items() if path not in before)
    return {
        "entries": incremental.entries,
        "full_seconds": round(full_seconds, 3),
        "full_region_files_written": full.region_files_written,
        "full_region_bytes_written": full_bytes,
        "incremental_seconds": round(incremental_seconds, 3),
        "incremental_region_files_written": incremental.region_files_written,
        "incremental_region_files_reused": incremental.region_files_reused,
        "incremental_region_bytes_written": written_bytes,
        "time_ratio": round(incremental_seconds / full_seconds, 4),
        "region_bytes_ratio": round(written_bytes / full_bytes, 4),
    }, after


def bench_refresh(table: Table, rows: int, fraction: float) -> dict[str, Any]:
    """Incremental refresh against a full rebuild after appends of ``fraction`` new rows."""
    for name in ("by_id", "by_id_full"):
        IndexStore(table).create(new_index_metadata(table, name, ["id"], [], True, {}), name)
    started = time.perf_counter()
    initial = refresh_full(table, "by_id")
    initial_seconds = time.perf_counter() - started
    before = _region_bytes(table, initial)
    appended = max(int(rows * fraction), 1)
    table.append(_batch(appended, seed_offset=1001, low=2**40))  # keys above every existing one
    table = table.refresh()
    growing, before = _timed_refreshes(table, before)
    table.append(_batch(appended, seed_offset=1002))  # keys anywhere in the existing range
    table = table.refresh()
    spread, _ = _timed_refreshes(table, before)
    return {"initial_full_seconds": round(initial_seconds, 3), "initial_region_files": initial.region_files_written,
            "appended_rows_per_case": appended, "append_above_all_keys": growing, "append_random_keys": spread}


def _report(report: dict[str, Any]) -> None:
    report["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--probes", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=10, help="scans, each followed by a share of the lookups")
    parser.add_argument("--row-group-rows", type=int, default=65_536)
    parser.add_argument("--root", type=Path, default=Path(".bench/index"))
    parser.add_argument("--refresh", action="store_true", help="benchmark the incremental refresh instead")
    parser.add_argument("--append-fraction", type=float, default=0.01)
    args = parser.parse_args(argv)

    started = time.perf_counter()
    table = make_table(args.root, args.rows, args.files, args.row_group_rows)
    setup_seconds = time.perf_counter() - started
    if args.refresh:
        refresh = bench_refresh(table, args.rows, args.append_fraction)
        _report({"rows": args.rows, "data_files": args.files, "setup_seconds": round(setup_seconds, 1), **refresh})
        shutil.rmtree(args.root, ignore_errors=True)
        return 0
    metadata = new_index_metadata(table, "by_id", ["id"], [], True, {})
    IndexStore(table).create(metadata, "by_id")
    build = bench_build(table)
    keys = build.pop("keys")
    IndexStore(table).create(new_index_metadata(table, COVERING, ["id"], ["payload"], True, {}), COVERING)
    started = time.perf_counter()
    refresh_full(table, COVERING)
    covering_seconds = time.perf_counter() - started
    table = table.refresh()
    lookups = bench_lookups(table, keys, args.probes, args.rounds)
    _report({"rows": args.rows, "data_files": args.files, "data_row_group_rows": args.row_group_rows,
             "setup_seconds": round(setup_seconds, 1), **build,
             "index_only_build_seconds": round(covering_seconds, 3), **lookups})
    shutil.rmtree(args.root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
