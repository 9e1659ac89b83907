"""A second moto server that enforces IAM: requests are checked for a valid signature by a known
access key, and for that identity's permissions (users, roles assumed through STS, bucket-scoped
policies). Only there does a listing that succeeds prove which identity made it.

It runs on ``TEST_S3_AUTH_PORT`` (default: the port of ``TEST_S3_ENDPOINT`` plus one), is started
for the session and stopped after it. moto lets the first ``INITIAL_NO_AUTH_ACTION_COUNT`` requests
through unchecked: exactly the three that create the administrator.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import boto3
import pytest

from tests.support.iam import IamServer, Keys, allow, policy
from tests.support.services import service

SETUP_REQUESTS = 3  # create_user, put_user_policy, create_access_key of the administrator


def _wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"moto_server with IAM checks exited: {log.read_text()[-2000:]}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return  # a TCP connect only: an HTTP request would use up one of the unchecked requests
        time.sleep(0.2)
    pytest.fail(f"moto_server with IAM checks: no answer on 127.0.0.1:{port} within 60 s")


@pytest.fixture(scope="session")
def iam_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IamServer]:
    s3_port = urlsplit(service("TEST_S3_ENDPOINT")).port
    port = int(os.environ.get("TEST_S3_AUTH_PORT") or (s3_port or 0) + 1)
    with socket.socket() as sock:
        if sock.connect_ex(("127.0.0.1", port)) == 0:
            pytest.fail(f"port {port} for the moto server with IAM checks is in use: set TEST_S3_AUTH_PORT")
    log = tmp_path_factory.mktemp("moto-iam") / "moto.log"
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(SETUP_REQUESTS)}
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        _wait_for_port(port, process, log)
        endpoint = f"http://127.0.0.1:{port}"
        iam = boto3.client(
            "iam",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="setup",
            aws_secret_access_key="setup",
        )
        iam.create_user(UserName="admin")
        iam.put_user_policy(UserName="admin", PolicyName="all", PolicyDocument=policy(allow("*", "*")))
        key = iam.create_access_key(UserName="admin")["AccessKey"]
        yield IamServer(endpoint, Keys(key["AccessKeyId"], key["SecretAccessKey"]))
    finally:
        process.terminate()
        process.wait(timeout=30)
