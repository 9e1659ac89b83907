"""A sharded scan finds and deletes exactly what the single-task run does, and fails closed on a failed shard."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_iceberg_maint.errors import InvalidInputError, MetadataReadError, StorageError
from airflow_iceberg_maint.fs.locations import Uri, local_path
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from airflow_iceberg_maint.orphans.report import OrphanReport
from airflow_iceberg_maint.orphans.sharded.files import (
    CANDIDATE_SCHEMA,
    BucketWriter,
    Scratch,
    bucket_range,
    buckets_of,
)
from airflow_iceberg_maint.orphans.sharded.finish import finish_sharded_scan
from airflow_iceberg_maint.orphans.sharded.match import match_shard
from airflow_iceberg_maint.orphans.sharded.scan import plan_sharded_scan, remove_orphan_files_sharded, run_shard
from tests.orphans.scenario import SCHEMA, Scenario, build, referenced_by_oracle, rows, snapshot_row_counts

# Everything of a report but timings, request counts and the order of the orphan list.
SAME = (
    "orphan_file_count",
    "orphan_bytes",
    "by_kind",
    "files_listed",
    "referenced_files",
    "kept_equivalent",
    "kept_undecodable",
    "protected_locations",
    "kept_protected",
    "conflicts",
    "kept_by_recheck",
    "snapshots",
    "manifests_read",
)


def _scratch(catalog, tmp_path: Path) -> str:
    """Next to the warehouse on its own store (outside every table), or a local folder for a local warehouse."""
    location = catalog.properties["warehouse"]
    return f"file://{tmp_path}/scratch" if location.startswith("file:") else f"{location.rsplit('/', 1)[0]}/scratch"


def _io(s: Scenario) -> dict[str, str]:
    return dict(s.table.io.properties)


def _same(sharded: OrphanReport, single: OrphanReport) -> None:
    assert sorted(sharded.orphan_files) == sorted(single.orphan_files)
    assert sharded.orphan_files == sorted(sharded.orphan_files)
    assert {k: sharded.summary()[k] for k in SAME} == {k: single.summary()[k] for k in SAME}


def _nested_table(s: Scenario) -> None:
    """Another table's metadata folder under the data folder: kept whole (S8)."""
    loc = s.table.location().rstrip("/")
    s.files.put(f"{loc}/data/inner/metadata/00000-x.metadata.json", b'{"table-uuid": "other", "location": "x"}')
    s.kept_planted |= {s.files.put(f"{loc}/data/inner/data/a.parquet")}


@pytest.mark.parametrize("shards", [1, 3])
@pytest.mark.parametrize("backend", ["sqlite_catalog", "s3_catalog", "gcs_catalog", "azure_catalog"])
def test_sharded_equals_single_task_dry_and_real(request, tmp_path, backend, shards):
    catalog = request.getfixturevalue(backend)
    s = build(catalog, plant_extra=_nested_table)
    dry = OrphanOptions(older_than=s.cutoff, dry_run=True)
    single = remove_orphan_files(s.table, dry, sources=[INDEX_FILES])
    inner = f"{s.table.location()}/data/inner/"
    assert set(single.orphan_files) == {p for p in s.expected_orphans if not p.startswith(inner)}

    sharded = remove_orphan_files_sharded(
        s.table,
        dry,
        shards=shards,
        scratch=_scratch(catalog, tmp_path) + "/dry",
        io_properties=_io(s),
        sources=[INDEX_FILES],
    )
    _same(sharded, single)
    assert sharded.protected_locations == [
        {"location": f"{s.table.location()}/data/inner", "reason": sharded.protected_locations[0]["reason"]}
    ]
    assert all(s.files.exists(p) for p in single.orphan_files)

    real = remove_orphan_files_sharded(
        s.table,
        OrphanOptions(older_than=s.cutoff),
        shards=shards,
        scratch=_scratch(catalog, tmp_path) + "/real",
        io_properties=_io(s),
        sources=[INDEX_FILES],
    )
    _same(real, single)
    assert real.deleted_file_count == single.orphan_file_count and real.failed == []
    assert not any(s.files.exists(p) for p in single.orphan_files)
    assert all(s.files.exists(p) for p in s.kept_planted)
    assert snapshot_row_counts(catalog.load_table("db.events")) == s.row_counts
    again = remove_orphan_files(s.table, dry, sources=[INDEX_FILES])
    assert again.orphan_files == []


