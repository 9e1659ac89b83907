"""Every backend has every capability of the storage protocol, and lists one level as it lists a tree.

The protocol's members are enumerated from ``Storage`` and its parent protocols, not written out
here, so a capability added to the protocol and missing from one backend fails this test (and
mypy, through each backend module's ``_conforms``), not a production run.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO
from typing_extensions import get_protocol_members

from airflow_iceberg_maint.errors import MaintenanceError, UnsupportedStoreError
from airflow_iceberg_maint.fs.adls import AzureStorage
from airflow_iceberg_maint.fs.backends import storage_for, table_storage
from airflow_iceberg_maint.fs.fileio import FileIOStorage
from airflow_iceberg_maint.fs.gcs import GcsStorage, client_from_properties
from airflow_iceberg_maint.fs.local import LocalStorage
from airflow_iceberg_maint.fs.s3 import S3Storage
from airflow_iceberg_maint.fs.storage import Storage, require_capabilities
from airflow_iceberg_maint.orphans.sharded.scan import SCAN_CAPABILITIES
from tests.support.services import AZURITE_ACCOUNT, S3_PROPS, azure_props, gcs_props, service

OFFLINE_S3 = {"s3.endpoint": "http://127.0.0.1:1", **S3_PROPS}
OFFLINE_GCS = {"gcs.service.host": "http://127.0.0.1:1", "gcs.oauth2.token": "anon"}
OFFLINE_AZURE = {"adls.account-name": "acct", "adls.account-key": "a2V5"}


def _protocol_members() -> dict[str, Any]:
    """Every member of ``Storage`` and its parent protocols, with its declaration (a function, or None for data)."""
    members: dict[str, Any] = {}
    for protocol in Storage.__mro__:
        if getattr(protocol, "_is_protocol", False) and protocol.__module__ == Storage.__module__:
            for name in get_protocol_members(protocol):
                members.setdefault(name, protocol.__dict__.get(name))
    return members


def _backends(tmp_path: Path) -> dict[str, Any]:
    """One instance of every class ``storage_for`` can return (built offline: nothing is requested)."""
    return {
        "LocalStorage": storage_for(f"file://{tmp_path}/t", {}),
        "S3Storage": storage_for("s3://b/t", OFFLINE_S3),
        "FileIOStorage": storage_for("s3://b/t", {**OFFLINE_S3, "iceberg-maint.s3-client": "file-io"}),
        "GcsStorage": storage_for("gs://b/t", OFFLINE_GCS),
        "AzureStorage": storage_for("abfs://c@acct.dfs.core.windows.net/t", OFFLINE_AZURE),
    }


def test_a_table_s_file_io_keeps_one_backend_a_store() -> None:
    io, other_io = PyArrowFileIO(OFFLINE_S3), PyArrowFileIO(OFFLINE_S3)
    first = table_storage("s3://b/t/data/x.parquet", io)
    assert isinstance(first, S3Storage)
    assert table_storage("s3://b/t/metadata/", io) is first
    assert table_storage("s3://c/t", io) is not first  # another bucket, another store
    assert table_storage("s3://b/t", other_io) is not first  # a reloaded table: its own clients
    container = "abfs://c@acct.dfs.core.windows.net"
    azure = PyArrowFileIO(OFFLINE_AZURE)
    assert table_storage(f"{container}/t", azure) is table_storage(f"{container}/u", azure)
    assert table_storage(f"{container}/t", azure) is not table_storage("abfs://d@acct.dfs.core.windows.net/t", azure)


def test_the_protocol_is_enumerated_whole() -> None:
    assert sorted(_protocol_members()) == [
        "create_exclusive",
        "create_may_retry",
        "delete",
        "delete_files",
        "list_calls",
        "list_files",
        "list_level",
        "list_names",
        "read",
    ]


@pytest.mark.parametrize("name", ["LocalStorage", "S3Storage", "FileIOStorage", "GcsStorage", "AzureStorage"])
def test_every_backend_has_every_member_of_the_protocol_with_its_parameters(tmp_path: Path, name: str) -> None:
    backend = _backends(tmp_path)[name]
    assert type(backend).__name__ == name
    missing, different = [], []
    for member, declared in _protocol_members().items():
        if not hasattr(backend, member):
            missing.append(member)
        elif inspect.isfunction(declared):
            expected = list(inspect.signature(declared).parameters)[1:]  # without self
            if list(inspect.signature(getattr(backend, member)).parameters) != expected:
                different.append(member)
    assert (missing, different) == ([], [])


def test_the_backend_classes_are_all_there_are() -> None:
    classes = {LocalStorage, S3Storage, FileIOStorage, GcsStorage, AzureStorage}
    assert {type(b) for b in _backends(Path("/nonexistent")).values()} == classes


class _NoLevels:
    """A store that can list a tree but not one level, as GCS and Azure could not before."""

    list_calls = 0

    def list_files(self) -> None: ...

    def delete_files(self) -> None: ...


def test_a_backend_missing_a_capability_is_refused_before_the_scan_starts() -> None:
    with pytest.raises(UnsupportedStoreError) as info:
        require_capabilities(_NoLevels(), "gs://b/t", SCAN_CAPABILITIES)
    assert isinstance(info.value, MaintenanceError) and info.value.retryable is False
    assert str(info.value) == (
        "location 'gs://b/t': its storage backend _NoLevels cannot list_level, which this action needs"
    )
    for backend in _backends(Path("/nonexistent")).values():
        require_capabilities(backend, "x://b/t", SCAN_CAPABILITIES)


# list_level, on every store: the files directly in a directory, spelled as list_files spells them,
# and its sub-directories; names that fail ``keep`` left out.


@dataclass
class Tree:
    root: str  # the directory listed, with no trailing '/'
    storage: Storage
    put: Callable[[str], object]  # plants a file at root + '/' + name
    keeps_double_slash: bool  # an object store: 'a//b' is a key of its own


def _keep(name: str) -> bool:
    return not name.startswith(("_", "."))


@pytest.fixture(
    params=[
        "local",
        pytest.param("s3", marks=pytest.mark.s3),
        pytest.param("gcs", marks=pytest.mark.gcs),
        pytest.param("azure", marks=pytest.mark.azure),
    ]
)
def tree(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tree]:
    kind = request.param
    if kind == "local":
        base = tmp_path / "t"

        def put_local(name: str) -> None:
            path = base / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"x")

        yield Tree(f"file://{base}", LocalStorage(), put_local, False)
    elif kind == "s3":
        props = {"s3.endpoint": service("TEST_S3_ENDPOINT"), **S3_PROPS}
        bucket = f"test-{uuid.uuid4().hex[:12]}"
        client = boto3.client(
            "s3",
            endpoint_url=props["s3.endpoint"],
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        client.create_bucket(Bucket=bucket)
        yield Tree(
            f"s3://{bucket}/t",
            storage_for(f"s3://{bucket}/t", props),
            lambda name: client.put_object(Bucket=bucket, Key=f"t/{name}", Body=b"x"),
            True,
        )
    elif kind == "gcs":
        props = gcs_props(service("TEST_GCS_ENDPOINT"))
        gcs_bucket = client_from_properties(props).create_bucket(f"test-{uuid.uuid4().hex[:12]}")
        yield Tree(
            f"gs://{gcs_bucket.name}/t",
            storage_for(f"gs://{gcs_bucket.name}/t", props),
            lambda name: gcs_bucket.blob(f"t/{name}").upload_from_string(b"x"),
            True,
        )
    else:
        from azure.storage.blob import BlobServiceClient

        props = azure_props(service("TEST_AZURITE_BLOB_ENDPOINT"))
        name = f"test-{uuid.uuid4().hex[:12]}"
        container = BlobServiceClient.from_connection_string(props["adls.connection-string"]).create_container(name)
        root = f"abfs://{name}@{AZURITE_ACCOUNT}.dfs.core.windows.net/t"
        yield Tree(root, storage_for(root, props), lambda key: container.upload_blob(f"t/{key}", b"x"), True)


def test_list_level_lists_one_level_spelled_as_list_files(tree: Tree) -> None:
    names = ["a.parquet", "b.avro", "_skipped.parquet", ".hidden", "sub/c.parquet", "sub/deep/d.parquet"]
    names += ["_tmp/e.parquet", "sub_sibling/f.parquet"]
    if tree.keeps_double_slash:
        names.append("/g.parquet")  # the key 't//g.parquet'
    for name in names:
        tree.put(name)

    files, dirs = tree.storage.list_level(tree.root, _keep)
    listed = {info.path: info for info in tree.storage.list_files(tree.root, _keep)}
    assert sorted(f.path for f in files) == [f"{tree.root}/a.parquet", f"{tree.root}/b.avro"]
    assert sorted(dirs) == (["", "sub", "sub_sibling"] if tree.keeps_double_slash else ["sub", "sub_sibling"])
    for info in files:  # the same spelling, size and time as the whole listing's
        assert listed[info.path] == info and info.size == 1 and info.mtime is not None
    # Each sub-directory listed whole, plus this level, is the whole listing.
    below = {p for d in dirs if d for p in (i.path for i in tree.storage.list_files(f"{tree.root}/{d}", _keep))}
    double = {p for p in listed if p.startswith(f"{tree.root}//")}
    assert {f.path for f in files} | below | double == set(listed)
    assert tree.storage.list_level(f"{tree.root}/sub/deep", _keep)[1] == []
    assert tree.storage.list_level(f"{tree.root}/nothing-here", _keep) == ([], [])
