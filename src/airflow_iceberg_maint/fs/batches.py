"""Deleting many files: in steps that report progress (``delete_in_steps``, what every cleanup calls), through
the bulk deletion the stores share underneath: group by bucket, send batches, settle what got no reply.

``delete_each`` serves filesystems with no bulk delete (one request a file). For the object
stores, each store supplies two calls: ``send(bucket, keys)``, one bulk-delete request that answers per key,
and ``exists(bucket, key)``, used only when a request got no reply, since it may still have taken
effect. The retry policy is the same for every store: the client library retries whole requests;
keys a successful reply marks as throttled are sent again here, with backoff.

A bulk request the store refuses as a whole (it answered, with an error for the request, after the
client's retries) may be refused for one key of it: its keys are then deleted one request each
(``delete_one``), so that every other key is deleted and the odd one fails alone, with the store's
own answer. A store that does not answer, or answers that it is busy, gets no more requests: its
keys are settled by asking which are gone. Keys a store's bulk request cannot name at all
(``bulk_safe``) are deleted one request each from the start.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol, TypeVar

from airflow_iceberg_maint import fencing
from airflow_iceberg_maint.fs.locations import Uri
from airflow_iceberg_maint.fs.storage import DeleteOutcome, SupportsBulkDelete
from airflow_iceberg_maint.progress import Phase

#: Files ``delete_each`` deletes between two checks of the run's lease.
EACH_BATCH = 1_000
DEFAULT_MAX_CONCURRENT_DELETES = 8
DELETE_STEP_PER_WORKER = 5_000  # files a delete worker gets between progress updates (5 S3 requests)


def delete_in_steps(storage: SupportsBulkDelete, paths: Sequence[str], max_concurrency: int) -> DeleteOutcome:
    """Delete in steps that keep every worker busy, reporting progress after each."""
    outcome = DeleteOutcome()
    step = max_concurrency * DELETE_STEP_PER_WORKER
    with Phase("deleting", total=len(paths)) as deleting:
        for start in range(0, len(paths), step):
            chunk = list(paths[start : start + step])
            part = storage.delete_files(chunk, max_concurrency)
            outcome.deleted += part.deleted
            outcome.failed += part.failed
            outcome.requests += part.requests
            deleting.advance(len(chunk))
    return outcome


@dataclass(frozen=True)
class Retry:
    """A key's verdict: worth sending again; ``error`` is what the store said, reported if it never succeeds."""

    error: str


#: A key's verdict in a bulk-delete reply: ``None`` deleted (or already gone), a ``Retry``, or an error text.
Verdict = str | Retry | None
#: ``send``: one bulk-delete request for keys of one bucket; a verdict for every key, or an exception.
Send = Callable[[str, list[str]], Mapping[str, Verdict]]
#: ``exists``: whether a key is still there; raises when the store cannot say.
Exists = Callable[[str, str], bool]
#: ``delete_one``: one single-object delete (a key already gone is no error); raises what the store answered.
DeleteOne = Callable[[str, str], None]
#: HTTP statuses of a batch's sub-reply that are worth sending that key again.
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


def refusal_status(status: int | str | None) -> bool:
    """Whether an HTTP status refuses a request for what it asks (4xx), not for a busy or failing store.

    A bulk request refused so is settled key by key; 408, 429 and 5xx (after the client's retries)
    say the store cannot serve now, and more requests would only add to its load.
    """
    try:
        code = int(status or 0)
    except ValueError:
        return False
    return 400 <= code < 500 and code not in RETRY_STATUSES


class Reply(Protocol):
    """One key's HTTP sub-reply in a multipart batch reply (Azure Blob Batch, the GCS JSON API)."""

    @property
    def status_code(self) -> int: ...


R = TypeVar("R", bound=Reply)


