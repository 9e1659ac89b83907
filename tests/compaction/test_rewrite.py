"""rewrite-data-files on real tables: rows identical before and after (pyiceberg's own scan), older snapshots
unchanged, ``replace`` snapshots, files of the target size, nothing left to do after one run."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation
from pyiceberg.transforms import BucketTransform

from airflow_iceberg_maint import InvalidInputError, plan_data_rewrite, rewrite_data_files
from airflow_iceberg_maint.compaction import writer
from airflow_iceberg_maint.compaction.snapshot import check_format
from tests.compaction.helpers import BY_DAY, MB, SCHEMA, append_files, create, data_files, delete_files, scanned
from tests.index.row_deletes import commit_position_deletes

CATALOGS = ["sqlite_catalog", "pg_catalog", "s3_catalog"]


def _snapshots(table: Table) -> dict[int, Counter[tuple[Any, ...]]]:
    """The rows of the first, a middle and the last snapshot (every snapshot is read the same way)."""
    snapshots = table.snapshots()
    chosen = {snapshots[0].snapshot_id, snapshots[len(snapshots) // 2].snapshot_id, snapshots[-1].snapshot_id}
    return {sid: scanned(table, sid) for sid in chosen}


def _check_sizes(table: Table, target: int) -> list[int]:
    """Every written file but the smallest of each partition is within 20% of the target."""
    by_partition: dict[str, list[int]] = {}
    for f in data_files(table):
        by_partition.setdefault(str(f["partition"]), []).append(f["file_size_in_bytes"])
    for sizes in by_partition.values():
        for size in sorted(sizes)[1:]:
            assert 0.8 * target <= size <= 1.2 * target, (size, target)
    return sorted(s for sizes in by_partition.values() for s in sizes)


@pytest.mark.parametrize("backend", CATALOGS)
def test_binpack_keeps_every_row_and_every_snapshot(backend: str, request: pytest.FixtureRequest) -> None:
    catalog: Catalog = request.getfixturevalue(backend)
    rng = random.Random(7)
    target = MB // 4
    table = append_files(create(catalog, "t", partitioned=True, target=target), rng, 12, 4000, [1, None])
    victims = {f["file_path"]: [0, 3, 7] for f in data_files(table)[:5]}
    table = commit_position_deletes(table, victims)
    before, history = scanned(table), _snapshots(table)
    report = rewrite_data_files(table, dry_run=False)
    table = catalog.load_table("db.t")
    assert scanned(table) == before
    assert {sid: scanned(table, sid) for sid in history} == history
    snapshot = table.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    assert report.commits and all(
        table.snapshot_by_id(s).summary.operation == Operation.REPLACE for s in report.commits
    )
    assert report.rewritten_data_files == 24 and report.failed == []
    assert report.removed_delete_files == 2 and delete_files(table) == []  # one position delete file a partition
    sizes = _check_sizes(table, target)
    assert len(sizes) >= 4  # files of the target size in each partition, and a smaller last one
    assert report.added_data_files == len(sizes) and report.added_bytes == sum(sizes)
    again = rewrite_data_files(table, dry_run=False)
    assert again.groups == [] and again.commits == [] and catalog.load_table("db.t").current_snapshot() == snapshot


def test_a_dry_run_writes_and_commits_nothing(sqlite_catalog: Catalog, warehouse: Path) -> None:
    table = append_files(create(sqlite_catalog, "t", partitioned=True, target=MB), random.Random(1), 12, 500, [1, 2])
    files_before = sorted(p for p in warehouse.rglob("*") if p.is_file())
    report = rewrite_data_files(table)
    assert report.dry_run and report.commits == [] and report.rewritten_data_files == 0
    assert [g["input_files"] for g in report.groups] == [12, 12]  # each append writes a file a partition
    assert all(g["output_files"] is None and g["output_bytes"] is None for g in report.groups)
    assert sorted(p for p in warehouse.rglob("*") if p.is_file()) == files_before
    assert sqlite_catalog.load_table("db.t").metadata_location == table.metadata_location
    assert report.to_json() == plan_data_rewrite(table, target_file_size_bytes=MB).to_json()


def test_a_write_failing_in_a_binpack_group_leaves_no_file_and_commits_nothing(
    sqlite_catalog: Catalog, warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows go to the writer on a thread of its own: a write failing after a file was written fails the
    group with its message, and every file the group wrote is removed; the table is as it was."""
    table = append_files(create(sqlite_catalog, "t", partitioned=False), random.Random(11), 40, 500, [1])
    files_before = sorted(p for p in warehouse.rglob("*") if p.is_file())
    real, calls, opened = writer.SizedWriter.write, [], []

    def failing(sized: writer.SizedWriter, rows: Any) -> None:
        calls.append(rows.num_rows)
        if sized.paths and len(calls) > 20:
            opened.extend(sized.paths)
            raise OSError("disk full")
        real(sized, rows)

    monkeypatch.setattr(writer.SizedWriter, "write", failing)
    report = rewrite_data_files(table, dry_run=False, target_file_size_bytes=64 * 1024)
    assert len(report.failed) == 1 and "disk full" in str(report.failed[0]) and report.commits == []
    assert opened  # a file of the group was written before the failure
    assert sorted(p for p in warehouse.rglob("*") if p.is_file()) == files_before
    assert sqlite_catalog.load_table("db.t").metadata_location == table.metadata_location


