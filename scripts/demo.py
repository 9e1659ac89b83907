"""``make demo``: the project's jobs on an embedded warehouse (SQLite catalog, local files).

Builds ``.demo/`` anew, then shows, each step printing what it did:

1. orphan removal from the command line: a table with many snapshots, a branch and a tag,
   expired snapshots and planted old orphans; a dry run, then the removal, then a check that
   every snapshot, branch and tag still reads the same rows;
2. the same job from Airflow: the daily policy-driven DAG run with ``airflow dags test``;
3. the event flow of secondary indexes: a writer commits, the index lags, the maintenance
   DAG commits an incremental extract, and a key is looked up.

Airflow reaches the catalog through the ``iceberg`` connection ``iceberg_default``; the
command line through pyiceberg's variables for a catalog of the same name.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import yaml
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

CATALOG = "iceberg_default"  # the catalog name IcebergHook gives the connection iceberg_default
SCHEMA = Schema(NestedField(1, "id", LongType()), NestedField(2, "category", StringType()))
CATEGORIES = ["books", "games", "garden/tools", "toys & more"]
DAY = 86400
BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parent.parent


def rows(start: int, count: int) -> pa.Table:
    ids = range(start, start + count)
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "category": pa.array([CATEGORIES[i % len(CATEGORIES)] for i in ids])}
    )


def build(root: Path) -> tuple[SqlCatalog, Table]:
    catalog = SqlCatalog(CATALOG, uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse")
    catalog.create_namespace("demo")
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "category"))
    table = catalog.create_table(
        "demo.orders", schema=SCHEMA, partition_spec=spec, properties={"write.metadata.previous-versions-max": "10"}
    )
    for i in range(24):
        table.append(rows(i * 50, 50))
    table.overwrite(rows(5000, 40), overwrite_filter="id < 100")
    table.delete("id >= 200 and id < 260")
    head = table.metadata.current_snapshot_id
    table.manage_snapshots().create_tag(head, "month-end").create_branch(head, "audit").commit()
    table.append(rows(9000, 20), branch="audit")
    expired = [s.snapshot_id for s in table.metadata.snapshots[:6]]
    table.maintenance.expire_snapshots().by_ids(expired).commit()
    _age(root / "warehouse", days=10)  # the table has lived for a while
    return catalog, catalog.load_table("demo.orders")


def _age(folder: Path, days: int) -> None:
    then = time.time() - days * DAY
    for dirpath, _, names in os.walk(folder):
        for name in names:
            os.utime(os.path.join(dirpath, name), (then, then))


def _put(path: Path, size: int, age_days: float | None = 10) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * size)
    if age_days is not None:
        then = time.time() - age_days * DAY
        os.utime(path, (then, then))


def plant(table: Table, tag: str) -> None:
    """Leftovers of a crashed writer, plus files that must survive."""
    loc = Path(table.location().removeprefix("file://"))
    for i in range(5):
        _put(loc / f"data/category=books/{tag}-failed-write-{i}.parquet", 4096)
    _put(loc / f"metadata/{tag}-abandoned-m0.avro", 2048)
    _put(loc / "data/_temporary/attempt-1.parquet", 4096)  # hidden: always skipped
    _put(loc / "data/category=games/in-flight.parquet", 4096, None)  # fresh: a write in progress
    _put(loc.parent / "orders_backup/data/copy.parquet", 4096)  # a sibling folder: never scanned


def row_counts(table: Table) -> dict[str, int]:
    counts = {
        f"snapshot {s.snapshot_id}": len(table.scan(snapshot_id=s.snapshot_id).to_arrow())
        for s in table.metadata.snapshots
    }
    return counts | {
        name: len(table.scan(snapshot_id=r.snapshot_id).to_arrow()) for name, r in table.metadata.refs.items()
    }


class Shell:
    """Runs the project's commands as a user would, with the demo's configuration."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.log = root / "demo.log"
        catalog = {"type": "sql", "uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/warehouse"}
        # The command line reads this .pyiceberg.yaml; the DAGs the same settings as a connection.
        (root / ".pyiceberg.yaml").write_text(yaml.safe_dump({"catalog": {CATALOG: catalog}}, default_flow_style=False))
        self.env = {
            **os.environ,
            "PYICEBERG_HOME": str(root),
            "ICEBERG_MAINT_STATE_URL": f"sqlite:///{root}/cli-state.db",
            "AIRFLOW_HOME": str(root / "airflow"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW_CONN_ICEBERG_DEFAULT": json.dumps({"conn_type": "iceberg", "extra": catalog}),
        }

    def cli(self, *args: str, show: bool = True) -> str:
        if show:
            print(f"\n$ iceberg-maint --catalog {CATALOG} {' '.join(args)}", flush=True)
        done = subprocess.run(
            [str(BIN / "iceberg-maint"), "--catalog", CATALOG, *args],
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode:
            sys.exit(f"iceberg-maint failed: {done.stderr.strip()}")
        if show:
            print(done.stdout.rstrip())
        return done.stdout

    def airflow(self, *args: str) -> None:
        print(f"$ airflow {' '.join(args)}", flush=True)
        with self.log.open("a") as log:
            done = subprocess.run(
                [str(BIN / "airflow"), *args], env=self.env, stdout=log, stderr=subprocess.STDOUT, check=False
            )
        if done.returncode:
            sys.exit(f"airflow {args[0]} failed; see {self.log}")


def act_one(root: Path, shell: Shell) -> None:
    catalog, table = build(root)
    plant(table, "march")
    before = row_counts(table)
    print(
        f"1. Orphan removal from the command line. Table demo.orders: {len(table.metadata.snapshots)} "
        f"snapshots, refs {sorted(table.metadata.refs)}, 6 snapshots expired, 6 old orphans planted."
    )
    shell.cli("orphans", "demo.orders", "--dry-run")
    shell.cli("orphans", "demo.orders")
    after = row_counts(catalog.load_table("demo.orders"))
    loc = Path(table.location().removeprefix("file://"))
    survivors = ("data/_temporary/attempt-1.parquet", "data/category=games/in-flight.parquet")
    kept = all((loc / p).exists() for p in survivors)
    print(
        f"Every snapshot, branch and tag still reads the same rows: {after == before} ({len(after)} checked); "
        f"hidden and in-flight files kept: {kept}."
    )
    if after != before or not kept:
        sys.exit("demo: the removal changed what the table reads")


def act_two(root: Path, shell: Shell) -> None:
    print(
        "\n2. The same job from Airflow: the DAG iceberg_orphan_cleanup_scheduled, "
        "policies in dags/iceberg_maint_policies.yaml"
    )
    table = SqlCatalog(CATALOG, uri=f"sqlite:///{root}/catalog.db").load_table("demo.orders")
    plant(table, "april")
    shell.airflow("db", "migrate")
    shell.airflow("pools", "set", "iceberg_maint", "4", "Iceberg maintenance")
    shell.airflow("dags", "test", "iceberg_orphan_cleanup_scheduled")
    for report in sorted((root / "airflow" / "iceberg_maint" / "reports").rglob("*.json")):
        if report.name == "catalog-tables.json":
            continue  # the run's one catalog pass, shared by its removal tasks: not a report
        data = json.loads(report.read_text())
        print(
            f"report {report.relative_to(root)}: table {data['table']}, {data['orphan_file_count']} orphans "
            f"({data['orphan_bytes']} bytes), {data['deleted_file_count']} deleted, dry run {data['dry_run']}"
        )


def act_three(shell: Shell) -> None:
    print(
        "\n3. Secondary indexes, event flow: write, lag, extract commit, lookup "
        "(indexes defined in dags/iceberg_indexes.yaml)"
    )
    shell.airflow("dags", "test", "iceberg_demo_writer")
    shell.airflow("dags", "test", "iceberg_index_maintenance_event_triggered")  # creates the indexes, first extracts
    shell.airflow("dags", "test", "iceberg_demo_writer")  # a new commit: the index lags
    lag = json.loads(shell.cli("index", "lag", "demo.events", "events_by_id", "--json", show=False))
    print(
        f"index lag: stale {lag['stale']}, {lag['snapshots_behind']} snapshot(s) behind, "
        f"{lag['added_files']['data']} data file(s) added since its newest extract"
    )
    shell.airflow("dags", "test", "iceberg_index_maintenance_event_triggered")  # commits an incremental extract
    lag = json.loads(shell.cli("index", "lag", "demo.events", "events_by_id", "--json", show=False))
    print(f"index lag after the maintenance run: stale {lag['stale']}")
    shell.cli("index", "list", "demo.events")
    shell.cli("index", "lookup", "demo.events", "events_by_id", "--eq", "142")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=Path(".demo"))
    root = parser.parse_args().root.resolve()
    shutil.rmtree(root, ignore_errors=True)  # every demo starts from nothing
    root.mkdir(parents=True)
    act_one(root, shell := Shell(root))
    act_two(root, shell)
    act_three(shell)
    print(f"\nDone. Airflow's own output is in {shell.log}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
