"""Azure Blob Storage and ADLS Gen2 (``abfs[s]://``, ``wasb[s]://``): listing, Blob Batch deletes, create-if-absent.

Locations name ``container@account.<host>``; the Blob endpoint serves both (``.dfs.`` is read as
``.blob.``). The client is azure-storage-blob, configured from the table's ``adls.*`` FileIO
properties (pyiceberg's own constants). Neither of pyiceberg's Azure filesystems offers what
orphan removal and index commits need: pyarrow's ``AzureFileSystem`` has no bulk delete and no
conditional create, and adlfs deletes one blob a request and stops at the first failure.
adlfs itself is built on this client.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from azure.core.credentials import AccessToken
from azure.core.exceptions import AzureError, HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.storage.blob import BlobPrefix, BlobServiceClient, ContainerClient
from pyiceberg.io import (
    ADLS_ACCOUNT_HOST,
    ADLS_ACCOUNT_KEY,
    ADLS_ACCOUNT_NAME,
    ADLS_ANON,
    ADLS_BLOB_STORAGE_AUTHORITY,
    ADLS_BLOB_STORAGE_SCHEME,
    ADLS_CLIENT_ID,
    ADLS_CLIENT_SECRET,
    ADLS_CONNECTION_STRING,
    ADLS_SAS_TOKEN,
    ADLS_TENANT_ID,
    ADLS_TOKEN,
)

from airflow_iceberg_maint.errors import InvalidInputError, StorageError
from airflow_iceberg_maint.fs.batches import BatchDeleter, Verdict, refusal_status, reply_verdicts
from airflow_iceberg_maint.fs.locations import Uri
from airflow_iceberg_maint.fs.storage import DeleteOutcome, FileInfo, KeepComponent, Storage

MAX_BLOBS_PER_BATCH = 256  # the Blob Batch limit for one request
REQUEST_ERRORS: tuple[type[Exception], ...] = (AzureError,)
DEFAULT_BLOB_HOST = "blob.core.windows.net"


class _StaticToken:
    """An ``adls.token`` bearer token, as pyiceberg's fsspec FileIO uses it."""

    def __init__(self, token: str) -> None:
        self.token = token

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken(self.token, int(time.time()) + 3600)


def split_authority(authority: str) -> tuple[str, str]:
    """``container@account.host`` -> (container, host); host is empty for a bare ``container``."""
    container, _, host = authority.partition("@")
    return container, host


def _account_url(props: Mapping[str, str], host: str, account: str) -> str:
    if authority := props.get(ADLS_BLOB_STORAGE_AUTHORITY):
        # pyarrow's rule: '.suffix' is appended to the account; an emulator's host:port takes the account as a path.
        scheme = props.get(ADLS_BLOB_STORAGE_SCHEME) or "https"
        return f"{scheme}://{account}{authority}" if authority.startswith(".") else f"{scheme}://{authority}/{account}"
    if account_host := props.get(ADLS_ACCOUNT_HOST):
        return f"https://{account_host}"
    if host:
        return "https://" + host.replace(".dfs.", ".blob.", 1)
    return f"https://{account}.{DEFAULT_BLOB_HOST}"


def _credential(props: Mapping[str, str], host: str, account: str) -> Any:
    if key := props.get(ADLS_ACCOUNT_KEY):
        return {"account_name": account, "account_key": key}
    if sas := props.get(f"{ADLS_SAS_TOKEN}.{host}") or props.get(ADLS_SAS_TOKEN):
        return sas
    if token := props.get(ADLS_TOKEN):
        return _StaticToken(token)
    if str(props.get(ADLS_ANON, "")).lower() == "true":
        return None
    from azure.identity import ClientSecretCredential, DefaultAzureCredential

    client_id, secret, tenant = (props.get(k) for k in (ADLS_CLIENT_ID, ADLS_CLIENT_SECRET, ADLS_TENANT_ID))
    if client_id and secret and tenant:
        return ClientSecretCredential(tenant, client_id, secret)
    if client_id or secret or tenant:
        raise InvalidInputError(f"{ADLS_CLIENT_ID}, {ADLS_CLIENT_SECRET} and {ADLS_TENANT_ID} must be given together")
    return DefaultAzureCredential()


