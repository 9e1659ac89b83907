"""A real Airflow around the tests: a fresh SQLite metadata database, the repo's ``dags/``,
and an ``iceberg_default`` connection (``AIRFLOW_CONN_ICEBERG_DEFAULT``) to a real SQLite
``SqlCatalog``. The environment is set before anything imports Airflow.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from cryptography.fernet import Fernet
from pyiceberg.catalog.sql import SqlCatalog

from tests.airflow.helpers import plant_orphans, task_context
from tests.support.airflow_dags import DAGS, TEST_DAGS

if TYPE_CHECKING:  # Airflow is imported only after the environment below is set
    from airflow.sdk import Context

REPO = Path(__file__).resolve().parents[2]
AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="iceberg-maint-airflow-"))

os.environ["AIRFLOW_HOME"] = str(AIRFLOW_HOME)
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "True"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(DAGS)
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{AIRFLOW_HOME}/airflow.db"
# The sample DAGs, plus a bundle of test-only DAGs that dag.test() can find and serialize.
os.environ["AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"] = json.dumps(
    [
        {"name": "dags-folder", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle", "kwargs": {}},
        {
            "name": "test-dags",
            "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
            "kwargs": {"path": str(TEST_DAGS)},
        },
    ]
)
# One key for this process and the `airflow` subprocesses, so each reads what the other encrypted.
os.environ["AIRFLOW__CORE__FERNET_KEY"] = Fernet.generate_key().decode()

POOL = "iceberg_maint"


@pytest.fixture(scope="session", autouse=True)
def airflow_db() -> Iterator[Path]:
    """Migrate the metadata database once per session and create the maintenance pool."""
    from airflow.models.pool import Pool
    from airflow.utils import db

    db.resetdb()
    Pool.create_or_update_pool(POOL, slots=2, description="iceberg maintenance", include_deferred=False)
    yield AIRFLOW_HOME


def connection_json(catalog_db: Path, warehouse: Path) -> str:
    extra = {"type": "sql", "uri": f"sqlite:///{catalog_db}", "warehouse": f"file://{warehouse}"}
    return json.dumps({"conn_type": "iceberg", "extra": extra})


@pytest.fixture
def catalog(tmp_path: Path, warehouse: Path, monkeypatch: pytest.MonkeyPatch) -> SqlCatalog:
    """A SQLite ``SqlCatalog`` and the ``iceberg_default`` connection to it.

    ``IcebergHook`` names the catalog after the connection id, and a SQL catalog only sees
    its own name's tables, so the test catalog is named ``iceberg_default`` too.
    """
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_DEFAULT", connection_json(tmp_path / "catalog.db", warehouse))
    return SqlCatalog("iceberg_default", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{warehouse}")


@pytest.fixture
def state_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/state.db"


@pytest.fixture
def pages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalog: SqlCatalog, state_url: str) -> str:
    """The status pages' options: records in ``state_url`` (returned), the sample policy and index-definition
    files, reports under the test's folder, the catalog listed afresh."""
    from airflow_iceberg_maint.airflow.ui.catalog_tables import forget

    for option, value in {
        "STATE_URL": state_url,
        "POLICY_FILE": str(DAGS / "iceberg_maint_policies.yaml"),
        "INDEX_DEFINITIONS_FILE": str(DAGS / "iceberg_indexes.yaml"),
        "REPORT_LOCATION": (tmp_path / "reports").as_uri(),
    }.items():
        monkeypatch.setenv(f"AIRFLOW__ICEBERG_MAINT__{option}", value)
    forget()  # another test's catalog listing
    return state_url


@pytest.fixture
def context() -> Context:
    return task_context()


@pytest.fixture
def demo_tables(catalog: SqlCatalog) -> dict:
    """Two tables in namespace ``demo`` (attached by ``dags/iceberg_maint_policies.yaml``), each with
    two commits and two planted orphans: one 10 days old (removable) and one fresh (kept)."""
    import pyarrow as pa

    catalog.create_namespace("demo")
    planted: dict[str, dict] = {}
    for name in ("demo.orders", "demo.events"):
        table = catalog.create_table(name, pa.schema([("id", pa.int64())]))
        table.append(pa.table({"id": [1, 2]}))
        table.append(pa.table({"id": [3]}))
        planted[name] = plant_orphans(Path(table.location().removeprefix("file://")))
    return planted
