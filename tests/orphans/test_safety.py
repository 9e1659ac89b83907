"""The safety gates of orphan removal: refusals, fail-closed reads, re-check, hidden paths, age."""

from __future__ import annotations

import logging
import os
import time
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_iceberg_maint.errors import (
    GcDisabledError,
    InvalidInputError,
    LocationRefusedError,
    MetadataReadError,
)
from airflow_iceberg_maint.fs.local import LocalStorage
from airflow_iceberg_maint.fs.locations import local_path
from airflow_iceberg_maint.fs.storage import FileInfo
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES
from airflow_iceberg_maint.orphans import removal
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from tests.orphans import sources
from tests.orphans.scenario import SCHEMA, rows

OLD = time.time() - 10 * 86400


def _table(catalog, name="db.t", **kwargs):
    table = catalog.create_table(name, schema=SCHEMA, **kwargs)
    table.append(rows(0, 10))
    table.append(rows(10, 10))
    return catalog.load_table(name)


def _plant_old(path: str, data: bytes = b"x") -> str:
    fs = local_path(path)
    os.makedirs(os.path.dirname(fs), exist_ok=True)
    with open(fs, "wb") as fh:
        fh.write(data)
    os.utime(fs, (OLD, OLD))
    return path


def _age_everything(table) -> None:
    root = local_path(table.location())
    for dirpath, _, names in os.walk(root):
        for name in names:
            os.utime(os.path.join(dirpath, name), (OLD, OLD))


def test_gc_disabled_is_refused_and_nothing_is_deleted(sqlite_catalog):
    table = _table(sqlite_catalog, properties={"gc.enabled": "false"})
    orphan = _plant_old(table.location() + "/data/orphan.parquet")
    with pytest.raises(GcDisabledError, match=r"table db\.t: gc\.enabled=false"):
        remove_orphan_files(table, sources=[INDEX_FILES])
    assert os.path.exists(local_path(orphan))


def test_unreadable_manifest_aborts_before_deleting(sqlite_catalog):
    table = _table(sqlite_catalog)
    orphan = _plant_old(table.location() + "/data/orphan.parquet")
    manifest = table.current_snapshot().manifests(table.io)[0].manifest_path
    with open(local_path(manifest), "r+b") as fh:
        fh.truncate(20)
    with pytest.raises(MetadataReadError, match=f"manifest '{manifest}': cannot be read"):
        remove_orphan_files(table, sources=[INDEX_FILES])
    assert os.path.exists(local_path(orphan))


def test_missing_manifest_list_aborts(sqlite_catalog):
    table = _table(sqlite_catalog)
    orphan = _plant_old(table.location() + "/data/orphan.parquet")
    os.remove(local_path(table.current_snapshot().manifest_list))
    with pytest.raises(MetadataReadError, match="manifest list"):
        remove_orphan_files(table, sources=[INDEX_FILES])
    assert os.path.exists(local_path(orphan))


def test_a_failing_reference_source_aborts(sqlite_catalog, monkeypatch):
    table = _table(sqlite_catalog)
    orphan = _plant_old(table.location() + "/data/orphan.parquet")
    with pytest.raises(MetadataReadError, match=r"^reference source 'broken': failed \(index metadata unreadable\)$"):
        remove_orphan_files(table, sources=[INDEX_FILES, sources.BROKEN])
    assert os.path.exists(local_path(orphan))


def test_reference_sources_protect_their_files(sqlite_catalog, monkeypatch):
    table = _table(sqlite_catalog)
    protected = _plant_old(table.location() + "/index/idx/region-1.parquet")
    orphan = _plant_old(table.location() + "/index/idx/region-2.parquet")
    report = remove_orphan_files(table, sources=[INDEX_FILES, sources.FIRST_REGION])
    assert report.orphan_files == [orphan]
    assert os.path.exists(local_path(protected))