def test_candidate_rules_and_options(sqlite_catalog: Catalog) -> None:
    table = append_files(create(sqlite_catalog, "t", partitioned=True, target=MB), random.Random(2), 8, 300, [1, 2])
    groups = plan_data_rewrite(table).groups
    assert [(g.group_id, len(g.input_files)) for g in groups] == [('0/{"day":1}', 8), ('0/{"day":2}', 8)]
    assert plan_data_rewrite(table, min_input_files=9).groups == []
    skipped = plan_data_rewrite(table, min_input_files=9).skipped_groups
    assert [s["partition"] for s in skipped] == [{"day": 1}, {"day": 2}]
    # Files well within the target's bounds are no candidates, unless they have enough deletes.
    small = min(f["file_size_in_bytes"] for f in data_files(table))
    assert plan_data_rewrite(table, target_file_size_bytes=small).groups == []
    table = commit_position_deletes(table, {data_files(table)[0]["file_path"]: [1]})
    only = plan_data_rewrite(table, target_file_size_bytes=small, delete_file_threshold=1).groups
    assert [len(g.input_files) for g in only] == [1] and len(only[0].delete_files) == 1
    # With min-input-files above every group, only groups holding a file with deletes are rewritten.
    assert [g.partition for g in plan_data_rewrite(table, min_input_files=50).groups] == [only[0].partition]
    assert [g.partition for g in plan_data_rewrite(table, where="day = 2").groups] == [{"day": 2}]


def test_group_ids_and_max_commits(sqlite_catalog: Catalog) -> None:
    table = append_files(
        create(sqlite_catalog, "t", partitioned=True, target=MB), random.Random(3), 16, 200, [1, 2, 3, 4]
    )
    before = scanned(table)
    ids = [g.group_id for g in plan_data_rewrite(table).groups]
    one = rewrite_data_files(table, dry_run=False, group_ids=[ids[0], '0/{"day":99}'])
    assert [g["partition"] for g in one.groups] == [{"day": 1}] and len(one.commits) == 1
    assert one.skipped_groups == [{"partition": '0/{"day":99}', "reason": "no longer a group of the plan"}]
    rest = rewrite_data_files(table, dry_run=False, max_commits=2)
    assert len(rest.groups) == 3 and len(rest.commits) == 2
    assert scanned(sqlite_catalog.load_table("db.t")) == before


def test_the_manifests_holding_inputs_are_merged_and_keep_every_other_entry_as_it_was(sqlite_catalog: Catalog) -> None:
    """12 appends of two partitions (a manifest each) with one partition rewritten: the commit writes
    the 12 touched manifests as one, each rewritten file ``DELETED`` and each other entry ``EXISTING``
    with its own snapshot and sequence numbers."""
    table = append_files(create(sqlite_catalog, "t", partitioned=True, target=MB), random.Random(8), 12, 100, [1, 2])
    base = table.current_snapshot()
    assert base is not None
    before_entries = {
        e.data_file.file_path: (e.snapshot_id, e.sequence_number, e.file_sequence_number)
        for m in base.manifests(table.io)
        for e in m.fetch_manifest_entry(table.io)
    }
    before = scanned(table)
    report = rewrite_data_files(table, dry_run=False, where="day = 1")
    table = sqlite_catalog.load_table("db.t")
    snapshot = table.current_snapshot()
    assert report.commits == [snapshot.snapshot_id] and scanned(table) == before
    manifests = snapshot.manifests(table.io)
    assert len(manifests) == 2  # the added files' manifest and the 12 touched ones merged
    entries = [e for m in manifests for e in m.fetch_manifest_entry(table.io, discard_deleted=False)]
    statuses = Counter(e.status.name for e in entries)
    assert statuses == {"DELETED": 12, "EXISTING": 12, "ADDED": report.added_data_files}
    for entry in entries:
        if entry.status.name == "EXISTING":
            assert entry.data_file.partition[0] == 2
            kept = (entry.snapshot_id, entry.sequence_number, entry.file_sequence_number)
            assert kept == before_entries[entry.data_file.file_path]
        elif entry.status.name == "DELETED":
            assert entry.data_file.partition[0] == 1 and entry.snapshot_id == snapshot.snapshot_id


