"""Shared fixtures: real pyiceberg catalogs (SQLite, PostgreSQL, SeaweedFS's REST catalog) and the
real S3, GCS and Azure emulators.

``make test`` starts PostgreSQL, moto's standalone server, Azurite, two GCS emulators and SeaweedFS
(S3 and an Iceberg REST catalog) and exports TEST_PG_URL, TEST_S3_ENDPOINT, TEST_AZURITE_BLOB_ENDPOINT,
TEST_GCS_ENDPOINT, TEST_FAKE_GCS_ENDPOINT, TEST_REST_URI and TEST_SEAWEED_S3_ENDPOINT. Without them
(a bare ``pytest`` run) those tests are skipped, except in CI, where a missing service is an error.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from tests.s3_helpers import s3_test_client

# A test past its time limit fails alone and the run goes on (the limits are pytest-timeout's).
pytest_plugins = ("tests.watchdog",)

S3_PROPS = {"s3.access-key-id": "testing", "s3.secret-access-key": "testing", "s3.region": "us-east-1"}
#: Azurite's well-known development account.
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def gcs_props(endpoint: str) -> dict[str, str]:
    """gcs.* properties for an emulator. Any token will do; without one pyarrow's filesystem asks the
    metadata server for credentials and hangs."""
    return {
        "gcs.service.host": endpoint,
        "gcs.project-id": "test",
        "gcs.oauth2.token": "test",
        "gcs.oauth2.token-expires-at": str(int(time.time() + 86400) * 1000),
    }


def azure_props(blob_endpoint: str) -> dict[str, str]:
    conn = (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
        f"BlobEndpoint={blob_endpoint};"
    )
    return {"adls.connection-string": conn, "adls.account-name": AZURITE_ACCOUNT}


#: The marker of each fixture that needs a service of ``make test``: a test using one is marked with it, so
#: ``make unit`` (``-m "not (s3 or postgres or gcs or azure or rest or browser or celery or reliability or slow)"``)
#: selects exactly the tests that need none. A test calling ``_service`` itself carries its marker explicitly.
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
#: Set by ``make unit``: a test that reaches a service there was not deselected by its marker.
UNIT_RUN = "ICEBERG_MAINT_UNIT_RUN"
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


def _service(var: str) -> str:
    value = os.environ.get(var)
    if os.environ.get(UNIT_RUN):
        pytest.fail(f"{var}: this test needs a service, so it must carry the service's marker (see SERVICE_FIXTURES)")
    if not value:
        if os.environ.get("CI"):
            pytest.fail(f"{var} is not set: run the tests through 'make test'")
        pytest.skip(f"{var} is not set: run the tests through 'make test'")
    return value


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
    return _service("TEST_S3_ENDPOINT")


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
    url = _service("TEST_PG_URL")
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


def glue_properties(s3_endpoint: str, s3_bucket: str) -> dict[str, str]:
    """The catalog properties of a Glue catalog on the local server (also an ``iceberg`` connection's extra)."""
    return {
        "type": "glue",
        "glue.endpoint": s3_endpoint,
        "glue.region": "us-east-1",
        "glue.access-key-id": "testing",
        "glue.secret-access-key": "testing",
        "s3.endpoint": s3_endpoint,
        **S3_PROPS,
        "warehouse": f"s3://{s3_bucket}/warehouse",
    }


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
    return _gcs_catalog(tmp_path, _service("TEST_GCS_ENDPOINT"))


@pytest.fixture
def gcs_catalog(gcs_catalog_config: tuple[SqlCatalog, dict[str, str]]) -> SqlCatalog:
    return gcs_catalog_config[0]


@pytest.fixture
def fake_gcs_catalog_config(tmp_path: Path) -> tuple[SqlCatalog, dict[str, str]]:
    """A catalog on fake-gcs-server, which honours ifGenerationMatch (index commits), and its config."""
    return _gcs_catalog(tmp_path, _service("TEST_FAKE_GCS_ENDPOINT"))


@pytest.fixture
def azure_catalog_config(tmp_path: Path) -> tuple[SqlCatalog, dict[str, str]]:
    """A catalog whose warehouse is abfs://<container>@devstoreaccount1.dfs.core.windows.net on Azurite."""
    from azure.storage.blob import BlobServiceClient

    props = azure_props(_service("TEST_AZURITE_BLOB_ENDPOINT"))
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


def oauth2_server_uri(catalog_uri: str) -> str:
    """The catalog's own token endpoint, named: pyiceberg warns that its fallback to it will go away."""
    return f"{catalog_uri.rstrip('/')}/v1/oauth/tokens"


def rest_properties(bucket: str, **extra: str) -> dict[str, str]:
    """pyiceberg properties of SeaweedFS's REST catalog on table bucket ``bucket`` (also a connection's extra).

    The key pair is SeaweedFS's admin identity; the catalog takes it as its OAuth2 client too.
    """
    key_id = os.environ.get("TEST_SEAWEED_ACCESS_KEY_ID", "admin")
    secret = os.environ.get("TEST_SEAWEED_SECRET_ACCESS_KEY", "secretkey")
    uri = _service("TEST_REST_URI")
    return {
        "type": "rest",
        "uri": uri,
        # Each table bucket is a catalog of its own; the warehouse names it.
        "warehouse": f"s3://{bucket}/",
        "credential": f"{key_id}:{secret}",
        "oauth2-server-uri": oauth2_server_uri(uri),
        "s3.endpoint": _service("TEST_SEAWEED_S3_ENDPOINT"),
        "s3.access-key-id": key_id,
        "s3.secret-access-key": secret,
        "s3.region": "us-east-1",
        **extra,
    }


def create_table_bucket() -> str:
    """A new SeaweedFS table bucket (S3 Tables API): the REST catalog serves table buckets only, and
    lets writes land only under ``<namespace>/<table>/{metadata,data,_*}/``, as S3 Tables does."""
    import boto3

    client = boto3.client(
        "s3tables",
        endpoint_url=_service("TEST_SEAWEED_S3_ENDPOINT"),
        aws_access_key_id=os.environ.get("TEST_SEAWEED_ACCESS_KEY_ID", "admin"),
        aws_secret_access_key=os.environ.get("TEST_SEAWEED_SECRET_ACCESS_KEY", "secretkey"),
        region_name="us-east-1",
    )
    bucket = f"test-{uuid.uuid4().hex[:12]}"
    client.create_table_bucket(name=bucket)
    return bucket


def seaweed_s3_properties() -> dict[str, str]:
    """The s3.* properties of SeaweedFS's S3 with its admin identity."""
    return {k: v for k, v in rest_properties("unused").items() if k.startswith("s3.")}


def create_plain_bucket() -> str:
    """A new plain (not table) bucket on SeaweedFS's S3: any key may be written there."""
    import boto3

    s3_props = seaweed_s3_properties()
    bucket = f"test-{uuid.uuid4().hex[:12]}"
    boto3.client(
        "s3",
        endpoint_url=s3_props["s3.endpoint"],
        aws_access_key_id=s3_props["s3.access-key-id"],
        aws_secret_access_key=s3_props["s3.secret-access-key"],
        region_name="us-east-1",
    ).create_bucket(Bucket=bucket)
    return bucket


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

    _service("TEST_REST_URI")  # where make test's SeaweedFS runs, this one can too
    with vending_server(tmp_path_factory.mktemp("vending")) as server:
        yield server