def reply_verdicts(
    keys: list[str], replies: Sequence[R], error_text: Callable[[R], str], malformed: type[Exception]
) -> dict[str, Verdict]:
    """The verdicts of a batch reply that has one sub-reply a key, in order.

    2xx and 404 (already gone) mean deleted, ``RETRY_STATUSES`` retry, any other status fails; both
    with ``error_text(reply)``. A reply whose parts do not match the keys raises ``malformed`` (one of
    the store's request errors: the batch is then settled key by key).
    """
    if len(replies) != len(keys):
        raise malformed(f"batch reply has {len(replies)} parts for {len(keys)} deletes")
    verdicts: dict[str, Verdict] = {}
    for key, reply in zip(keys, replies, strict=True):
        status = reply.status_code
        if 200 <= status < 300 or status == 404:
            verdicts[key] = None
        elif status in RETRY_STATUSES:
            verdicts[key] = Retry(error_text(reply))
        else:
            verdicts[key] = error_text(reply)
    return verdicts


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
    #: The single-object delete used to settle a bulk request the store refused as a whole.
    delete_one: DeleteOne | None = None
    #: Whether a request error is the store refusing the request (settled key by key with ``delete_one``),
    #: rather than no answer or a busy store (settled by asking which keys are gone, ``exists``).
    refused: Callable[[Exception], bool] = lambda exc: False
    #: Whether a key can be named in a bulk request; the others are deleted one by one from the start.
    bulk_safe: Callable[[str], bool] = lambda key: True

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
        lease = fencing.current()  # the workers run outside the run's context: each checks it before its batch

        def batch(head: str, bucket: str, keys: list[str]) -> tuple[str, list[str], list[tuple[str, str]], int]:
            if lease is not None:
                lease.check("a delete batch")
            return (head, *self._delete_batch(bucket, keys))

        with ThreadPoolExecutor(max_workers=max(1, max_concurrency)) as pool:
            results = pool.map(lambda b: batch(*b), batches)
            for head, deleted, failed, requests in results:
                outcome.deleted.extend(head + k for k in deleted)
                outcome.failed.extend((head + k, err) for k, err in failed)
                outcome.requests += requests
        return outcome

    def _delete_batch(self, bucket: str, keys: list[str]) -> tuple[list[str], list[tuple[str, str]], int]:
        odd = [k for k in keys if not self.bulk_safe(k)]
        deleted, failed, requests = self._send_batch(bucket, [k for k in keys if self.bulk_safe(k)] if odd else keys)
        if odd:
            gone, kept, sent = self._one_by_one(bucket, odd)
            deleted, failed, requests = deleted + gone, failed + kept, requests + sent
        return deleted, failed, requests

    def _send_batch(self, bucket: str, keys: list[str]) -> tuple[list[str], list[tuple[str, str]], int]:
        deleted: list[str] = []
        failed: list[tuple[str, str]] = []
        requests = 0
        todo = keys
        last_error: dict[str, str] = {}
        for attempt in range(self.max_attempts if keys else 0):
            if attempt:
                time.sleep(self.backoff_seconds * 2 ** (attempt - 1))
            retry: list[str] = []
            try:
                requests += 1
                verdicts = self.send(bucket, todo)
            except self.request_errors as exc:
                if self.delete_one is not None and self.refused(exc):
                    # Refused whole, after the client's retries: maybe for one key of it. Each key on its own,
                    # so that one odd key fails alone, with the store's own answer to it.
                    gone, kept, sent = self._one_by_one(bucket, todo)
                    return deleted + gone, failed + kept, requests + sent
                # The client has already retried. The request may still have taken effect (its reply lost):
                # ask which keys are gone rather than report them all as failed.
                gone, kept = self._settle(bucket, todo, self.describe(exc))
                return deleted + gone, failed + kept, requests
            for key in todo:
                verdict = verdicts[key]
                if verdict is None:
                    deleted.append(key)
                elif isinstance(verdict, Retry):
                    retry.append(key)
                    last_error[key] = verdict.error
                else:
                    failed.append((key, verdict))
            if not retry:
                return deleted, failed, requests
            todo = retry
        gave_up = [(k, f"{last_error[k]} (still failing after {self.max_attempts} attempts)") for k in todo]
        return deleted, failed + gave_up, requests

    def _one_by_one(self, bucket: str, keys: list[str]) -> tuple[list[str], list[tuple[str, str]], int]:
        """Delete each key with its own request; stops at the first that gets no answer, and settles the rest."""
        if self.delete_one is None:
            raise TypeError("a BatchDeleter with bulk_safe or refused needs delete_one")
        deleted: list[str] = []
        failed: list[tuple[str, str]] = []
        for i, key in enumerate(keys):
            try:
                self.delete_one(bucket, key)
            except self.request_errors as exc:
                if not self.refused(exc):  # no answer, or a busy store: no more requests to it
                    gone, kept = self._settle(bucket, keys[i:], self.describe(exc))
                    return deleted + gone, failed + kept, i + 1
                failed.append((key, self.describe(exc)))
            else:
                deleted.append(key)
        return deleted, failed, len(keys)

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


def delete_each(
    paths: Sequence[str], max_concurrency: int, remove: Callable[[str], None], describe: Callable[[OSError], str]
) -> DeleteOutcome:
    """Delete ``paths`` one ``remove(path)`` each, ``max_concurrency`` at a time; a missing file counts as deleted."""

    def delete(path: str) -> str | None:
        try:
            remove(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            return describe(exc)
        return None

    outcome = DeleteOutcome()
    with ThreadPoolExecutor(max_workers=max(1, max_concurrency)) as pool:
        for start in range(0, len(paths), EACH_BATCH):
            fencing.guard("a delete batch")
            chunk = paths[start : start + EACH_BATCH]
            for path, error in zip(chunk, pool.map(delete, chunk), strict=True):
                outcome.requests += 1
                if error is None:
                    outcome.deleted.append(path)
                else:
                    outcome.failed.append((path, error))
    return outcome
