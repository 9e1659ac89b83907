"""The Celery deployment's ``[celery] celery_config_options``: Airflow's defaults, with the tasks' modules imported.

A Celery worker forks a process per task, which parses the DAG file and so imports pyiceberg, pyarrow,
boto3 and this project's operators. Imported here, in the worker's main process (the scheduler reads this
module too), every fork starts with them, so on the loaded 2-core test machine a task starts in a fraction
of the time. A production deployment can do the same; nothing else about the tasks changes.
"""

from __future__ import annotations

import boto3  # noqa: F401
import pyarrow.parquet  # noqa: F401
import pyiceberg.table  # noqa: F401
from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG

import airflow_iceberg_maint.airflow.compaction_task_group
import airflow_iceberg_maint.airflow.operators.expiry
import airflow_iceberg_maint.airflow.operators.index
import airflow_iceberg_maint.airflow.operators.index_shards
import airflow_iceberg_maint.airflow.operators.maintenance_planning
import airflow_iceberg_maint.airflow.sensors.due
import airflow_iceberg_maint.airflow.sensors.index_lag
import airflow_iceberg_maint.airflow.sharded_orphan_removal  # noqa: F401

CELERY_CONFIG = dict(DEFAULT_CELERY_CONFIG)