def test_a_commit_during_the_scan_protects_the_files_it_adds(sqlite_catalog, monkeypatch):
    """A writer commits a file that was listed as an orphan; the re-check keeps it."""
    table = _table(sqlite_catalog)
    late = table.location() + "/data/late.parquet"
    pq.write_table(rows(100, 5).cast(SCHEMA.as_arrow()), local_path(late))
    os.utime(local_path(late), (OLD, OLD))
    orphan = _plant_old(table.location() + "/data/orphan.parquet")
    report = remove_orphan_files(table, sources=[INDEX_FILES, sources.COMMIT_LATE_FILE])
    assert report.kept_by_recheck == 1
    assert report.orphan_files == [orphan]
    assert os.path.exists(local_path(late))
    reloaded = sqlite_catalog.load_table("db.t")
    assert len(reloaded.scan().to_arrow()) == 25


def test_a_table_that_cannot_be_reloaded_for_the_re_check_deletes_nothing(sqlite_catalog, monkeypatch):
    """The catalog names a metadata file that is gone by the re-check: a clear read error, not a traceback."""
    table = _table(sqlite_catalog)
    orphan = _plant_old(table.location() + "/data/orphan.parquet")
    with pytest.raises(
        MetadataReadError,
        match=(
            r"^table 'db\.t': its metadata file .*\.metadata\.json cannot be read \(FileNotFoundError: .*\); "
            r"a catalog's answer may leave snapshots out, so nothing was done$"
        ),
    ):
        remove_orphan_files(table, sources=[INDEX_FILES, sources.COMMIT_THEN_LOSE_METADATA])
    assert os.path.exists(local_path(orphan))


def test_hidden_paths_are_skipped_but_hidden_partition_fields_are_not(sqlite_catalog):
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType

    schema = Schema(NestedField(1, "id", LongType()), NestedField(2, "_cat", StringType()))
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "_cat"))
    table = sqlite_catalog.create_table("db.hidden", schema=schema, partition_spec=spec)
    table.append(pa.table({"id": pa.array([1, 2], pa.int64()), "_cat": pa.array(["a", "b"])}))
    _age_everything(table)
    loc = table.location()
    in_partition = _plant_old(f"{loc}/data/_cat=a/orphan.parquet")
    hidden = [
        _plant_old(f"{loc}/data/_tmp/x.parquet"),
        _plant_old(f"{loc}/data/_cat/x.parquet"),
        _plant_old(f"{loc}/.trash/x.parquet"),
        _plant_old(f"{loc}/data/_cat=a/.x.crc"),
    ]
    report = remove_orphan_files(table, sources=[INDEX_FILES])
    assert report.orphan_files == [in_partition]
    assert all(os.path.exists(local_path(h)) for h in hidden)
    assert len(sqlite_catalog.load_table("db.hidden").scan().to_arrow()) == 2


def test_symlinks_are_neither_followed_nor_deleted(sqlite_catalog, tmp_path):
    table = _table(sqlite_catalog)
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "precious.parquet"
    victim.write_bytes(b"x")
    os.utime(victim, (OLD, OLD))
    link_dir = local_path(table.location()) + "/data/link"
    os.symlink(outside, link_dir)
    os.symlink(victim, local_path(table.location()) + "/data/link.parquet")
    report = remove_orphan_files(table, OrphanOptions(older_than_days=0), sources=[INDEX_FILES])
    assert report.orphan_files == []
    assert victim.exists()
    with pytest.raises(LocationRefusedError, match="symlink"):
        remove_orphan_files(table, OrphanOptions(location=table.location() + "/data/link"), sources=[INDEX_FILES])
    assert victim.exists()


