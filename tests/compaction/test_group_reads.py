"""A group of many local files is read by forked reader processes: every row once, in one order for
both passes of a sort, a file too large for a chunk streamed in its place; a reader killed fails its group.

Each rewrite runs in a process of its own (the command line, started from a short script that records
which processes read): readers are forked only while the process runs one thread, which a test session
cannot promise.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from airflow_iceberg_maint.compaction.group_reads import MIN_FILES_FOR_PROCESSES, usable_cores
from tests.compaction.helpers import append_files, create, data_files, delete_files, read_live, scanned
from tests.index.row_deletes import commit_deletion_vector, commit_equality_deletes, commit_position_deletes

pytestmark = pytest.mark.skipif(usable_cores() < 2, reason="readers are forked only with two usable cores or more")

SCRIPT = """
    import os, signal, sys
    from pathlib import Path
    from airflow_iceberg_maint.cli import main
    from airflow_iceberg_maint.compaction import group_reads

    record, parent, real = Path(sys.argv[1]), os.getpid(), group_reads.live_rows
    (record / "command").write_text(str(parent))

    def recorded(table, plan, path):
        if os.getpid() != parent and sys.argv[2] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        (record / str(os.getpid())).touch()
        return real(table, plan, path)

    group_reads.live_rows = recorded
    if sys.argv[2] == "second-fork-fails":
        from tests.support.fork_faults import fail_second_fork

        fail_second_fork()
    sys.exit(main(["rewrite-data-files", *sys.argv[3:]]))
"""


def _table(catalog: Catalog) -> tuple[Table, Counter[tuple[object, ...]]]:
    """Many small files and one large one amid them, with every delete kind; and the rows to expect."""
    rng = random.Random(11)
    table = append_files(create(catalog, "t", False), rng, MIN_FILES_FOR_PROCESSES // 2, 40, [1, 2, None])
    table = append_files(table, rng, 1, 30000, [1, 2, None])  # too large for a chunk at a 1 MB budget
    table = append_files(table, rng, MIN_FILES_FOR_PROCESSES // 2 + 4, 40, [1, 2, None])
    paths = [f["file_path"] for f in data_files(table)]
    table = commit_position_deletes(table, {paths[1]: [0, 5, 39], paths[-1]: list(range(0, 40, 3))})
    table = commit_deletion_vector(table, paths[2], [1, 2, 3])
    expected = Counter({row: n for row, n in scanned(table).items() if ("day", 2) not in row})
    return commit_equality_deletes(table, ["day"], [[2]]), expected


def _rewrite(tmp_path: Path, env: dict[str, str], mode: str, *args: str) -> tuple[dict[str, Any], set[int], int]:
    """The JSON report of the command, the processes that read files (the command's own pid negated), and
    the command's exit code."""
    record = tmp_path / f"readers-{mode}-{len(list(tmp_path.iterdir()))}"
    record.mkdir()
    script = [sys.executable, "-c", textwrap.dedent(SCRIPT), str(record), mode, "db.t", "--json", *args]
    done = subprocess.run(script, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.stdout, done.stderr
    report = json.loads(done.stdout)
    command = int((record / "command").read_text())
    readers = {-pid if pid == command else pid for pid in (int(p.name) for p in record.iterdir() if p.name.isdigit())}
    return report, readers, done.returncode


def test_forked_readers_give_every_row_once_and_both_sort_passes_one_order(
    tmp_path: Path, env: dict[str, str], sqlite_catalog: Catalog
) -> None:
    table, expected = _table(sqlite_catalog)
    history = {s.snapshot_id: read_live(table, s.snapshot_id) for s in table.snapshots()}
    options = ["--min-input-files", "2", "--memory-budget-mb", "1", "--strategy", "sort", "--sort", "id"]
    report, readers, code = _rewrite(tmp_path, env, "record", *options)
    assert code == 0 and report["failed"] == [] and report["rewritten_data_files"] == MIN_FILES_FOR_PROCESSES + 5
    assert len(readers) >= 2 and all(pid > 0 for pid in readers)  # forked readers, never the command itself
    table = sqlite_catalog.load_table("db.t")
    assert delete_files(table) == [] and scanned(table) == expected
    ids = [i for f in data_files(table) for i in pq.read_table(f["file_path"], columns=["id"])["id"].to_pylist()]
    assert ids == sorted(ids)  # both passes of the sort read the chunks in one order
    for snapshot_id, rows in history.items():
        assert read_live(table, snapshot_id) == rows


def test_a_reader_process_killed_fails_its_group_and_changes_nothing(
    tmp_path: Path, env: dict[str, str], sqlite_catalog: Catalog, warehouse: Path
) -> None:
    table, _ = _table(sqlite_catalog)
    before = {p for p in warehouse.rglob("*") if p.is_file()}
    report, readers, code = _rewrite(tmp_path, env, "kill", "--min-input-files", "2", "--no-remove-dangling-deletes")
    assert code == 0 and report["commits"] == [] and len(report["failed"]) == 1  # a failed group is reported
    assert "a reader process ended without its rows" in report["failed"][0]["error"]
    assert sqlite_catalog.load_table("db.t").metadata_location == table.metadata_location
    assert {p for p in warehouse.rglob("*") if p.is_file()} == before  # the files written were removed
    assert readers == set()  # each reader died before its first file; the command read none


def test_a_fork_failing_midway_ends_the_forked_reader_and_threads_read(
    tmp_path: Path, env: dict[str, str], sqlite_catalog: Catalog
) -> None:
    table, expected = _table(sqlite_catalog)
    report, readers, code = _rewrite(tmp_path, env, "second-fork-fails", "--min-input-files", "2")
    assert code == 0 and report["failed"] == [] and len(report["commits"]) == 2  # and the command ended
    assert len(readers) == 1 and min(readers) < 0  # the command read every file itself, on threads
    table = sqlite_catalog.load_table("db.t")
    assert delete_files(table) == [] and scanned(table) == expected
