"""Compaction benchmark: ours against iceberg-zamboni 0.7.0, a naive pyiceberg rewrite and a floor, in one run.

    .venv/bin/python bench/compaction.py                  # ours (Python API), zamboni, naive, floor
    .venv/bin/python bench/compaction.py --without-ours   # before the compaction exists: the others alone
    .venv/bin/python bench/compaction.py --ours-cli       # ours as the command line runs it (the whole process timed)

Two cases, each a local table on a SQLite catalog, unpartitioned, built once under ``--work``:
``plain`` is 2,000 small data files of 900 to 1,100 rows (2,000,000 rows: ints, strings with a
few nulls, doubles, timestamps), written as a streaming writer writes them, 20 files a commit
(100 fast appends); ``deletes`` is the same table with 10% of each file's rows deleted by one
position delete file a data file (``write.delete.granularity=file``, Iceberg Java's default since
1.8), with the file_path bounds Java writes, committed in one snapshot. Every timed run gets a
fresh copy of the case's table (hard links of its files, a copy of the catalog) made before the
clock starts; each way runs in its own process that loads the table first (untimed), and the
parent takes its peak memory: the larger of its RSS high-water mark (VmHWM) and the sum of its
process tree's PSS (forked workers' shared pages counted once), sampled every 100 ms.

- ours: ``airflow_iceberg_maint.api.compaction.rewrite_data_files(table, dry_run=False,
  target_file_size_bytes=128 MiB, memory_budget_mb=--memory-budget-mb)`` (``--ours-python``,
  the default), or with ``--ours-cli`` ``iceberg-maint --catalog bench rewrite-data-files db.t
  --target-file-size-mb 128 --memory-budget-mb M --json`` (timed from the parent: start-up and
  imports included);
- zamboni: iceberg-zamboni 0.7.0 in the bench's own venv (``--zamboni-python``, made by
  ``python3 -m venv bench/.venvs/zamboni && bench/.venvs/zamboni/bin/pip install
  iceberg-zamboni==0.7.0``; never a dependency of the project). Its compaction entry point, read
  from its installed source (``zamboni/compactor.py``, ``zamboni/session.py``), called as its
  ``zamboni compact --yes`` does with the defaults of its command line:
  ``TableCompactor(CatalogSession.from_catalog(catalog), "db.t",
  CompactionConfig(target_file_size_bytes=128 MiB)).execute(dry_run=False)`` (DuckDB with 4
  threads, memory mode ``auto``: a group under 256 MiB is rewritten in memory; one ``replace``
  commit);
- naive: ``table.overwrite(table.scan().to_arrow())``, a user with pyiceberg alone;
- floor: the plan made untimed, then pyarrow reads every input byte (data and delete files),
  applies the deleted positions and writes the rows once, zstd, one forked process a core each
  writing its share into one file; no commit.

Each way is timed ``--repeat`` times per case, interleaved, and the median is kept; after each
run the current snapshot's rows (read with pyiceberg's scan; the floor's files with pyarrow) are
asserted identical to the table's rows before, and the output files are counted and sized.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

MIB = 1024 * 1024
HERE = Path(__file__).resolve().parent
WAYS = ("ours", "ours_cli", "zamboni", "naive", "floor")


def catalog(root: Path) -> SqlCatalog:
    return SqlCatalog("bench", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/wh")


def load(root: Path) -> Table:
    return catalog(root).load_table("db.t")


def local(path: str) -> str:
    return path.removeprefix("file://")


# -- the ways, each in its own process ---------------------------------------------------------------


def ours_python(table: Table, args: argparse.Namespace) -> dict[str, Any]:
    from airflow_iceberg_maint.api.compaction import rewrite_data_files  # not there until the compaction lands

    report = rewrite_data_files(
        table, dry_run=False, target_file_size_bytes=args.target_bytes, memory_budget_mb=args.memory_budget_mb
    )
    data = report.to_json()
    data = json.loads(data) if isinstance(data, str) else data
    assert not data.get("failed"), data
    return {"commits": len(data.get("commits", []))}


def zamboni(table: Table, args: argparse.Namespace) -> dict[str, Any]:
    from zamboni import CatalogSession, CompactionConfig, TableCompactor

    session = CatalogSession.from_catalog(catalog(args.root))
    config = CompactionConfig(target_file_size_bytes=args.target_bytes)
    result = TableCompactor(session, "db.t", config).execute(dry_run=False)
    return {"commits": len({g.snapshot_id for g in result.groups}), "rewritten": result.rewritten_data_files}


def naive(table: Table, args: argparse.Namespace) -> dict[str, Any]:
    table.overwrite(table.scan().to_arrow())
    return {"commits": 1}


_FLOOR_TASKS: list[tuple[str, list[str]]] = []  # inherited by the floor's forked workers


def floor(table: Table, args: argparse.Namespace) -> Callable[[], dict[str, Any]]:
    """Plans untimed, returns the timed part."""
    global _FLOOR_TASKS
    _FLOOR_TASKS = [
        (local(t.file.file_path), [local(d.file_path) for d in t.delete_files]) for t in table.scan().plan_files()
    ]
    out = args.root / "floor-out"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()

    def run() -> dict[str, Any]:
        import multiprocessing

        workers = os.cpu_count() or 1
        shares = [(i, workers, str(out / f"part-{i}.parquet")) for i in range(workers)]
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            rows = sum(pool.map(_floor_share, shares))
        return {"rows": rows}

    return run


def _floor_share(share: tuple[int, int, str]) -> int:
    """Every ``step``-th input task from ``start``: read whole, deleted positions dropped, written to one file."""
    start, step, path = share
    limit, pending, written, writer = 1_048_576, [], 0, None  # pyiceberg's write.parquet.row-group-limit
    for data_path, deletes in _FLOOR_TASKS[start::step]:
        rows = pq.ParquetFile(data_path).read(use_threads=False)  # one process a core: no reader threads
        if deletes:
            gone = pa.chunked_array([_positions(d, data_path) for d in deletes], pa.int64())
            rows = rows.filter(pc.invert(pc.is_in(pa.array(range(rows.num_rows), pa.int64()), gone)))
        pending.append(rows)
        if sum(t.num_rows for t in pending) >= limit:
            writer = writer or pq.ParquetWriter(path, rows.schema, compression="zstd")
            writer.write_table(pa.concat_tables(pending), row_group_size=limit)
            written, pending = written + sum(t.num_rows for t in pending), []
    if pending:
        writer = writer or pq.ParquetWriter(path, pending[0].schema, compression="zstd")
        writer.write_table(pa.concat_tables(pending), row_group_size=limit)
        written += sum(t.num_rows for t in pending)
    if writer:
        writer.close()
    return written


def _positions(delete_path: str, data_path: str) -> pa.ChunkedArray:
    deletes = pq.ParquetFile(delete_path).read(use_threads=False)
    return deletes.filter(pc.equal(deletes["file_path"], f"file://{data_path}"))["pos"]


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def child(args: argparse.Namespace) -> int:
    """``--child WAY``: load the table (untimed), run the way, print seconds, CPU seconds and its result as JSON."""
    table = load(args.root)
    ways: dict[str, Callable[..., Any]] = {"ours": ours_python, "zamboni": zamboni, "naive": naive}
    timed_part = floor(table, args) if args.child == "floor" else functools.partial(ways[args.child], table, args)
    loaded_mb = high_water_mb("self")
    started, cpu = time.perf_counter(), _cpu()
    result = timed_part()
    seconds, cpu = time.perf_counter() - started, _cpu() - cpu
    print(
        json.dumps(
            {"seconds": seconds, "cpu": cpu, "loaded_mb": loaded_mb, "hwm_mb": high_water_mb("self"), "result": result}
        )
    )
    return 0


# -- the parent: processes, memory, copies -----------------------------------------------------------


def high_water_mb(pid: int | str) -> float:
    """The process's RSS high-water mark (VmHWM): its own, unlike ``ru_maxrss``, which exec keeps from the parent."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        return 0.0