def test_a_sharded_scan_through_the_digest_cache_finds_the_same_and_fills_it(sqlite_catalog, tmp_path):
    s = build(sqlite_catalog)
    single = remove_orphan_files(s.table, OrphanOptions(older_than=s.cutoff, dry_run=True), sources=[INDEX_FILES])
    cache = tmp_path / "digests"
    lists = {m.manifest_list for m in s.table.metadata.snapshots if m.manifest_list}
    cached = OrphanOptions(older_than=s.cutoff, dry_run=True, cache=str(cache))
    for run in ("cold", "warm"):
        sharded = remove_orphan_files_sharded(
            s.table,
            cached,
            shards=2,
            scratch=_scratch(sqlite_catalog, tmp_path) + f"/{run}",
            io_properties=_io(s),
            sources=[INDEX_FILES],
        )
        _same(sharded, single)
        assert len(list(cache.rglob("*.list"))) == len(lists)  # the plan read the lists through it
        assert list(cache.rglob("*.manifest"))  # and the shards the manifests


def _part_buckets(path: Path) -> list[int]:
    return json.loads(pq.ParquetFile(path).schema_arrow.metadata[b"buckets"])


def test_many_buckets_and_shards_match_the_single_run(sqlite_catalog, tmp_path, monkeypatch):
    """Each shard lists several directories and reads several manifests; each match task several buckets.

    Every writer writes one part a flush of ``FLUSH_ROWS`` rows (a row group a bucket), and each
    match task reads, of each part, only the row groups of its own contiguous bucket range.
    """
    monkeypatch.setattr("airflow_iceberg_maint.orphans.sharded.scan.ROWS_PER_BUCKET", 3)
    monkeypatch.setattr("airflow_iceberg_maint.orphans.sharded.files.FLUSH_ROWS", 5)
    # listed rows reach a writer 5 at a time
    monkeypatch.setattr("airflow_iceberg_maint.orphans.sharded.scan.LIST_BATCH", 5)
    monkeypatch.setattr("airflow_iceberg_maint.orphans.sharded.scan.LIST_DEPTH", 1)  # data/, metadata/, misc/ to shards
    s = build(sqlite_catalog)
    dry = OrphanOptions(older_than=s.cutoff, dry_run=True)
    single = remove_orphan_files(s.table, dry, sources=[INDEX_FILES])
    plan = plan_sharded_scan(
        s.table, dry, shards=4, scratch=f"file://{tmp_path}/scratch", io_properties=_io(s), sources=[INDEX_FILES]
    )
    assert plan.buckets > plan.shards and plan.directories == 3
    for i in range(4):
        run_shard(s.table, plan.scratch, i, _io(s))

    # One part a flush: every listed part of a writer holds FLUSH_ROWS rows but its last, which holds the rest.
    listed = sorted((tmp_path / "scratch" / "listed").iterdir())
    by_writer: dict[str, list[int]] = {}
    for part in listed:
        owner = part.name.split("-")[1]  # {plan}-{owner}-{number}.parquet
        by_writer.setdefault(owner, []).append(pq.ParquetFile(part).metadata.num_rows)
    for sizes in by_writer.values():
        assert sizes[:-1] == [5] * (len(sizes) - 1) and 1 <= sizes[-1] <= 5
    assert len(listed) == sum(-(-sum(sizes) // 5) for sizes in by_writer.values())
    # Each part: a row group a bucket present, in bucket order, each row group only that bucket's rows.
    parts = listed + sorted((tmp_path / "scratch" / "refs").iterdir())
    for part in parts:
        buckets, rows = _part_buckets(part), pq.ParquetFile(part)
        assert buckets == sorted(set(buckets)) and len(buckets) == rows.num_row_groups
        if part.parent.name == "refs":
            for group, bucket in enumerate(buckets):
                assert set(buckets_of(rows.read_row_group(group).column("key"), plan.buckets)) == {bucket}

    reads: list[tuple[int, list[int]]] = []
    read_row_groups = pq.ParquetFile.read_row_groups

    def recorded(self, row_groups, *args, **kwargs):
        buckets = json.loads(self.schema_arrow.metadata[b"buckets"])
        reads.append((match, [buckets[g] for g in row_groups]))
        return read_row_groups(self, row_groups, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_groups", recorded)
    for match in range(4):
        match_shard(plan.scratch, match, _io(s))
    monkeypatch.undo()
    # One read a part and match task (when the part has rows of its range), only of the range's row groups.
    for match in range(4):
        wanted = bucket_range(match, 4, plan.buckets)
        mine = [b for m, read in reads if m == match for b in read]
        assert mine and set(mine) <= set(wanted)
        assert len([m for m, _ in reads if m == match]) == sum(
            any(b in wanted for b in _part_buckets(p)) for p in parts
        )
    assert sorted(b for _, read in reads for b in read) == sorted(b for p in parts for b in _part_buckets(p))
    _same(finish_sharded_scan(s.table, plan.scratch, _io(s), sources=[INDEX_FILES]), single)


def test_a_writer_writes_one_part_a_flush_with_a_row_group_a_bucket(tmp_path, monkeypatch):
    monkeypatch.setattr("airflow_iceberg_maint.orphans.sharded.files.FLUSH_ROWS", 5)
    scratch = Scratch(f"file://{tmp_path}", {})
    writer = BucketWriter(scratch, "listed", "w", 4, CANDIDATE_SCHEMA, "p1")
    top = [0, 1 << 62, -(1 << 63), -(1 << 62)]  # the first key of buckets 0, 1, 2 and 3 of 4

    def add(names: str, buckets: list[int]) -> None:
        rows = pa.table([[n.encode() for n in names], list(range(len(names)))], schema=CANDIDATE_SCHEMA)
        writer.add(rows, np.array([top[b] + i for i, b in enumerate(buckets)], np.int64))

    add("abcd", [3, 0, 3, 1])
    add("efgh", [1, 3, 0, 3])  # 8 rows held: the first part
    add("ijk", [2, 2, 0])
    writer.flush()  # the second part
    writer.flush()  # nothing held: no part
    assert writer.parts == ["listed/p1-w-00000.parquet", "listed/p1-w-00001.parquet"] and writer.rows == 11
    assert sorted(p.name for p in (tmp_path / "listed").iterdir()) == ["p1-w-00000.parquet", "p1-w-00001.parquet"]
    first = pq.ParquetFile(tmp_path / "listed" / "p1-w-00000.parquet")
    assert _part_buckets(tmp_path / "listed" / "p1-w-00000.parquet") == [0, 1, 3]
    assert [first.read_row_group(g).column("path").to_pylist() for g in range(3)] == [
        [b"b", b"g"],
        [b"d", b"e"],
        [b"a", b"c", b"f", b"h"],
    ]
    assert _read(scratch, writer.parts[0], range(1, 3)) == [(1, [b"d", b"e"])]
    assert _read(scratch, writer.parts[1], range(0, 3)) == [(0, [b"k"]), (2, [b"i", b"j"])]


def _read(scratch: Scratch, name: str, wanted: range) -> list[tuple[int, list[bytes]]]:
    return [(b, t.column("path").to_pylist()) for b, t in scratch.read_buckets(name, CANDIDATE_SCHEMA, wanted, "p1")]


def test_a_part_whose_bucket_list_does_not_fit_is_refused(tmp_path):
    scratch = Scratch(f"file://{tmp_path}", {})
    rows = pa.table([[b"a", b"b"], [1, 2]], schema=CANDIDATE_SCHEMA)
    scratch.write_part("p.parquet", rows, np.array([0, 1]), "p1")
    pq.write_table(rows.replace_schema_metadata({b"buckets": b"[1, 0]", b"plan": b"p1"}), tmp_path / "q.parquet")
    assert [b for b, _ in scratch.read_buckets("p.parquet", CANDIDATE_SCHEMA, range(2), "p1")] == [0, 1]
    with pytest.raises(MetadataReadError, match=r"scratch file '.*/q.parquet': its bucket list does not fit"):
        list(scratch.read_buckets("q.parquet", CANDIDATE_SCHEMA, range(2), "p1"))
    with pytest.raises(MetadataReadError, match=r"scratch file '.*/p.parquet': belongs to plan p1, not to plan p2"):
        list(scratch.read_buckets("p.parquet", CANDIDATE_SCHEMA, range(2), "p2"))


@pytest.mark.parametrize("backend", ["sqlite_catalog", "s3_catalog"])
def test_a_failed_shard_fails_the_run_before_anything_is_deleted(request, tmp_path, backend):
    catalog = request.getfixturevalue(backend)
    s = build(catalog)
    scratch = _scratch(catalog, tmp_path)
    options = OrphanOptions(older_than=s.cutoff)
    plan = plan_sharded_scan(s.table, options, shards=2, scratch=scratch, io_properties=_io(s), sources=[INDEX_FILES])
    manifest = s.table.inspect.manifests()["path"].to_pylist()[0]
    s.files.put(manifest, b"not avro")
    owner = next(i for i in range(2) if manifest in _planned_manifests(plan.scratch, s, i))
    before = s.files.all_files(s.table.location())

    run_shard(s.table, plan.scratch, 1 - owner, _io(s))
    with pytest.raises(MetadataReadError, match=f"manifest '{manifest}': cannot be read"):
        run_shard(s.table, plan.scratch, owner, _io(s))
    with pytest.raises(MetadataReadError, match=rf"scratch file '.*/shards/000{owner}.json': cannot be read"):
        match_shard(plan.scratch, 0, _io(s))
    with pytest.raises(MetadataReadError, match=rf"scratch file '.*/shards/000{owner}.json': cannot be read"):
        finish_sharded_scan(s.table, plan.scratch, _io(s), sources=[INDEX_FILES])
    assert s.files.all_files(s.table.location()) == before


def _planned_manifests(scratch: str, s: Scenario, index: int) -> list[str]:
    return Scratch(scratch, _io(s)).read_json("plan.json")["manifests"][index]


def test_a_scratch_write_failure_fails_the_shard_and_nothing_is_deleted(sqlite_catalog, tmp_path):
    s = build(sqlite_catalog)
    plan = plan_sharded_scan(
        s.table,
        OrphanOptions(older_than=s.cutoff),
        shards=2,
        scratch=f"file://{tmp_path}/scratch",
        io_properties=_io(s),
        sources=[INDEX_FILES],
    )
    (tmp_path / "scratch" / "refs").rename(tmp_path / "scratch" / "refs-moved")
    (tmp_path / "scratch" / "refs").write_text("a file where the shards write their directories")
    before = s.files.all_files(s.table.location())
    with pytest.raises(StorageError, match=r"scratch file '.*/refs/\w{32}-s0000-00000.parquet': cannot be written"):
        run_shard(s.table, plan.scratch, 0, _io(s))
    with pytest.raises(MetadataReadError, match=r"shards/0000.json': cannot be read"):
        match_shard(plan.scratch, 1, _io(s))
    assert s.files.all_files(s.table.location()) == before


def test_markers_of_another_plan_are_refused(sqlite_catalog, tmp_path):
    s = build(sqlite_catalog)
    scratch = f"file://{tmp_path}/scratch"
    options = OrphanOptions(older_than=s.cutoff, dry_run=True)
    plan_sharded_scan(s.table, options, shards=1, scratch=scratch, io_properties=_io(s), sources=[INDEX_FILES])
    run_shard(s.table, scratch, 0, _io(s))
    plan_sharded_scan(s.table, options, shards=1, scratch=scratch, io_properties=_io(s), sources=[INDEX_FILES])
    with pytest.raises(MetadataReadError, match=r"shards/0000\.json': belongs to another plan"):
        match_shard(scratch, 0, _io(s))


def test_a_commit_during_the_scan_protects_the_files_it_adds(sqlite_catalog, tmp_path):
    s = build(sqlite_catalog)
    late = s.table.location() + "/data/late.parquet"  # an orphan when listed, committed before the final step
    pq.write_table(rows(102, 1).cast(SCHEMA.as_arrow()), local_path(late))  # one partition value
    os.utime(local_path(late), (0, 0))
    scratch = f"file://{tmp_path}/scratch"
    plan = plan_sharded_scan(
        s.table,
        OrphanOptions(older_than=s.cutoff),
        shards=2,
        scratch=scratch,
        io_properties=_io(s),
        sources=[INDEX_FILES],
    )
    for i in range(2):
        run_shard(s.table, scratch, i, _io(s))
    for i in range(2):
        match_shard(scratch, i, _io(s))
    sqlite_catalog.load_table("db.events").add_files([late])  # another writer commits the "orphan"
    report = finish_sharded_scan(s.table, plan.scratch, _io(s), sources=[INDEX_FILES])
    assert report.kept_by_recheck == 1 and late not in report.orphan_files
    assert s.files.exists(late)
    assert set(report.orphan_files) == s.expected_orphans


@pytest.mark.parametrize("inside", ["/data/scratch", "/scratch", "/data/../scratch"])
def test_scratch_inside_the_table_location_is_refused(sqlite_catalog, inside):
    s = build(sqlite_catalog)
    scratch = s.table.location().rstrip("/") + inside
    with pytest.raises(InvalidInputError, match="scratch location"):
        plan_sharded_scan(
            s.table,
            OrphanOptions(older_than=s.cutoff),
            shards=2,
            scratch=scratch,
            io_properties=_io(s),
            sources=[INDEX_FILES],
        )
    assert not Path(Uri.parse(s.table.location()).path, "scratch").exists()


def test_bad_shard_counts_are_refused(sqlite_catalog, tmp_path):
    s = build(sqlite_catalog)
    for shards in (0, 257):
        with pytest.raises(InvalidInputError, match=f"shards {shards}: expected 1 to 256"):
            plan_sharded_scan(
                s.table,
                OrphanOptions(older_than=s.cutoff),
                shards=shards,
                scratch=f"file://{tmp_path}/s",
                io_properties=_io(s),
                sources=[INDEX_FILES],
            )


def test_parts_a_zombie_of_a_cleared_plan_writes_are_never_read_by_the_new_plan(sqlite_catalog, tmp_path):
    """Plan A's shard wrote its parts; A was cleared and B planned at the same scratch; B's shard wrote its
    parts and marker; then a zombie of A's shard writes its parts again. A commit between the plans added
    a file A's parts never saw: B's settle must not take A's parts, or that live file is an orphan (the
    re-check reads only snapshots B did not know)."""
    s = build(sqlite_catalog)
    scratch = f"file://{tmp_path}/scratch"
    store = Scratch(scratch, _io(s))
    options = OrphanOptions(older_than=s.cutoff)
    plan_sharded_scan(s.table, options, shards=1, scratch=scratch, io_properties=_io(s), sources=[INDEX_FILES])
    run_shard(s.table, scratch, 0, _io(s))
    a_parts = store.read_json("shards/0000.json")["parts"]
    zombie = {name: store.read(name) for name in a_parts["refs"] + a_parts["listed"]}  # what A's shard writes

    late = s.table.location() + "/data/late.parquet"
    pq.write_table(rows(102, 1).cast(SCHEMA.as_arrow()), local_path(late))
    os.utime(local_path(late), (0, 0))  # older than the cutoff: a candidate, kept only by B's references
    sqlite_catalog.load_table("db.events").add_files([late])
    table = sqlite_catalog.load_table("db.events")
    rotated = referenced_by_oracle(s.table) - referenced_by_oracle(table)  # metadata files out of the log now

    plan_sharded_scan(table, options, shards=1, scratch=scratch, io_properties=_io(s), sources=[INDEX_FILES])
    run_shard(table, scratch, 0, _io(s))
    for name, data in zombie.items():  # after B's marker
        store.write(name, data)
    match_shard(scratch, 0, _io(s))
    report = finish_sharded_scan(table, scratch, _io(s), sources=[INDEX_FILES])
    assert late not in report.orphan_files and s.files.exists(late)
    assert set(report.orphan_files) == s.expected_orphans | rotated
    assert snapshot_row_counts(sqlite_catalog.load_table("db.events"))  # every snapshot reads


def test_a_part_of_another_plan_under_this_plans_name_is_refused(sqlite_catalog, tmp_path):
    """Parts carry their plan in the footer too: bytes of plan A's part under a name of plan B fail B (S2)."""
    s = build(sqlite_catalog)
    scratch = f"file://{tmp_path}/scratch"
    store = Scratch(scratch, _io(s))
    options = OrphanOptions(older_than=s.cutoff, dry_run=True)
    plan_sharded_scan(s.table, options, shards=1, scratch=scratch, io_properties=_io(s), sources=[INDEX_FILES])
    run_shard(s.table, scratch, 0, _io(s))
    a_refs = store.read_json("shards/0000.json")["parts"]["refs"]
    plan_sharded_scan(s.table, options, shards=1, scratch=scratch, io_properties=_io(s), sources=[INDEX_FILES])
    run_shard(s.table, scratch, 0, _io(s))
    b_refs = store.read_json("shards/0000.json")["parts"]["refs"]
    assert a_refs and b_refs and not set(a_refs) & set(b_refs)
    store.write(b_refs[0], store.read(a_refs[0]))
    with pytest.raises(MetadataReadError, match=r"belongs to plan [0-9a-f]{32}, not to plan [0-9a-f]{32}"):
        match_shard(scratch, 0, _io(s))
