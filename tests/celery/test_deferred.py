"""Deferrable sensors on the Celery deployment: each waits in the triggerer (no worker slot) and is resumed
on a worker when its trigger fires: the due sensor once the policy's interval has passed, the index-lag
sensor once the table has a commit its index has not."""

from __future__ import annotations

from pyiceberg.catalog.sql import SqlCatalog

from tests.celery.helpers import cutoff_after_writes, make_table, rows
from tests.support.celery import WORKERS, Deployment, wait_for

DAG = "celery_deferred"
SENSORS = ("wait_until_due", "wait_for_lag")


def test_the_due_and_index_lag_sensors_wait_in_the_triggerer_and_resume_on_a_worker(
    celery_airflow: Deployment, catalog: SqlCatalog
) -> None:
    make_table(catalog, "due.events", appends=2)
    lagging = make_table(catalog, "lag.events", appends=2)
    run = celery_airflow.trigger(DAG, {"older_than": cutoff_after_writes()})

    def held_by_the_triggerer() -> list[tuple[str, str]]:
        """The triggers of the deferred sensors that a running triggerer job has taken."""
        assert celery_airflow.run_state(DAG, run) not in ("success", "failed"), celery_airflow.brief(DAG, run)
        return sorted(
            celery_airflow.query(
                "select ti.task_id, t.classpath from task_instance ti join trigger t on t.id = ti.trigger_id "
                "join job j on j.id = t.triggerer_id where ti.dag_id = %s and ti.run_id = %s "
                "and ti.state = 'deferred' and j.job_type = 'TriggererJob' and j.state = 'running'",
                DAG,
                run,
            )
        )

    expected = [
        ("wait_for_lag", "airflow_iceberg_maint.airflow.triggers.index_lag.IcebergIndexLagTrigger"),
        ("wait_until_due", "airflow_iceberg_maint.airflow.triggers.due.IcebergTableDueTrigger"),
    ]
    wait_for(
        lambda: held_by_the_triggerer() == expected,
        240,
        lambda: f"both sensors deferred to the triggerer: {celery_airflow.brief(DAG, run)}",
    )
    lagging.append(rows(1000, 10))  # the index is now one snapshot behind: the lag trigger fires
    assert celery_airflow.wait_run(DAG, run) == "success"
    tries = {t["task_id"]: t for t in celery_airflow.task_instances(DAG, run)}
    for sensor in SENSORS:
        assert tries[sensor]["try_number"] == 1 and tries[sensor]["hostname"] in WORKERS
    assert celery_airflow.xcom(DAG, run, "wait_until_due")["due"] is True
    lag = celery_airflow.xcom(DAG, run, "wait_for_lag")
    assert lag["snapshots_behind"] == 1, lag
    print("deferred sensors resumed on:", {s: tries[s]["hostname"] for s in SENSORS})
