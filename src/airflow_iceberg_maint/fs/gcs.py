"""Google Cloud Storage (``gs://``): listing with mtimes, JSON-API batch deletes, create-if-absent.

The client is google-cloud-storage, configured from the table's ``gcs.*`` FileIO properties
(pyiceberg's own constants). Neither of pyiceberg's GCS filesystems offers what orphan removal
and index commits need: pyarrow's ``GcsFileSystem`` has no bulk delete and no conditional
create, and gcsfs sends its batch deletes only to Google's own host (one request a file
elsewhere) and calls exclusive create experimental. gcsfs itself is built on this client.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import requests
from google.api_core.exceptions import GoogleAPICallError, GoogleAPIError, NotFound, PreconditionFailed
from google.auth.credentials import AnonymousCredentials
from google.auth.exceptions import GoogleAuthError
from google.cloud import storage
from google.cloud.storage.retry import DEFAULT_RETRY
from google.oauth2.credentials import Credentials
from pyiceberg.io import GCS_PROJECT_ID, GCS_REQUESTER_PAYS, GCS_SERVICE_HOST, GCS_TOKEN, GCS_TOKEN_EXPIRES_AT_MS

from airflow_iceberg_maint.errors import StorageError
from airflow_iceberg_maint.fs.batches import BatchDeleter, Verdict, refusal_status, reply_verdicts
from airflow_iceberg_maint.fs.locations import Uri
from airflow_iceberg_maint.fs.storage import DeleteOutcome, FileInfo, KeepComponent, Storage

MAX_CALLS_PER_BATCH = 100  # the JSON API's limit for one batch request
#: What the client raises when the store is unreachable or refuses a request (requests' errors are OSErrors).
REQUEST_ERRORS: tuple[type[Exception], ...] = (GoogleAPIError, GoogleAuthError, requests.RequestException)


def client_from_properties(props: Mapping[str, str]) -> Any:
    """A client configured like the table's FileIO.

    ``gcs.oauth2.token`` is an OAuth2 access token (as pyarrow reads it, pyiceberg's default
    FileIO for ``gs://``), or ``anon`` (as gcsfs reads it); without it, Application Default
    Credentials. ``gcs.service.host`` points at another endpoint (an emulator).
    """
    token = props.get(GCS_TOKEN)
    credentials: Any = None
    if token == "anon":
        credentials = AnonymousCredentials()
    elif token and token != "google_default":
        expires = props.get(GCS_TOKEN_EXPIRES_AT_MS)
        expiry = datetime.fromtimestamp(int(expires) / 1000, UTC).replace(tzinfo=None) if expires else None
        credentials = Credentials(token, expiry=expiry)  # google-auth compares naive UTC times
    options = {"api_endpoint": props[GCS_SERVICE_HOST]} if props.get(GCS_SERVICE_HOST) else None
    return storage.Client(project=props.get(GCS_PROJECT_ID), credentials=credentials, client_options=options)


def _user_project(props: Mapping[str, str]) -> str | None:
    """The project billed on a requester-pays bucket, as gcsfs sends it."""
    return props.get(GCS_PROJECT_ID) if str(props.get(GCS_REQUESTER_PAYS, "")).lower() == "true" else None


def _error_text(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"


@contextlib.contextmanager
def _as_os_error(location: str) -> Iterator[None]:
    """A missing object as FileNotFoundError, any other failure to reach or use the store as OSError."""
    try:
        yield
    except NotFound as exc:
        raise FileNotFoundError(location) from exc
    except PreconditionFailed:
        raise
    except REQUEST_ERRORS as exc:
        raise OSError(f"{location}: {_error_text(exc)}") from exc


def _reply_error(reply: Any) -> str:
    try:
        message = str(json.loads(reply.content)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        message = str(reply.content[:200])
    return f"{reply.status_code}: {message}"


class UnreadableReply(GoogleAPIError):
    """The store answered a batch with a reply the client cannot match to its deletes."""


def _refused(exc: Exception) -> bool:
    """The store refused the batch (4xx), or answered it in a form that cannot be read: settled key by key."""
    return isinstance(exc, UnreadableReply) or (isinstance(exc, GoogleAPICallError) and refusal_status(exc.code))


class _RepliesBatch(storage.Batch):
    """A batch that keeps its replies, one HTTP response a call, in order.

    ``Batch.finish`` returns them, but the context manager (the only public way to queue calls
    in a batch) calls it on exit and drops them; the client has no other public handle
    (python-storage issue 1214). With ``raise_exception=False`` failed calls are replies too.
    A reply the client cannot read (not multipart, or not one part a call) raises ValueError there;
    it is raised as a request error here, so that the batch is settled key by key.
    """

    replies: list[Any]

    def finish(self, raise_exception: bool = True) -> list[Any]:
        try:
            self.replies = list(super().finish(raise_exception=raise_exception))
        except ValueError as exc:
            raise UnreadableReply(f"batch reply cannot be read ({exc})") from exc
        return self.replies


class GcsStorage:
    """Listing, batch deletes, and the conditional writes of index commits (``ifGenerationMatch=0``)."""

    create_may_retry = True  # the client retries an upload with a generation precondition; the retry may get 412

    def __init__(
        self, client: Any, user_project: str | None = None, max_attempts: int = 6, backoff_seconds: float = 0.2
    ) -> None:
        self.client = client
        self.user_project = user_project
        self.max_attempts = max_attempts
        self.backoff_seconds = backoff_seconds
        self.list_calls = 0

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> GcsStorage:
        return cls(client_from_properties(props), _user_project(props))

    def _bucket(self, name: str) -> Any:
        return self.client.bucket(name, user_project=self.user_project)

    def list_files(self, root: str, keep: KeepComponent) -> Iterator[FileInfo]:
        uri = Uri.parse(root.rstrip("/"))
        base = uri.path.lstrip("/") + "/"  # a trailing '/' so that 't' never lists 't_backup/'
        head = f"{uri.scheme}://{uri.authority}/"
        try:
            pages = self.client.list_blobs(self._bucket(uri.authority), prefix=base).pages
            for page in pages:
                self.list_calls += 1
                for blob in page:
                    name = blob.name
                    if name.endswith("/") or not all(keep(p) for p in name[len(base) :].split("/")):
                        continue  # folder placeholders are no files
                    yield FileInfo(head + name, int(blob.size or 0), blob.updated)
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
            pages = self.client.list_blobs(self._bucket(uri.authority), prefix=prefix, delimiter="/").pages
            for page in pages:
                self.list_calls += 1
                for blob in page:
                    name = blob.name[len(prefix) :]
                    # The folder placeholder of the directory itself is no file; no name here holds a '/'.
                    if name and not name.endswith("/") and keep(name):
                        files.append(FileInfo(head + blob.name, int(blob.size or 0), blob.updated))
                names.extend(p[len(prefix) : -1] for p in page.prefixes)  # each ends with the delimiter
        except REQUEST_ERRORS as exc:
            raise StorageError(f"{head}{prefix}: cannot be listed ({_error_text(exc)})") from exc
        # '' is a prefix ending in '//' (GCS keeps it, as S3 does): the caller lists that directory whole.
        return files, [name for name in names if not name or keep(name)]

    def _send_delete(self, bucket_name: str, keys: list[str]) -> dict[str, Verdict]:
        def send() -> list[Any]:
            bucket = self._bucket(bucket_name)
            with _RepliesBatch(self.client, raise_exception=False) as batch:
                for key in keys:
                    bucket.delete_blob(key)
            replies: list[Any] = batch.replies
            return replies

        # Sending a batch again is safe: a delete that already happened answers 404.
        replies = DEFAULT_RETRY(send)()
        return reply_verdicts(keys, replies, _reply_error, UnreadableReply)

    def _delete_one(self, bucket_name: str, key: str) -> None:
        with contextlib.suppress(NotFound):
            self._bucket(bucket_name).delete_blob(key)

    def _exists(self, bucket_name: str, key: str) -> bool:
        return bool(self._bucket(bucket_name).blob(key).exists())

    def delete_files(self, paths: Sequence[str], max_concurrency: int) -> DeleteOutcome:
        deleter = BatchDeleter(
            self._send_delete,
            self._exists,
            REQUEST_ERRORS,
            _error_text,
            MAX_CALLS_PER_BATCH,
            self.max_attempts,
            self.backoff_seconds,
            delete_one=self._delete_one,
            refused=_refused,
        )
        return deleter.delete_files(paths, max_concurrency)

    # Conditional writes (index commits). A store failure is an OSError, as on local disks.

    def _blob(self, location: str) -> Any:
        uri = Uri.parse(location)
        return self._bucket(uri.authority).blob(uri.path.lstrip("/"))

    def list_names(self, directory: str) -> tuple[list[str], list[str]]:
        uri = Uri.parse(directory.rstrip("/"))
        prefix = uri.path.lstrip("/") + "/"
        with _as_os_error(directory):
            blobs = self.client.list_blobs(self._bucket(uri.authority), prefix=prefix, delimiter="/")
            files = [b.name[len(prefix) :] for b in blobs]  # exhausting the pages fills ``prefixes``
            dirs = [p[len(prefix) :].rstrip("/") for p in blobs.prefixes]
        return [f for f in files if f], [d for d in dirs if d]

    def create_exclusive(self, location: str, data: bytes) -> bool:
        try:
            with _as_os_error(location):
                self._blob(location).upload_from_string(data, content_type="application/json", if_generation_match=0)
        except PreconditionFailed:
            return False
        return True

    def read(self, location: str) -> bytes:
        with _as_os_error(location):
            data: bytes = self._blob(location).download_as_bytes()
        return data

    def delete(self, location: str) -> None:
        with contextlib.suppress(FileNotFoundError), _as_os_error(location):
            self._blob(location).delete()


def _conforms(storage: GcsStorage) -> Storage:
    """Never called: mypy checks here that the backend has every capability of ``Storage``."""
    return storage
