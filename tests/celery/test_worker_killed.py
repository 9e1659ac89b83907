"""A Celery worker killed (SIGKILL to its process group) in the middle of a shard: the shard is retried on
the other worker and the run still deletes exactly the orphans, nothing live.

Run last in this folder: it leaves worker-a dead. The shard's first try on worker-a writes its files, then
waits (``kill_on``, tests/celery/dags/celery_dags.py) before reporting success; the test kills the worker
once a shard says so and its task instance is ``running`` on worker-a.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from pyiceberg.catalog.sql import SqlCatalog

from tests.celery.helpers import exists, gate_key, planted_table
from tests.s3_helpers import s3_test_client
from tests.support.celery import HEARTBEAT_TIMEOUT_SECONDS, Deployment, wait_for

DAG = "celery_orphans_sharded"
VICTIM, SURVIVOR = "worker-a", "worker-b"


def test_a_worker_killed_mid_shard_has_its_shard_retried_on_the_other_and_the_run_deletes_exactly_the_orphans(
    celery_airflow: Deployment, catalog: SqlCatalog
) -> None:
    endpoint = celery_airflow.catalog_properties["s3.endpoint"]
    made = planted_table(catalog, endpoint, "kill.orders", 6)
    planted, live = made.planted, made.live
    conf = {"table": "kill.orders", "older_than": made.cutoff, "dry_run": False, "shards": 4}
    run = celery_airflow.trigger(DAG, {**conf, "kill_on": VICTIM})
    s3 = s3_test_client(endpoint)

    def gated_on_victim() -> list[int]:
        assert celery_airflow.run_state(DAG, run) not in ("success", "failed"), celery_airflow.brief(DAG, run)
        running = {
            t["map_index"]
            for t in celery_airflow.task_instances(DAG, run)
            if t["task_id"] == "scan_orphan_shard" and t["state"] == "running" and t["hostname"] == VICTIM
        }
        found = s3.list_objects_v2(Bucket=celery_airflow.bucket, Prefix=gate_key(run, 0).rsplit("/", 1)[0])
        gated = {int(o["Key"].rsplit("/", 1)[1]) for o in found.get("Contents", [])}
        return sorted(running & gated)

    gated = wait_for(gated_on_victim, 240, lambda: f"a shard gated on {VICTIM}: {celery_airflow.brief(DAG, run)}")
    killed_at = datetime.now(UTC)
    started = time.monotonic()
    celery_airflow.kill_worker(VICTIM)
    assert celery_airflow.wait_run(DAG, run, timeout=300) == "success"
    wall = time.monotonic() - started

    tries = celery_airflow.task_instances(DAG, run)
    for shard in gated:
        first, *rest = [t for t in tries if (t["task_id"], t["map_index"]) == ("scan_orphan_shard", shard)]
        assert (first["try_number"], first["hostname"]) == (1, VICTIM), first
        assert first["state"] in ("failed", "up_for_retry"), first
        assert [(t["try_number"], t["hostname"], t["state"]) for t in rest] == [(2, SURVIVOR, "success")], rest
        retry = rest[0]
        print(
            f"shard {shard}: killed on {VICTIM}; marked failed {(first['end_date'] - killed_at).total_seconds():.1f} s "
            f"after the kill (heartbeat timeout {HEARTBEAT_TIMEOUT_SECONDS} s); retry started on {retry['hostname']} "
            f"{(retry['start_date'] - killed_at).total_seconds():.1f} s after the kill"
        )
    # Everything that ran after the kill ran on the survivor.
    assert {t["hostname"] for t in tries if t["start_date"] and t["start_date"] > killed_at} == {SURVIVOR}
    print(
        "kill test, which worker ran what:",
        [(t["task_id"], t["map_index"], t["try_number"], t["hostname"], t["state"]) for t in tries],
    )
    print(f"kill test: from the kill to the run's success {wall:.1f} s")

    summary = celery_airflow.xcom(DAG, run, "finish_orphan_shards")
    assert (summary["orphan_file_count"], summary["deleted_file_count"]) == (len(planted), len(planted))
    assert not any(exists(endpoint, uri) for uri in planted)
    assert all(exists(endpoint, uri) for uri in live)
    assert len(catalog.load_table("kill.orders").scan().to_arrow()) == 8 * 50
