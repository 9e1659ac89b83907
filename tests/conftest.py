"""Shared fixtures: real pyiceberg catalogs (SQLite, PostgreSQL, SeaweedFS's REST catalog) and the
real S3, GCS and Azure emulators.

``make test`` starts PostgreSQL, moto's standalone server, Azurite, two GCS emulators and SeaweedFS
(S3 and an Iceberg REST catalog) and exports TEST_PG_URL, TEST_S3_ENDPOINT, TEST_AZURITE_BLOB_ENDPOINT,
TEST_GCS_ENDPOINT, TEST_FAKE_GCS_ENDPOINT, TEST_REST_URI and TEST_SEAWEED_S3_ENDPOINT. Without them
(a bare ``pytest`` run) those tests are skipped, except in CI, where a missing service is an error.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from tests.s3_helpers import s3_test_client
from tests.support.services import (
    AZURITE_ACCOUNT,
    S3_PROPS,
    azure_props,
    create_plain_bucket,
    create_table_bucket,
    gcs_props,
    glue_properties,
    rest_properties,
    seaweed_s3_properties,
    service,
)

# A test past its time limit fails alone and the run goes on (the limits are pytest-timeout's).
pytest_plugins = ("tests.watchdog",)


#: The marker of each fixture that needs a service of ``make test``: a test using one is marked with it, so
#: ``make unit`` (``-m "not (s3 or postgres or gcs or azure or rest or browser or celery or reliability or slow)"``)
#: selects exactly the tests that need none. A test calling ``service`` itself carries its marker explicitly.
#: A test parametrized with a fixture's name (``request.getfixturevalue(backend)``) is marked the same way.
SERVICE_FIXTURES = {
    "s3_endpoint": "s3",
    "s3_bucket": "s3",
    "s3_catalog": "s3",
    "glue_catalog": "s3",
    "iam_server": "s3",
    "pg_catalog": "postgres",
    "gcs_catalog": "gcs",
    "gcs_catalog_config": "gcs",
    "fake_gcs_catalog_config": "gcs",
    "azure_catalog": "azure",
    "azure_catalog_config": "azure",
    # SeaweedFS's S3 and Iceberg REST catalog (main's make test); the marker "rest" comes with them.
    "seaweed_s3_catalog": "rest",
    "rest_catalog_config": "rest",
    "rest_catalog": "rest",
    "vending_seaweed": "rest",  # a SeaweedFS of the tests' own, vending credentials (tests/vending.py)
}
#: Tests that need no service but are left out of ``make unit`` for their time (marker ``slow``), by node-id
#: prefix: each starts processes or sweeps many cases. ``make test`` runs them.
SLOW = (
    "tests/test_cli_",  # the iceberg-maint command in subprocesses (each imports Airflow)
    "tests/orphans/test_cli.py",
    "tests/index/test_cli_index.py",
    "tests/index/test_incremental_cases.py::test_cli_",
    "tests/orphans/test_trust.py::test_the_command_line_",
    "tests/orphans/test_trust.py::test_a_cutoff_out_of_range_is_a_one_line_error",
    "tests/orphans/test_trust.py::test_a_relative_table_location_is_refused",
    "tests/orphans/test_trust.py::test_names_that_are_not_utf8_are_kept",
    "tests/orphans/test_scenarios.py::test_worker_processes_",  # manifest readers in worker processes
    "tests/index/test_sharded_build.py::test_a_killed_shard_",  # kills a shard's process
    "tests/orphans/test_sharded.py",  # every phase of the sharded pipeline, scratch files included, per test
    "tests/index/test_incremental.py::test_random_histories_",  # random histories, full build each
    "tests/index/test_bounded_build.py::test_bounded_build_equals_one_in_memory_sort",
    "tests/orphans/test_manifest_types.py::test_damaged_files_",  # every damage of every manifest codec
    # Whole DAG runs: dag.test() (the first of a session syncs and parses every DAG) or `airflow` subprocesses.
    "tests/airflow/test_airflow_cli.py",
    "tests/airflow/test_dags_e2e.py",
    "tests/airflow/test_index_dags_e2e.py",
    "tests/airflow/test_index_triggerer.py",
    "tests/airflow/test_sensor_deferred_run.py",
    "tests/airflow/test_sharded_dags.py",
    "tests/airflow/test_task_retries.py",
    "tests/airflow/test_nested_tables.py::test_scheduled_run_",
    "tests/airflow/test_recent_files_floor.py::test_manual_dag_",
    "tests/airflow/test_recent_files_floor.py::test_scheduled_dag_",
    "tests/airflow/test_maintenance_dag.py",
    "tests/airflow/test_table_lease.py::test_two_task_runs_",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        params = getattr(item, "callspec", None)
        values = {v for v in params.params.values() if isinstance(v, str)} if params else set()
        for name in sorted((set(getattr(item, "fixturenames", ())) | values) & SERVICE_FIXTURES.keys()):
            item.add_marker(SERVICE_FIXTURES[name])
        if item.nodeid.startswith(SLOW) or "concurrent" in item.name:  # concurrent: writers in processes
            item.add_marker("slow")


@pytest.fixture(autouse=True)
def _private_cleanup_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands run by tests record cleanups in a state file of their own, never the user's."""
    monkeypatch.setenv("ICEBERG_MAINT_STATE_URL", f"sqlite:///{tmp_path}/cleanup-state.db")


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    path = tmp_path / "warehouse"
    path.mkdir()
    return path