def test_cutoff_is_strict_and_never_in_the_future(sqlite_catalog, caplog):
    table = _table(sqlite_catalog)
    at = _plant_old(table.location() + "/data/at-cutoff.parquet")
    before = _plant_old(table.location() + "/data/before-cutoff.parquet")
    os.utime(local_path(before), (OLD - 1, OLD - 1))
    cutoff = datetime.fromtimestamp(os.stat(local_path(at)).st_mtime, UTC)
    report = remove_orphan_files(table, OrphanOptions(older_than=cutoff, dry_run=True), sources=[INDEX_FILES])
    assert report.orphan_files == [before]
    with pytest.raises(InvalidInputError, match="is in the future"):
        remove_orphan_files(
            table, OrphanOptions(older_than=datetime.now(UTC) + timedelta(hours=1)), sources=[INDEX_FILES]
        )
    with pytest.raises(InvalidInputError, match="older_than_days -1"):
        remove_orphan_files(table, OrphanOptions(older_than_days=-1), sources=[INDEX_FILES])
    with caplog.at_level(logging.WARNING):
        zero = remove_orphan_files(table, OrphanOptions(older_than_days=0, dry_run=True), sources=[INDEX_FILES])
    assert "older_than_days is 0" in caplog.text
    assert set(zero.orphan_files) == {at, before}


def test_default_cutoff_is_three_days(sqlite_catalog):
    table = _table(sqlite_catalog)
    two_days = _plant_old(table.location() + "/data/two-days.parquet")
    four_days = _plant_old(table.location() + "/data/four-days.parquet")
    now = time.time()
    os.utime(local_path(two_days), (now - 2 * 86400,) * 2)
    os.utime(local_path(four_days), (now - 4 * 86400,) * 2)
    report = remove_orphan_files(table, OrphanOptions(dry_run=True), sources=[INDEX_FILES])
    assert report.orphan_files == [four_days]


def test_bad_options_change_nothing(sqlite_catalog):
    table = _table(sqlite_catalog)
    orphan = _plant_old(table.location() + "/data/orphan.parquet")
    with pytest.raises(InvalidInputError, match="prefix_mismatch_mode 'sometimes'"):
        remove_orphan_files(table, OrphanOptions(prefix_mismatch_mode="sometimes"), sources=[INDEX_FILES])
    with pytest.raises(InvalidInputError, match="max_concurrent_deletes 0"):
        remove_orphan_files(table, OrphanOptions(max_concurrent_deletes=0), sources=[INDEX_FILES])
    with pytest.raises(LocationRefusedError):
        remove_orphan_files(table, OrphanOptions(location=table.location() + "_backup"), sources=[INDEX_FILES])
    assert os.path.exists(local_path(orphan))


def test_scan_of_a_sub_location_only(sqlite_catalog):
    table = _table(sqlite_catalog)
    in_data = _plant_old(table.location() + "/data/orphan.parquet")
    in_metadata = _plant_old(table.location() + "/metadata/orphan.avro")
    report = remove_orphan_files(table, OrphanOptions(location=table.location() + "/data/"), sources=[INDEX_FILES])
    assert report.location == table.location() + "/data"
    assert report.orphan_files == [in_data]
    assert os.path.exists(local_path(in_metadata))


def test_local_delete_counts_missing_files_as_deleted_and_reports_failures(tmp_path):
    present = tmp_path / "a"
    present.write_bytes(b"x")
    blocked = tmp_path / "dir"
    blocked.mkdir()
    outcome = LocalStorage().delete_files([str(present), str(tmp_path / "gone"), str(blocked)], max_concurrency=2)
    assert sorted(outcome.deleted) == sorted([str(present), str(tmp_path / "gone")])
    assert [p for p, _ in outcome.failed] == [str(blocked)]
    assert not present.exists()


class _LocalWithoutTimes(LocalStorage):
    """Local storage that, like some object stores and inventories, lists one file without a time.

    Such a store cannot run here, so the test stands it in for the engine's storage.
    """

    def list_files(self, root, keep):
        for info in super().list_files(root, keep):
            yield FileInfo(info.path, info.size, None) if info.path.endswith("no-time.parquet") else info


def test_a_file_without_a_modification_time_is_never_a_candidate(sqlite_catalog, monkeypatch):
    table = _table(sqlite_catalog)
    no_time = _plant_old(table.location() + "/data/no-time.parquet")
    old = _plant_old(table.location() + "/data/old.parquet")
    monkeypatch.setattr(removal, "storage_for", lambda location, properties: _LocalWithoutTimes())
    report = remove_orphan_files(table, sources=[INDEX_FILES])
    assert report.orphan_files == [old]
    assert os.path.exists(local_path(no_time)) and not os.path.exists(local_path(old))


