"""Bulk deletion shared by the object stores: group by bucket, send batches, settle what got no reply.

Each store supplies two calls: ``send(bucket, keys)``, one bulk-delete request that answers per key,
and ``exists(bucket, key)``, used only when a request got no reply, since it may still have taken
effect. The retry policy is the same for every store: the client library retries whole requests;
keys a successful reply marks as throttled are sent again here, with backoff.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from airflow_iceberg_maint.fs.locations import Uri
from airflow_iceberg_maint.fs.storage import DeleteOutcome

#: A key's verdict in a bulk-delete reply: ``None`` deleted (or already gone), ``RETRY``, or an error text.
RETRY = "retry"
#: ``send``: one bulk-delete request for keys of one bucket; a verdict for every key, or an exception.
Send = Callable[[str, list[str]], Mapping[str, str | None]]
#: ``exists``: whether a key is still there; raises when the store cannot say.
Exists = Callable[[str, str], bool]


@dataclass(frozen=True)
class BatchDeleter:
    send: Send
    exists: Exists
    #: What ``send`` and ``exists`` raise when the store is unreachable or refuses the request.
    request_errors: tuple[type[Exception], ...]
    describe: Callable[[Exception], str]
    max_keys: int
    max_attempts: int = 6
    backoff_seconds: float = 0.2

    def delete_files(self, paths: Sequence[str], max_concurrency: int) -> DeleteOutcome:
        """Delete ``scheme://bucket/key`` paths in batches of ``max_keys``, ``max_concurrency`` at a time."""
        outcome = DeleteOutcome()
        by_bucket: dict[tuple[str, str], list[str]] = {}
        for path in paths:
            uri = Uri.parse(path)
            by_bucket.setdefault((f"{uri.scheme}://{uri.authority}/", uri.authority), []).append(uri.path[1:])
        batches = [
            (head, bucket, keys[i : i + self.max_keys])
            for (head, bucket), keys in by_bucket.items()
            for i in range(0, len(keys), self.max_keys)
        ]
        with ThreadPoolExecutor(max_workers=max(1, max_concurrency)) as pool:
            results = pool.map(lambda b: (b[0], *self._delete_batch(b[1], b[2])), batches)
            for head, deleted, failed, requests in results:
                outcome.deleted.extend(head + k for k in deleted)
                outcome.failed.extend((head + k, err) for k, err in failed)
                outcome.requests += requests
        return outcome

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
                verdicts = self.send(bucket, todo)
            except self.request_errors as exc:
                # The client has already retried. The request may still have taken effect (its reply lost):
                # ask which keys are gone rather than report them all as failed.
                gone, kept = self._settle(bucket, todo, self.describe(exc))
                return deleted + gone, failed + kept, requests
            for key in todo:
                verdict = verdicts[key]
                if verdict is None:
                    deleted.append(key)
                elif verdict == RETRY:
                    retry.append(key)
                else:
                    failed.append((key, verdict))
            if not retry:
                return deleted, failed, requests
            todo = retry
        return deleted, failed + [(k, f"still throttled after {self.max_attempts} attempts") for k in todo], requests

    def _settle(self, bucket: str, keys: list[str], reason: str) -> tuple[list[str], list[tuple[str, str]]]:
        """After a bulk delete with no reply: keys now absent are deleted, the others failed.

        Stops asking at the first key that cannot be checked (the store is unreachable); that key
        and the rest are reported failed with the outcome unknown.
        """
        deleted: list[str] = []
        failed: list[tuple[str, str]] = []
        for i, key in enumerate(keys):
            try:
                present = self.exists(bucket, key)
            except self.request_errors:
                failed.extend((k, f"{reason}; outcome unknown") for k in keys[i:])
                break
            if present:
                failed.append((key, f"{reason}; not deleted"))
            else:
                deleted.append(key)
        return deleted, failed
