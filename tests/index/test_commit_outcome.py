"""Index commits whose outcome is unknown (issue 9, item 6): files are deleted only once a commit is known lost.

On the real S3-protocol server, faults are injected with botocore event hooks on the library's
own S3 clients (the one thing mocked here: a dropped reply cannot be produced on demand
otherwise; tests/reliability drops replies for real with a TCP proxy):

- ``after-call.s3.PutObject`` raising: the conditional PUT landed, its reply is lost, no retry;
- ``before-send.s3.PutObject`` sending the request for real, then raising ``ConnectionClosedError``:
  botocore's own retry sends it again and gets 412, because the first attempt created the file;
- ``before-call.s3.DeleteObject`` / ``GetObject`` raising ``EndpointConnectionError``.

Local-disk equivalents wrap ``LocalStorage`` the same way (a SIGTERM right after the link,
a failing delete). After each fault: the extract is committed (or known lost), its files exist
(or only the loser's are gone), lookups through the index are exact, and an orphan run deletes
nothing of the index.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowTaskTerminated
from botocore.exceptions import ConnectionClosedError, EndpointConnectionError
from botocore.httpsession import URLLib3Session
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField, StringType

from airflow_iceberg_maint.errors import CommitOutcomeUnknownError, IndexCommitConflictError
from airflow_iceberg_maint.fs.local import LocalStorage
from airflow_iceberg_maint.fs.locations import Uri, local_path
from airflow_iceberg_maint.fs.s3 import S3Storage
from airflow_iceberg_maint.index.format.extract_files import region_file_paths
from airflow_iceberg_maint.index.lifecycle.expire import expire_extracts
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES
from airflow_iceberg_maint.index.metadata.builders import new_index_metadata
from airflow_iceberg_maint.index.metadata.model import IndexMetadata
from airflow_iceberg_maint.index.metadata.spec import COMMIT_NUM_RETRIES, DELETE_AFTER_COMMIT, PREVIOUS_VERSIONS_MAX
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.index.read.lookup import lookup
from airflow_iceberg_maint.index.write.refresh import refresh_full
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from tests.support.services import S3_PROPS

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType(), required=False))
INDEX = "by_id"
PROBES = [0, 7, 39, 40, 55, 79, 1000]


def rows(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table({"id": pa.array(ids, pa.int64()), "name": pa.array([f"n{i}" for i in ids])})


def indexed_table(catalog: SqlCatalog, **properties: str) -> Table:
    """A table with one committed extract, delete-after-commit on, and a newer snapshot to index."""
    table = catalog.create_table("db.events", SCHEMA)
    table.append(rows(0, 40))
    props = {DELETE_AFTER_COMMIT: "true", PREVIOUS_VERSIONS_MAX: "1", **properties}
    IndexStore(table).create(new_index_metadata(table, INDEX, ["bucket(4, id)", "id"], [], True, props), INDEX)
    refresh_full(table, INDEX)
    table.append(rows(40, 40))
    return table


def current(table: Table) -> IndexMetadata:
    return IndexStore(table).load(INDEX)[0]


def extract_files(table: Table, metadata: IndexMetadata, extract_id: int) -> set[str]:
    extract = next(e for e in metadata.extracts if e.extract_id == extract_id)
    tracking = metadata.resolve_location(extract.tracking_file)
    return {tracking, *region_file_paths(table.io, tracking, metadata.location)}


def assert_lookups_exact(table: Table) -> None:
    """Through the index (mode "index", no fallback scan), each id finds exactly the rows a scan finds."""
    everything = table.scan().to_arrow()
    for value in PROBES:
        result = lookup(table, INDEX, [(value,)])
        assert result.mode == "index", (value, result.mode)
        expected = everything.filter(pc.equal(everything["id"], value)).sort_by("name").to_pylist()
        assert result.rows.sort_by("name").to_pylist() == expected, value


def orphan_run(table: Table) -> list[str]:
    """A real orphan run with the cutoff at now; returns what it deleted."""
    report = remove_orphan_files(table, OrphanOptions(older_than=datetime.now(UTC)), sources=[INDEX_FILES])
    assert report.failed == []
    return list(report.orphan_files)


class Store:
    """Lists and checks files with a plain boto3 client on the real endpoint, or on the local disk."""

    def __init__(self, table: Table) -> None:
        self.table = table
        uri = Uri.parse(table.location())
        self.s3 = (
            None
            if uri.is_local
            else boto3.client(
                "s3",
                endpoint_url=table.io.properties["s3.endpoint"],
                aws_access_key_id=S3_PROPS["s3.access-key-id"],
                aws_secret_access_key=S3_PROPS["s3.secret-access-key"],
                region_name=S3_PROPS["s3.region"],
            )
        )

    def index_files(self) -> set[str]:
        root = f"{self.table.location().rstrip('/')}/index/"
        if self.s3 is None:
            base = local_path(root)
            found: set[str] = set()
            for directory, _, names in os.walk(base):
                found.update(f"{root}{os.path.relpath(os.path.join(directory, n), base)}" for n in names)
            return found
        uri = Uri.parse(root)
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=uri.authority, Prefix=uri.path.lstrip("/"))
        return {f"s3://{uri.authority}/{o['Key']}" for page in pages for o in page.get("Contents", [])}


class Faults:
    """botocore handlers attached to every S3 client the library creates while a test runs.

    A table's FileIO keeps its storage backend (``fs.backends.table_storage``), so a client made
    before ``on`` gets the handler too."""

    def __init__(self) -> None:
        self.handlers: list[tuple[str, Callable[..., Any]]] = []
        self.clients: list[Any] = []
        self.enabled = True

    def on(self, event: str, handler: Callable[..., Any]) -> None:
        self.handlers.append((event, handler))
        for client in self.clients:
            self._register(client, event, handler)

    def attach(self, client: Any) -> None:
        self.clients.append(client)
        for event, handler in self.handlers:
            self._register(client, event, handler)

    def _register(self, client: Any, event: str, handler: Callable[..., Any]) -> None:
        def guarded(**kwargs: Any) -> Any:
            return handler(**kwargs) if self.enabled else None

        client.meta.events.register(event, guarded)


@pytest.fixture
def faults(monkeypatch: pytest.MonkeyPatch) -> Iterator[Faults]:
    faults = Faults()
    original = S3Storage.from_properties.__func__  # type: ignore[attr-defined]

    def from_properties(cls: type[S3Storage], props: Any) -> S3Storage:
        storage: S3Storage = original(cls, props)
        faults.attach(storage.client)
        return storage

    monkeypatch.setattr(S3Storage, "from_properties", classmethod(from_properties))
    yield faults
    faults.enabled = False


def raise_times(times: int, make: Callable[[], BaseException]) -> Callable[..., None]:
    left = [times]

    def handler(**_: Any) -> None:
        if left[0] > 0:
            left[0] -= 1
            raise make()

    return handler


def closed() -> ConnectionClosedError:
    return ConnectionClosedError(endpoint_url="http://127.0.0.1/fault")


def unreachable() -> EndpointConnectionError:
    return EndpointConnectionError(endpoint_url="http://127.0.0.1/fault")


def send_then_drop(times: int) -> Callable[..., None]:
    """before-send: the request takes effect on the server, then the connection 'breaks' (botocore retries)."""
    left = [times]
    session = URLLib3Session()

    def handler(request: Any, **_: Any) -> None:
        if left[0] > 0:
            left[0] -= 1
            session.send(request).content  # noqa: B018 - read the reply fully, then drop it
            raise closed()

    return handler


def lose_put_reply_then_reads(faults: Faults) -> None:
    """The PUT lands but its reply is lost, and from then on nothing can be read back: the outcome is unknown."""
    broken = [False]

    def put_reply_lost(**_: Any) -> None:
        broken[0] = True
        raise closed()

    def get_fails(**_: Any) -> None:
        if broken[0]:
            raise unreachable()

    faults.on("after-call.s3.PutObject", put_reply_lost)
    faults.on("before-call.s3.GetObject", get_fails)


def check_committed_and_whole(table: Table, before: IndexMetadata, store: Store) -> IndexMetadata:
    """The refresh's extract is in the current metadata, once, and every file it names exists."""
    after = current(table)
    new = [e for e in after.extracts if e.extract_id not in {x.extract_id for x in before.extracts}]
    assert [e.source_table_snapshot_id for e in new] == [table.current_snapshot().snapshot_id]
    assert extract_files(table, after, new[0].extract_id) <= store.index_files()
    assert_lookups_exact(table)
    return after


