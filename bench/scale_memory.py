"""Memory of the single-task orphan scan at scale, on a LOCAL table: time, peak RSS, bytes per listed file, spill.

    .venv/bin/python bench/scale_memory.py --files 1000000 --orphans 100000 [--budget-mb 256] [--work DIR]

Builds once (kept in ``--work``, reused while its marker exists) a table of ``--files`` empty
data files on local disk, committed by ``--snapshots`` fast appends that write the manifests,
spread over 100 directories ``data/p=NNN/``, plus ``--orphans`` empty files nobody references.
Empty files cost an inode each and no blocks. Then runs one dry single-task scan in its own
process and prints, as JSON: wall time, peak RSS (``VmHWM``), the RSS of the same process
after its imports and the table load (the baseline), bytes a listed file above that baseline,
and the bytes the scan spilled to local disk (from the scan's own log line).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from orphans import placeholder_data_file
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

DIRS = 100
_SPILLED = re.compile(r"spilled (\d+) bytes")


def catalog(work: Path) -> SqlCatalog:
    return SqlCatalog("scale", uri=f"sqlite:///{work}/catalog.db", warehouse=f"file://{work}/wh")


def build(work: Path, files: int, orphans: int, snapshots: int) -> None:
    """The table once per ``--work``: empty files on disk, pyiceberg's fast appends write the manifests."""
    marker = work / f"built-{files}-{orphans}-{snapshots}"
    if marker.exists():
        print(f"reusing the table built earlier ({marker.name})", file=sys.stderr)
        return
    started = time.perf_counter()
    work.mkdir(parents=True, exist_ok=True)
    (work / "catalog.db").unlink(missing_ok=True)
    cat = catalog(work)
    cat.create_namespace("db")
    table = cat.create_table("db.t", schema=Schema(NestedField(1, "id", LongType())))
    loc = table.location().rstrip("/")
    local = loc.removeprefix("file://")
    for d in range(DIRS):
        os.makedirs(f"{local}/data/p={d:03d}", exist_ok=True)
    names = [f"data/p={i % DIRS:03d}/f-{i:08d}.parquet" for i in range(files)]
    names += [f"data/p={i % DIRS:03d}/orphan-{i:08d}.parquet" for i in range(orphans)]
    for name in names:
        os.close(os.open(f"{local}/{name}", os.O_CREAT | os.O_WRONLY, 0o644))
    del names
    touch_seconds = time.perf_counter() - started
    per = files // snapshots
    for s in range(snapshots):
        with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
            for i in range(s * per, (s + 1) * per if s < snapshots - 1 else files):
                append.append_data_file(placeholder_data_file(f"{loc}/data/p={i % DIRS:03d}/f-{i:08d}.parquet", size=0))
    marker.touch()
    build_out = {"files": files, "orphans": orphans, "snapshots": snapshots}
    build_out |= {"touch_seconds": round(touch_seconds, 1), "total_seconds": round(time.perf_counter() - started, 1)}
    print(json.dumps({"build": build_out}), flush=True)


def _rss_mb(field: str) -> float:
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(field))
    return int(line.split()[1]) / 1024


class _Spilled(logging.Handler):
    """Reads the scan's ``spilled N bytes`` log lines, and the peak RSS when listing and referencing end."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.bytes = 0
        self.peak_before_match = 0.0

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        found = _SPILLED.search(message)
        if found:
            self.bytes += int(found.group(1))
        if "older than the cutoff" in message:  # the log line that closes the list_and_reference phase
            self.peak_before_match = _rss_mb("VmHWM")


def step(args: argparse.Namespace) -> None:
    """One dry scan, in this process (run by the parent)."""
    from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES
    from airflow_iceberg_maint.orphans.options import OrphanOptions
    from airflow_iceberg_maint.orphans.removal import remove_orphan_files

    spilled = _Spilled()
    logging.getLogger("airflow_iceberg_maint").addHandler(spilled)
    logging.getLogger("airflow_iceberg_maint").setLevel(logging.INFO)
    table = catalog(Path(args.work)).load_table("db.t")
    baseline = _rss_mb("VmRSS")
    extra = {"memory_budget_mb": args.budget_mb} if args.budget_mb else {}
    options = OrphanOptions(older_than=datetime.fromisoformat(args.cutoff), dry_run=True, only_this_table=True, **extra)
    started = time.perf_counter()
    report = remove_orphan_files(table, options, sources=[INDEX_FILES])
    seconds = time.perf_counter() - started
    peak = _rss_mb("VmHWM")
    out = {
        "files_listed": report.files_listed,
        "referenced": report.referenced_files,
        "orphans": report.orphan_file_count,
        "seconds": round(seconds, 1),
        "phase_seconds": report.phase_seconds,
        "baseline_rss_mb": round(baseline),
        "peak_rss_mb": round(peak),
        "peak_rss_before_match_mb": round(spilled.peak_before_match),
        "bytes_per_listed_file": round((peak - baseline) * 2**20 / max(report.files_listed, 1)),
        "spilled_mb": round(spilled.bytes / 2**20, 1),
        "budget_mb": args.budget_mb or "default",
    }
    print(json.dumps(out), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--orphans", type=int, default=100_000)
    parser.add_argument("--snapshots", type=int, default=100)
    parser.add_argument("--budget-mb", type=int, default=0, help="memory_budget_mb of the scan (0: its default)")
    parser.add_argument("--work", default=".bench-scale-memory")
    parser.add_argument("--step", action="store_true")
    parser.add_argument("--cutoff")
    args = parser.parse_args()
    work = Path(args.work).absolute()
    args.work = str(work)
    if args.step:
        step(args)
        return
    build(work, args.files, args.orphans, args.snapshots)
    command = [sys.executable, __file__, "--step", "--work", args.work, "--cutoff", datetime.now(UTC).isoformat()]
    command += ["--budget-mb", str(args.budget_mb)]
    root = str(Path(__file__).resolve().parents[1] / "src")
    result = subprocess.run(command, env={**os.environ, "PYTHONPATH": root}, check=True)
    sys.exit(result.returncode)


if __name__ == "__main__":
    main()
