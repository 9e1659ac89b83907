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


def _service(var: str) -> str:
    value = os.environ.get(var)
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
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
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


def rest_properties(bucket: str, **extra: str) -> dict[str, str]:
    """pyiceberg properties of SeaweedFS's REST catalog on table bucket ``bucket`` (also a connection's extra).

    The key pair is SeaweedFS's admin identity; the catalog takes it as its OAuth2 client too.
    """
    key_id = os.environ.get("TEST_SEAWEED_ACCESS_KEY_ID", "admin")
    secret = os.environ.get("TEST_SEAWEED_SECRET_ACCESS_KEY", "secretkey")
    return {
        "type": "rest",
        "uri": _service("TEST_REST_URI"),
        # Each table bucket is a catalog of its own; the warehouse names it.
        "warehouse": f"s3://{bucket}/",
        "credential": f"{key_id}:{secret}",
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


@pytest.fixture
def seaweed_s3_catalog(tmp_path: Path) -> SqlCatalog:
    """A SQLite catalog whose warehouse is a plain (not table) bucket on SeaweedFS's S3: a second real
    S3 implementation beside moto."""
    import boto3

    props = rest_properties("unused")
    s3_props = {k: v for k, v in props.items() if k.startswith("s3.")}
    bucket = f"test-{uuid.uuid4().hex[:12]}"
    boto3.client(
        "s3",
        endpoint_url=s3_props["s3.endpoint"],
        aws_access_key_id=s3_props["s3.access-key-id"],
        aws_secret_access_key=s3_props["s3.secret-access-key"],
        region_name="us-east-1",
    ).create_bucket(Bucket=bucket)
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