# S3: the conditional PUT lands, its reply is lost


@pytest.mark.s3
def test_s3_refresh_whose_put_reply_is_lost_is_settled_as_committed(s3_catalog: SqlCatalog, faults: Faults) -> None:
    table = indexed_table(s3_catalog)
    store, before = Store(table), current(table)
    faults.on("after-call.s3.PutObject", raise_times(1, closed))

    result = refresh_full(table, INDEX)

    faults.enabled = False
    after = check_committed_and_whole(table, before, store)
    assert result.extract == after.extracts[-1]
    assert orphan_run(table) == []


@pytest.mark.s3
def test_s3_refresh_whose_retried_put_gets_412_from_its_own_first_attempt(
    s3_catalog: SqlCatalog, faults: Faults
) -> None:
    table = indexed_table(s3_catalog)
    store, before = Store(table), current(table)
    _, _, version = IndexStore(table).load(INDEX)
    faults.on("before-send.s3.PutObject", send_then_drop(1))

    result = refresh_full(table, INDEX)

    faults.enabled = False
    after = check_committed_and_whole(table, before, store)
    # One new version with one new extract: the 412 was not taken for a lost race and re-applied.
    assert IndexStore(table).load(INDEX)[2] == version + 1
    assert len(after.extracts) == len(before.extracts) + 1 and result.extract == after.extracts[-1]
    assert orphan_run(table) == []


