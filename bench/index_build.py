"""Index build benchmark: peak memory and time of a full build within a memory budget.

    .venv/bin/python bench/index_build.py                        # 10,000,000 rows, int64 and string keys
    .venv/bin/python bench/index_build.py --rows 100000000       # 100,000,000 rows (about 20 GB of disk)
    .venv/bin/python bench/index_build.py --engine duckdb        # the same build sorted by DuckDB instead

- tables: one column, ``id`` (random int64, almost unique) or ``name`` (a random 16-character
  string), in data files of ``--file-rows`` rows written directly by pyarrow and added with
  ``table.add_files`` (so 10^8 rows take minutes, not hours);
- build: ``refresh_full`` of an index ordered by the key with ``_file``/``_pos``, in a child
  process, with ``write.build.memory-budget-bytes`` = ``--budget`` (the index default when not
  given); reported: seconds, peak RSS of the child (``ru_maxrss``), its RSS after imports, and
  the entries and regions written;
- floor: ``pyarrow.compute.sort_indices`` of the keys already in memory (another child, best of
  three), at ``--floor-rows`` rows at most (the target compares the build with it at 10^7);
- ``--engine duckdb`` (needs ``duckdb`` installed; not a dependency): the same entries are
  loaded into an on-disk DuckDB database with ``memory_limit`` = the budget and sorted by
  ``ORDER BY key NULLS FIRST, input order``; its Arrow batches are cut and written by the
  project's own region writer, and the regions are checked equal to the kept engine's.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

KEYS = {"int64": ("id", pa.int64()), "string": ("name", pa.string())}


def _keys(kind: str, rows: int, seed: int) -> pa.Array:
    values = pc.cast(pc.floor(pc.multiply(pc.random(rows, initializer=seed), float(2**62))), pa.int64())
    if kind == "int64":
        return values
    # 16 characters: a letter and 15 digits, in no order.
    return pc.binary_join_element_wise("k", pc.utf8_slice_codeunits(pc.cast(values, pa.string()), 0, 15), "")


def make_table(root: Path, kind: str, rows: int, file_rows: int) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    shutil.rmtree(root, ignore_errors=True)
    (root / "files").mkdir(parents=True)
    catalog = SqlCatalog("bench", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/wh")
    catalog.create_namespace("db")
    name, arrow_type = KEYS[kind]
    table = catalog.create_table("db.keys", schema=pa.schema([(name, arrow_type)]))
    paths = []
    for number, start in enumerate(range(0, rows, file_rows)):
        path = root / "files" / f"part-{number:05d}.parquet"
        pq.write_table(pa.table({name: _keys(kind, min(file_rows, rows - start), number + 1)}), path)
        paths.append(f"file://{path}")
    for at in range(0, len(paths), 50):
        table.add_files(paths[at : at + 50])


def _load(root: Path) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog("bench", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/wh").load_table("db.keys")


def child_build(root: Path, kind: str, budget: int | None, engine: str) -> dict[str, Any]:
    from airflow_iceberg_maint.index.metadata.builders import new_index_metadata
    from airflow_iceberg_maint.index.metadata.store import IndexStore
    from airflow_iceberg_maint.index.write.refresh import refresh_full

    table = _load(root)
    properties = {"write.build.memory-budget-bytes": str(budget)} if budget else {}
    name = f"ix_{engine}_{int(time.time() * 1000)}"
    IndexStore(table).create(new_index_metadata(table, name, [KEYS[kind][0]], [], True, properties), name)
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    if engine == "own":
        result = refresh_full(table, name)
        entries, regions = result.entries, result.region_files_written
        tracking = result.extract.tracking_file
    else:
        entries, regions, tracking = _duckdb_build(table, name, budget, root)
    seconds = time.perf_counter() - started
    return {
        "seconds": round(seconds, 1),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
        "rss_after_imports_mib": baseline // 1024,
        "entries": entries,
        "regions": regions,
        "tracking": tracking,
    }


def _duckdb_build(table: Any, name: str, budget: int | None, root: Path) -> tuple[int, int, str]:
    """The same build with DuckDB's out-of-core sort in place of the project's sorted runs."""
    import duckdb

    from airflow_iceberg_maint.index.format.extract_files import write_tracking_file
    from airflow_iceberg_maint.index.metadata.builders import with_extract_schema_for
    from airflow_iceberg_maint.index.metadata.store import IndexStore
    from airflow_iceberg_maint.index.source.snapshot_files import plan_snapshot
    from airflow_iceberg_maint.index.write.build import (
        entries_by_file,
        entry_bytes,
        entry_layout,
        in_order,
        ordering_columns,
        regions_of,
        target_rows,
        write_region,
    )
    from airflow_iceberg_maint.index.write.refresh import tracking_file_location
    from airflow_iceberg_maint.sorting.ordering import sortable

    metadata, _, _ = IndexStore(table).load(name)
    snapshot = table.current_snapshot()
    metadata, schema_id = with_extract_schema_for(metadata, table.metadata, snapshot.snapshot_id)
    layout = entry_layout(metadata, metadata.schema_by_id(schema_id))
    plan = plan_snapshot(table, snapshot)
    work = root / "duckdb"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    con = duckdb.connect(str(work / "sort.duckdb"))
    con.execute(f"SET memory_limit = '{budget or metadata.build_memory_budget_bytes()}B'")
    con.execute(f"SET temp_directory = '{work}/tmp'")
    con.execute("SET preserve_insertion_order = false")
    con.execute("SET threads = 2")
    size, rows = 0.0, 0
    for entries in entries_by_file(table, plan, sorted(plan.data_files), layout):
        keys = ordering_columns(entries, layout)
        part = entries.append_column("seq", pc.add(pc.cumulative_sum(pa.array([1] * entries.num_rows)), rows))
        for i, key in enumerate(keys):
            part = part.append_column(f"k{i}", sortable(key))
        size += entry_bytes(entries)
        rows += entries.num_rows
        con.register("part", part)
        con.execute(
            "INSERT INTO entries SELECT * FROM part"
            if rows > entries.num_rows
            else "CREATE TABLE entries AS SELECT * FROM part"
        )
        con.unregister("part")
    order = ", ".join(f"k{i} ASC NULLS FIRST" for i in range(len(layout.ordering)))
    columns = ", ".join(f'"{f.name}"' for f in layout.region_schema)
    reader = con.sql(f"SELECT {columns} FROM entries ORDER BY {order}, seq").to_arrow_reader(65_536)

    def pieces() -> Any:
        for batch in reader:
            entries = pa.Table.from_batches([batch]).cast(layout.region_schema)  # _file back to a dictionary
            yield entries, ordering_columns(entries, layout)

    target = target_rows(size, rows, metadata.region_target_size_bytes())
    regions = regions_of(pieces(), target, metadata.allow_key_spanning())
    written = list(in_order(lambda region: write_region(table.io, layout, *region), regions))
    con.close()
    shutil.rmtree(work, ignore_errors=True)
    tracking = tracking_file_location(metadata)
    write_tracking_file(table.io, tracking, layout.stats_columns, written)
    return rows, len(written), tracking


def child_floor(root: Path, kind: str, rows: int) -> dict[str, Any]:
    name = KEYS[kind][0]
    parts, count = [], 0
    for path in sorted((root / "files").iterdir()):
        if count >= rows:
            break
        parts.append(pq.read_table(path, columns=[name]).column(name))
        count += len(parts[-1])
    keys = pa.chunked_array([c for p in parts for c in p.chunks]).slice(0, rows)
    times = []
    for _ in range(3):  # the best of three: the machine may be shared
        started = time.perf_counter()
        pc.sort_indices(keys)
        times.append(time.perf_counter() - started)
    return {"rows": len(keys), "seconds": round(min(times), 2)}


def _same_regions(root: Path, first: str, second: str) -> bool:
    from airflow_iceberg_maint.index.format.extract_files import read_tracking_file

    table = _load(root)
    a, b = read_tracking_file(table.io, first), read_tracking_file(table.io, second)
    return [(e.record_count, e.stats) for e in a] == [(e.record_count, e.stats) for e in b]


def _child(*args: str) -> dict[str, Any]:
    output = subprocess.run([sys.executable, __file__, *args], check=True, stdout=subprocess.PIPE, text=True).stdout
    result: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--file-rows", type=int, default=1_000_000)
    parser.add_argument("--keys", choices=[*KEYS, "both"], default="both")
    parser.add_argument("--budget", type=int, default=0, help="bytes (default: the index property's default)")
    parser.add_argument("--engine", choices=["own", "duckdb", "both"], default="own")
    parser.add_argument("--floor-rows", type=int, default=10_000_000)
    parser.add_argument("--root", type=Path, default=Path(".bench/index_build"))
    parser.add_argument("--child", choices=["build", "floor"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    root = args.root.resolve()
    kinds = list(KEYS) if args.keys == "both" else [args.keys]
    if args.child == "build":
        print(json.dumps(child_build(root, kinds[0], args.budget or None, args.engine)))
        return 0
    if args.child == "floor":
        print(json.dumps(child_floor(root, kinds[0], args.floor_rows)))
        return 0
    engines = ["own", "duckdb"] if args.engine == "both" else [args.engine]
    for kind in kinds:
        where = root / kind
        started = time.perf_counter()
        make_table(where, kind, args.rows, args.file_rows)
        setup = round(time.perf_counter() - started)
        report: dict[str, Any] = {"keys": kind, "rows": args.rows, "setup_seconds": setup}
        common = ["--root", str(where), "--keys", kind, "--budget", str(args.budget)]
        builds = {engine: _child(*common, "--child", "build", "--engine", engine) for engine in engines}
        for engine, build in builds.items():
            report[engine] = {k: v for k, v in build.items() if k != "tracking"}
        if len(builds) == 2:
            report["same_regions"] = _same_regions(where, builds["own"]["tracking"], builds["duckdb"]["tracking"])
        floor = _child(*common, "--child", "floor", "--floor-rows", str(args.floor_rows))
        report["floor_sort"] = floor
        if floor["rows"] == args.rows:
            report.update({f"{e}_vs_floor": round(b["seconds"] / floor["seconds"], 2) for e, b in builds.items()})
        print(json.dumps(report), flush=True)
        shutil.rmtree(where, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