def _tree_mb(pid: int) -> float:
    """Memory of ``pid`` and its descendants now: the sum of their PSS (shared pages of forked workers once)."""
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/smaps_rollup") as fh:
                total += next(int(line.split()[1]) for line in fh if line.startswith("Pss:"))
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    stack += [int(c) for c in fh.read().split()]
        except (OSError, StopIteration, ValueError):
            continue
    return total / 1024


def run_process(command: list[str], env: dict[str, str] | None, log: Path) -> dict[str, Any]:
    """Run ``command``; its wall and CPU seconds, its peak memory (MB) and the JSON it printed last."""
    with open(log, "ab") as err:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, env=env)
        peak, done = [0.0], threading.Event()

        def sample() -> None:
            # Every 100 ms: reading smaps_rollup walks a process's page tables under its memory lock, and every
            # 20 ms that slowed the processes measured (ours, with forked readers, from 2.6 to 3.8 s; the floor
            # from 1.4 to 1.8 s) while the peaks found moved by 1%. VmHWM, the process's own exact peak, is
            # read with it.
            while not done.is_set():
                peak[0] = max(peak[0], _tree_mb(process.pid), high_water_mb(process.pid))
                done.wait(0.1)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        assert process.stdout is not None
        out = process.stdout.read()
        done.set()
        sampler.join()
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {process.returncode}; see {log}")
    lines = out.decode().strip().splitlines()
    printed = json.loads(lines[-1]) if lines else {}
    return {
        "wall": wall,
        "process_cpu": usage.ru_utime + usage.ru_stime,
        "peak_mb": max(peak[0], printed.get("hwm_mb", 0.0)),
        "printed": printed,
    }


