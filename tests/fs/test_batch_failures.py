"""One batch delete on GCS or Azure in which some deletes fail and the others succeed.

Real failures where an emulator produces them: an Azure blob under a lease (Azurite answers
412 LeaseIdMissing), an object already gone (404, both stores), a batch reply the client cannot
read (fake-gcs-server answers the client's batch with no parts). Refusals no emulator produces
(403 and throttling on GCS, 403 and ServerBusy on Azure) come from a proxy in front of the
emulator (tests/fs/batch_faults.py), which leaves the refused files in place.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from airflow_iceberg_maint.fs.adls import AzureStorage
from airflow_iceberg_maint.fs.gcs import GcsStorage, client_from_properties
from tests.fs.batch_faults import AZURE_REFUSALS, GCS_REFUSALS, BatchFaults, azure_refusal, gcs_refusal
from tests.support.services import AZURITE_ACCOUNT, azure_props, gcs_props, service

LEASED = "LeaseIdMissing: There is currently a lease on the blob and no lease ID was specified in the request."


@dataclass
class Store:
    """A bucket (or container) of its own on one emulator, and how the store words a refusal."""

    endpoint: str  # http://HOST:PORT
    head: str  # a path up to the key
    storage: Callable[[str], GcsStorage | AzureStorage]  # on an endpoint: the emulator's, or a proxy's
    upload: Callable[[str], object]  # plants a key, with a plain client
    keys: Callable[[], list[str]]  # lists the keys, with a plain client
    refusal: Callable[[int], bytes]
    throttle: int  # the status the store throttles a delete with
    refused: Callable[[int], str]  # the error text the storage reports for a refusal

    def put(self, *names: str) -> list[str]:
        for name in names:
            self.upload(f"d/{name}")
        return self.paths(*names)

    def paths(self, *names: str) -> list[str]:
        return [f"{self.head}d/{name}" for name in names]

    def remaining(self) -> set[str]:
        return {self.head + key for key in self.keys()}


def _gcs(endpoint: str) -> Store:
    bucket = client_from_properties(gcs_props(endpoint)).create_bucket(f"test-{uuid.uuid4().hex[:12]}")
    return Store(
        endpoint,
        f"gs://{bucket.name}/",
        lambda url: GcsStorage(client_from_properties(gcs_props(url)), max_attempts=3, backoff_seconds=0),
        lambda key: bucket.blob(key).upload_from_string(b"x"),
        lambda: [b.name for b in bucket.list_blobs()],
        gcs_refusal,
        429,
        lambda status: f"{status}: {GCS_REFUSALS[status]}",
    )


def _azure_service(url: str) -> Any:
    from azure.storage.blob import BlobServiceClient

    return BlobServiceClient.from_connection_string(azure_props(f"{url}/{AZURITE_ACCOUNT}")["adls.connection-string"])


def _azure(endpoint: str) -> Store:
    name = f"test-{uuid.uuid4().hex[:12]}"
    container = _azure_service(endpoint).create_container(name)
    return Store(
        endpoint,
        f"abfs://{name}@{AZURITE_ACCOUNT}.dfs.core.windows.net/",
        lambda url: AzureStorage(_azure_service(url), max_attempts=3, backoff_seconds=0),
        lambda key: container.upload_blob(key, b"x"),
        lambda: [b.name for b in container.list_blobs()],
        azure_refusal,
        503,
        lambda status: "{}: {}".format(*AZURE_REFUSALS[status]),
    )


def _azurite() -> str:
    return service("TEST_AZURITE_BLOB_ENDPOINT").removesuffix(f"/{AZURITE_ACCOUNT}")


@pytest.fixture(params=[pytest.param("gcs", marks=pytest.mark.gcs), pytest.param("azure", marks=pytest.mark.azure)])
def store(request: pytest.FixtureRequest) -> Store:
    return _gcs(service("TEST_GCS_ENDPOINT")) if request.param == "gcs" else _azure(_azurite())


def test_refused_deletes_fail_and_the_rest_of_their_batch_is_deleted(store: Store) -> None:
    a, denied, busy, b = store.put("a", "denied", "busy", "b")
    (gone,) = store.paths("gone")  # never there: 404, which counts as deleted
    # Refused once each: a 403 is final (sent again, it would go through); a throttled delete is sent again alone.
    with BatchFaults(store.endpoint, {"denied": [403], "busy": [store.throttle]}, store.refusal) as proxy:
        outcome = store.storage(proxy.url).delete_files([a, denied, busy, b, gone], max_concurrency=2)
    assert outcome.deleted == [a, b, gone, busy]
    assert outcome.failed == [(denied, store.refused(403))]
    assert outcome.requests == 2
    assert proxy.batches == [["a", "denied", "busy", "b", "gone"], ["busy"]]
    assert store.remaining() == {denied}


def test_a_delete_throttled_at_every_attempt_fails_with_the_stores_error(store: Store) -> None:
    a, busy = store.put("a", "busy")
    with BatchFaults(store.endpoint, {"busy": [store.throttle] * 3}, store.refusal) as proxy:
        outcome = store.storage(proxy.url).delete_files([a, busy], max_concurrency=1)
    assert outcome.deleted == [a]
    assert outcome.failed == [(busy, f"{store.refused(store.throttle)} (still failing after 3 attempts)")]
    assert outcome.requests == 3
    assert proxy.batches == [["a", "busy"], ["busy"], ["busy"]]
    assert store.remaining() == {busy}


def test_a_delete_of_a_file_already_gone_counts_as_deleted(store: Store) -> None:
    (a,) = store.put("a")
    (gone,) = store.paths("gone")
    outcome = store.storage(store.endpoint).delete_files([gone, a], max_concurrency=1)
    assert (outcome.deleted, outcome.failed, outcome.requests) == ([gone, a], [], 1)
    assert store.remaining() == set()


@pytest.mark.azure
def test_azure_blob_under_a_lease_fails_and_the_rest_of_its_batch_is_deleted() -> None:
    store = _azure(_azurite())
    a, leased, b = store.put("a", "leased", "b")
    (gone,) = store.paths("gone")
    container = _azure_service(store.endpoint).get_container_client(store.head[len("abfs://") :].partition("@")[0])
    container.get_blob_client("d/leased").acquire_lease(-1)  # an infinite lease: a real refusal, 412
    outcome = store.storage(store.endpoint).delete_files([a, leased, b, gone], max_concurrency=1)
    assert outcome.deleted == [a, b, gone]
    assert outcome.failed == [(leased, LEASED)]
    assert outcome.requests == 1  # 412 is final: not sent again
    assert store.remaining() == {leased}


@pytest.mark.gcs
def test_gcs_batch_reply_the_client_cannot_read_is_settled_key_by_key() -> None:
    # fake-gcs-server answers the client's batch with a multipart reply of no parts, and deletes nothing:
    # each key is then deleted with a request of its own (a key already gone is no error).
    store = _gcs(service("TEST_FAKE_GCS_ENDPOINT"))
    a, b = store.put("a", "b")
    (gone,) = store.paths("gone")
    outcome = store.storage(store.endpoint).delete_files([a, gone, b], max_concurrency=1)
    assert (outcome.deleted, outcome.failed) == ([a, gone, b], [])
    assert outcome.requests == 4  # the batch, then one delete a key
    assert store.remaining() == set()
