"""S3 listing (paginated, spread over prefixes) and bulk deletion (``DeleteObjects``).

One retry policy per kind of failure: botocore retries whole requests (connection errors,
500/503, SlowDown) with its adaptive mode; ``storage.batches`` only retries the keys a successful
``DeleteObjects`` reply lists as throttled, which botocore cannot see. A request that still
fails surfaces as ``StorageError`` (listing) or as per-file failures (deletion), never as a raw
botocore exception.
"""

from __future__ import annotations

import errno
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from airflow_iceberg_maint.errors import StorageError
from airflow_iceberg_maint.fs.batches import BatchDeleter, Retry, Verdict, refusal_status
from airflow_iceberg_maint.fs.locations import Uri
from airflow_iceberg_maint.fs.s3_client import put_arguments, s3_client
from airflow_iceberg_maint.fs.storage import DeleteOutcome, FileInfo, KeepComponent, Storage

MAX_KEYS_PER_DELETE = 1000  # the S3 limit for one DeleteObjects request
#: Per-key error codes in a DeleteObjects reply that are worth sending again.
RETRY_KEY_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "503",
        "InternalError",
        "ServiceUnavailable",
    }
)
NOT_FOUND_CODES = frozenset({"404", "NoSuchKey", "NotFound"})
#: Replies to a conditional PUT that mean another writer created the object first.
CONFLICT_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict", "412", "409"})
REQUEST_ERRORS = (ClientError, BotoCoreError)
#: What XML 1.0 cannot carry: C0 controls but tab, newline and carriage return (which botocore escapes),
#: surrogates (a name that is not UTF-8), U+FFFE and U+FFFF.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
SPREAD_DEPTH = 2  # list this many levels by delimiter, then each prefix flat and in parallel


