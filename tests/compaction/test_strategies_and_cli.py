"""The sort and z-order strategies, and ``iceberg-maint rewrite-data-files`` as a user runs it."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import Catalog

from airflow_iceberg_maint import rewrite_data_files
from airflow_iceberg_maint.state.cleanup import SqlStateStore
from airflow_iceberg_maint.state.jobs import DATA_COMPACTION
from tests.compaction.helpers import ARROW, MB, append_files, create, data_files, scanned

REPORT_KEYS = {
    "table",
    "dry_run",
    "strategy",
    "target_file_size_bytes",
    "groups",
    "rewritten_data_files",
    "added_data_files",
    "removed_delete_files",
    "rewritten_bytes",
    "added_bytes",
    "commits",
    "skipped_groups",
    "failed",
}
GROUP_KEYS = {"partition", "spec_id", "input_files", "input_bytes", "output_files", "output_bytes", "delete_files"}


def _column(path: str, name: str) -> list[int | None]:
    """An integer column of a data file (``id`` or ``day``)."""
    return pq.read_table(path.removeprefix("file://"), columns=[name]).column(name).to_pylist()


def _span(values: list[int | None]) -> int:
    """How many whole numbers the values cover, from the least to the greatest (none of them null)."""
    present = [v for v in values if v is not None]
    assert len(present) == len(values)
    return max(present) - min(present) + 1


def test_sort_orders_the_rows_of_each_file(sqlite_catalog: Catalog) -> None:
    table = append_files(create(sqlite_catalog, "t", False, target=MB // 8), random.Random(1), 10, 3000, [1, 2, None])
    before = scanned(table)
    report = rewrite_data_files(table, dry_run=False, strategy="sort", sort=["day desc nulls last", "id"])
    table = sqlite_catalog.load_table("db.t")
    assert report.failed == [] and scanned(table) == before and report.added_data_files > 1
    rows: list[tuple[int | None, int | None]] = []
    for f in sorted(data_files(table), key=lambda f: int(f["file_path"].rsplit("-", 6)[-6])):
        rows += list(zip(_column(f["file_path"], "day"), _column(f["file_path"], "id"), strict=True))
    key = [(-(d if d is not None else -(10**9)), i) for d, i in rows]
    assert key == sorted(key)  # across the files of the group, in the order they were written


def test_zorder_clusters_both_columns(sqlite_catalog: Catalog) -> None:
    table = create(sqlite_catalog, "t", False, target=MB // 16)
    rng = random.Random(2)
    for _ in range(8):
        rows = [
            {"id": rng.randrange(1024), "day": rng.randrange(1024), "payload": f"{rng.getrandbits(40):x}"}
            for _ in range(4000)
        ]
        table.append(pa.Table.from_pylist(rows, schema=ARROW))
    before = scanned(table)
    report = rewrite_data_files(table, dry_run=False, strategy="zorder", zorder=["id", "day"])
    table = sqlite_catalog.load_table("db.t")
    assert report.failed == [] and scanned(table) == before and report.added_data_files >= 4
    # Each file covers a small box of (id, day), where the unordered input files each covered everything.
    for f in data_files(table):
        ids, days = _column(f["file_path"], "id"), _column(f["file_path"], "day")
        box = _span(ids) * _span(days)
        assert box <= 0.6 * 1024 * 1024


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    command = [str(Path(sys.executable).parent / "iceberg-maint"), "rewrite-data-files", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_cli_dry_run_then_real_run(env: dict[str, str], sqlite_catalog: Catalog) -> None:
    table = append_files(create(sqlite_catalog, "t", True), random.Random(3), 6, 200, [1, 2])
    dry = _cli(env, "db.t", "--dry-run", "--json", "--target-file-size-mb", "1")
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert set(plan) == REPORT_KEYS and all(set(g) == GROUP_KEYS for g in plan["groups"])
    assert plan["dry_run"] is True and plan["target_file_size_bytes"] == MB and plan["commits"] == []
    assert sqlite_catalog.load_table("db.t").metadata_location == table.metadata_location
    real = _cli(env, "db.t", "--json", "--target-file-size-mb", "1", "--min-input-files", "2")
    assert real.returncode == 0, real.stderr
    done = json.loads(real.stdout)
    assert set(done) == REPORT_KEYS and done["rewritten_data_files"] == 12 and len(done["commits"]) == 2
    assert [g["output_files"] for g in done["groups"]] == [1, 1]
    state = SqlStateStore().get(str(table.metadata.table_uuid), DATA_COMPACTION)
    assert state is not None and state.last_success_at is not None and state.last_attempt_dry_run is False
    text = _cli(env, "db.t", "--target-file-size-mb", "1")
    assert text.returncode == 0 and text.stdout.startswith("table db.t: rewrote 0 data files in 0 groups")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--where", "day >>> 3"], "where 'day >>> 3': expected a row filter in pyiceberg's syntax"),
        (["--strategy", "zorder"], "zorder: the zorder strategy needs the columns"),
        (["--sort", "id", "--zorder", "day"], "--sort and --zorder: give one of them"),
        (["--sort", "nope"], "sort 'nope': the table has no such column"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(
    env: dict[str, str], sqlite_catalog: Catalog, args: list[str], message: str
) -> None:
    table = append_files(create(sqlite_catalog, "t", False), random.Random(4), 2, 10, [1])
    result = _cli(env, "db.t", *args)
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr, result.stderr
    assert sqlite_catalog.load_table("db.t").metadata_location == table.metadata_location
