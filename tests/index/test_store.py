"""Index discovery and atomic commits (S6), on the local disk and on the S3, GCS and Azure emulators."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField, StringType

from airflow_iceberg_maint.errors import (
    IndexCommitConflictError,
    IndexExistsError,
    IndexNotFoundError,
    InvalidInputError,
)
from airflow_iceberg_maint.fs.adls import AzureStorage
from airflow_iceberg_maint.fs.gcs import GcsStorage
from airflow_iceberg_maint.fs.local import LocalStorage
from airflow_iceberg_maint.fs.s3 import S3Storage
from airflow_iceberg_maint.index.metadata.builders import new_extract, new_index_metadata, with_extract_schema_for
from airflow_iceberg_maint.index.metadata.model import IndexMetadata
from airflow_iceberg_maint.index.metadata.store import IndexStore

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType(), required=False))
WORKERS = 4
COMMITS_PER_WORKER = 6


def make_table(catalog: SqlCatalog) -> Table:
    table = catalog.create_table("db.events", SCHEMA)
    table.append(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]}))
    return table


def create_index(table: Table, name: str = "by_id", **properties: str) -> IndexStore:
    store = IndexStore(table)
    store.create(new_index_metadata(table, name, ["bucket(8, id)", "id"], [], True, dict(properties)), name)
    return store


def add_extract(table: Table, tracking: str) -> Any:
    snapshot_id = table.current_snapshot().snapshot_id

    def update(metadata: IndexMetadata) -> IndexMetadata:
        metadata, schema_id = with_extract_schema_for(metadata, table.metadata, snapshot_id)
        return metadata.with_extract(new_extract(metadata, snapshot_id, schema_id, tracking, 10))

    return update


def tracking_files(metadata: IndexMetadata) -> list[str]:
    return [e.tracking_file for e in metadata.extracts]


def version_names(store: IndexStore, name: str = "by_id") -> list[str]:
    return [loc.rsplit("/", 1)[1] for _, loc in sorted(store.versions(name).items())]


# Discovery and creation


def test_create_then_load_names_and_layout(sqlite_catalog: SqlCatalog) -> None:
    table = make_table(sqlite_catalog)
    store = IndexStore(table)
    metadata = new_index_metadata(table, "by_id", ["id"], [], False, {})
    location = store.create(metadata, "by_id")

    assert location == f"{table.location()}/index/by_id/metadata/00001.metadata.json"
    assert store.names() == ["by_id"]
    loaded, loaded_location, version = store.load("by_id")
    assert (loaded, loaded_location, version) == (metadata, location, 1)
    assert isinstance(store.files, LocalStorage)


def test_create_twice_fails_and_changes_nothing(sqlite_catalog: SqlCatalog) -> None:
    table = make_table(sqlite_catalog)
    store = create_index(table)
    before = store.load("by_id")

    with pytest.raises(IndexExistsError, match=r"^index 'by_id': already exists on table "):
        store.create(new_index_metadata(table, "by_id", ["id"], [], False, {}), "by_id")
    assert store.load("by_id") == before
    assert version_names(store) == ["00001.metadata.json"]


def test_unknown_index_and_bad_names(sqlite_catalog: SqlCatalog) -> None:
    table = make_table(sqlite_catalog)
    store = IndexStore(table)
    assert store.names() == []
    with pytest.raises(IndexNotFoundError, match=r"^index 'nope': table '.*' has no such index$"):
        store.load("nope")
    for bad in ("../x", ".hidden", "a/b", ""):
        with pytest.raises(InvalidInputError, match=re.escape(f"index name {bad!r}")):
            store.index_dir(bad)


def test_directory_without_metadata_is_not_an_index(sqlite_catalog: SqlCatalog) -> None:
    table = make_table(sqlite_catalog)
    store = create_index(table)
    stray = f"{table.location()}/index/leftover/data/region-x.parquet".removeprefix("file://")
    os.makedirs(os.path.dirname(stray))
    open(stray, "wb").close()
    assert store.names() == ["by_id"]


# Commits


def test_commit_writes_next_version_with_metadata_log(sqlite_catalog: SqlCatalog) -> None:
    table = make_table(sqlite_catalog)
    store = create_index(table)
    first, first_location, _ = store.load("by_id")

    committed, location = store.commit("by_id", add_extract(table, "file:///t/tracking-1.parquet"))

    assert location.endswith("/index/by_id/metadata/00002.metadata.json")
    assert store.load("by_id") == (committed, location, 2)
    assert tracking_files(committed) == ["file:///t/tracking-1.parquet"]
    assert [(e.metadata_file, e.timestamp_ms) for e in committed.metadata_log] == [
        (first_location, first.last_updated_ms)
    ]
    assert committed.last_updated_ms > first.last_updated_ms
    # The file on disk is exactly the committed JSON.
    with open(location.removeprefix("file://"), "rb") as f:
        assert json.load(f) == committed.to_json()


def test_previous_versions_max_and_delete_after_commit(sqlite_catalog: SqlCatalog) -> None:
    table = make_table(sqlite_catalog)
    store = create_index(
        table,
        **{"write.metadata.previous-versions-max": "2", "write.metadata.delete-after-commit.enabled": "true"},
    )
    for i in range(5):
        store.commit("by_id", add_extract(table, f"file:///t/tracking-{i}.parquet"))

    metadata, _, version = store.load("by_id")
    assert version == 6
    assert [e.metadata_file.rsplit("/", 1)[1] for e in metadata.metadata_log] == [
        "00004.metadata.json",
        "00005.metadata.json",
    ]
    assert version_names(store) == ["00004.metadata.json", "00005.metadata.json", "00006.metadata.json"]


def test_previous_versions_max_without_delete_keeps_files(sqlite_catalog: SqlCatalog) -> None:
    table = make_table(sqlite_catalog)
    store = create_index(table, **{"write.metadata.previous-versions-max": "1"})
    for i in range(3):
        store.commit("by_id", add_extract(table, f"file:///t/tracking-{i}.parquet"))

    metadata, _, _ = store.load("by_id")
    assert [e.metadata_file.rsplit("/", 1)[1] for e in metadata.metadata_log] == ["00003.metadata.json"]
    assert version_names(store) == [f"0000{v}.metadata.json" for v in range(1, 5)]


def test_update_may_not_change_the_definition(sqlite_catalog: SqlCatalog) -> None:
    table = make_table(sqlite_catalog)
    store = create_index(table)

    with pytest.raises(InvalidInputError, match=r"^commit to index 'by_id': ordering-key is fixed at creation$"):
        store.commit("by_id", lambda m: replace(m, ordering_key=(1,)))
    with pytest.raises(InvalidInputError, match=r"^properties\.commit\.retry\.num-retries: expected an integer"):
        store.commit("by_id", lambda m: replace(m, properties={"commit.retry.num-retries": "many"}))
    assert version_names(store) == ["00001.metadata.json"]


def test_update_error_writes_nothing(sqlite_catalog: SqlCatalog) -> None:
    table = make_table(sqlite_catalog)
    store = create_index(table)

    def failing(_: IndexMetadata) -> IndexMetadata:
        raise RuntimeError("build failed")

    with pytest.raises(RuntimeError, match=r"^build failed$"):
        store.commit("by_id", failing)
    assert version_names(store) == ["00001.metadata.json"]


def test_loser_reapplies_on_top_of_the_winner(sqlite_catalog: SqlCatalog) -> None:
    table = make_table(sqlite_catalog)
    store = create_index(table)
    rival = IndexStore(sqlite_catalog.load_table("db.events"))
    calls: list[int] = []
    mine = add_extract(table, "file:///t/mine.parquet")

    def racing(metadata: IndexMetadata) -> IndexMetadata:
        calls.append(len(metadata.extracts))
        if len(calls) == 1:  # a concurrent writer commits between our read and our write
            rival.commit("by_id", add_extract(table, "file:///t/rival.parquet"))
        return mine(metadata)

    committed, location = store.commit("by_id", racing)

    assert calls == [0, 1]
    assert location.endswith("/00003.metadata.json")
    assert tracking_files(committed) == ["file:///t/rival.parquet", "file:///t/mine.parquet"]
    assert [e.metadata_file.rsplit("/", 1)[1] for e in committed.metadata_log] == [
        "00001.metadata.json",
        "00002.metadata.json",
    ]


def test_loser_gives_up_after_max_attempts(sqlite_catalog: SqlCatalog) -> None:
    table = make_table(sqlite_catalog)
    store = create_index(table)
    rival = IndexStore(sqlite_catalog.load_table("db.events"))
    mine = add_extract(table, "file:///t/mine.parquet")

    def always_loses(metadata: IndexMetadata) -> IndexMetadata:
        rival.commit("by_id", add_extract(table, f"file:///t/rival-{len(metadata.extracts)}.parquet"))
        return mine(metadata)

    with pytest.raises(
        IndexCommitConflictError,
        match=r"^index 'by_id': commit lost to concurrent writers 3 time\(s\); nothing was committed$",
    ):
        store.commit("by_id", always_loses, max_attempts=3)

    final, _, version = store.load("by_id")
    assert version == 4
    assert tracking_files(final) == [f"file:///t/rival-{i}.parquet" for i in range(3)]


def test_malformed_metadata_file_is_named(sqlite_catalog: SqlCatalog) -> None:
    table = make_table(sqlite_catalog)
    store = create_index(table)
    metadata, _, _ = store.load("by_id")
    broken = metadata.to_json()
    broken["ordering-key"] = []
    path = store.version_location("by_id", 2)
    with open(path.removeprefix("file://"), "w") as f:
        json.dump(broken, f)

    expected = rf"^index metadata {re.escape(path)}: ordering-key: must not be empty$"
    with pytest.raises(InvalidInputError, match=expected):
        store.load("by_id")


def test_metadata_of_another_table_is_refused(sqlite_catalog: SqlCatalog) -> None:
    table = make_table(sqlite_catalog)
    store = create_index(table)
    metadata, _, _ = store.load("by_id")
    foreign = replace(metadata, table_uuid="00000000-0000-4000-8000-000000000000")
    path = store.version_location("by_id", 2)
    with open(path.removeprefix("file://"), "wb") as f:
        f.write(foreign.to_bytes())

    with pytest.raises(InvalidInputError, match=r"table-uuid: 00000000-0000-4000-8000-000000000000 is not the table"):
        store.load("by_id")


def test_metadata_of_another_index_directory_is_refused(sqlite_catalog: SqlCatalog) -> None:
    table = make_table(sqlite_catalog)
    store = create_index(table)
    metadata, _, _ = store.load("by_id")
    moved = replace(metadata, location=f"{table.location()}/index/other")
    path = store.version_location("by_id", 2)
    with open(path.removeprefix("file://"), "wb") as f:
        f.write(moved.to_bytes())

    expected = rf"^index metadata {re.escape(path)}: location '.*/index/other' is not the index directory$"
    with pytest.raises(InvalidInputError, match=expected):
        store.load("by_id")


# Concurrent commits from several processes


def _commit_worker(catalog_props: Mapping[str, str], worker: int, commits: int, barrier: Any, results: Any) -> None:
    catalog = SqlCatalog("default", **catalog_props)
    table = catalog.load_table("db.events")
    store = IndexStore(table)
    barrier.wait()
    for i in range(commits):
        store.commit("by_id", add_extract(table, f"{table.location()}/tracking-{worker}-{i}.parquet"), max_attempts=200)
    results.put(worker)


def run_concurrent_commits(catalog: SqlCatalog, catalog_props: Mapping[str, str]) -> None:
    table = make_table(catalog)
    store = create_index(table)
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(WORKERS)
    results = ctx.Queue()
    processes = [
        ctx.Process(target=_commit_worker, args=(dict(catalog_props), w, COMMITS_PER_WORKER, barrier, results))
        for w in range(WORKERS)
    ]
    for p in processes:
        p.start()
    for p in processes:
        p.join(timeout=240)
    assert [p.exitcode for p in processes] == [0] * WORKERS
    assert sorted(results.get(timeout=5) for _ in range(WORKERS)) == list(range(WORKERS))

    total = WORKERS * COMMITS_PER_WORKER
    final, _, version = store.load("by_id")
    # No lost extract: every commit of every worker is in the final metadata, exactly once.
    expected = {
        f"{table.location()}/tracking-{w}-{i}.parquet" for w in range(WORKERS) for i in range(COMMITS_PER_WORKER)
    }
    assert sorted(tracking_files(final)) == sorted(expected)
    # Linear history: versions 1..N+1 all exist, each one's log ends with its predecessor,
    # and each version holds exactly its predecessor's extracts plus one.
    versions = store.versions("by_id")
    assert version == total + 1
    assert sorted(versions) == list(range(1, total + 2))
    previous: IndexMetadata | None = None
    for v in range(1, total + 2):
        metadata = store.read_metadata(versions[v])
        if previous is not None:
            assert metadata.metadata_log[-1].metadata_file == versions[v - 1]
            assert metadata.extracts[:-1] == previous.extracts
        previous = metadata


def test_concurrent_commits_from_several_processes(sqlite_catalog: SqlCatalog, tmp_path: Any, warehouse: Any) -> None:
    run_concurrent_commits(
        sqlite_catalog, {"uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{warehouse}"}
    )


# The same on the S3-protocol server


@pytest.mark.s3
def test_s3_create_commit_and_conditional_write(s3_catalog: SqlCatalog) -> None:
    table = make_table(s3_catalog)
    store = create_index(table)
    assert isinstance(store.files, S3Storage)
    assert store.names() == ["by_id"]
    with pytest.raises(IndexExistsError):
        store.create(new_index_metadata(table, "by_id", ["id"], [], False, {}), "by_id")

    committed, location = store.commit("by_id", add_extract(table, f"{table.location()}/tracking-1.parquet"))
    assert location == f"{table.location()}/index/by_id/metadata/00002.metadata.json"
    assert store.load("by_id") == (committed, location, 2)
    # If-None-Match: * refuses to replace an existing version.
    assert store.files.create_exclusive(location, b"{}") is False
    assert store.load("by_id")[0] == committed


@pytest.mark.s3
def test_s3_loser_gives_up_after_max_attempts(s3_catalog: SqlCatalog) -> None:
    table = make_table(s3_catalog)
    store = create_index(table)
    rival = IndexStore(s3_catalog.load_table("db.events"))
    mine = add_extract(table, "s3://x/mine.parquet")

    def always_loses(metadata: IndexMetadata) -> IndexMetadata:
        rival.commit("by_id", add_extract(table, f"s3://x/rival-{len(metadata.extracts)}.parquet"))
        return mine(metadata)

    with pytest.raises(IndexCommitConflictError, match=r"commit lost to concurrent writers 2 time\(s\)"):
        store.commit("by_id", always_loses, max_attempts=2)
    assert tracking_files(store.load("by_id")[0]) == ["s3://x/rival-0.parquet", "s3://x/rival-1.parquet"]


@pytest.mark.s3
def test_s3_previous_versions_max_and_delete_after_commit(s3_catalog: SqlCatalog) -> None:
    table = make_table(s3_catalog)
    store = create_index(
        table,
        **{"write.metadata.previous-versions-max": "1", "write.metadata.delete-after-commit.enabled": "true"},
    )
    for i in range(3):
        store.commit("by_id", add_extract(table, f"s3://x/tracking-{i}.parquet"))
    assert version_names(store) == ["00003.metadata.json", "00004.metadata.json"]


@pytest.mark.s3
def test_s3_concurrent_commits_from_several_processes(
    s3_catalog: SqlCatalog, s3_endpoint: str, s3_bucket: str, tmp_path: Any
) -> None:
    from tests.support.services import S3_PROPS

    run_concurrent_commits(
        s3_catalog,
        {
            "uri": f"sqlite:///{tmp_path}/catalog.db",
            "warehouse": f"s3://{s3_bucket}/warehouse",
            "s3.endpoint": s3_endpoint,
            **S3_PROPS,
        },
    )


# The same on GCS (fake-gcs-server: gcp-storage-emulator ignores ifGenerationMatch) and Azure (Azurite)

CLOUD_BACKENDS = pytest.mark.parametrize(
    ("backend", "files_type"),
    [("fake_gcs_catalog_config", GcsStorage), ("azure_catalog_config", AzureStorage)],
    ids=["gcs", "azure"],
)


@CLOUD_BACKENDS
def test_cloud_create_commit_and_conditional_write(request: Any, backend: str, files_type: type) -> None:
    catalog, _ = request.getfixturevalue(backend)
    table = make_table(catalog)
    store = create_index(table)
    assert isinstance(store.files, files_type)
    assert store.names() == ["by_id"]
    with pytest.raises(IndexExistsError):
        store.create(new_index_metadata(table, "by_id", ["id"], [], False, {}), "by_id")
    committed, location = store.commit("by_id", add_extract(table, f"{table.location()}/tracking-1.parquet"))
    assert location == f"{table.location()}/index/by_id/metadata/00002.metadata.json"
    assert store.load("by_id") == (committed, location, 2)
    assert store.files.create_exclusive(location, b"{}") is False  # never replaces an existing version
    assert store.load("by_id")[0] == committed


@CLOUD_BACKENDS
def test_cloud_two_writers_creating_one_object_exactly_one_wins(request: Any, backend: str, files_type: type) -> None:
    catalog, _ = request.getfixturevalue(backend)
    store = IndexStore(make_table(catalog))
    writers = 2
    for round_ in range(10):
        location = f"{store.root}/race/{round_:05d}.metadata.json"
        barrier = threading.Barrier(writers)

        def create(writer: int, location: str = location, barrier: threading.Barrier = barrier) -> bool:
            barrier.wait()
            return store.files.create_exclusive(location, f"writer-{writer}".encode())

        with ThreadPoolExecutor(writers) as pool:
            won = list(pool.map(create, range(writers)))
        assert won.count(True) == 1, won
        assert store.files.read(location) == f"writer-{won.index(True)}".encode()


@CLOUD_BACKENDS
def test_cloud_concurrent_commits_from_several_processes(request: Any, backend: str, files_type: type) -> None:
    catalog, config = request.getfixturevalue(backend)
    run_concurrent_commits(catalog, config)
