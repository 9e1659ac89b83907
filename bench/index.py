"""Index benchmark: lookups against a pyiceberg filtered scan, build against a pure pyarrow sort, in one run.

    .venv/bin/python bench/index.py              # 10,000,000 rows, unsorted int64 key, 10 data files

- table: ``id`` (random int64, unsorted, almost unique) and a ``payload`` string, written by
  pyiceberg into a SQLite catalog on the local disk, ``--files`` appends of equal size, with
  ``write.parquet.row-group-limit`` = ``--row-group-rows`` (pyiceberg's default is 1M rows), or
  the rows that make ``--row-group-mb`` of Arrow data (Spark's default is 128 MB). pyiceberg
  writes no Parquet page index; the bench turns it on in pyiceberg's writer (``write_page_index``,
  as parquet-mr has by default since 1.11) unless ``--no-page-index``; ``--sorted-files`` sorts
  each file's rows by ``id`` (clustered rows; the keys still spread over every file);
- build: ``refresh_full`` of an index ordered by ``id`` with ``_file``/``_pos`` (read, apply
  deletes, sort, cut, write region files and the tracking file, commit), in entries per second,
  against the floor: ``pyarrow.compute.sort_indices`` of the same keys already in memory;
- lookup: ``lookup`` of ``--probes`` present keys, warm (caches filled by one warm-up lookup),
  p50 and p95, against ``table.scan(row_filter=EqualTo("id", key)).to_arrow()`` of one key in
  each of ``--rounds`` rounds (both return the same rows, checked);
- fetch floors, one per way of reading the row from its data file (its file already open where
  the library allows it), each on the same rows: ``pyarrow_row_group`` (the row group decoded up
  to the row: the lookup's path for files without an offset index), ``pages`` (this project's
  page reads through the offset index, ``index/page_reads.py``), and, when installed, Polars
  (``scan_parquet(...).slice(pos, 1)``), DuckDB (``file_row_number`` filter) and DataFusion
  (``LIMIT 1 OFFSET pos``; one probe a round, it reads the whole file). Each is reported with
  the speed-up over the scan it would allow at most (scan / floor). Scans, lookups and floors
  are interleaved round by round, so a slow stretch of a noisy machine weighs on all of them;
- index-only lookup: the same keys through a second index whose extract also stores
  ``payload`` (``--identity payload``), answered from its region file alone;
- region files read per lookup (target 1 for a non-spanning key).

    scripts/services.sh run -- .venv/bin/python bench/index.py --s3 --rows 1000000

- S3 (``--s3``, instead of the local table): the same table in a bucket of the local S3 server
  (``TEST_S3_ENDPOINT``), read through a counting proxy: GET requests and bytes per warm lookup,
  split into data files and index files, against the bytes of the data pages holding the row.

    .venv/bin/python bench/index.py --refresh    # incremental refresh against a full rebuild

- refresh (``--refresh``, instead of the above): the same table, fully indexed; then
  ``--append-fraction`` (1%) new rows are appended twice, and after each append the refresh is
  timed both ways on the same snapshot: ``refresh_full`` of a twin index with the same
  definition, then ``refresh_index`` (incremental) of the index. First append: new keys above
  every existing one (ids or times that grow); second: keys spread over the whole range (the
  worst case, every region is touched). Reported per case: seconds and region bytes written
  by each, and the ratios incremental / full (targets: at most 0.1 for both).

    .venv/bin/python bench/index.py --many --row-group-rows 1048576   # many keys and a range

- many keys and ranges (``--many``, instead of the lookups above; ``index/query.py``): the same
  table and index; ``lookup_keys`` of each of ``--keys`` (10,000) present keys against
  ``table.scan(row_filter=In("id", keys))``, and ``lookup_range`` of ranges holding
  ``--range-fractions`` (0.1%) of the rows against ``table.scan`` with the same bounds; a cold
  query, then ``--repeat`` rounds of scan and query (medians), each checked to return the scan's
  rows; with the pages holding the rows and a fetch floor. See ``bench/index_queries.py``.

    .venv/bin/python bench/index.py --dictionaries --rows 1000000 --row-group-rows 1048576

- kept dictionaries (``--dictionaries``, instead of the lookups above): ``--probes`` single-key
  lookups after one warm pass over the same keys, alternately with the kept decoded dictionaries
  (``index/dictionary_pages.py``) and without (each fetch decodes its dictionary page, as
  before); p50 and p95 of each.

    .venv/bin/python bench/index.py --build --rows 100000000   # full build within the memory budget

- build in bounded memory (``--build``, instead of all the above): runs ``bench/index_build.py``
  with the options that follow (``--keys``, ``--budget``, ``--engine``, ...; see its help).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import resource
import shutil
import statistics
import sys
import threading
import time
import uuid
from bisect import bisect_right
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from index_queries import bench_many, many_keys_on_s3
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import EqualTo
from pyiceberg.io import pyarrow as pyiceberg_pyarrow
from pyiceberg.table import Table

from airflow_iceberg_maint.index.format.extract_files import read_tracking_file
from airflow_iceberg_maint.index.metadata.builders import new_index_metadata
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.index.read.lookup import lookup
from airflow_iceberg_maint.index.source import dictionary_pages, page_reads
from airflow_iceberg_maint.index.source.parquet_files import opened_parquet
from airflow_iceberg_maint.index.write.incremental import refresh_index
from airflow_iceberg_maint.index.write.refresh import RefreshResult, refresh_full

SCHEMA = pa.schema([("id", pa.int64()), ("payload", pa.string())])
#: A second index on ``id`` whose extract also holds ``payload``: its lookups read no data file.
COVERING = "by_id_with_payload"


def _batch(rows: int, seed_offset: int, low: int = 0) -> pa.Table:
    """Random keys in ``[low, low + 2**40)``."""
    keys = pc.cast(
        pc.add(pc.floor(pc.multiply(pc.random(rows, initializer=seed_offset), float(2**40))), float(low)), pa.int64()
    )
    return pa.table(
        {"id": keys, "payload": pc.binary_join_element_wise("p", pc.cast(keys, pa.string()), "")}, schema=SCHEMA
    )


def _page_indexed_writes() -> None:
    """Make pyiceberg's writer write the Parquet page index, as parquet-mr (Spark) does by default."""
    real = pyiceberg_pyarrow._get_parquet_writer_kwargs
    pyiceberg_pyarrow._get_parquet_writer_kwargs = lambda properties: {**real(properties), "write_page_index": True}


