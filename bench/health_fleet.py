"""The fleet health scan: ``iceberg-maint health --all`` over many small tables, timed.

    .venv/bin/python bench/health_fleet.py                      # 1,000 tables on a SQLite catalog
    .venv/bin/python bench/health_fleet.py --tables 200 --parallelism 8
    scripts/services.sh run -- .venv/bin/python bench/health_fleet.py --catalog rest --tables 200
                                                                # SeaweedFS's REST catalog and S3

Each table gets two appends of a few rows (two small data files, two manifests, three metadata
files) and every fifth a third append; the SQLite build is kept under ``--work`` and reused. The
scan is ``fleet_health`` (the command's engine) with a state store of its own; the median of
``--repeat`` scans is printed with the tables a second.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent


def _rows(i: int) -> pa.Table:
    return pa.table({"id": pa.array([i, i + 1, i + 2], pa.int64()), "name": pa.array(["a", "b", "c"], pa.string())})


def _build(catalog: Any, tables: int) -> None:
    namespaces = [n[0] for n in catalog.list_namespaces()]
    if "fleet" not in namespaces:
        catalog.create_namespace("fleet")
    existing = {ident[-1] for ident in catalog.list_tables("fleet")}
    started = time.perf_counter()
    for i in range(tables):
        name = f"t{i:05d}"
        if name in existing:
            continue
        table = catalog.create_table(f"fleet.{name}", schema=_rows(0).schema)
        for j in range(3 if i % 5 == 0 else 2):
            table.append(_rows(j))
        if i % 100 == 99:
            print(f"built {i + 1} tables in {time.perf_counter() - started:.0f} s", file=sys.stderr)


def _catalog(kind: str, work: Path) -> Any:
    if kind == "sqlite":
        from pyiceberg.catalog.sql import SqlCatalog

        work.mkdir(parents=True, exist_ok=True)
        return SqlCatalog("bench", uri=f"sqlite:///{work}/catalog.db", warehouse=f"file://{work}/warehouse")
    sys.path.insert(0, str(ROOT))
    from pyiceberg.catalog import load_catalog

    from tests.support.services import create_table_bucket, rest_properties

    return load_catalog("bench", **rest_properties(create_table_bucket()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--parallelism", type=int, default=4)
    parser.add_argument("--catalog", choices=("sqlite", "rest"), default="sqlite")
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / ".work" / "health_fleet")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from airflow_iceberg_maint import fleet_health
    from airflow_iceberg_maint.state.cleanup import SqlStateStore

    work = args.work / str(args.tables) if args.catalog == "sqlite" else args.work
    catalog = _catalog(args.catalog, work)
    _build(catalog, args.tables)
    state = SqlStateStore(f"sqlite:///{args.work.parent / f'health-state-{uuid.uuid4().hex}.db'}")
    times = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        reports = fleet_health(catalog, namespace="fleet", parallelism=args.parallelism, state=state)
        times.append(time.perf_counter() - started)
        assert len(reports) == args.tables and not reports.failed, reports.failed
    median = statistics.median(times)
    print(
        f"health fleet scan, {args.catalog} catalog, {args.tables} tables, parallelism {args.parallelism}: "
        f"median {median:.1f} s of {args.repeat} ({args.tables / median:.0f} tables/s; "
        f"all: {', '.join(f'{t:.1f}' for t in times)} s)"
    )


if __name__ == "__main__":
    main()