def service_from_properties(props: Mapping[str, str], authority: str) -> Any:
    """A Blob service client for a location's ``container@account.host``, configured like the table's FileIO."""
    if conn := props.get(ADLS_CONNECTION_STRING):
        return BlobServiceClient.from_connection_string(conn)
    _, host = split_authority(authority)
    account = props.get(ADLS_ACCOUNT_NAME) or host.split(".", 1)[0]
    if not account:
        raise InvalidInputError(
            f"location authority {authority!r}: names no storage account; give container@account.dfs.core.windows.net "
            f"or set {ADLS_ACCOUNT_NAME}"
        )
    return BlobServiceClient(_account_url(props, host, account), credential=_credential(props, host, account))


def _error_text(exc: Exception) -> str:
    code = getattr(exc, "error_code", None)
    message = str(getattr(exc, "message", None) or exc).splitlines()[0]
    return f"{code or type(exc).__name__}: {message}"


def _reply_error(reply: Any) -> str:
    return f"{reply.headers.get('x-ms-error-code') or reply.status_code}: {reply.reason}"


def _refused(exc: Exception) -> bool:
    """The store refused the batch for what it asks (4xx): settled key by key."""
    return isinstance(exc, HttpResponseError) and refusal_status(exc.status_code)


@contextlib.contextmanager
def _as_os_error(location: str) -> Iterator[None]:
    """A missing blob as FileNotFoundError, any other failure to reach or use the store as OSError."""
    try:
        yield
    except ResourceNotFoundError as exc:
        raise FileNotFoundError(location) from exc
    except ResourceExistsError:
        raise
    except REQUEST_ERRORS as exc:
        raise OSError(f"{location}: {_error_text(exc)}") from exc