@pytest.mark.s3
def test_s3_refresh_whose_old_metadata_delete_fails_is_committed(
    s3_catalog: SqlCatalog, faults: Faults, caplog: pytest.LogCaptureFixture
) -> None:
    table = indexed_table(s3_catalog)
    store, before = Store(table), current(table)
    versions = IndexStore(table).versions(INDEX)
    faults.on("before-call.s3.DeleteObject", raise_times(10, unreachable))

    with caplog.at_level(logging.WARNING, logger="airflow_iceberg_maint.index.metadata.store"):
        refresh_full(table, INDEX)

    faults.enabled = False
    check_committed_and_whole(table, before, store)
    stale = versions[min(versions)]  # dropped from the log (previous-versions-max 1) but not deleted
    assert stale in store.index_files()
    assert f"index metadata {stale}: not deleted after commit (Could not connect" in caplog.text
    # Numbered index metadata files are the index's own to clean: the orphan run deletes nothing.
    assert orphan_run(table) == []
    assert stale in store.index_files()


@pytest.mark.s3
def test_s3_refresh_whose_outcome_cannot_be_read_keeps_its_files(s3_catalog: SqlCatalog, faults: Faults) -> None:
    table = indexed_table(s3_catalog)
    store, before = Store(table), current(table)
    lose_put_reply_then_reads(faults)

    with pytest.raises(CommitOutcomeUnknownError, match=r"may or may not have landed .*the files it references"):
        refresh_full(table, INDEX)

    faults.enabled = False
    check_committed_and_whole(table, before, store)  # it had landed: the files it names are all there
    assert orphan_run(table) == []


@pytest.mark.s3
def test_s3_refresh_terminated_during_put_keeps_its_files(s3_catalog: SqlCatalog, faults: Faults) -> None:
    """SIGTERM in Airflow raises AirflowTaskTerminated wherever the task is: here just after the PUT landed."""
    table = indexed_table(s3_catalog)
    store, before = Store(table), current(table)
    faults.on("after-call.s3.PutObject", raise_times(1, lambda: AirflowTaskTerminated("SIGTERM")))

    with pytest.raises(AirflowTaskTerminated):
        refresh_full(table, INDEX)

    faults.enabled = False
    check_committed_and_whole(table, before, store)
    assert orphan_run(table) == []


@pytest.mark.s3
def test_s3_refresh_that_lost_to_a_concurrent_winner_deletes_only_its_own_files(
    s3_catalog: SqlCatalog, faults: Faults
) -> None:
    table = indexed_table(s3_catalog, **{COMMIT_NUM_RETRIES: "0"})
    store = Store(table)
    files_before = store.index_files()
    seen: dict[str, set[str]] = {}

    def winner_first(**_: Any) -> None:
        if "ours" in seen:
            return
        seen["ours"] = store.index_files() - files_before  # the loser's tracking and region files
        faults.enabled = False
        try:
            refresh_full(table, INDEX)  # the concurrent winner commits the version we are about to write
        finally:
            faults.enabled = True
        raise unreachable()  # our PUT never left; botocore's retry then finds the winner's file: 412

    faults.on("before-send.s3.PutObject", winner_first)

    with pytest.raises(IndexCommitConflictError, match="nothing was committed"):
        refresh_full(table, INDEX)

    faults.enabled = False
    after = current(table)
    winner = extract_files(table, after, after.extracts[-1].extract_id)
    assert seen["ours"] and not seen["ours"] & winner
    remaining = store.index_files()
    assert not seen["ours"] & remaining
    assert winner <= remaining
    assert_lookups_exact(table)
    assert orphan_run(table) == []


# S3: expire


def three_extracts(catalog: SqlCatalog) -> Table:
    table = indexed_table(catalog)
    refresh_full(table, INDEX)
    table.append(rows(80, 20))
    refresh_full(table, INDEX)
    return table


