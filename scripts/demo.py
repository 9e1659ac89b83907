"""``make demo``: orphan-file removal on an embedded warehouse (SQLite catalog, local files).

Builds ``.demo/`` anew: a partitioned table with many snapshots, a branch and a tag, two
expired snapshots (whose files become orphans), and planted old orphans next to files that
must survive (hidden, fresh, and a sibling table's backup). Then runs the ``iceberg-maint``
command twice, a dry run and a real removal, and checks that every snapshot still reads.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

SCHEMA = Schema(NestedField(1, "id", LongType()), NestedField(2, "category", StringType()))
CATEGORIES = ["books", "games", "garden/tools", "toys & more"]
DAY = 86400


def rows(start: int, count: int) -> pa.Table:
    ids = range(start, start + count)
    return pa.table({"id": pa.array(ids, pa.int64()),
                     "category": pa.array([CATEGORIES[i % len(CATEGORIES)] for i in ids])})


def build(root: Path) -> tuple[SqlCatalog, dict[str, int]]:
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    catalog = SqlCatalog("default", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse")
    catalog.create_namespace("demo")
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "category"))
    table = catalog.create_table("demo.events", schema=SCHEMA, partition_spec=spec,
                                 properties={"write.metadata.previous-versions-max": "10"})
    for i in range(24):
        table.append(rows(i * 50, 50))
    table.overwrite(rows(5000, 40), overwrite_filter="id < 100")
    table.delete("id >= 200 and id < 260")
    head = table.metadata.current_snapshot_id
    table.manage_snapshots().create_tag(head, "month-end").create_branch(head, "audit").commit()
    table.append(rows(9000, 20), branch="audit")
    expired = [s.snapshot_id for s in table.metadata.snapshots[:6]]
    table.maintenance.expire_snapshots().by_ids(expired).commit()
    table = catalog.load_table("demo.events")
    _age_everything(root / "warehouse", days=10)  # the table has lived for a while
    _plant(table)
    return catalog, _row_counts(table)


def _age_everything(folder: Path, days: int) -> None:
    then = time.time() - days * DAY
    for dirpath, _, names in os.walk(folder):
        for name in names:
            os.utime(os.path.join(dirpath, name), (then, then))


def _plant(table: Table) -> None:
    loc = Path(table.location().removeprefix("file://"))
    old = time.time() - 10 * DAY

    def put(rel: str, size: int, age: float | None = old) -> None:
        path = loc.parent / rel if rel.startswith("..") else loc / rel
        path = Path(os.path.normpath(path))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\0" * size)
        if age is not None:
            os.utime(path, (age, age))

    for i in range(5):
        put(f"data/category=books/failed-write-{i}.parquet", 4096)  # a crashed writer's leftovers
    put("metadata/abandoned-m0.avro", 2048)
    put("data/_temporary/attempt-1.parquet", 4096)                 # hidden: always skipped
    put("data/category=games/in-flight.parquet", 4096, age=None)   # fresh: a write in progress
    put("../events_backup/data/copy.parquet", 4096)                 # a sibling folder: never scanned


def _row_counts(table: Table) -> dict[str, int]:
    counts = {f"snapshot {s.snapshot_id}": len(table.scan(snapshot_id=s.snapshot_id).to_arrow())
              for s in table.metadata.snapshots}
    counts |= {f"{name}": len(table.scan(snapshot_id=r.snapshot_id).to_arrow())
               for name, r in table.metadata.refs.items()}
    return counts


def _cli(root: Path, *args: str) -> None:
    env = {**os.environ,
           "PYICEBERG_CATALOG__DEFAULT__TYPE": "sql",
           "PYICEBERG_CATALOG__DEFAULT__URI": f"sqlite:///{root}/catalog.db",
           "PYICEBERG_CATALOG__DEFAULT__WAREHOUSE": f"file://{root}/warehouse"}
    command = [str(Path(sys.executable).parent / "iceberg-maint"), *args]
    print(f"\n$ iceberg-maint {' '.join(args)}", flush=True)
    subprocess.run(command, env=env, check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", type=Path, default=Path(".demo"))
    args = parser.parse_args()
    root = args.root.resolve()
    catalog, before = build(root)
    table = catalog.load_table("demo.events")
    print(f"Demo warehouse in {root}: table demo.events, {len(table.metadata.snapshots)} snapshots, "
          f"branches and tags {sorted(table.metadata.refs)}, 6 snapshots expired, 6 old orphans planted.")
    _cli(root, "orphans", "demo.events", "--dry-run")
    _cli(root, "orphans", "demo.events")
    after = _row_counts(catalog.load_table("demo.events"))
    kept = all(Path(table.location().removeprefix("file://"), p).exists()
               for p in ("data/_temporary/attempt-1.parquet", "data/category=games/in-flight.parquet"))
    print(f"\nEvery snapshot, branch and tag still reads the same rows: {after == before} "
          f"({len(after)} checked). Hidden and in-flight files kept: {kept}.")
    return 0 if after == before and kept else 1


if __name__ == "__main__":
    sys.exit(main())