class AzureStorage:
    """One storage account: listing, Blob Batch deletes, and the conditional writes of index commits."""

    create_may_retry = True  # the client retries a PUT whose reply was lost; the retry then gets 409

    def __init__(self, service: Any, max_attempts: int = 6, backoff_seconds: float = 0.2) -> None:
        self.service = service
        self.max_attempts = max_attempts
        self.backoff_seconds = backoff_seconds
        self.list_calls = 0

    @classmethod
    def from_properties(cls, props: Mapping[str, str], location: str) -> AzureStorage:
        return cls(service_from_properties(props, Uri.parse(location).authority))

    def container(self, authority: str) -> ContainerClient:
        client: ContainerClient = self.service.get_container_client(split_authority(authority)[0])
        return client

    def list_files(self, root: str, keep: KeepComponent) -> Iterator[FileInfo]:
        uri = Uri.parse(root.rstrip("/"))
        base = uri.path.lstrip("/") + "/"  # a trailing '/' so that 't' never lists 't_backup/'
        head = f"{uri.scheme}://{uri.authority}/"
        try:
            pages = self.container(uri.authority).list_blobs(name_starts_with=base, include=["metadata"]).by_page()
            for page in pages:
                self.list_calls += 1
                for blob in page:
                    name = blob.name
                    # Directories of a hierarchical-namespace account are listed as blobs marked hdi_isfolder.
                    is_dir = (blob.metadata or {}).get("hdi_isfolder") == "true" or name.endswith("/")
                    if is_dir or not all(keep(p) for p in name[len(base) :].split("/")):
                        continue
                    yield FileInfo(head + name, int(blob.size or 0), blob.last_modified)
        except REQUEST_ERRORS as exc:
            # An incomplete listing is never used: the run stops before matching or deleting anything.
            raise StorageError(f"{head}{base}: cannot be listed ({_error_text(exc)})") from exc

    def list_level(self, directory: str, keep: KeepComponent) -> tuple[list[FileInfo], list[str]]:
        uri = Uri.parse(directory.rstrip("/"))
        prefix = uri.path.lstrip("/") + "/"
        head = f"{uri.scheme}://{uri.authority}/"
        files: list[FileInfo] = []
        names: list[str] = []
        try:
            container = self.container(uri.authority)
            items = container.walk_blobs(name_starts_with=prefix, delimiter="/", include=["metadata"])
            for page in items.by_page():
                self.list_calls += 1
                for item in page:
                    name = item.name[len(prefix) :]
                    if isinstance(item, BlobPrefix):
                        names.append(name[:-1])  # each ends with the delimiter
                    # Directories of a hierarchical-namespace account are blobs marked hdi_isfolder: no files.
                    elif (item.metadata or {}).get("hdi_isfolder") == "true" or not name or name.endswith("/"):
                        continue
                    elif keep(name):
                        files.append(FileInfo(head + item.name, int(item.size or 0), item.last_modified))
        except REQUEST_ERRORS as exc:
            raise StorageError(f"{head}{prefix}: cannot be listed ({_error_text(exc)})") from exc
        # '' is a prefix ending in '//': the caller lists that directory whole.
        return files, [name for name in names if not name or keep(name)]

    def _send_delete(self, authority: str, keys: list[str]) -> dict[str, Verdict]:
        replies = list(self.container(authority).delete_blobs(*keys, raise_on_any_failure=False))
        return reply_verdicts(keys, replies, _reply_error, AzureError)

    def _delete_one(self, authority: str, key: str) -> None:
        with contextlib.suppress(ResourceNotFoundError):
            self.container(authority).delete_blob(key)

    def _exists(self, authority: str, key: str) -> bool:
        return bool(self.container(authority).get_blob_client(key).exists())

    def delete_files(self, paths: Sequence[str], max_concurrency: int) -> DeleteOutcome:
        deleter = BatchDeleter(
            self._send_delete,
            self._exists,
            REQUEST_ERRORS,
            _error_text,
            MAX_BLOBS_PER_BATCH,
            self.max_attempts,
            self.backoff_seconds,
            delete_one=self._delete_one,
            refused=_refused,
        )
        return deleter.delete_files(paths, max_concurrency)

    # Conditional writes (index commits). A store failure is an OSError, as on local disks.

    def _blob(self, location: str) -> Any:
        uri = Uri.parse(location)
        return self.container(uri.authority).get_blob_client(uri.path.lstrip("/"))

    def list_names(self, directory: str) -> tuple[list[str], list[str]]:
        uri = Uri.parse(directory.rstrip("/"))
        prefix = uri.path.lstrip("/") + "/"
        files: list[str] = []
        dirs: list[str] = []
        with _as_os_error(directory):
            for item in self.container(uri.authority).walk_blobs(name_starts_with=prefix, delimiter="/"):
                name = item.name[len(prefix) :]
                if name.endswith("/"):  # a BlobPrefix
                    dirs.append(name.rstrip("/"))
                elif name:
                    files.append(name)
        return files, dirs

    def create_exclusive(self, location: str, data: bytes) -> bool:
        try:
            with _as_os_error(location):
                self._blob(location).upload_blob(data, overwrite=False)  # sent with If-None-Match: *
        except ResourceExistsError:
            return False
        return True

    def read(self, location: str) -> bytes:
        with _as_os_error(location):
            data: bytes = self._blob(location).download_blob().readall()
        return data

    def delete(self, location: str) -> None:
        with contextlib.suppress(FileNotFoundError), _as_os_error(location):
            self._blob(location).delete_blob()


def _conforms(storage: AzureStorage) -> Storage:
    """Never called: mypy checks here that the backend has every capability of ``Storage``."""
    return storage