@pytest.mark.s3
def test_s3_expire_whose_put_reply_is_lost_deletes_the_expired_files(s3_catalog: SqlCatalog, faults: Faults) -> None:
    table = three_extracts(s3_catalog)
    store, before = Store(table), current(table)
    expired_ids = [e.extract_id for e in before.extracts[:2]]
    doomed = set().union(*(extract_files(table, before, i) for i in expired_ids))
    kept = extract_files(table, before, before.extracts[2].extract_id)
    faults.on("before-send.s3.PutObject", send_then_drop(1))

    result = expire_extracts(table, INDEX, retain_last=1, older_than=None)

    faults.enabled = False
    assert result["expired_extract_ids"] == expired_ids
    assert result["deleted_files"] == len(doomed - kept) and result["failed"] == []
    assert [e.extract_id for e in current(table).extracts] == [before.extracts[2].extract_id]
    remaining = store.index_files()
    assert not (doomed - kept) & remaining and kept <= remaining
    assert_lookups_exact(table)
    assert orphan_run(table) == []


@pytest.mark.s3
def test_s3_expire_whose_outcome_cannot_be_read_deletes_nothing(s3_catalog: SqlCatalog, faults: Faults) -> None:
    table = three_extracts(s3_catalog)
    store, before = Store(table), current(table)
    all_extract_files = set().union(*(extract_files(table, before, e.extract_id) for e in before.extracts))
    lose_put_reply_then_reads(faults)

    with pytest.raises(CommitOutcomeUnknownError, match=r"^expire: no file was deleted: index 'by_id': the commit"):
        expire_extracts(table, INDEX, retain_last=1, older_than=None)

    faults.enabled = False
    assert all_extract_files <= store.index_files()
    assert_lookups_exact(table)


# Local disk


def test_local_refresh_terminated_right_after_the_link_keeps_its_files(
    sqlite_catalog: SqlCatalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = indexed_table(sqlite_catalog)
    store, before = Store(table), current(table)
    real = LocalStorage.create_exclusive

    def then_sigterm(self: LocalStorage, location: str, data: bytes) -> bool:
        real(self, location, data)
        raise AirflowTaskTerminated("SIGTERM")

    monkeypatch.setattr(LocalStorage, "create_exclusive", then_sigterm)
    with pytest.raises(AirflowTaskTerminated):
        refresh_full(table, INDEX)
    monkeypatch.setattr(LocalStorage, "create_exclusive", real)

    check_committed_and_whole(table, before, store)
    assert orphan_run(table) == []


def test_local_refresh_whose_old_metadata_delete_fails_is_committed(
    sqlite_catalog: SqlCatalog, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    table = indexed_table(sqlite_catalog)
    store, before = Store(table), current(table)
    versions = IndexStore(table).versions(INDEX)

    def refuse(self: LocalStorage, location: str) -> None:
        raise PermissionError(13, "Permission denied", location)

    monkeypatch.setattr(LocalStorage, "delete", refuse)
    with caplog.at_level(logging.WARNING, logger="airflow_iceberg_maint.index.metadata.store"):
        refresh_full(table, INDEX)
    monkeypatch.undo()

    check_committed_and_whole(table, before, store)
    stale = versions[min(versions)]
    assert f"index metadata {stale}: not deleted after commit" in caplog.text
    assert stale in store.index_files()
    assert orphan_run(table) == []


def test_local_refresh_that_lost_to_a_concurrent_winner_deletes_only_its_own_files(
    sqlite_catalog: SqlCatalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = indexed_table(sqlite_catalog, **{COMMIT_NUM_RETRIES: "0"})
    store = Store(table)
    files_before = store.index_files()
    real = LocalStorage.create_exclusive
    seen: dict[str, set[str]] = {}

    def winner_first(self: LocalStorage, location: str, data: bytes) -> bool:
        if "ours" not in seen:
            seen["ours"] = store.index_files() - files_before
            monkeypatch.setattr(LocalStorage, "create_exclusive", real)
            refresh_full(table, INDEX)
        return real(self, location, data)

    monkeypatch.setattr(LocalStorage, "create_exclusive", winner_first)
    with pytest.raises(IndexCommitConflictError, match="nothing was committed"):
        refresh_full(table, INDEX)

    after = current(table)
    winner = extract_files(table, after, after.extracts[-1].extract_id)
    remaining = store.index_files()
    assert seen["ours"] and not seen["ours"] & winner
    assert not seen["ours"] & remaining and winner <= remaining
    assert_lookups_exact(table)
    assert orphan_run(table) == []


# Airflow operators


def test_operators_retry_a_commit_of_unknown_outcome() -> None:
    from airflow_iceberg_maint.airflow.task_errors import task_exception

    error = task_exception("table db.t index by_id", CommitOutcomeUnknownError("may or may not have landed"))
    assert type(error) is AirflowException and not isinstance(error, AirflowFailException)
    assert str(error) == "table db.t index by_id: may or may not have landed"
