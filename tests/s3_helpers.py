"""The local S3 server's client, as the tests' fixtures and tests build it."""

from __future__ import annotations

from typing import Any


def s3_test_client(endpoint: str) -> Any:
    """A boto3 S3 client of the local S3 server at ``endpoint`` (moto accepts any key pair)."""
    import boto3

    keys = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **keys)
