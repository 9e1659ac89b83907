"""Shared fixtures: real pyiceberg catalogs (SQLite, PostgreSQL) and the real S3-protocol server.

``make test`` starts PostgreSQL and moto's standalone server and exports TEST_PG_URL and
TEST_S3_ENDPOINT. Without them (a bare ``pytest`` run) those tests are skipped, except in
CI, where a missing service is an error.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog

S3_PROPS = {"s3.access-key-id": "testing", "s3.secret-access-key": "testing", "s3.region": "us-east-1"}


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

    client = boto3.client("s3", endpoint_url=s3_endpoint, aws_access_key_id="testing",
                          aws_secret_access_key="testing", region_name="us-east-1")
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
    return {"type": "glue", "glue.endpoint": s3_endpoint, "glue.region": "us-east-1",
            "glue.access-key-id": "testing", "glue.secret-access-key": "testing",
            "s3.endpoint": s3_endpoint, **S3_PROPS, "warehouse": f"s3://{s3_bucket}/warehouse"}
