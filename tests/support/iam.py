"""IAM on the local S3 server (tests/fs/conftest.py starts it): policies, users, roles and their keys."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

import boto3


def policy(*statements: dict[str, Any]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def allow(actions: str | list[str], resources: str | list[str]) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": actions, "Resource": resources}


def bucket_resources(bucket: str) -> list[str]:
    return [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]


@dataclass
class Keys:
    access_key: str
    secret_key: str

    def props(self) -> dict[str, str]:
        return {"s3.access-key-id": self.access_key, "s3.secret-access-key": self.secret_key}


@dataclass
class IamServer:
    endpoint: str
    admin: Keys

    def client(self, service: str, keys: Keys | None = None, token: str | None = None) -> Any:
        keys = keys or self.admin
        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=keys.access_key,
            aws_secret_access_key=keys.secret_key,
            aws_session_token=token,
        )

    def bucket(self, *keys: str) -> str:
        """A new bucket holding ``keys`` (each a small object)."""
        name = f"iam-{uuid.uuid4().hex[:12]}"
        s3 = self.client("s3")
        s3.create_bucket(Bucket=name)
        for key in keys:
            s3.put_object(Bucket=name, Key=key, Body=b"x")
        return name

    def user(self, *statements: dict[str, Any]) -> Keys:
        """A new user allowed exactly ``statements``, and its access key."""
        iam = self.client("iam")
        name = f"u-{uuid.uuid4().hex[:10]}"
        iam.create_user(UserName=name)
        if statements:
            iam.put_user_policy(UserName=name, PolicyName="p", PolicyDocument=policy(*statements))
        key = iam.create_access_key(UserName=name)["AccessKey"]
        return Keys(key["AccessKeyId"], key["SecretAccessKey"])

    def role(self, *statements: dict[str, Any]) -> str:
        """A new role anyone may assume (moto checks the trust policy), allowed exactly ``statements``; its ARN."""
        iam = self.client("iam")
        name = f"r-{uuid.uuid4().hex[:10]}"
        trust = {"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}
        arn: str = iam.create_role(RoleName=name, AssumeRolePolicyDocument=policy(trust))["Role"]["Arn"]
        iam.put_role_policy(RoleName=name, PolicyName="p", PolicyDocument=policy(*statements))
        return arn

    def keys(self, bucket: str) -> list[str]:
        return sorted(o["Key"] for o in self.client("s3").list_objects_v2(Bucket=bucket).get("Contents", []))
