"""The provider is discovered through its entry point, its plugin loads once without error, the
version is written once, and the sample DAGs load cleanly."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import tomllib
from pathlib import Path

from airflow.dag_processing.dagbag import DagBag
from airflow.providers_manager import ProvidersManager

from airflow_iceberg_maint import __version__
from tests.support.airflow_dags import DAGS

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_provider_is_discovered_with_its_modules() -> None:
    info = ProvidersManager().providers["airflow-iceberg-maint"]
    assert info.version == __version__
    modules = {m for entry in info.data["operators"] for m in entry["python-modules"]}
    assert {
        "airflow_iceberg_maint.airflow.operators.orphans",
        "airflow_iceberg_maint.airflow.operators.orphan_planning",
    } <= modules
    sensors = {m for entry in info.data["sensors"] for m in entry["python-modules"]}
    triggers = {m for entry in info.data["triggers"] for m in entry["python-modules"]}
    assert "airflow_iceberg_maint.airflow.sensors.due" in sensors
    assert "airflow_iceberg_maint.airflow.triggers.due" in triggers
    for section in ("operators", "sensors", "triggers"):
        for entry in info.data[section]:
            for module in entry["python-modules"]:
                __import__(module)


def test_the_version_is_pyprojects_everywhere() -> None:
    """pyproject.toml holds the only version: the installed metadata, ``__version__`` and the provider info
    all read it (a stale install, or a version written again somewhere, fails here)."""
    with PYPROJECT.open("rb") as fh:
        declared = tomllib.load(fh)["project"]["version"]
    provider = ProvidersManager().providers["airflow-iceberg-maint"]
    assert importlib.metadata.version("airflow-iceberg-maint") == declared
    assert (__version__, provider.version, provider.data["versions"]) == (declared, declared, [declared])


# What the api-server's home page reports (plugins_manager.get_import_errors), in a fresh interpreter of the
# installed environment, with every distribution of this project that sys.path exposes.
_PLUGINS = """
import json
from importlib import metadata
from airflow import plugins_manager
print(json.dumps({
    "errors": plugins_manager.get_import_errors(),
    "plugins": [p["name"] for p in plugins_manager.get_plugin_info()],
    "distributions": sorted(
        str(d.locate_file(d._path.name)) for d in metadata.distributions() if d.name == "airflow-iceberg-maint"
    ),
}))
"""


def test_airflow_loads_the_plugin_once_without_import_errors() -> None:
    """A second copy of the project's metadata on sys.path (the ``src/*.egg-info`` an editable install
    leaves, see ``make install``) makes Airflow load the entry point twice and show "Plugin 'iceberg_maint'
    already registered" on its home page."""
    done = subprocess.run([sys.executable, "-c", _PLUGINS], capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    # The home page's symptom first, then its cause: the metadata directories sys.path exposes.
    assert found["errors"] == {}, found["distributions"]
    assert found["plugins"].count("iceberg_maint") == 1, found["plugins"]
    assert len(found["distributions"]) == 1, found["distributions"]


def test_dagbag_has_no_import_errors() -> None:
    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    assert {"iceberg_orphan_cleanup_scheduled", "iceberg_orphan_cleanup_manual"} <= set(bag.dag_ids)


def test_scheduled_dag_maps_removal_in_the_pool() -> None:
    dag = DagBag(dag_folder=str(DAGS)).get_dag("iceberg_orphan_cleanup_scheduled")
    assert dag.timetable.expression == "0 0 * * *"
    removal = dag.get_task("remove_orphan_files")
    assert removal.pool == "iceberg_maint"
    assert dag.get_task("plan_due_tables").downstream_task_ids == {"remove_orphan_files"}


def test_manual_dag_form() -> None:
    dag = DagBag(dag_folder=str(DAGS)).get_dag("iceberg_orphan_cleanup_manual")
    assert dag.schedule is None
    params = dag.params
    assert set(params.keys()) == {
        "table",
        "older_than_days",
        "allow_recent_files",
        "location",
        "only_this_table",
        "dry_run",
        "shards",
    }
    assert params["dry_run"] is True
    assert params["only_this_table"] is False
    assert params["allow_recent_files"] is False
    assert params["older_than_days"] == 3
    assert params["location"] is None
    assert params.get_param("table").schema["type"] == "string"
