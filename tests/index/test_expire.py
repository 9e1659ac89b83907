"""Expiring extracts: by count, by age, both; the newest is never expired; shared files survive."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField, StringType

from airflow_iceberg_maint.errors import InvalidInputError, MetadataReadError
from airflow_iceberg_maint.fs.locations import local_path
from airflow_iceberg_maint.index.format.extract_files import region_file_paths
from airflow_iceberg_maint.index.lifecycle.expire import expire_extracts
from airflow_iceberg_maint.index.metadata.builders import new_extract, new_index_metadata
from airflow_iceberg_maint.index.metadata.model import Extract, IndexMetadata
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.index.write.refresh import refresh_full
from tests.index.test_orphans_protect_index import Storage

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType(), required=False))


def three_extracts(catalog: SqlCatalog, **properties: str) -> tuple[Table, IndexStore, list[Extract]]:
    table = catalog.create_table("db.events", SCHEMA)
    store = IndexStore(table)
    store.create(new_index_metadata(table, "by_id", ["bucket(4, id)", "id"], [], True, dict(properties)), "by_id")
    extracts = []
    for start in (0, 40, 80):
        table.append(
            pa.table(
                {
                    "id": pa.array(range(start, start + 40), pa.int64()),
                    "name": pa.array([str(i) for i in range(start, start + 40)]),
                }
            )
        )
        extracts.append(refresh_full(table, "by_id").extract)
    assert len({e.timestamp_ms for e in extracts}) == 3
    return table, store, extracts


def files_of(table: Table, extract: Extract) -> set[str]:
    return {extract.tracking_file, *region_file_paths(table.io, extract.tracking_file)}


def ms_to_datetime(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def check_retain_last(table: Table, store: IndexStore, extracts: list[Extract]) -> None:
    storage = Storage(table)
    before = storage.list(store.index_dir("by_id"))
    old = files_of(table, extracts[0]) | files_of(table, extracts[1])

    result = expire_extracts(table, "by_id", retain_last=1, older_than=None)

    assert result == {
        "index": "by_id",
        "expired_extract_ids": [extracts[0].extract_id, extracts[1].extract_id],
        "deleted_files": len(old),
        "failed": [],
    }
    assert storage.list(store.index_dir("by_id")) == before - old | {store.version_location("by_id", 5)}
    metadata, _, version = store.load("by_id")
    assert (version, metadata.extracts) == (5, (extracts[2],))
    assert files_of(table, extracts[2]) <= storage.list(store.index_dir("by_id"))


def test_retain_last_deletes_the_files_of_the_expired_extracts(sqlite_catalog: SqlCatalog) -> None:
    check_retain_last(*three_extracts(sqlite_catalog))


@pytest.mark.s3
def test_s3_retain_last_deletes_the_files_of_the_expired_extracts(s3_catalog: SqlCatalog) -> None:
    check_retain_last(*three_extracts(s3_catalog))


def test_older_than_expires_only_older_extracts(sqlite_catalog: SqlCatalog) -> None:
    table, store, extracts = three_extracts(sqlite_catalog)
    cutoff = ms_to_datetime(extracts[1].timestamp_ms)  # strictly older than the second extract
    old = files_of(table, extracts[0])

    result = expire_extracts(table, "by_id", retain_last=None, older_than=cutoff)

    assert result["expired_extract_ids"] == [extracts[0].extract_id]
    assert result["deleted_files"] == len(old)
    assert not old & Storage(table).list(store.index_dir("by_id"))
    assert store.load("by_id")[0].extracts == (extracts[1], extracts[2])


def test_newest_extract_is_never_expired(sqlite_catalog: SqlCatalog) -> None:
    table, store, extracts = three_extracts(sqlite_catalog)
    result = expire_extracts(table, "by_id", retain_last=None, older_than=datetime.now(UTC))
    assert result["expired_extract_ids"] == [extracts[0].extract_id, extracts[1].extract_id]
    assert store.load("by_id")[0].extracts == (extracts[2],)

    again = expire_extracts(table, "by_id", retain_last=1, older_than=datetime.now(UTC))
    assert again == {"index": "by_id", "expired_extract_ids": [], "deleted_files": 0, "failed": []}
    assert store.load("by_id")[2] == 5  # nothing to expire: no new metadata version


def test_retain_last_and_older_than_together(sqlite_catalog: SqlCatalog) -> None:
    table, store, extracts = three_extracts(sqlite_catalog)
    result = expire_extracts(table, "by_id", retain_last=2, older_than=datetime.now(UTC))
    assert result["expired_extract_ids"] == [extracts[0].extract_id]
    assert store.load("by_id")[0].extracts == (extracts[1], extracts[2])


def test_files_still_referenced_by_a_remaining_extract_are_kept(sqlite_catalog: SqlCatalog) -> None:
    table, store, extracts = three_extracts(sqlite_catalog)
    first = extracts[0]
    # A later extract that reuses the first one's tracking file (and so its region files).
    reuse: list[Extract] = []

    def add_reuse(metadata: IndexMetadata) -> IndexMetadata:
        reuse[:] = [
            new_extract(
                metadata,
                first.source_table_snapshot_id,
                first.extract_schema_id,
                first.tracking_file,
                first.tracking_file_size_in_bytes,
            )
        ]
        return metadata.with_extract(reuse[0])

    store.commit("by_id", add_reuse)
    shared, second = files_of(table, first), files_of(table, extracts[1])
    result = expire_extracts(table, "by_id", retain_last=2, older_than=None)

    assert result["expired_extract_ids"] == [first.extract_id, extracts[1].extract_id]
    assert result["deleted_files"] == len(second)
    assert shared <= Storage(table).list(store.index_dir("by_id"))
    assert not second & Storage(table).list(store.index_dir("by_id"))


def test_unreadable_remaining_tracking_file_deletes_nothing(sqlite_catalog: SqlCatalog) -> None:
    table, store, extracts = three_extracts(sqlite_catalog)
    with open(local_path(extracts[2].tracking_file), "wb") as f:
        f.write(b"garbage")
    before = Storage(table).list(store.index_dir("by_id"))

    with pytest.raises(
        MetadataReadError,
        match=re.escape(
            f"index 'by_id': extracts {[extracts[0].extract_id]} were expired, but no file was deleted: tracking file"
        ),
    ):
        expire_extracts(table, "by_id", retain_last=2, older_than=None)
    assert Storage(table).list(store.index_dir("by_id")) == before | {store.version_location("by_id", 5)}
    assert os.path.exists(local_path(extracts[0].tracking_file))


@pytest.mark.parametrize(
    ("retain_last", "older_than", "message"),
    [
        (None, None, "expire: give --retain-last N, --older-than TIMESTAMP, or both"),
        (0, None, "--retain-last 0: must be at least 1 (the newest extract is never expired)"),
    ],
)
def test_bad_arguments_change_nothing(
    sqlite_catalog: SqlCatalog, retain_last: int | None, older_than: datetime | None, message: str
) -> None:
    table, store, _ = three_extracts(sqlite_catalog)
    with pytest.raises(InvalidInputError, match=re.escape(message)):
        expire_extracts(table, "by_id", retain_last=retain_last, older_than=older_than)
    assert store.load("by_id")[2] == 4
