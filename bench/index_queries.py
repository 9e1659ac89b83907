"""Many keys and ranges through an index against a pyiceberg scan of the same filter (``bench/index.py --many``).

For each key count in ``--keys`` (default 10,000) and each fraction of the rows in
``--range-fractions`` (default 0.001):

- query: ``lookup_keys`` of that many present keys (``id`` values spread over the table: the
  data is in random key order), or ``lookup_range`` of a range holding that fraction of the rows;
- baseline: ``table.scan(row_filter=In("id", keys))`` or a scan with the same bounds, ``.to_arrow()``;
- both return the same rows (every column, as multisets: the scan's order is not the index's),
  checked on every run;
- timing: one cold query (the first in the process: no open file, no cached statistics), then
  ``--repeat`` rounds of scan then query; medians of wall and CPU seconds (the process's CPU
  time, every thread counted: the scan decodes on Arrow's threads, the query on a few threads
  of its own). Ratios are scan / query;
- where the rows are, from ``plan_keys``/``plan_range`` (no data file read): the data files and
  the pages of each fetched column holding a row, against all the pages of those columns;
- fetch floor: the fetched columns of those data files read whole by pyarrow (threads on). When
  every page holds a row, a query must decompress and decode at least that much, so scan / floor
  is the most any index could give on this table (least of ``--repeat`` runs, wall and CPU).
"""

from __future__ import annotations

import statistics
import time
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.expressions import And, BooleanExpression, GreaterThanOrEqual, In, LessThanOrEqual
from pyiceberg.table import Table

from airflow_iceberg_maint.index.read.query import QueryPlan, lookup_keys, lookup_range, plan_keys, plan_range
from airflow_iceberg_maint.index.source import page_reads
from airflow_iceberg_maint.index.source.parquet_files import opened_parquet

#: The columns a query fetches from the data files: ``id`` is the index's key, held in its entries.
FETCHED = ["payload"]


def _timed(run: Callable[[], Any]) -> tuple[float, float, Any]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = run()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def _same_rows(found: pa.Table, scanned: pa.Table) -> None:
    def rows(table: pa.Table) -> Counter[tuple[Any, ...]]:
        return Counter(tuple(r.values()) for r in table.select(sorted(table.column_names)).to_pylist())

    if rows(found) != rows(scanned):
        raise AssertionError("the query and the scan returned different rows")


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def _against_scan(query: Callable[[], pa.Table], scan: Callable[[], pa.Table], repeat: int) -> dict[str, Any]:
    cold_wall, cold_cpu, found = _timed(query)
    scans: list[tuple[float, float]] = []
    queries: list[tuple[float, float]] = []
    for _ in range(repeat):
        scan_wall, scan_cpu, scanned = _timed(scan)
        query_wall, query_cpu, found = _timed(query)
        _same_rows(found, scanned)
        scans.append((scan_wall, scan_cpu))
        queries.append((query_wall, query_cpu))
    scan_wall, scan_cpu = (_median([s[i] for s in scans]) for i in (0, 1))
    query_wall, query_cpu = (_median([q[i] for q in queries]) for i in (0, 1))
    return {
        "rows_returned": found.num_rows,
        "scan_seconds_wall_cpu": [scan_wall, scan_cpu],
        "query_cold_seconds_wall_cpu": [round(cold_wall, 3), round(cold_cpu, 3)],
        "query_warm_seconds_wall_cpu": [query_wall, query_cpu],
        "speedup_wall_cold": round(scan_wall / cold_wall, 1),
        "speedup_wall_warm": round(scan_wall / query_wall, 1),
        "speedup_cpu_warm": round(scan_cpu / query_cpu, 1),
    }


def _where(table: Table, plan: QueryPlan) -> dict[str, Any]:
    """Data files and pages of the fetched columns holding the planned rows, against all their pages."""
    held = total = held_bytes = total_bytes = dictionary_bytes = 0
    for planned in plan.files:
        with opened_parquet(table.io, planned.path) as handle:
            layout = page_reads._layout(handle, planned.path)
            for group in range(len(handle.starts) - 1):
                local = [p - handle.starts[group] for p in planned.positions if handle.starts[group] <= p]
                local = [row for row in local if row < handle.starts[group + 1] - handle.starts[group]]
                for name in FETCHED:
                    leaf = layout.flat[name][0]
                    chunk = layout.footer.row_groups[group].columns[leaf]
                    pages = page_reads._pages(handle, planned.path, chunk, group, leaf)
                    hit = {bisect_right(pages.first_rows, row) - 1 for row in local}
                    held, total = held + len(hit), total + len(pages.sizes)
                    held_bytes += sum(pages.sizes[p] for p in hit)
                    total_bytes += sum(pages.sizes)
                    if hit:  # what precedes the first data page: the dictionary page, if any
                        metadata = chunk.meta_data
                        start = metadata.dictionary_page_offset
                        start = metadata.data_page_offset if start is None else start
                        dictionary_bytes += pages.offsets[0] - min(start, pages.offsets[0])
    return {
        "data_files": len(plan.files),
        "pages_holding_rows": held,
        "pages_of_the_fetched_columns": total,
        "page_bytes_holding_rows": held_bytes,
        "page_bytes_of_the_fetched_columns": total_bytes,
        "dictionary_page_bytes_of_those_column_chunks": dictionary_bytes,
    }