def test_partition_evolution_keeps_each_files_spec(sqlite_catalog: Catalog) -> None:
    table = append_files(create(sqlite_catalog, "t", partitioned=True, target=MB), random.Random(4), 6, 300, [1, None])
    with table.update_spec() as update:
        update.add_field("id", BucketTransform(2), "id_bucket")
    table = append_files(sqlite_catalog.load_table("db.t"), random.Random(5), 6, 300, [1, None])
    before, history = scanned(table), _snapshots(table)
    report = rewrite_data_files(table, dry_run=False, min_input_files=2)
    table = sqlite_catalog.load_table("db.t")
    assert {g["spec_id"] for g in report.groups} == {0, 1}
    assert scanned(table) == before and {s: scanned(table, s) for s in history} == history
    specs = {f["file_path"]: f["spec_id"] for f in table.inspect.files().to_pylist()}
    assert set(specs.values()) == {0, 1}


def test_bad_input_is_refused_before_anything(sqlite_catalog: Catalog) -> None:
    table = append_files(create(sqlite_catalog, "t", partitioned=False), random.Random(6), 2, 10, [1])
    cases: list[tuple[dict[str, Any], str]] = [  # deliberately wrong arguments: the checks are tested
        ({"where": "day >>> 3"}, "where 'day >>> 3': expected a row filter"),
        ({"where": "nope = 3"}, "where 'nope = 3'"),
        ({"strategy": "shuffle"}, "strategy 'shuffle': expected one of binpack, sort, zorder"),
        ({"strategy": "zorder"}, "zorder: the zorder strategy needs the columns"),
        ({"strategy": "sort", "sort": ["nope"]}, "sort 'nope': the table has no such column"),
        ({"min_input_files": 0}, "min_input_files 0: expected a whole number >= 1"),
        ({"dry_run": "no"}, "dry_run 'no': expected True or False"),
    ]
    for kwargs, message in cases:
        with pytest.raises(InvalidInputError, match=message.replace("(", r"\(")):
            rewrite_data_files(table, dry_run=kwargs.pop("dry_run", False), **kwargs)
    assert sqlite_catalog.load_table("db.t").metadata_location == table.metadata_location


def test_a_v1_table_is_compacted_and_a_v3_table_refused_with_one_line(sqlite_catalog: Catalog) -> None:
    """v1 tables have no delete files nor sequence numbers: bin-pack, written with v1 manifests. pyiceberg
    0.12 writes no v3 manifest, so a v3 table is refused before anything is read or written."""
    table = sqlite_catalog.create_table(
        "db.t", schema=SCHEMA, partition_spec=BY_DAY, properties={"format-version": "1"}
    )
    table = append_files(table, random.Random(8), 6, 300, [1, None])
    before, history = scanned(table), _snapshots(table)
    report = rewrite_data_files(table, dry_run=False)
    table = sqlite_catalog.load_table("db.t")
    assert table.metadata.format_version == 1 and len(report.commits) == 2  # a group a partition
    assert scanned(table) == before
    assert {sid: scanned(table, sid) for sid in history} == history
    assert sorted(f["record_count"] for f in data_files(table))[-1] > 300  # files merged, one a partition
    assert len(data_files(table)) == 2 and sum(f["record_count"] for f in data_files(table)) == 1800

    # pyiceberg 0.12 cannot create a v3 table either: the check, on this table's metadata marked v3.
    v3 = table.metadata.model_copy(update={"format_version": 3})
    with pytest.raises(InvalidInputError, match="table format version 3: compaction commits v1 and v2 tables only"):
        check_format(v3)
