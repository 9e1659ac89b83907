"""The `airflow` command in a subprocess, as a user runs it: `providers list` and `dags test`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint import __version__
from tests.airflow.helpers import stored_state


def test_airflow_dags_test_runs_the_scheduled_dag(demo_tables: dict, catalog: SqlCatalog) -> None:
    airflow = Path(sys.executable).with_name("airflow")
    env = {**os.environ, "PATH": f"{airflow.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        [str(airflow), "dags", "test", "iceberg_orphan_cleanup_scheduled"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "2 of 2 attached tables are due" in output
    assert "state=success" in output
    for name, planted in demo_tables.items():
        assert not planted["old"].exists() and planted["fresh"].exists()
        assert stored_state(str(catalog.load_table(name).metadata.table_uuid))["last_success_at"] is not None


def test_airflow_providers_list_shows_the_provider() -> None:
    airflow = Path(sys.executable).with_name("airflow")
    done = subprocess.run([str(airflow), "providers", "list"], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert any(line.startswith("airflow-iceberg-maint ") and __version__ in line for line in done.stdout.splitlines())
