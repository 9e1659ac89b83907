"""Compaction's mapped tasks on two Celery workers: ``compaction_task_group`` in four shares on a partitioned table.

Each share takes the table's lease, so the shares of one table commit one after another: the three that
find it held defer (the triggerer watches the lease) and resume on whichever worker takes them. The test
checks that each share ran once on a worker, that each committed its own groups (one ``replace``
snapshot a group, a share's commits together in the log), that the rows are the same and that each
partition is one file after.
"""

from __future__ import annotations

import json
import time
from typing import Any

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from tests.celery.helpers import partitioned_table, read_json
from tests.support.celery import WORKERS, Deployment

DAG = "celery_compaction_sharded"
SHARE_TASK = "rewrite_data_file_groups"
PARTITIONS, APPENDS, PER_FILE = 8, 6, 20  # 48 small files, one group of six a partition
SHARES = 4


def sorted_rows(table: Table) -> list[dict[str, Any]]:
    return sorted(table.scan().to_arrow().to_pylist(), key=lambda row: row["id"])


def test_four_compaction_shares_run_on_both_workers_and_commit_every_group_as_a_replace(
    celery_airflow: Deployment, catalog: SqlCatalog
) -> None:
    endpoint = celery_airflow.catalog_properties["s3.endpoint"]
    table = partitioned_table(catalog, "compact.events", PARTITIONS, APPENDS, PER_FILE)
    before, before_snapshot = sorted_rows(table), table.metadata.current_snapshot_id
    assert len(before) == PARTITIONS * APPENDS * PER_FILE and len(table.inspect.files()) == PARTITIONS * APPENDS
    spec_id = table.spec().spec_id
    groups = {f"{spec_id}/{json.dumps({'kind': f'p{n}'})}".replace(" ", "") for n in range(PARTITIONS)}

    started = time.monotonic()
    run = celery_airflow.trigger(DAG, {"table": "compact.events", "shares": SHARES})
    assert celery_airflow.wait_run(DAG, run) == "success", celery_airflow.brief(DAG, run)
    wall = time.monotonic() - started

    # The plan: every partition's group once, in four shares of two.
    shares = [s["group_ids"] for s in celery_airflow.xcom(DAG, run, "plan_data_rewrite")]
    assert len(shares) == SHARES and sorted(g for share in shares for g in share) == sorted(groups)
    assert sorted(len(share) for share in shares) == [PARTITIONS // SHARES] * SHARES

    # Each share rewrote exactly its groups, six files into one each, one commit a group, nothing failed.
    commits: dict[int, list[int]] = {}
    for index, share in enumerate(shares):
        summary = celery_airflow.xcom(DAG, run, SHARE_TASK, map_index=index)
        report = read_json(endpoint, summary["report"])
        assert report["stage"] == "done" and report["failed"] == [] and report["dry_run"] is False
        taken = [
            f"{g['spec_id']}/{json.dumps(g['partition'], sort_keys=True, separators=(',', ':'))}"
            for g in report["groups"]
        ]
        assert taken == share
        assert [(g["input_files"], g["output_files"]) for g in report["groups"]] == [(APPENDS, 1)] * len(share)
        assert (summary["rewritten_data_files"], summary["added_data_files"]) == (APPENDS * len(share), len(share))
        assert len(report["commits"]) == summary["commit_count"] == len(share)
        commits[index] = report["commits"]

    # The log after the rewrite: one replace snapshot a group, each share's commits together (the lease).
    after = catalog.load_table("compact.events")
    log = [entry.snapshot_id for entry in after.metadata.snapshot_log]
    new = log[log.index(before_snapshot) + 1 :] if before_snapshot is not None else log
    assert sorted(new) == sorted(c for share in commits.values() for c in share)
    assert {after.metadata.snapshot_by_id(s).summary.operation.value for s in new} == {"replace"}
    order = sorted(commits, key=lambda i: new.index(commits[i][0]))
    assert new == [c for i in order for c in commits[i]], (new, commits)
    assert after.metadata.current_snapshot_id == new[-1]

    # The same rows, one file a partition.
    assert sorted_rows(after) == before
    assert len(after.inspect.files()) == PARTITIONS

    # Where the shares ran: each once (a lease wait defers and resumes the same try), on the deployment's
    # workers. Which one is Celery's choice: the lease runs the shares one after another and each resumed
    # share goes to whichever worker asks first, so on a loaded machine one worker may take them all
    # (tests/celery/test_sharded_orphans.py has both workers run shards that nothing serializes).
    tries = [t for t in celery_airflow.task_instances(DAG, run) if t["task_id"] == SHARE_TASK]
    assert sorted(t["map_index"] for t in tries) == list(range(SHARES)), tries
    assert all(t["state"] == "success" and t["try_number"] == 1 for t in tries), tries
    hosts = {t["map_index"]: t["hostname"] for t in tries}
    assert {t["queue"] for t in celery_airflow.task_instances(DAG, run)} == {"iceberg_maint"}
    print(
        "compaction, which worker ran which share (in commit order):",
        [(i, hosts[i], len(shares[i]), commits[i]) for i in order],
        f"wall time from trigger to success {wall:.1f} s",
    )
    assert set(hosts.values()) <= set(WORKERS), hosts
