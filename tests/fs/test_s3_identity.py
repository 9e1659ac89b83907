"""Listing and deleting act as the table's own FileIO would: each S3 setting pyiceberg reads, tested
against moto's servers. Identities on the server that enforces IAM (``iam_server``), where a request
succeeds only for the identity its policy allows; network settings (proxy, addressing, timeouts)
and the FileIO fallback on the plain server.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import boto3
import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.errors import InvalidInputError, StorageError
from airflow_iceberg_maint.fs.backends import storage_for
from airflow_iceberg_maint.fs.fileio import FileIOStorage
from airflow_iceberg_maint.fs.s3 import S3Storage
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from tests.reliability.fault_proxy import FaultProxy
from tests.support.iam import IamServer, Keys, allow, bucket_resources
from tests.support.services import S3_PROPS

FILES = ["t/data/a.parquet", "t/data/b.parquet", "t/metadata/m.json"]


def listed(storage: object, root: str) -> list[str]:
    return sorted(f.path for f in storage.list_files(root, lambda _: True))  # type: ignore[attr-defined]


def props_on(server: IamServer, keys: Keys | None = None, **more: str) -> dict[str, str]:
    return {"s3.endpoint": server.endpoint, "s3.region": "us-east-1", **(keys.props() if keys else {}), **more}


# Identities, on the server that enforces IAM


def test_static_keys_list_and_batch_delete_as_that_user_only(iam_server: IamServer) -> None:
    mine, theirs = iam_server.bucket(*FILES), iam_server.bucket(*FILES)
    user = iam_server.user(allow("s3:*", bucket_resources(mine)))
    storage = storage_for(f"s3://{mine}/t", props_on(iam_server, user))
    assert isinstance(storage, S3Storage)
    assert listed(storage, f"s3://{mine}/t") == [f"s3://{mine}/{k}" for k in FILES]
    outcome = storage.delete_files([f"s3://{mine}/t/data/a.parquet", f"s3://{mine}/t/data/b.parquet"], 2)
    assert sorted(outcome.deleted) == [f"s3://{mine}/t/data/a.parquet", f"s3://{mine}/t/data/b.parquet"]
    assert outcome.requests == 1  # one DeleteObjects for both
    assert iam_server.keys(mine) == ["t/metadata/m.json"]

    with pytest.raises(StorageError, match=rf"s3://{theirs}/t/: cannot be listed \(AccessDenied"):
        listed(storage, f"s3://{theirs}/t")
    refused = storage.delete_files([f"s3://{theirs}/t/data/a.parquet"], 1)
    assert refused.deleted == [] and refused.failed[0][1].startswith("AccessDenied")
    assert iam_server.keys(theirs) == sorted(FILES)


def test_client_keys_apply_and_s3_keys_win(iam_server: IamServer) -> None:
    bucket = iam_server.bucket(*FILES)
    user, nobody = iam_server.user(allow("s3:*", bucket_resources(bucket))), iam_server.user()
    client_only = props_on(
        iam_server, None, **{"client.access-key-id": user.access_key, "client.secret-access-key": user.secret_key}
    )
    assert listed(storage_for(f"s3://{bucket}/t", client_only), f"s3://{bucket}/t") == [
        f"s3://{bucket}/{k}" for k in FILES
    ]
    # pyiceberg's precedence: s3.* over client.*
    both = {**client_only, **nobody.props()}
    with pytest.raises(StorageError, match="AccessDenied"):
        listed(storage_for(f"s3://{bucket}/t", both), f"s3://{bucket}/t")


def test_two_tables_with_different_credentials_in_one_run(iam_server: IamServer, tmp_path: Path) -> None:
    """Table properties carry each table's keys; the catalog's own keys may only read (pyiceberg reads a
    table's metadata file with them), neither list nor delete."""
    buckets = [iam_server.bucket(), iam_server.bucket()]
    users = [iam_server.user(allow("s3:*", bucket_resources(b))) for b in buckets]
    uri = f"sqlite:///{tmp_path}/catalog.db"
    # pyiceberg writes a new table's first metadata file with the catalog's keys: the administrator's here.
    creator = SqlCatalog(
        "default", uri=uri, warehouse=f"s3://{buckets[0]}/wh", **props_on(iam_server, iam_server.admin)
    )
    creator.create_namespace("db")
    for i, (bucket, user) in enumerate(zip(buckets, users, strict=True)):
        creator.create_table(
            f"db.t{i}", pa.schema([("id", pa.int64())]), location=f"s3://{bucket}/t{i}", properties=user.props()
        )
    reader = iam_server.user(allow("s3:GetObject", [f"arn:aws:s3:::{b}/*" for b in buckets]))
    catalog = SqlCatalog("default", uri=uri, **props_on(iam_server, reader))
    tables, planted = [], []
    for i, bucket in enumerate(buckets):
        catalog.load_table(f"db.t{i}").append(pa.table({"id": [i]}))
        orphan = f"t{i}/data/orphan-{i}.parquet"
        iam_server.client("s3").put_object(Bucket=bucket, Key=orphan, Body=b"x")
        tables.append(catalog.load_table(f"db.t{i}"))
        planted.append(f"s3://{bucket}/{orphan}")
    time.sleep(1.2)
    cutoff = datetime.now(UTC)
    for table, orphan, bucket in zip(tables, planted, buckets, strict=True):
        report = remove_orphan_files(table, OrphanOptions(older_than=cutoff), sources=[INDEX_FILES])
        assert report.orphan_files == [orphan] and report.deleted_file_count == 1
        assert orphan.split("/", 3)[3] not in iam_server.keys(bucket)
        assert len(table.scan().to_arrow()) == 1


def test_role_assumed_through_sts_lists_and_deletes(iam_server: IamServer, monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = iam_server.bucket(*FILES)
    role = iam_server.role(allow("s3:*", bucket_resources(bucket)))
    assumer = iam_server.user(allow("sts:AssumeRole", "*"))  # no S3 permission of its own
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", iam_server.endpoint)
    location = f"s3://{bucket}/t"

    with pytest.raises(StorageError, match="AccessDenied"):
        listed(storage_for(location, props_on(iam_server, assumer)), location)

    storage = storage_for(
        location, props_on(iam_server, assumer, **{"s3.role-arn": role, "s3.role-session-name": "maint-test"})
    )
    assert listed(storage, location) == [f"s3://{bucket}/{k}" for k in FILES]
    outcome = storage.delete_files([f"s3://{bucket}/t/data/a.parquet"], 1)
    assert outcome.deleted == [f"s3://{bucket}/t/data/a.parquet"] and outcome.failed == []
    assert iam_server.keys(bucket) == ["t/data/b.parquet", "t/metadata/m.json"]
    # The requests were signed with the role's temporary keys, which STS names as the session.
    assumed = storage.client._request_signer._credentials.get_frozen_credentials()  # type: ignore[attr-defined]
    assert assumed.access_key != assumer.access_key and assumed.token
    identity = iam_server.client("sts", Keys(assumed.access_key, assumed.secret_key), assumed.token)
    session_arn = role.replace(":iam:", ":sts:").replace(":role/", ":assumed-role/") + "/maint-test"
    assert identity.get_caller_identity()["Arn"] == session_arn

    client_names = props_on(iam_server, assumer, **{"client.role-arn": role})
    assert listed(storage_for(location, client_names), location) == [
        f"s3://{bucket}/t/data/b.parquet",
        f"s3://{bucket}/t/metadata/m.json",
    ]


def test_role_without_any_credentials_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(
        InvalidInputError,
        match=r"property s3.role-arn='arn:aws:iam::123456789012:role/r': "
        r"no credentials to assume the role with",
    ):
        storage_for("s3://b/t", {"s3.role-arn": "arn:aws:iam::123456789012:role/r"})


def test_profiles_by_either_name(iam_server: IamServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = iam_server.bucket(*FILES)
    user = iam_server.user(allow("s3:*", bucket_resources(bucket)))
    credentials = tmp_path / "credentials"
    credentials.write_text(
        f"[maint]\naws_access_key_id = {user.access_key}\naws_secret_access_key = {user.secret_key}\n"
    )
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    location = f"s3://{bucket}/t"
    for name in ("s3.profile-name", "client.profile-name"):
        assert listed(storage_for(location, props_on(iam_server, None, **{name: "maint"})), location) == [
            f"s3://{bucket}/{k}" for k in FILES
        ]
    with pytest.raises(InvalidInputError, match=r"property s3.profile-name='other': no such profile"):
        storage_for(location, props_on(iam_server, None, **{"s3.profile-name": "other"}))


def test_fileio_fallback_uses_the_fileio_identity(iam_server: IamServer) -> None:
    mine, theirs = iam_server.bucket(*FILES), iam_server.bucket(*FILES)
    user = iam_server.user(allow("s3:*", bucket_resources(mine)))
    props = props_on(iam_server, user, **{"iceberg-maint.s3-client": "file-io"})
    storage = storage_for(f"s3://{mine}/t", props)
    assert isinstance(storage, FileIOStorage)
    assert listed(storage, f"s3://{mine}/t") == [f"s3://{mine}/{k}" for k in FILES]
    other = storage_for(f"s3://{theirs}/t", props)
    with pytest.raises(StorageError, match=rf"s3://{theirs}/t: cannot be listed \(OSError: .*ACCESS_DENIED"):
        listed(other, f"s3://{theirs}/t")


# Network settings and the fallback, on the plain server


class _RecordingProxy(FaultProxy):
    """The test's proxy: forwards every request to the S3 server and records its Host and path."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.requests: list[tuple[str, str]] = []
        self.signed: list[bool] = []

    def _choose(self, request):
        self.requests.append((request.headers.get("host", ""), request.path))
        self.signed.append("authorization" in request.headers)
        return super()._choose(request)


@pytest.fixture
def proxy(s3_endpoint: str) -> Iterator[_RecordingProxy]:
    with _RecordingProxy(s3_endpoint) as running:
        yield running


def test_proxy_and_addressing_style(proxy: _RecordingProxy, s3_endpoint: str, s3_bucket: str) -> None:
    boto3.client("s3", endpoint_url=s3_endpoint, **_client_keys()).put_object(Bucket=s3_bucket, Key="t/x", Body=b"x")
    # A host name, not an address: botocore would address an IP path-style whatever it is told.
    endpoint = s3_endpoint.replace("127.0.0.1", "localhost")
    port = endpoint.rsplit(":", 1)[1]
    location = f"s3://{s3_bucket}/t"
    base = {**S3_PROPS, "s3.endpoint": endpoint, "s3.proxy-uri": proxy.url}

    assert listed(storage_for(location, base), location) == [f"s3://{s3_bucket}/t/x"]
    assert set(proxy.requests) == {(f"localhost:{port}", f"/{s3_bucket}")}  # path style for an endpoint
    proxy.requests.clear()
    virtual = {**base, "s3.force-virtual-addressing": "true"}
    assert listed(storage_for(location, virtual), location) == [f"s3://{s3_bucket}/t/x"]
    assert set(proxy.requests) == {(f"{s3_bucket}.localhost:{port}", "/")}


def test_anonymous_requests_are_not_signed(proxy: _RecordingProxy, s3_endpoint: str, s3_bucket: str) -> None:
    location = f"s3://{s3_bucket}/t"
    base = {**S3_PROPS, "s3.endpoint": s3_endpoint, "s3.proxy-uri": proxy.url}
    listed(storage_for(location, base), location)
    assert proxy.signed and all(proxy.signed)
    proxy.signed.clear()
    listed(storage_for(location, {**base, "s3.anonymous": "true"}), location)
    assert proxy.signed and not any(proxy.signed)


def _client_keys() -> dict[str, str]:
    return {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region_name": "us-east-1"}


@pytest.fixture
def silent_server() -> Iterator[str]:
    """Accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for sock in held:
        sock.close()
    server.close()


def test_request_and_connect_timeouts(silent_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    props = {**S3_PROPS, "s3.endpoint": silent_server, "s3.request-timeout": "0.5", "s3.connect-timeout": "2"}
    storage = storage_for("s3://b/t", props)
    assert storage.client.meta.config.connect_timeout == 2.0  # type: ignore[attr-defined]
    started = time.monotonic()
    with pytest.raises(StorageError, match=r"s3://b/t/: cannot be listed \(ReadTimeoutError: Read timeout"):
        listed(storage, "s3://b/t")
    assert time.monotonic() - started < 5
    with pytest.raises(InvalidInputError, match=r"property s3.request-timeout='soon': expected a number of seconds"):
        storage_for("s3://b/t", {**props, "s3.request-timeout": "soon"})


def test_server_side_encryption_of_index_files(s3_endpoint: str, s3_bucket: str) -> None:
    props = {**S3_PROPS, "s3.endpoint": s3_endpoint, "s3.server-side-encryption": "AES256"}
    storage = storage_for(f"s3://{s3_bucket}/t", props)
    assert storage.create_exclusive(f"s3://{s3_bucket}/t/index/v1.json", b"{}") is True
    head = boto3.client("s3", endpoint_url=s3_endpoint, **_client_keys()).head_object(
        Bucket=s3_bucket, Key="t/index/v1.json"
    )
    assert head["ServerSideEncryption"] == "AES256"


def test_remote_signing_and_the_switch_choose_the_fileio_filesystem(s3_endpoint: str) -> None:
    base = {**S3_PROPS, "s3.endpoint": s3_endpoint}
    for setting in (
        {"s3.signer": "S3V4RestSigner", "s3.signer.uri": "http://127.0.0.1:1"},
        {"s3.remote-signing-enabled": "true"},
        {"iceberg-maint.s3-client": "file-io"},
    ):
        assert isinstance(storage_for("s3://b/t", {**base, **setting}), FileIOStorage), setting
    assert isinstance(storage_for("s3://b/t", {**base, "iceberg-maint.s3-client": "boto3"}), S3Storage)
    with pytest.raises(
        InvalidInputError,
        match=r"property iceberg-maint.s3-client='aws': expected one of boto3, "
        r"file-io",
    ):
        storage_for("s3://b/t", {**base, "iceberg-maint.s3-client": "aws"})


def test_orphan_removal_through_the_fileio_filesystem(tmp_path: Path, s3_endpoint: str, s3_bucket: str) -> None:
    """The fallback end to end: dry run, then the real run, exact files; index commits refused clearly."""
    catalog = SqlCatalog(
        "default",
        uri=f"sqlite:///{tmp_path}/catalog.db",
        warehouse=f"s3://{s3_bucket}/wh",
        **{**S3_PROPS, "s3.endpoint": s3_endpoint, "iceberg-maint.s3-client": "file-io"},
    )
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [1, 2]}))
    s3 = boto3.client("s3", endpoint_url=s3_endpoint, **_client_keys())
    prefix = table.location().split("/", 3)[3]
    orphans = [f"{prefix}/data/orphan-{i}.parquet" for i in range(3)] + [f"{prefix}/metadata/stale.json"]
    for key in orphans:
        s3.put_object(Bucket=s3_bucket, Key=key, Body=b"x")
    time.sleep(1.2)
    cutoff = datetime.now(UTC)
    expected = sorted(f"s3://{s3_bucket}/{k}" for k in orphans)

    dry = remove_orphan_files(table, OrphanOptions(older_than=cutoff, dry_run=True), sources=[INDEX_FILES])
    assert sorted(dry.orphan_files) == expected and dry.deleted_file_count == 0
    real = remove_orphan_files(table, OrphanOptions(older_than=cutoff), sources=[INDEX_FILES])
    assert sorted(real.orphan_files) == expected and real.deleted_file_count == 4
    assert real.delete_requests == 4  # one per file: the pyarrow filesystem has no multi-object delete
    left = {o["Key"] for o in s3.list_objects_v2(Bucket=s3_bucket, Prefix=prefix + "/")["Contents"]}
    assert not left & set(orphans)
    assert len(catalog.load_table("db.t").scan().to_arrow()) == 2

    from airflow_iceberg_maint.index.metadata.builders import new_index_metadata

    with pytest.raises(
        InvalidInputError,
        match=r"the table's FileIO filesystem \(ArrowFSWrapper\) cannot create a "
        r"file only if none exists .*which index commits need",
    ):
        IndexStore(table).create(new_index_metadata(table, "by_id", ["id"], [], False, {}), "by_id")