def _group_rows(args: argparse.Namespace) -> int:
    """Rows per row group: ``--row-group-rows``, or the rows making ``--row-group-mb`` of Arrow data."""
    if not args.row_group_mb:
        return args.row_group_rows
    sample = _batch(100_000, seed_offset=1)
    return int(args.row_group_mb * 2**20 / (sample.nbytes / sample.num_rows))


def make_table(
    root: Path,
    rows: int,
    files: int,
    row_group_rows: int,
    warehouse: str | None = None,
    properties: dict[str, str] | None = None,
    sorted_files: bool = False,
) -> Table:
    root = root.resolve()  # a relative path would make a ``file://`` URI whose first part is a host
    shutil.rmtree(root, ignore_errors=True)
    (root / "wh").mkdir(parents=True)
    catalog = SqlCatalog(
        "bench", uri=f"sqlite:///{root}/catalog.db", warehouse=warehouse or f"file://{root}/wh", **(properties or {})
    )
    catalog.create_namespace("db")
    table = catalog.create_table(
        "db.events", schema=SCHEMA, properties={"write.parquet.row-group-limit": str(row_group_rows)}
    )
    for i in range(files):
        batch = _batch(rows // files, seed_offset=i + 1)
        table.append(batch.sort_by("id") if sorted_files else batch)
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


@dataclass(frozen=True)
class _Location:
    """Where a value's first row is: the data file, its row group, the row in it and in the file."""

    path: str
    group: int
    row: int
    position: int


def _row_locations(table: Table, values: list[Any]) -> dict[Any, _Location]:
    """Found by reading the key column of every data file, independently of the index."""
    wanted = pa.array(values, type=pa.int64())
    found: dict[Any, _Location] = {}
    for task in table.scan().plan_files():
        path = task.file.file_path
        with table.io.new_input(path).open() as stream:
            parquet = pq.ParquetFile(stream)
            start = 0
            for group in range(parquet.metadata.num_row_groups):
                ids = parquet.read_row_group(group, columns=["id"]).column("id")
                for row in pc.indices_nonzero(pc.is_in(ids, value_set=wanted)).to_pylist():
                    found.setdefault(ids[row].as_py(), _Location(path, group, row, start + row))
                start += ids.length()
    return found


class _Floors:
    """One way per option of reading the row at a location, each timed: the option's fetch floor."""

    def __init__(self, table: Table, local: bool) -> None:
        self.table = table
        self.open: dict[str, pq.ParquetFile] = {}
        self.options: dict[str, Any] = {"pyarrow_row_group": self.pyarrow_row_group, "pages": self.pages}
        if local:
            self._add_libraries()

    def _add_libraries(self) -> None:
        try:
            import polars

            self.options["polars_slice"] = lambda at: (
                polars.scan_parquet(self._local(at)).slice(at.position, 1).collect().to_arrow()
            )
        except ImportError:
            pass
        try:
            import duckdb

            connection = duckdb.connect()
            self.options["duckdb_file_row_number"] = lambda at: connection.sql(
                f"SELECT id, payload FROM read_parquet('{self._local(at)}', file_row_number = true) "
                f"WHERE file_row_number = {at.position}"
            ).to_arrow_table()
        except ImportError:
            pass
        try:
            import datafusion

            context = datafusion.SessionContext()
            registered: dict[str, str] = {}

            def offset(at: _Location) -> pa.Table:
                if at.path not in registered:
                    registered[at.path] = f"f{len(registered)}"
                    context.register_parquet(registered[at.path], self._local(at))
                return context.sql(
                    f"SELECT id, payload FROM {registered[at.path]} LIMIT 1 OFFSET {at.position}"
                ).to_arrow_table()

            self.options["datafusion_offset"] = offset
        except ImportError:
            pass

    @staticmethod
    def _local(at: _Location) -> str:
        return at.path.removeprefix("file://")

    def pyarrow_row_group(self, at: _Location) -> pa.Table:
        """The row group's column chunks decoded up to the row, on Arrow's threads."""
        if at.path not in self.open:
            self.open[at.path] = pq.ParquetFile(self.table.io.new_input(at.path).open(), pre_buffer=False)
        batch = next(self.open[at.path].iter_batches(batch_size=at.row + 1, row_groups=[at.group], use_threads=True))
        return pa.Table.from_batches([batch.slice(at.row, 1)])

    def pages(self, at: _Location) -> pa.Table | None:
        """This project's page reads, on the lookup's own open file."""
        with opened_parquet(self.table.io, at.path) as handle:
            return page_reads.read_positions(handle, at.path, {at.group: [at.row]}, ["id", "payload"])

    def measure(self, name: str, at: _Location, value: Any) -> float | None:
        started = time.perf_counter()
        rows = self.options[name](at)
        elapsed = time.perf_counter() - started
        if rows is None:
            return None  # the option cannot read this file (pages: no offset index)
        assert rows.column("id").to_pylist() == [value], (name, value)
        return elapsed


def _ms(values: list[float], q: float = 0.5) -> float:
    return round(_percentile(values, q) * 1000, 2)


def bench_lookups(table: Table, keys: pa.ChunkedArray, probes: int, rounds: int, local: bool = True) -> dict[str, Any]:
    """Lookups, filtered scans and each option's fetch floor, interleaved in ``rounds`` so that a
    slower stretch of a noisy machine weighs on all of them alike."""
    positions = pc.cast(pc.floor(pc.multiply(pc.random(probes, initializer=99), len(keys) - 1)), pa.int64())
    values = pc.take(keys, positions).to_pylist()
    locations = _row_locations(table, values)
    floors = _Floors(table, local)
    lookup(table, "by_id", [(values[0],)])  # warm-up: plan, tracking file and OS caches
    for name in floors.options:
        floors.measure(name, locations[values[0]], values[0])
    timings, regions, scans, index_only = [], [], [], []
    fetches: dict[str, list[float]] = {name: [] for name in floors.options}
    per_round = -(-len(values) // rounds)
    for start in range(0, len(values), per_round):
        chunk = values[start : start + per_round]
        started = time.perf_counter()
        scanned = table.scan(row_filter=EqualTo("id", chunk[0])).to_arrow()
        scans.append(time.perf_counter() - started)
        assert sorted(scanned.to_pylist(), key=str) == sorted(
            lookup(table, "by_id", [(chunk[0],)]).rows.to_pylist(), key=str
        )
        for value in chunk:
            started = time.perf_counter()
            result = lookup(table, "by_id", [(value,)])
            timings.append(time.perf_counter() - started)
            regions.append(result.region_files_read)
            assert result.mode == "index" and result.rows.num_rows >= 1
        for name in floors.options:
            for value in chunk[:1] if name == "datafusion_offset" else chunk:  # it reads the whole file
                elapsed = floors.measure(name, locations[value], value)
                if elapsed is not None:
                    fetches[name].append(elapsed)
        for value in chunk:
            started = time.perf_counter()
            covered = lookup(table, COVERING, [(value,)])
            index_only.append(time.perf_counter() - started)
            assert covered.mode == "index" and covered.rows.num_rows >= 1
    lookup_p50, scan_p50, only_p50 = (_percentile(t, 0.5) for t in (timings, scans, index_only))
    used = "pages" if fetches["pages"] else "pyarrow_row_group"
    return {
        "lookup_probes": len(values),
        "lookup_warm_p50_ms": _ms(timings),
        "lookup_warm_p95_ms": _ms(timings, 0.95),
        "scan_probes": len(scans),
        "scan_p50_ms": round(scan_p50 * 1000, 1),
        "scan_p95_ms": round(_percentile(scans, 0.95) * 1000, 1),
        "lookup_speedup_p50": round(scan_p50 / lookup_p50, 1),
        "lookup_fetch": used,
        "lookup_vs_its_fetch_floor_p50": round(lookup_p50 / _percentile(fetches[used], 0.5), 2),
        "fetch_floors": {
            name: {
                "probes": len(times),
                "p50_ms": _ms(times),
                "p95_ms": _ms(times, 0.95),
                "scan_over_floor_p50": round(scan_p50 / _percentile(times, 0.5), 1),
            }
            if times
            else "cannot read these files"
            for name, times in fetches.items()
        },
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
    return {
        "initial_full_seconds": round(initial_seconds, 3),
        "initial_region_files": initial.region_files_written,
        "appended_rows_per_case": appended,
        "append_above_all_keys": growing,
        "append_random_keys": spread,
    }


def _report(report: dict[str, Any]) -> None:
    report["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")


class _CountingProxy(ThreadingHTTPServer):
    """Forwards S3 requests to the local S3 server, noting each one's method, path and reply bytes."""

    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        parsed = urlsplit(upstream)
        self.upstream = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self.requests: list[tuple[str, str, int]] = []
        self.requests_lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _CountingProxy

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        upstream = http.client.HTTPConnection(*self.server.upstream)
        upstream.request(self.command, self.path, body=body, headers=dict(self.headers.items()))
        response = upstream.getresponse()
        data = response.read()
        upstream.close()
        self.send_response(response.status)
        head = self.command == "HEAD"  # its Content-Length is the object's size: passed on as is
        for name, value in response.getheaders():
            if name.lower() not in ("transfer-encoding", "connection") and (head or name.lower() != "content-length"):
                self.send_header(name, value)
        if not head:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if not head:
            self.wfile.write(data)
        with self.server.requests_lock:
            self.server.requests.append((self.command, self.path, len(data)))

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _page_bytes(table: Table, at: _Location, columns: list[str]) -> tuple[int, int]:
    """Compressed bytes of the data pages holding the row in ``columns`` (from the offset index), and
    of those columns' dictionary pages where the row's page is dictionary-encoded."""
    pages_total = dictionaries = 0
    with opened_parquet(table.io, at.path) as handle:
        layout = page_reads._layout(handle, at.path)
        for name in columns:
            leaf = layout.flat[name][0]
            chunk = layout.footer.row_groups[at.group].columns[leaf]
            pages = page_reads._pages(handle, at.path, chunk, at.group, leaf)
            page = bisect_right(pages.first_rows, at.row) - 1
            pages_total += pages.sizes[page]
            if page_reads._dictionary_encoded(page_reads._read(handle, pages.offsets[page], pages.sizes[page]), 0):
                dictionaries += len(page_reads._dictionary_page(handle, chunk, pages))
    return pages_total, dictionaries


def _chunk_bytes(table: Table, at: _Location, column: str) -> int:
    """Compressed bytes of the column chunk holding the row: what a reader without page skipping fetches."""
    with opened_parquet(table.io, at.path) as handle:
        metadata = handle.file.metadata.row_group(at.group)
        return next(
            metadata.column(i).total_compressed_size
            for i in range(metadata.num_columns)
            if metadata.column(i).path_in_schema == column
        )


def bench_s3(args: argparse.Namespace, group_rows: int) -> dict[str, Any]:
    """Warm lookups on the local S3 server through the counting proxy: requests and bytes each."""
    endpoint = os.environ.get("TEST_S3_ENDPOINT")
    if not endpoint:
        raise SystemExit("--s3 needs TEST_S3_ENDPOINT: run it under scripts/services.sh run -- ...")
    credentials = {"s3.access-key-id": "testing", "s3.secret-access-key": "testing", "s3.region": "us-east-1"}
    bucket = f"bench-{uuid.uuid4().hex[:8]}"
    boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    ).create_bucket(Bucket=bucket)
    started = time.perf_counter()
    table = make_table(
        args.root, args.rows, args.files, group_rows, f"s3://{bucket}/wh", {"s3.endpoint": endpoint, **credentials}
    )
    IndexStore(table).create(new_index_metadata(table, "by_id", ["id"], [], True, {}), "by_id")
    refresh_full(table, "by_id")
    setup_seconds = time.perf_counter() - started
    proxy = _CountingProxy(endpoint)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    root = args.root.resolve()
    through_proxy = SqlCatalog(
        "bench",
        uri=f"sqlite:///{root}/catalog.db",
        warehouse=f"s3://{bucket}/wh",
        **{"s3.endpoint": proxy.endpoint, **credentials},
    ).load_table("db.events")
    keys = through_proxy.scan(selected_fields=("id",)).to_arrow().column("id")
    positions = pc.cast(pc.floor(pc.multiply(pc.random(args.probes, initializer=99), len(keys) - 1)), pa.int64())
    values = pc.take(keys, positions).to_pylist()
    locations = _row_locations(through_proxy, values)
    lookup(through_proxy, "by_id", [(values[0],)])  # warm-up: open files, footers, offset indexes
    per_lookup: list[dict[str, int]] = []
    for value in values:
        proxy.requests.clear()
        started = time.perf_counter()
        result = lookup(through_proxy, "by_id", [(value,)])
        seconds = time.perf_counter() - started
        assert result.mode == "index" and result.rows.num_rows >= 1
        gets = [(path, size) for method, path, size in proxy.requests if method == "GET" and "list-type" not in path]
        data = [size for path, size in gets if "/index/" not in path]
        # The lookup reads ``payload`` from the data file: the index holds ``id`` (its key).
        page_bytes, dictionary_bytes = _page_bytes(through_proxy, locations[value], ["payload"])
        per_lookup.append(
            {
                "ms": seconds * 1000,
                "requests": len(proxy.requests),
                "gets": len(gets),
                "get_bytes": sum(size for _, size in gets),
                "data_gets": len(data),
                "data_bytes": sum(data),
                "page_bytes": page_bytes,
                "page_and_dictionary_bytes": page_bytes + dictionary_bytes,
            }
        )
    many = many_keys_on_s3(through_proxy, keys, args.keys[0], proxy.requests)
    proxy.shutdown()

    def median(name: str) -> float:
        return statistics.median(p[name] for p in per_lookup)

    return {
        "rows": args.rows,
        "data_files": args.files,
        "data_row_group_rows": group_rows,
        "setup_seconds": round(setup_seconds, 1),
        "lookups": len(per_lookup),
        "lookup_p50_ms": round(median("ms"), 1),
        "requests_per_lookup_p50": median("requests"),
        "get_requests_per_lookup_p50": median("gets"),
        "get_bytes_per_lookup_p50": median("get_bytes"),
        "data_file_gets_per_lookup_p50": median("data_gets"),
        "data_file_bytes_per_lookup_p50": median("data_bytes"),
        "data_file_bytes_per_lookup_max": max(p["data_bytes"] for p in per_lookup),
        "bytes_of_the_page_holding_the_row_p50": median("page_bytes"),
        "data_file_bytes_over_page_bytes_p50": round(
            statistics.median(p["data_bytes"] / p["page_bytes"] for p in per_lookup), 2
        ),
        "data_file_bytes_over_page_bytes_max": round(max(p["data_bytes"] / p["page_bytes"] for p in per_lookup), 2),
        "lookups_whose_page_is_dictionary_encoded": sum(
            p["page_and_dictionary_bytes"] > p["page_bytes"] for p in per_lookup
        ),
        "data_file_bytes_over_page_and_dictionary_bytes_max": round(
            max(p["data_bytes"] / p["page_and_dictionary_bytes"] for p in per_lookup), 2
        ),
        "column_chunk_bytes_payload": _chunk_bytes(through_proxy, locations[values[0]], "payload"),
        f"many_keys_{args.keys[0]}": many,
    }


def _timed(run: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = run()
    return time.perf_counter() - started, result


def bench_dictionaries(table: Table, keys: pa.ChunkedArray, probes: int) -> dict[str, Any]:
    """Single-key lookups with and without kept dictionaries, alternating key by key."""
    ids = pc.unique(keys.combine_chunks())
    step = max(1, len(ids) // probes)
    values = ids.take(pa.array(range(0, step * probes, step), type=pa.int64())).to_pylist()
    for value in values:  # warm: files open, dictionaries kept
        lookup(table, "by_id", [(value,)])
    supported = dictionary_pages.supported
    times: dict[str, list[float]] = {"kept": [], "not_kept": []}
    try:
        for i, value in enumerate(values):
            mode = "kept" if i % 2 == 0 else "not_kept"
            dictionary_pages.supported = supported if mode == "kept" else (lambda *a: False)  # type: ignore[assignment]
            seconds, found = _timed(lambda v=value: lookup(table, "by_id", [(v,)]))
            if found.rows.num_rows < 1:
                raise AssertionError(f"key {value}: no row found")
            times[mode].append(seconds)
    finally:
        dictionary_pages.supported = supported  # type: ignore[assignment]
    return {
        f"{mode}_{name}_ms": round(_ms(values_, q), 2)
        for mode, values_ in times.items()
        for name, q in (("p50", 0.5), ("p95", 0.95))
    }


def _numbers(kind: Any) -> Any:
    return lambda text: [kind(part) for part in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--build" in argv:
        # The bounded-memory build bench lives in index_build.py; its options follow --build.
        import index_build

        return index_build.main([a for a in argv if a != "--build"])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", action="store_true", help="the bounded-memory build bench (bench/index_build.py)")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--probes", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=10, help="scans, each followed by a share of the lookups")
    parser.add_argument("--row-group-rows", type=int, default=65_536)
    parser.add_argument(
        "--row-group-mb",
        type=float,
        default=0.0,
        help="row groups of this many MiB of Arrow data instead of --row-group-rows",
    )
    parser.add_argument("--no-page-index", action="store_true", help="data files without the Parquet page index")
    parser.add_argument(
        "--sorted-files",
        action="store_true",
        help="each data file's rows sorted by id (the keys still spread over every file): clustered rows",
    )
    parser.add_argument("--s3", action="store_true", help="lookups on the local S3 server instead (TEST_S3_ENDPOINT)")
    parser.add_argument("--root", type=Path, default=Path(".bench/index"))
    parser.add_argument("--refresh", action="store_true", help="benchmark the incremental refresh instead")
    parser.add_argument("--append-fraction", type=float, default=0.01)
    parser.add_argument("--many", action="store_true", help="many keys and a range instead of single lookups")
    parser.add_argument(
        "--keys", type=_numbers(int), default=[10_000], help="key counts of the --many bench (comma-separated)"
    )
    parser.add_argument(
        "--range-fractions", type=_numbers(float), default=[0.001], help="fractions of the rows the --many ranges hold"
    )
    parser.add_argument("--repeat", type=int, default=3, help="rounds of scan and query of each --many case")
    parser.add_argument("--dictionaries", action="store_true", help="single lookups with and without kept dictionaries")
    args = parser.parse_args(argv)

    if not args.no_page_index:
        _page_indexed_writes()
    group_rows = _group_rows(args)
    if args.s3:
        _report({"page_index": not args.no_page_index, **bench_s3(args, group_rows)})
        shutil.rmtree(args.root, ignore_errors=True)
        return 0
    started = time.perf_counter()
    table = make_table(args.root, args.rows, args.files, group_rows, sorted_files=args.sorted_files)
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
    if args.dictionaries:
        kept = bench_dictionaries(table.refresh(), keys, args.probes)
        _report({"rows": args.rows, "data_files": args.files, "data_row_group_rows": group_rows, **kept})
        shutil.rmtree(args.root, ignore_errors=True)
        return 0
    if args.many:
        many = bench_many(table.refresh(), keys, args.keys, args.range_fractions, args.repeat)
        _report({"rows": args.rows, "data_files": args.files, "data_row_group_rows": group_rows, **build, **many})
        shutil.rmtree(args.root, ignore_errors=True)
        return 0
    IndexStore(table).create(new_index_metadata(table, COVERING, ["id"], ["payload"], True, {}), COVERING)
    started = time.perf_counter()
    refresh_full(table, COVERING)
    covering_seconds = time.perf_counter() - started
    table = table.refresh()
    lookups = bench_lookups(table, keys, args.probes, args.rounds)
    _report(
        {
            "rows": args.rows,
            "data_files": args.files,
            "data_row_group_rows": group_rows,
            "page_index": not args.no_page_index,
            "setup_seconds": round(setup_seconds, 1),
            **build,
            "index_only_build_seconds": round(covering_seconds, 3),
            **lookups,
        }
    )
    shutil.rmtree(args.root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