def run_way(way: str, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    log = args.work / "ways.log"
    if way == "ours_cli":
        env = {
            **os.environ,
            "PYICEBERG_CATALOG__BENCH__TYPE": "sql",
            "PYICEBERG_CATALOG__BENCH__URI": f"sqlite:///{root}/catalog.db",
            "PYICEBERG_CATALOG__BENCH__WAREHOUSE": f"file://{root}/wh",
        }
        command = [str(Path(sys.executable).parent / "iceberg-maint"), "--catalog", "bench", "rewrite-data-files"]
        command += ["db.t", "--target-file-size-mb", str(args.target_bytes // MIB)]
        command += ["--memory-budget-mb", str(args.memory_budget_mb), "--json"]
        ran = run_process(command, env, log)
        report = ran["printed"]
        assert not report.get("failed"), report
        return {**ran, "seconds": ran["wall"], "cpu": ran["process_cpu"], "result": {"commits": len(report["commits"])}}
    python = str(args.zamboni_python) if way == "zamboni" else sys.executable
    command = [python, str(HERE / "compaction.py"), "--child", way, "--root", str(root)]
    command += ["--target-bytes", str(args.target_bytes), "--memory-budget-mb", str(args.memory_budget_mb)]
    ran = run_process(command, None, log)
    return {**ran, **ran["printed"]}


def fresh_copy(pristine: Path, live: Path) -> None:
    """Hard links of the table's files (never rewritten in place), a copy of the catalog (updated in place)."""
    shutil.rmtree(live, ignore_errors=True)
    shutil.copytree(
        pristine, live, copy_function=os.link, ignore=shutil.ignore_patterns("catalog.db", "built-*", "floor-out")
    )
    shutil.copyfile(pristine / "catalog.db", live / "catalog.db")


def sorted_rows(rows: pa.Table) -> pa.Table:
    return rows.sort_by("id").combine_chunks()


def outcome(way: str, live: Path, expected: pa.Table) -> dict[str, Any]:
    """The rows now (asserted identical to ``expected``), the output files and their sizes on storage."""
    if way == "floor":
        paths = sorted(str(p) for p in (live / "floor-out").glob("*.parquet"))
        rows = pq.read_table(paths).select(expected.column_names).cast(expected.schema)
        sizes, deletes = [os.path.getsize(p) for p in paths], 0
    else:
        table = load(live)
        tasks = list(table.scan().plan_files())
        rows = table.scan().to_arrow()
        sizes = sorted((t.file.file_size_in_bytes for t in tasks), reverse=True)
        deletes = len({d.file_path for t in tasks for d in t.delete_files})
    if not sorted_rows(rows).equals(expected):
        raise SystemExit(f"MISMATCH: {way} changed the rows ({rows.num_rows} rows, expected {expected.num_rows})")
    return {"files": len(sizes), "bytes": sum(sizes), "largest": max(sizes), "delete_files": deletes}


# -- building the two cases --------------------------------------------------------------------------


def rows_for(index: int, first_id: int) -> pa.Table:
    import numpy as np

    rng = np.random.default_rng(index)
    n = int(rng.integers(900, 1101))
    events = np.array(["view", "click", "add_to_cart", "purchase", "refund", "search", "login", "logout"])
    amount = np.round(rng.lognormal(3, 1, n), 2)
    return pa.table(
        {
            "id": pa.array(np.arange(first_id, first_id + n), pa.int64()),
            "user_id": pa.array(rng.integers(0, 100_000, n), pa.int32()),
            "event": pa.array(events[rng.integers(0, len(events), n)]),
            "sku": pa.array([None if x < 20 else f"SKU-{x:07d}" for x in rng.integers(0, 2_000_000, n)]),
            "amount": pa.array(amount, pa.float64(), mask=rng.random(n) < 0.01),
            "score": pa.array(rng.random(n), pa.float64()),
            "ts": pa.array(1_780_000_000_000_000 + (first_id + np.arange(n)) * 1_000_000, pa.timestamp("us")),
        }
    )


def build_plain(root: Path, files: int, per_commit: int) -> None:
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    cat = catalog(root)
    cat.create_namespace("db")
    table = cat.create_table("db.t", schema=rows_for(0, 0).schema)
    next_id, started = 0, time.perf_counter()
    for commit in range(0, files, per_commit):
        with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
            for index in range(commit, min(files, commit + per_commit)):
                rows = rows_for(index, next_id)
                next_id += rows.num_rows
                for data_file in _dataframe_to_data_files(tx.table_metadata, df=rows, io=table.io):
                    append.append_data_file(data_file)
        if (commit // per_commit + 1) % 20 == 0:
            print(f"  built {commit + per_commit} files ({time.perf_counter() - started:.0f} s)", file=sys.stderr)


def add_position_deletes(root: Path, fraction: float) -> None:
    """One position delete file a data file, deleting ``fraction`` of its rows, all committed in one snapshot."""
    import numpy as np
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    sys.path.insert(0, str(HERE.parent))
    from tests.index.row_deletes import POSITION_DELETE_SCHEMA, _commit, _write

    table = load(root)
    deletes = []
    for index, task in enumerate(sorted(table.scan().plan_files(), key=lambda t: t.file.file_path)):
        path, count = task.file.file_path, task.file.record_count
        positions = np.sort(np.random.default_rng(10_000 + index).choice(count, round(count * fraction), replace=False))
        data = pa.table({"file_path": [path] * len(positions), "pos": positions}, schema=POSITION_DELETE_SCHEMA)
        delete_path, size = _write(table, data)
        delete = DataFile.from_args(
            content=DataFileContent.POSITION_DELETES,
            file_path=delete_path,
            file_format=FileFormat.PARQUET,
            partition=Record(),
            record_count=len(positions),
            file_size_in_bytes=size,
            lower_bounds=_bounds(path, positions[0]),
            upper_bounds=_bounds(path, positions[-1]),
        )
        delete.spec_id = 0
        deletes.append(delete)
    _commit(table, deletes)


def _bounds(path: str, pos: int) -> dict[int, bytes]:
    """A position delete file's bounds as Iceberg Java writes them: file_path whole, pos as a little-endian long."""
    return {2147483546: path.encode(), 2147483545: int(pos).to_bytes(8, "little")}


def prepare(args: argparse.Namespace) -> dict[str, Path]:
    """Each case's table kept aside at ``work/pristine-CASE``, built unless already built with these sizes.

    Both cases are versions of the one table at ``work/table`` (its location is in its metadata):
    the deletes case is the plain one plus a snapshot of position deletes.
    """
    live, plain, deleted = args.work / "table", args.work / "pristine-plain", args.work / "pristine-deletes"
    marker = f"built-{args.files}-{args.per_commit}"
    if not (plain / marker).exists():
        print(f"building: {args.files} files, {args.per_commit} a commit", file=sys.stderr)
        shutil.rmtree(deleted, ignore_errors=True)
        build_plain(live, args.files, args.per_commit)
        fresh_copy(live, plain)
        (plain / marker).touch()
    marker += f"-{args.delete_fraction}"
    if not (deleted / marker).exists():
        fresh_copy(plain, live)
        add_position_deletes(live, args.delete_fraction)
        fresh_copy(live, deleted)
        (deleted / marker).touch()
    return {"plain": plain, "deletes": deleted}


# -- measuring and reporting -------------------------------------------------------------------------


def measure(case: str, pristine: Path, ways: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """Each way ``--repeat`` times, interleaved, on a fresh copy; medians, output files, rows checked."""
    live = args.work / "table"
    fresh_copy(pristine, live)
    expected = sorted_rows(load(live).scan().to_arrow())
    runs: dict[str, list[dict[str, Any]]] = {way: [] for way in ways}
    for repetition in range(args.repeat):
        for way in ways:
            fresh_copy(pristine, live)
            ran = run_way(way, live, args)
            runs[way].append({**ran, **outcome(way, live, expected)})
        done = ", ".join(f"{w} {r[-1]['seconds']:.2f} s" for w, r in runs.items())
        print(f"  {case} {repetition + 1}/{args.repeat}: {done}", file=sys.stderr)
    summary: dict[str, Any] = {"rows": expected.num_rows, "input": _input(pristine, live), "ways": {}}
    for way, done in runs.items():
        last = done[-1]
        summary["ways"][way] = {
            "seconds": round(statistics.median(r["seconds"] for r in done), 3),
            "seconds_all": [round(r["seconds"], 3) for r in done],
            "cpu_seconds": round(statistics.median(r["cpu"] for r in done), 3),
            "peak_mb": round(statistics.median(r["peak_mb"] for r in done)),
            "loaded_mb": round(last.get("loaded_mb", 0)),
            "output_files": last["files"],
            "output_bytes": last["bytes"],
            "largest_file_bytes": last["largest"],
            "delete_files_left": last["delete_files"],
            "commits": last.get("result", {}).get("commits"),
        }
    return summary


def _input(pristine: Path, live: Path) -> dict[str, int]:
    fresh_copy(pristine, live)
    tasks = list(load(live).scan().plan_files())
    deletes = {d.file_path: d.file_size_in_bytes for t in tasks for d in t.delete_files}
    return {
        "data_files": len(tasks),
        "data_bytes": sum(t.file.file_size_in_bytes for t in tasks),
        "delete_files": len(deletes),
        "delete_bytes": sum(deletes.values()),
    }


def verdicts(summary: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The issue's targets, met or missed (or not measured), and the ratios behind them."""
    ways = summary["ways"]
    ours = "ours" if "ours" in ways else "ours_cli" if "ours_cli" in ways else None

    def ratio(a: str, b: str, key: str = "seconds") -> float | None:
        return round(ways[a][key] / ways[b][key], 2) if a in ways and b in ways else None

    out: dict[str, Any] = {
        "zamboni_over_ours": ratio("zamboni", ours) if ours else None,
        "ours_over_floor": ratio(ours, "floor") if ours else None,
        "naive_over_ours": ratio("naive", ours) if ours else None,
        "zamboni_over_floor": ratio("zamboni", "floor"),
        "naive_over_floor": ratio("naive", "floor"),
        # CPU seconds move less than wall time on a machine shared with other jobs
        "zamboni_over_ours_cpu": ratio("zamboni", ours, "cpu_seconds") if ours else None,
        "ours_over_floor_cpu": ratio(ours, "floor", "cpu_seconds") if ours else None,
    }

    def verdict(value: float | None, ok: bool) -> str:
        return "not measured" if value is None else "met" if ok else "missed"

    z, f = out["zamboni_over_ours"], out["ours_over_floor"]
    out["target >= 2x faster than zamboni"] = verdict(z, z is not None and z >= 2)
    out["target <= 1.3x the floor"] = verdict(f, f is not None and f <= 1.3)
    out["target identical rows"] = "met (every way, every run)"
    peak = ways[ours]["peak_mb"] if ours else None
    budget = args.memory_budget_mb + 300
    out[f"target peak <= budget + 300 MB ({budget} MB)"] = verdict(peak, peak is not None and peak <= budget)
    return out


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package missing
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--per-commit", type=int, default=20, help="data files a commit when building")
    parser.add_argument("--delete-fraction", type=float, default=0.1)
    parser.add_argument("--cases", default="plain,deletes")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--target-bytes", type=int, default=128 * MIB)
    parser.add_argument("--memory-budget-mb", type=int, default=512, help="ours' budget (the target adds 300 MB)")
    parser.add_argument("--work", type=Path, default=HERE / ".work" / "compaction")
    parser.add_argument("--zamboni-python", type=Path, default=HERE / ".venvs" / "zamboni" / "bin" / "python")
    parser.add_argument("--without-ours", action="store_true", help="before the compaction exists")
    parser.add_argument("--ours-python", action="store_true", help="ours by its Python API (the default)")
    parser.add_argument("--ours-cli", action="store_true", help="ours by iceberg-maint rewrite-data-files")
    parser.add_argument("--without-zamboni", action="store_true")
    parser.add_argument("--without-naive", action="store_true")
    parser.add_argument("--child", choices=WAYS, help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    args.work = args.work.resolve()
    ways = [] if args.without_ours else ["ours"] if args.ours_python or not args.ours_cli else []
    if ways and not _importable("airflow_iceberg_maint.api.compaction"):
        raise SystemExit(
            "ours: airflow_iceberg_maint.api.compaction is not importable here; --without-ours leaves it out"
        )
    ways += ["ours_cli"] if args.ours_cli and not args.without_ours else []
    if not args.without_zamboni:
        if not args.zamboni_python.exists():
            raise SystemExit(
                f"--zamboni-python {args.zamboni_python}: not found; python3 -m venv bench/.venvs/zamboni && "
                "bench/.venvs/zamboni/bin/pip install iceberg-zamboni==0.7.0 (or --without-zamboni)"
            )
        ways.append("zamboni")
    ways += [] if args.without_naive else ["naive"]
    ways.append("floor")
    pristine = prepare(args)
    results: dict[str, Any] = {"cores": os.cpu_count(), "load_before": os.getloadavg()[0]}
    for case in args.cases.split(","):
        results[case] = measure(case, pristine[case], ways, args)
        results[case]["ratios_and_targets"] = verdicts(results[case], args)
    results["load_after"] = os.getloadavg()[0]
    print(json.dumps(results, indent=2))
    for case in args.cases.split(","):
        print(f"{case}: {results[case]['rows']:,} rows, input {results[case]['input']}")
        for way, w in results[case]["ways"].items():
            print(
                f"  {way:9} {w['seconds']:7.2f} s  cpu {w['cpu_seconds']:7.2f} s  peak {w['peak_mb']:5} MB  "
                f"{w['output_files']} files, {w['output_bytes'] / MIB:.1f} MiB (largest "
                f"{w['largest_file_bytes'] / MIB:.1f} MiB for a {args.target_bytes / MIB:.0f} MiB target), "
                f"{w['delete_files_left']} delete files left"
            )
        for key, value in results[case]["ratios_and_targets"].items():
            print(f"  {key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