def test_files_of_a_staged_snapshot_no_ref_points_at_are_kept(sqlite_catalog):
    """Like a WAP-staged snapshot: in the metadata, on no branch or tag; its files are live."""
    table = _table(sqlite_catalog)
    table.manage_snapshots().create_branch(table.metadata.current_snapshot_id, "staging").commit()
    table.append(rows(50, 5), branch="staging")
    staged = table.metadata.refs["staging"].snapshot_id
    table.manage_snapshots().remove_branch("staging").commit()
    table = sqlite_catalog.load_table("db.t")
    assert staged in {s.snapshot_id for s in table.metadata.snapshots}
    assert all(ref.snapshot_id != staged for ref in table.metadata.refs.values())
    _age_everything(table)
    staged_files = set(table.inspect.files(snapshot_id=staged)["file_path"].to_pylist())
    report = remove_orphan_files(table, sources=[INDEX_FILES])
    assert not staged_files & set(report.orphan_files)
    assert len(table.scan(snapshot_id=staged).to_arrow()) == 25


def test_statistics_files_are_kept_and_replaced_ones_removed(sqlite_catalog):
    from pyiceberg.table.statistics import PartitionStatisticsFile
    from pyiceberg.table.update import SetPartitionStatisticsUpdate

    from tests.expiry.history import set_statistics_file

    table = _table(sqlite_catalog)
    snapshot_id = table.metadata.current_snapshot_id
    meta = table.location() + "/metadata"
    first, second, partition = (
        _plant_old(f"{meta}/{name}", b"PFA1")
        for name in ("stats-1.puffin", "stats-2.puffin", "partition-stats-1.parquet")
    )

    set_statistics_file(table, snapshot_id, first, size=4)
    set_statistics_file(table, snapshot_id, second, size=4)  # replaces the first for this snapshot
    partition_stats = PartitionStatisticsFile(snapshot_id=snapshot_id, statistics_path=partition, file_size_in_bytes=4)  # type: ignore[call-arg]
    sqlite_catalog.commit_table(
        table,
        requirements=(),
        updates=(SetPartitionStatisticsUpdate(partition_statistics=partition_stats),),  # type: ignore[call-arg]
    )
    table = sqlite_catalog.load_table("db.t")
    assert [s.statistics_path for s in table.metadata.statistics] == [second]
    assert [s.statistics_path for s in table.metadata.partition_statistics] == [partition]

    report = remove_orphan_files(table, sources=[INDEX_FILES])
    assert report.orphan_files == [first]
    assert report.by_kind["statistics"] == {"count": 1, "bytes": 4}
    assert os.path.exists(local_path(second)) and os.path.exists(local_path(partition))


def test_position_equality_and_deletion_vector_files_are_kept(sqlite_catalog):
    from tests.index.row_deletes import commit_deletion_vector, commit_equality_deletes, commit_position_deletes

    table = _table(sqlite_catalog, properties={"format-version": "2"})
    data_files = sorted(table.inspect.files()["file_path"].to_pylist())
    table = commit_position_deletes(table, {data_files[0]: [0, 1]})
    table = commit_equality_deletes(table, ["id"], [[15]])
    table = commit_deletion_vector(table, data_files[1], [2])
    delete_files = set(table.inspect.delete_files()["file_path"].to_pylist())
    assert len(delete_files) == 3
    _age_everything(table)
    orphan = _plant_old(table.location() + "/data/orphan-deletes.parquet")
    report = remove_orphan_files(table, sources=[INDEX_FILES])
    assert report.orphan_files == [orphan]
    # pyiceberg cannot scan equality deletes, so check the files themselves rather than rows.
    assert all(os.path.exists(local_path(p)) for p in delete_files | set(data_files))