def _fetch_floor(table: Table, plan: QueryPlan, repeat: int) -> tuple[float, float]:
    """Wall and CPU seconds to read the fetched columns of the planned data files whole (the least
    of ``repeat`` runs: a floor, which load only raises)."""

    def read() -> None:
        for planned in plan.files:
            with table.io.new_input(planned.path).open() as stream:
                pq.read_table(stream, columns=FETCHED, use_threads=True)

    runs = [_timed(read)[:2] for _ in range(repeat)]
    return round(min(r[0] for r in runs), 3), round(min(r[1] for r in runs), 3)


def _case(
    table: Table, query: Callable[[], pa.Table], scan: Callable[[], pa.Table], plan: QueryPlan, repeat: int
) -> dict[str, Any]:
    measured = _against_scan(query, scan, repeat)
    floor = _fetch_floor(table, plan, repeat)
    scan = measured["scan_seconds_wall_cpu"]
    return {
        **measured,
        **_where(table, plan),
        "fetch_floor_seconds_wall_cpu": list(floor),
        "scan_over_fetch_floor_wall_cpu": [round(scan[0] / floor[0], 1), round(scan[1] / floor[1], 1)],
    }


def bench_many(
    table: Table, keys: pa.ChunkedArray, counts: list[int], fractions: list[float], repeat: int
) -> dict[str, Any]:
    """Each key count and each range fraction against a pyiceberg scan of the same filter."""
    ids = pc.unique(keys.combine_chunks())
    report: dict[str, Any] = {}
    for count in counts:
        step = max(1, len(ids) // count)
        wanted = ids.take(pa.array(range(0, step * count, step), type=pa.int64()))
        values = wanted.to_pylist()
        report[f"keys_{count}"] = _case(
            table,
            lambda w=wanted: lookup_keys(table, "by_id", w),
            lambda v=values: table.scan(row_filter=In("id", v)).to_arrow(),
            plan_keys(table, "by_id", wanted),
            repeat,
        )
    ordered = pc.sort_indices(ids)
    low_at = len(ids) // 2
    for fraction in fractions:
        low = ids[ordered[low_at].as_py()].as_py()
        high = ids[ordered[low_at + max(1, int(len(ids) * fraction)) - 1].as_py()].as_py()
        bounds: BooleanExpression = And(GreaterThanOrEqual("id", low), LessThanOrEqual("id", high))
        report[f"range_{fraction:g}"] = _case(
            table,
            lambda lo=low, hi=high: lookup_range(table, "by_id", lo, hi),
            lambda b=bounds: table.scan(row_filter=b).to_arrow(),
            plan_range(table, "by_id", low, high),
            repeat,
        )
    return report


def many_keys_on_s3(
    table: Table, keys: pa.ChunkedArray, count: int, requests: list[tuple[str, str, int]]
) -> dict[str, Any]:
    """GET requests and bytes of ``lookup_keys`` of ``count`` keys, split into data and index files
    (``requests``: the counting proxy's log of method, path and reply bytes), cold then warm,
    against the bytes of the pages holding the rows."""
    ids = pc.unique(keys.combine_chunks())
    step = max(1, len(ids) // count)
    wanted = ids.take(pa.array(range(1, step * count, step), type=pa.int64()))  # not the single lookups' keys
    report: dict[str, Any] = {"keys": count}
    for run in ("cold", "warm"):
        requests.clear()
        seconds, _, found = _timed(lambda: lookup_keys(table, "by_id", wanted))
        gets = [(path, size) for method, path, size in requests if method == "GET" and "list-type" not in path]
        data = [size for path, size in gets if "/index/" not in path]
        report[run] = {
            "seconds": round(seconds, 3),
            "rows": found.num_rows,
            "requests": len(requests),
            "gets": len(gets),
            "get_bytes": sum(size for _, size in gets),
            "data_file_gets": len(data),
            "data_file_bytes": sum(data),
        }
    return {**report, **_where(table, plan_keys(table, "by_id", wanted))}
