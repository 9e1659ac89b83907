"""The sharded orphan scan on two Celery workers with no shared disk: scratch on S3, the single task's result."""

from __future__ import annotations

from collections import Counter

from pyiceberg.catalog.sql import SqlCatalog

from tests.celery.helpers import exists, planted_table, read_json
from tests.support.celery import WORKERS, Deployment

SHARD_TASKS = ("scan_orphan_shard", "match_orphan_shard")
COUNTS = ("orphan_file_count", "orphan_bytes", "files_listed", "dry_run")


def test_four_shards_spread_over_both_workers_match_the_single_task_and_delete_exactly_the_orphans(
    celery_airflow: Deployment, catalog: SqlCatalog
) -> None:
    endpoint = celery_airflow.catalog_properties["s3.endpoint"]
    made = planted_table(catalog, endpoint, "shards.orders", 9)
    planted, live = made.planted, made.live
    conf = {"table": "shards.orders", "older_than": made.cutoff, "dry_run": True, "shards": 4}

    single_run = celery_airflow.trigger("celery_orphans_single", conf)
    sharded_run = celery_airflow.trigger("celery_orphans_sharded", conf)
    assert celery_airflow.wait_run("celery_orphans_single", single_run) == "success"
    assert celery_airflow.wait_run("celery_orphans_sharded", sharded_run) == "success"

    single = celery_airflow.xcom("celery_orphans_single", single_run, "remove_orphan_files")
    sharded = celery_airflow.xcom("celery_orphans_sharded", sharded_run, "finish_orphan_shards")
    assert {k: sharded[k] for k in COUNTS} == {k: single[k] for k in COUNTS}
    assert single["orphan_file_count"] == len(planted)
    assert sorted(read_json(endpoint, sharded["report"])["orphan_files"]) == planted
    assert sorted(read_json(endpoint, single["report"])["orphan_files"]) == planted
    # The scratch folder the shards handed their files through is on S3, beside the report.
    plan = celery_airflow.xcom("celery_orphans_sharded", sharded_run, "plan_orphan_shards")
    assert plan["scratch"].startswith(f"{celery_airflow.report_base}/") and plan["shards"] == 4
    assert all(exists(endpoint, uri) for uri in planted)

    tries = celery_airflow.task_instances("celery_orphans_sharded", sharded_run)
    shard_hosts = {(t["task_id"], t["map_index"]): t["hostname"] for t in tries if t["task_id"] in SHARD_TASKS}
    assert set(shard_hosts) == {(task, i) for task in SHARD_TASKS for i in range(4)}
    assert set(shard_hosts.values()) == set(WORKERS), shard_hosts  # both workers ran shards
    assert {t["queue"] for t in tries} == {"iceberg_maint"}
    print("dry run, which worker ran what:", sorted((k, v) for k, v in shard_hosts.items()))

    real_run = celery_airflow.trigger("celery_orphans_sharded", {**conf, "dry_run": False})
    assert celery_airflow.wait_run("celery_orphans_sharded", real_run) == "success"
    summary = celery_airflow.xcom("celery_orphans_sharded", real_run, "finish_orphan_shards")
    assert (summary["orphan_file_count"], summary["deleted_file_count"]) == (len(planted), len(planted))
    assert not any(exists(endpoint, uri) for uri in planted)
    assert all(exists(endpoint, uri) for uri in live)
    assert len(catalog.load_table("shards.orders").scan().to_arrow()) == 8 * 50
    hosts = Counter(t["hostname"] for t in celery_airflow.task_instances("celery_orphans_sharded", real_run))
    print("real run, tasks per worker:", dict(hosts))