class S3Storage:
    create_may_retry = True  # botocore retries a PUT whose reply was lost; the retry then gets 412

    def __init__(
        self,
        client: Any,
        list_workers: int = 8,
        max_attempts: int = 6,
        backoff_seconds: float = 0.2,
        put_arguments: Mapping[str, str] | None = None,
    ) -> None:
        self.client = client
        self.put_arguments = dict(put_arguments or {})  # server-side encryption of the files written
        self.list_workers = list_workers
        self.max_attempts = max_attempts
        self.backoff_seconds = backoff_seconds
        self.list_calls = 0
        self._lock = threading.Lock()

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> S3Storage:
        """A client with the identity and settings of the table's pyiceberg FileIO (see ``fs.s3_client``)."""
        return cls(s3_client(props), put_arguments=put_arguments(props))

    # Listing

    def _list_page_set(self, bucket: str, prefix: str, delimiter: str | None) -> Iterator[dict[str, Any]]:
        kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
        if delimiter:
            kwargs["Delimiter"] = delimiter
        for page in self.client.get_paginator("list_objects_v2").paginate(**kwargs):
            with self._lock:
                self.list_calls += 1
            yield page

    def _list_prefix(self, bucket: str, prefix: str, depth: int) -> tuple[list[dict[str, Any]], list[str]]:
        """Objects directly found, and sub-prefixes left to list (when ``depth`` > 0)."""
        objects: list[dict[str, Any]] = []
        prefixes: list[str] = []
        try:
            for page in self._list_page_set(bucket, prefix, "/" if depth > 0 else None):
                objects.extend(page.get("Contents", []))
                prefixes.extend(p["Prefix"] for p in page.get("CommonPrefixes", []))
        except REQUEST_ERRORS as exc:
            # An incomplete listing is never used: the run stops before matching or deleting anything.
            raise StorageError(f"s3://{bucket}/{prefix}: cannot be listed ({_error_text(exc)})") from exc
        return objects, prefixes

    def list_files(self, root: str, keep: KeepComponent) -> Iterator[FileInfo]:
        uri = Uri.parse(root.rstrip("/"))
        bucket = uri.authority
        base = uri.path.lstrip("/") + "/"  # a trailing '/' so that 't' never lists 't_backup/'
        head = f"{uri.scheme}://{bucket}/"

        def kept(key: str) -> bool:
            return all(keep(part) for part in key[len(base) :].split("/"))

        with ThreadPoolExecutor(max_workers=self.list_workers) as pool:
            pending = [pool.submit(self._list_prefix, bucket, base, SPREAD_DEPTH)]
            depth_of = {pending[0]: SPREAD_DEPTH}
            while pending:
                future = pending.pop(0)
                objects, prefixes = future.result()
                depth = depth_of.pop(future)
                for obj in objects:
                    key = obj["Key"]
                    if not key.endswith("/") and kept(key):
                        yield FileInfo(head + key, int(obj.get("Size", 0)), obj.get("LastModified"))
                for prefix in prefixes:
                    if kept(prefix.rstrip("/")):
                        sub = pool.submit(self._list_prefix, bucket, prefix, depth - 1)
                        depth_of[sub] = depth - 1
                        pending.append(sub)

    def list_level(self, directory: str, keep: KeepComponent) -> tuple[list[FileInfo], list[str]]:
        uri = Uri.parse(directory.rstrip("/"))
        bucket, prefix = uri.authority, uri.path.lstrip("/") + "/"
        head = f"{uri.scheme}://{bucket}/"
        objects, prefixes = self._list_prefix(bucket, prefix, 1)
        files = [
            FileInfo(head + obj["Key"], int(obj.get("Size", 0)), obj.get("LastModified"))
            for obj in objects
            if not obj["Key"].endswith("/") and keep(obj["Key"][len(prefix) :])
        ]
        names = [p[len(prefix) : -1] for p in prefixes]  # each ends with the delimiter
        dirs = [name for name in names if not name or keep(name)]
        return files, dirs

    # Deletion

    def _send_delete(self, bucket: str, keys: list[str]) -> dict[str, Verdict]:
        objects = [{"Key": k} for k in keys]
        response = self.client.delete_objects(Bucket=bucket, Delete={"Objects": objects, "Quiet": True})
        verdicts: dict[str, Verdict] = dict.fromkeys(keys)
        for error in response.get("Errors", []):
            code = error.get("Code")
            text = f"{code}: {error.get('Message', '')}"
            if code in RETRY_KEY_CODES:
                verdicts[error["Key"]] = Retry(text)
            elif code not in NOT_FOUND_CODES:
                verdicts[error["Key"]] = text
        return verdicts

    def _delete_one(self, bucket: str, key: str) -> None:
        # The key travels in the URL path, percent-encoded: any key can be named exactly.
        try:
            self.client.delete_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            if _status(exc) != "404":  # no such bucket: the file is gone
                raise

    def _exists(self, bucket: str, key: str) -> bool:
        try:
            self.client.head_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            if _status(exc) == "404" or _code(exc) in NOT_FOUND_CODES:
                return False
            raise
        return True

    def delete_files(self, paths: Sequence[str], max_concurrency: int) -> DeleteOutcome:
        deleter = BatchDeleter(
            self._send_delete,
            self._exists,
            REQUEST_ERRORS,
            _error_text,
            MAX_KEYS_PER_DELETE,
            self.max_attempts,
            self.backoff_seconds,
            delete_one=self._delete_one,
            refused=_refused,
            bulk_safe=bulk_safe,
        )
        return deleter.delete_files(paths, max_concurrency)

    # Conditional writes (index commits)

    def list_names(self, directory: str) -> tuple[list[str], list[str]]:
        uri = Uri.parse(directory.rstrip("/"))
        prefix = uri.path.lstrip("/") + "/"
        files: list[str] = []
        dirs: list[str] = []
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=uri.authority, Prefix=prefix, Delimiter="/"):
            files.extend(o["Key"][len(prefix) :] for o in page.get("Contents", []))
            dirs.extend(p["Prefix"][len(prefix) :].rstrip("/") for p in page.get("CommonPrefixes", []))
        return [f for f in files if f], [d for d in dirs if d]

    def create_exclusive(self, location: str, data: bytes) -> bool:
        uri = Uri.parse(location)
        try:
            self.client.put_object(
                Bucket=uri.authority, Key=uri.path.lstrip("/"), Body=data, IfNoneMatch="*", **self.put_arguments
            )
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            status = str(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
            if code in CONFLICT_CODES or status in CONFLICT_CODES:
                return False
            if status == "403":  # a definite refusal (a table bucket's layout, a policy), as a local disk's EACCES
                raise PermissionError(
                    errno.EACCES, f"the store refused the write ({code}, HTTP 403)", location
                ) from exc
            raise
        return True

    def read(self, location: str) -> bytes:
        uri = Uri.parse(location)
        try:
            body: bytes = self.client.get_object(Bucket=uri.authority, Key=uri.path.lstrip("/"))["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                raise FileNotFoundError(location) from exc
            raise
        return body

    def delete(self, location: str) -> None:
        uri = Uri.parse(location)
        self.client.delete_object(Bucket=uri.authority, Key=uri.path.lstrip("/"))


def bulk_safe(key: str) -> bool:
    """Whether a ``DeleteObjects`` body can name the key: its XML cannot carry control characters.

    Sent anyway, such a key makes S3 refuse the whole request (400 MalformedXML; the local test
    server answers 500), so it is deleted with ``DeleteObject``, whose URL names any key exactly.
    """
    return _NOT_XML.search(key) is None


def _refused(exc: Exception) -> bool:
    """The store refused the request for what it names (4xx), not for being busy or failing (429, 408, 5xx)."""
    return isinstance(exc, ClientError) and refusal_status(_status(exc))


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _status(exc: ClientError) -> str:
    return str(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))


def _error_text(exc: Exception) -> str:
    """One line: the S3 error code and message, or botocore's connection error."""
    if isinstance(exc, ClientError):
        return f"{_code(exc) or _status(exc)}: {exc}"
    return f"{type(exc).__name__}: {exc}"


def _conforms(storage: S3Storage) -> Storage:
    """Never called: mypy checks here that the backend has every capability of ``Storage``."""
    return storage
