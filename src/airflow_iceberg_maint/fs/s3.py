"""S3 listing (paginated, spread over prefixes) and bulk deletion (``DeleteObjects``).

One retry policy per kind of failure: botocore retries whole requests (connection errors,
500/503, SlowDown) with its adaptive mode; this module only retries the keys a successful
``DeleteObjects`` reply lists as throttled, which botocore cannot see. A request that still
fails surfaces as ``StorageError`` (listing) or as per-file failures (deletion), never as a raw
botocore exception.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from airflow_iceberg_maint.errors import StorageError
from airflow_iceberg_maint.fs.locations import Uri
from airflow_iceberg_maint.fs.s3_client import put_arguments, s3_client
from airflow_iceberg_maint.fs.storage import DeleteOutcome, FileInfo, KeepComponent

MAX_KEYS_PER_DELETE = 1000  # the S3 limit for one DeleteObjects request
#: Per-key error codes in a DeleteObjects reply that are worth sending again.
RETRY_KEY_CODES = frozenset({"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "503",
                             "InternalError", "ServiceUnavailable"})
NOT_FOUND_CODES = frozenset({"404", "NoSuchKey", "NotFound"})
#: Replies to a conditional PUT that mean another writer created the object first.
CONFLICT_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict", "412", "409"})
REQUEST_ERRORS = (ClientError, BotoCoreError)
SPREAD_DEPTH = 2  # list this many levels by delimiter, then each prefix flat and in parallel


class S3Storage:
    create_may_retry = True  # botocore retries a PUT whose reply was lost; the retry then gets 412

    def __init__(self, client: Any, list_workers: int = 8, max_attempts: int = 6, backoff_seconds: float = 0.2,
                 put_arguments: Mapping[str, str] | None = None) -> None:
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

    def _delete_batch(self, bucket: str, keys: list[str]) -> tuple[list[str], list[tuple[str, str]], int]:
        deleted: list[str] = []
        failed: list[tuple[str, str]] = []
        requests = 0
        todo = keys
        for attempt in range(self.max_attempts):
            if attempt:
                time.sleep(self.backoff_seconds * 2 ** (attempt - 1))
            retry: list[str] = []
            try:
                requests += 1
                response = self.client.delete_objects(
                    Bucket=bucket, Delete={"Objects": [{"Key": k} for k in todo], "Quiet": True}
                )
            except REQUEST_ERRORS as exc:
                # botocore has already retried. The request may still have taken effect (its reply lost):
                # ask which keys are gone rather than report them all as failed.
                gone, kept = self._settle_deletes(bucket, todo, _error_text(exc))
                return deleted + gone, failed + kept, requests
            errors = {e["Key"]: e for e in response.get("Errors", [])}
            for key in todo:
                error = errors.get(key)
                if error is None or error.get("Code") in NOT_FOUND_CODES:
                    deleted.append(key)
                elif error.get("Code") in RETRY_KEY_CODES:
                    retry.append(key)
                else:
                    failed.append((key, f"{error.get('Code')}: {error.get('Message', '')}"))
            if not retry:
                return deleted, failed, requests
            todo = retry
        return deleted, failed + [(k, "SlowDown: still throttled after retries") for k in todo], requests

    def _settle_deletes(self, bucket: str, keys: list[str], reason: str) -> tuple[list[str], list[tuple[str, str]]]:
        """After a DeleteObjects with no reply: keys now absent are deleted, the others failed.

        Stops asking at the first key that cannot be checked (the store is unreachable); that key
        and the rest are reported failed with the outcome unknown.
        """
        deleted: list[str] = []
        failed: list[tuple[str, str]] = []
        for i, key in enumerate(keys):
            try:
                self.client.head_object(Bucket=bucket, Key=key)
            except ClientError as exc:
                if _status(exc) == "404" or _code(exc) in NOT_FOUND_CODES:
                    deleted.append(key)
                    continue
                failed.extend((k, f"{reason}; outcome unknown") for k in keys[i:])
                break
            except BotoCoreError:
                failed.extend((k, f"{reason}; outcome unknown") for k in keys[i:])
                break
            else:
                failed.append((key, f"{reason}; not deleted"))
        return deleted, failed

    def delete_files(self, paths: Sequence[str], max_concurrency: int) -> DeleteOutcome:
        outcome = DeleteOutcome()
        by_bucket: dict[tuple[str, str], list[str]] = {}
        for path in paths:
            uri = Uri.parse(path)
            by_bucket.setdefault((f"{uri.scheme}://{uri.authority}/", uri.authority), []).append(uri.path[1:])
        batches = [
            (head, bucket, keys[i : i + MAX_KEYS_PER_DELETE])
            for (head, bucket), keys in by_bucket.items()
            for i in range(0, len(keys), MAX_KEYS_PER_DELETE)
        ]
        with ThreadPoolExecutor(max_workers=max(1, max_concurrency)) as pool:
            results = pool.map(lambda b: (b[0], *self._delete_batch(b[1], b[2])), batches)
            for head, deleted, failed, requests in results:
                outcome.deleted.extend(head + k for k in deleted)
                outcome.failed.extend((head + k, err) for k, err in failed)
                outcome.requests += requests
        return outcome


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
            self.client.put_object(Bucket=uri.authority, Key=uri.path.lstrip("/"), Body=data, IfNoneMatch="*",
                                   **self.put_arguments)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            status = str(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
            if code in CONFLICT_CODES or status in CONFLICT_CODES:
                return False
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


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _status(exc: ClientError) -> str:
    return str(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))


def _error_text(exc: Exception) -> str:
    """One line: the S3 error code and message, or botocore's connection error."""
    if isinstance(exc, ClientError):
        return f"{_code(exc) or _status(exc)}: {exc}"
    return f"{type(exc).__name__}: {exc}"
