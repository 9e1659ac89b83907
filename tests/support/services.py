"""The test services of ``make test`` (tests/conftest.py): their URLs, and the properties and buckets that reach them.

A helper that needs a service gets its URL from ``service``, which skips the test when the service
is not running (and fails it in CI, or in ``make unit``, where no test may need one).
"""

from __future__ import annotations

import os
import time
import uuid

import pytest

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


#: Set by ``make unit``: a test that reaches a service there was not deselected by its marker.
UNIT_RUN = "ICEBERG_MAINT_UNIT_RUN"


def service(var: str) -> str:
    value = os.environ.get(var)
    if os.environ.get(UNIT_RUN):
        pytest.fail(f"{var}: this test needs a service, so it must carry the service's marker (see SERVICE_FIXTURES)")
    if not value:
        if os.environ.get("CI"):
            pytest.fail(f"{var} is not set: run the tests through 'make test'")
        pytest.skip(f"{var} is not set: run the tests through 'make test'")
    return value


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


def oauth2_server_uri(catalog_uri: str) -> str:
    """The catalog's own token endpoint, named: pyiceberg warns that its fallback to it will go away."""
    return f"{catalog_uri.rstrip('/')}/v1/oauth/tokens"


def rest_properties(bucket: str, **extra: str) -> dict[str, str]:
    """pyiceberg properties of SeaweedFS's REST catalog on table bucket ``bucket`` (also a connection's extra).

    The key pair is SeaweedFS's admin identity; the catalog takes it as its OAuth2 client too.
    """
    key_id = os.environ.get("TEST_SEAWEED_ACCESS_KEY_ID", "admin")
    secret = os.environ.get("TEST_SEAWEED_SECRET_ACCESS_KEY", "secretkey")
    uri = service("TEST_REST_URI")
    return {
        "type": "rest",
        "uri": uri,
        # Each table bucket is a catalog of its own; the warehouse names it.
        "warehouse": f"s3://{bucket}/",
        "credential": f"{key_id}:{secret}",
        "oauth2-server-uri": oauth2_server_uri(uri),
        "s3.endpoint": service("TEST_SEAWEED_S3_ENDPOINT"),
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
        endpoint_url=service("TEST_SEAWEED_S3_ENDPOINT"),
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