@pytest.fixture
def sqlite_catalog(tmp_path: Path, warehouse: Path) -> SqlCatalog:
    catalog = SqlCatalog("default", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{warehouse}")
    catalog.create_namespace("db")
    return catalog


@pytest.fixture
def s3_endpoint() -> str:
    return service("TEST_S3_ENDPOINT")


@pytest.fixture
def s3_bucket(s3_endpoint: str) -> Iterator[str]:
    client = s3_test_client(s3_endpoint)
    bucket = f"test-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    yield bucket


@pytest.fixture
def s3_catalog(tmp_path: Path, s3_endpoint: str, s3_bucket: str) -> SqlCatalog:
    catalog = SqlCatalog(
        "default",
        uri=f"sqlite:///{tmp_path}/catalog.db",
        warehouse=f"s3://{s3_bucket}/warehouse",
        **{"s3.endpoint": s3_endpoint, **S3_PROPS},
    )
    catalog.create_namespace("db")
    return catalog


@pytest.fixture
def pg_catalog(warehouse: Path) -> SqlCatalog:
    url = service("TEST_PG_URL")
    # One schema-free namespace per test keeps tests independent on the shared server.
    catalog = SqlCatalog(f"pg_{uuid.uuid4().hex[:8]}", uri=url, warehouse=f"file://{warehouse}")
    catalog.create_namespace("db")
    return catalog


@pytest.fixture
def glue_catalog(s3_endpoint: str, s3_bucket: str) -> Any:
    """pyiceberg's Glue catalog against the Glue API of the local server (the one serving S3), with a
    database of its own (``glue_catalog.test_namespace``): the server's Glue data lives as long as it does."""
    from pyiceberg.catalog.glue import GlueCatalog

    catalog = GlueCatalog("glue", **glue_properties(s3_endpoint, s3_bucket))
    namespace = f"db_{uuid.uuid4().hex[:10]}"
    catalog.create_namespace(namespace, {"location": f"s3://{s3_bucket}/warehouse/{namespace}"})
    catalog.test_namespace = namespace  # type: ignore[attr-defined]
    return catalog


def _gcs_catalog(tmp_path: Path, endpoint: str) -> tuple[SqlCatalog, dict[str, str]]:
    from airflow_iceberg_maint.fs.gcs import client_from_properties

    props = gcs_props(endpoint)
    bucket = f"test-{uuid.uuid4().hex[:12]}"
    client_from_properties(props).create_bucket(bucket)
    config = {"uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"gs://{bucket}/warehouse", **props}
    catalog = SqlCatalog("default", **config)
    catalog.create_namespace("db")
    return catalog, config


@pytest.fixture
def gcs_catalog_config(tmp_path: Path) -> tuple[SqlCatalog, dict[str, str]]:
    """A catalog on gcp-storage-emulator (listing, batch deletes; it ignores ifGenerationMatch), and its config."""
    return _gcs_catalog(tmp_path, service("TEST_GCS_ENDPOINT"))


@pytest.fixture
def gcs_catalog(gcs_catalog_config: tuple[SqlCatalog, dict[str, str]]) -> SqlCatalog:
    return gcs_catalog_config[0]


@pytest.fixture
def fake_gcs_catalog_config(tmp_path: Path) -> tuple[SqlCatalog, dict[str, str]]:
    """A catalog on fake-gcs-server, which honours ifGenerationMatch (index commits), and its config."""
    return _gcs_catalog(tmp_path, service("TEST_FAKE_GCS_ENDPOINT"))


@pytest.fixture
def azure_catalog_config(tmp_path: Path) -> tuple[SqlCatalog, dict[str, str]]:
    """A catalog whose warehouse is abfs://<container>@devstoreaccount1.dfs.core.windows.net on Azurite."""
    from azure.storage.blob import BlobServiceClient

    props = azure_props(service("TEST_AZURITE_BLOB_ENDPOINT"))
    container = f"test-{uuid.uuid4().hex[:12]}"
    BlobServiceClient.from_connection_string(props["adls.connection-string"]).create_container(container)
    warehouse = f"abfs://{container}@{AZURITE_ACCOUNT}.dfs.core.windows.net/warehouse"
    config = {"uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": warehouse, **props}
    catalog = SqlCatalog("default", **config)
    catalog.create_namespace("db")
    return catalog, config


@pytest.fixture
def azure_catalog(azure_catalog_config: tuple[SqlCatalog, dict[str, str]]) -> SqlCatalog:
    return azure_catalog_config[0]


@pytest.fixture
def seaweed_s3_catalog(tmp_path: Path) -> SqlCatalog:
    """A SQLite catalog whose warehouse is a plain (not table) bucket on SeaweedFS's S3: a second real
    S3 implementation beside moto."""
    s3_props = seaweed_s3_properties()
    bucket = create_plain_bucket()
    catalog = SqlCatalog(
        "default", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"s3://{bucket}/warehouse", **s3_props
    )
    catalog.create_namespace("db")
    return catalog


@pytest.fixture
def rest_catalog_config() -> tuple[Any, dict[str, str]]:
    """SeaweedFS's REST catalog on a table bucket of the test's own, with namespace ``db``, and its config."""
    from pyiceberg.catalog import load_catalog

    config = rest_properties(create_table_bucket())
    catalog = load_catalog("default", **config)
    catalog.create_namespace("db")
    return catalog, config


@pytest.fixture
def rest_catalog(rest_catalog_config: tuple[Any, dict[str, str]]) -> Any:
    return rest_catalog_config[0]


@pytest.fixture(scope="module")
def vending_seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """SeaweedFS whose REST catalog vends table-scoped S3 credentials (``tests.vending``), per test module.

    Not once per session: its servers talk to each other over many connections, whose local ports (the
    kernel's ephemeral range) could take a fixed port another fixture binds later.
    """
    from tests.vending import vending_server

    service("TEST_REST_URI")  # where make test's SeaweedFS runs, this one can too
    with vending_server(tmp_path_factory.mktemp("vending")) as server:
        yield server
