"""``health``'s statistics on real tables: every number against what pyiceberg's ``inspect`` tables, the files on
disk and the tables' own construction say."""

from __future__ import annotations

from datetime import UTC, datetime

from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint import table_health
from tests.expiry.history import build_history
from tests.health.tables import (
    SCHEMA,
    live_data_files,
    manifests_on_record,
    metadata_files_on_disk,
    partitioned_table,
)
from tests.index.row_deletes import commit_deletion_vector, commit_position_deletes

KIB, MIB, GIB = 2**10, 2**20, 2**30
UPPERS = [64 * KIB, MIB, 16 * MIB, 64 * MIB, 128 * MIB, 256 * MIB, 512 * MIB, GIB, None]


def _histogram(*files: int) -> list[dict[str, int | None]]:
    return [{"upper_bytes": upper, "files": n} for upper, n in zip(UPPERS, [*files, 0, 0, 0, 0, 0, 0, 0], strict=False)]


def test_counts_sizes_histogram_and_small_files_of_a_partitioned_table(sqlite_catalog: SqlCatalog) -> None:
    table = partitioned_table(sqlite_catalog)
    files = live_data_files(table)
    sizes = sorted(files.values())
    assert len(sizes) == 4 and sizes[-1] > 64 * KIB and sizes[2] < 64 * KIB and sizes[-1] <= MIB
    manifests = manifests_on_record(table)
    snapshots = table.metadata.snapshots

    body = table_health("db.parts", catalog=sqlite_catalog).to_json()

    assert body["table"] == "db.parts"
    assert body["snapshot_id"] == table.metadata.current_snapshot_id
    assert body["data_files"] == 4
    assert body["data_bytes"] == sum(sizes)
    assert body["data_rows"] == 2008
    assert body["file_size_histogram"] == _histogram(3, 1)
    assert body["small_data_files"] == 4  # all below 75% of 512 MiB
    assert body["delete_files"] == {"position": 0, "equality": 0, "deletion_vector": 0}
    assert body["deleted_rows"] == 0
    assert body["snapshots"] == 3
    oldest = datetime.fromtimestamp(min(s.timestamp_ms for s in snapshots) / 1000, UTC)
    assert body["oldest_snapshot_at"] == oldest.isoformat()
    assert (body["manifests"], body["manifest_bytes"]) == (len(manifests), sum(manifests.values()))
    assert body["manifests"] == 3
    assert body["metadata_files"] == metadata_files_on_disk(table) == 4  # created, then three appends
    assert (body["expirable_snapshots"], body["expirable_bytes"]) == (0, 0)  # none older than 5 days
    assert body["partition_count"] == 3
    by_partition = {p["partition"]: p for p in body["partitions"]}
    assert {k: (v["data_files"], v["small_data_files"], v["data_rows"]) for k, v in by_partition.items()} == {
        "region=a": (2, 2, 5),
        "region=b": (1, 1, 3),
        "region=c": (1, 1, 2000),
    }
    # Two small files share partition a (b's and c's are alone): 25 x 2/4 = 12.5, rounded half up.
    assert body["deductions"] == [
        {"cause": "2 of 4 data files are small and share a partition", "points": 13, "remedy": "rewrite-data-files"}
    ]
    assert body["score"] == 87

    # A target of the large file's size: it is no longer below 75% of it, the three others are.
    sized = table_health("db.parts", catalog=sqlite_catalog, target_file_size_bytes=sizes[-1]).to_json()
    assert sized["small_data_files"] == 3 and sized["target_file_size_bytes"] == sizes[-1]
    assert table_health("db.parts", catalog=sqlite_catalog, target_file_size_bytes=1).to_json()["small_data_files"] == 0


def test_delete_files_of_each_kind_and_the_rows_they_delete(sqlite_catalog: SqlCatalog) -> None:
    history = build_history(sqlite_catalog)  # position deletes of 2 rows, an equality delete of 1, a DV of 1
    deletes = history.table.inspect.delete_files().to_pylist()
    assert len(deletes) == 3

    body = table_health(history.table).to_json()

    assert body["delete_files"] == {"position": 1, "equality": 1, "deletion_vector": 1}
    assert body["deleted_rows"] == 4 == sum(d["record_count"] for d in deletes)
    assert body["delete_bytes"] == sum(d["file_size_in_bytes"] for d in deletes)
    assert body["data_files"] == len(live_data_files(history.table))


def test_delete_ratio_per_partition(sqlite_catalog: SqlCatalog) -> None:
    table = partitioned_table(sqlite_catalog)
    by_region = {p.split("/region=")[-1][0]: p for p in live_data_files(table)}
    a_first = sorted(p for p in live_data_files(table) if "region=a" in p)[0]
    commit_position_deletes(table, {by_region["b"]: [0]})
    commit_deletion_vector(table, a_first, [0, 1])

    body = table_health(table).to_json()

    assert body["delete_files"] == {"position": 1, "equality": 0, "deletion_vector": 1}
    assert body["deleted_rows"] == 3
    parts = {p["partition"]: (p["delete_files"], p["deleted_rows"], p["delete_ratio"]) for p in body["partitions"]}
    assert parts == {"region=a": (1, 2, 0.4), "region=b": (1, 1, round(1 / 3, 6)), "region=c": (0, 0, 0.0)}
    # 3 of 2,008 rows deleted: 50 x 3/2008 rounds to 0 points, so no deduction for deletes.
    assert [d["remedy"] for d in body["deductions"]] == ["rewrite-data-files"]


def test_an_empty_table_is_healthy(sqlite_catalog: SqlCatalog) -> None:
    body = table_health(sqlite_catalog.create_table("db.empty", schema=SCHEMA)).to_json()
    assert body["snapshot_id"] is None and body["oldest_snapshot_at"] is None
    assert (body["data_files"], body["manifests"], body["snapshots"], body["metadata_files"]) == (0, 0, 0, 1)
    assert (body["score"], body["deductions"]) == (100, [])
