"""S18: a ref the expiry's commit dropped comes back on a same-content copy when its v2 snapshot cannot.

Another writer's commit lands inside the expiry's catalog call (``tests.commit_race``): a tag or a
branch on expiring snapshots, some with position and equality deletes or a statistics file. The
catalog applies the expiry on it and drops the ref; the run puts the ref back on copies of its
snapshots (new ids and sequence numbers, the same manifest lists), reports them, deletes nothing,
and the ref reads the rows it read before: pyiceberg's scan, and a reader that applies every delete
by its sequence numbers. An orphan run right after deletes none of the ref's files.

On SeaweedFS's REST catalog as it is; on SQLite with pyiceberg's own metadata builder, the commit
taking the REST path (the location check, no in-process requirement), which is how the case arises.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.catalog import Catalog
from pyiceberg.manifest import DataFileContent
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.update import AddSnapshotUpdate

from airflow_iceberg_maint import commit_fence
from airflow_iceberg_maint.catalog import load_table
from airflow_iceberg_maint.errors import ExpiryRestoreError
from airflow_iceberg_maint.expiry.snapshot_copies import COPY_OF
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from tests.commit_race import race_into_commit
from tests.expiry.history import after_clock_passes, exists, reachable, set_statistics_file, snapshot_rows
from tests.expiry.test_concurrent_commits import _race_into_the_commit, expire, expiring_table
from tests.index.row_deletes import commit_equality_deletes, commit_position_deletes
from tests.orphans.scenario import rows


@pytest.fixture(params=["sqlite", pytest.param("rest", marks=pytest.mark.rest)])
def catalog(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Catalog:
    if request.param == "sqlite":  # the REST path: no requirement can refuse the commit in-process
        monkeypatch.setattr(commit_fence, "validates_requirements_in_process", lambda catalog: False)
    return request.getfixturevalue(f"{request.param}_catalog")


def make_history(catalog: Catalog) -> tuple[Table, dict[str, int]]:
    """s1 (rows 0-5), pos (rows 0 and 1 deleted by position), eq (row 4 deleted by equality), then an
    overwrite (rows 10-12) and an append (s3). Everything but main's head is older than 1 ms."""
    table = expiring_table(catalog)
    ids: dict[str, int] = {}

    def step(name: str) -> None:
        ids[name] = table.metadata.current_snapshot_id
        after_clock_passes(table.metadata.snapshot_by_id(ids[name]).timestamp_ms)

    table.append(rows(0, 6))
    step("s1")
    commit_position_deletes(table, {table.inspect.files()["file_path"][0].as_py(): [0, 1]})
    step("pos")
    commit_equality_deletes(table, ["id"], [[4]])
    step("eq")
    table.overwrite(rows(10, 3))
    step("s2")
    table.append(rows(20, 3))
    step("s3")
    return load_table(catalog, ".".join(table.name())), ids


def _statistics_on(table: Table, snapshot_id: int) -> str:
    path = f"{table.location()}/data/stats-{snapshot_id}.parquet"  # SeaweedFS takes no other names
    with table.io.new_output(path).create() as stream:
        stream.write(b"PFA1stats")
    set_statistics_file(table, snapshot_id, path)
    return path


#: A ref the writer makes inside the expiry's commit: name, kind, the step it points at, and for a branch its
#: min-snapshots-to-keep (the table keeps snapshots 1 ms, so the branch keeps exactly that many of its chain).
Ref = tuple[str, str, str, int]
STEPS = ("s1", "pos", "eq", "s2")  # the expiring snapshots (s2's parent is the overwrite's delete)

CASES: dict[str, tuple[Ref, ...]] = {
    "tag-with-deletes": (("keep", "tag", "eq", 1),),
    "branch": (("b", "branch", "pos", 1),),
    # The branch keeps three snapshots: all three come back, each the parent of the next.
    "branch-of-three": (("b3", "branch", "eq", 3),),
    "two-tags": (("t1", "tag", "s1", 1), ("t2", "tag", "eq", 1)),
    "tag-with-statistics": (("st", "tag", "s1", 1),),
}


def _make_refs(writer: Table, ids: dict[str, int], refs: tuple[Ref, ...]) -> None:
    manage = writer.manage_snapshots()
    for name, kind, step, keep in refs:
        if kind == "tag":
            manage = manage.create_tag(ids[step], name)
        else:
            manage = manage.create_branch(ids[step], name, min_snapshots_to_keep=keep)
    manage.commit()


def _scan(table: Table, snapshot_id: int) -> list[int] | None:
    """pyiceberg's own scan, which applies position deletes; None where equality deletes apply (it refuses)."""
    snapshot = table.snapshot_by_id(snapshot_id)
    assert snapshot is not None
    entries = [e for m in snapshot.manifests(table.io) for e in m.fetch_manifest_entry(table.io)]
    if any(e.data_file.content == DataFileContent.EQUALITY_DELETES for e in entries):
        return None
    return sorted(table.scan(snapshot_id=snapshot_id).to_arrow()["id"].to_pylist())


def _files_of(table: Table, snapshot_id: int) -> set[str]:
    snapshot = table.snapshot_by_id(snapshot_id)
    assert snapshot is not None
    manifests = snapshot.manifests(table.io)
    files = {snapshot.manifest_list, *(m.manifest_path for m in manifests)}
    for manifest in manifests:
        files |= {e.data_file.file_path for e in manifest.fetch_manifest_entry(table.io, discard_deleted=True)}
    return files


def _copy_of(snapshot: Snapshot) -> int | None:
    """The snapshot a copy copies (a summary answers None for a key it lacks)."""
    value = snapshot.summary[COPY_OF] if snapshot.summary is not None else None
    return None if value is None else int(value)


def _ancestry(table: Table, snapshot_id: int) -> list[int]:
    chain: list[int] = []
    current: int | None = snapshot_id
    while current is not None and (snapshot := table.snapshot_by_id(current)) is not None:
        chain.append(current)
        current = snapshot.parent_snapshot_id
    return chain


@dataclass
class Seen:
    """A ref the writer made, as the table had it: its snapshot, rows and files (its ancestors' too)."""

    snapshot_id: int
    manifest_list: str
    live_rows: list[int]  # every delete applied
    scanned: list[int] | None  # pyiceberg's scan, where it can read the snapshot
    files: set[str]  # of every snapshot the ref keeps
    depth: int  # how many snapshots the ref keeps
    ancestry: list[int]


def run_with_refs_made_inside_the_commit(catalog: Catalog, refs: tuple[Ref, ...], statistics: bool) -> None:
    """The writer makes ``refs`` inside the expiry's commit; ``statistics``: s1 has a statistics file."""
    table, ids = make_history(catalog)
    name = ".".join(table.name())
    stats = _statistics_on(catalog.load_table(name), ids["s1"]) if statistics else None
    table = load_table(catalog, name)
    seen: dict[str, Seen] = {}
    last_sequence_number: list[int] = []
    kept_snapshots: set[int] = set()

    def writer() -> None:
        _make_refs(catalog.load_table(name), ids, refs)
        now = load_table(catalog, name)
        read = snapshot_rows(now)
        last_sequence_number.append(now.metadata.last_sequence_number)  # type: ignore[union-attr]  # a format-version 2 table
        for ref, kind, _, keep in refs:
            old = now.metadata.refs[ref].snapshot_id
            ancestry = _ancestry(now, old)
            kept = min(keep, len(ancestry)) if kind == "branch" else 1
            files = set().union(*(_files_of(now, s) for s in ancestry[:kept]))
            manifest_list = now.metadata.snapshot_by_id(old).manifest_list
            kept_snapshots.update(ancestry[:kept])
            seen[ref] = Seen(old, manifest_list, read[f"ref:{ref}"], _scan(now, old), files, kept, ancestry)

    _race_into_the_commit(catalog, writer)
    report = expire(table, lambda r, s: None)

    assert report.committed and report.deleted_files == [] and report.kept_all_files and seen
    every_file = set().union(*(s.files for s in seen.values()))
    for moment in ("after the expiry", "after an orphan run"):
        after = load_table(catalog, name)
        read = snapshot_rows(after)
        for ref, was in seen.items():
            new = after.metadata.refs[ref].snapshot_id
            copy = after.snapshot_by_id(new)
            assert copy is not None and new != was.snapshot_id and copy.manifest_list == was.manifest_list, moment
            assert _copy_of(copy) == was.snapshot_id
            assert (copy.sequence_number or 0) > last_sequence_number[0]
            assert f"{ref!r} now on snapshot {new}, a copy of snapshot {was.snapshot_id}" in report.kept_all_files
            assert read[f"ref:{ref}"] == was.live_rows and _scan(after, new) == was.scanned, moment
            # Its ancestors: copies of, or, the original's, in order, the ones the ref keeps first.
            origins = [_copy_of(after.snapshot_by_id(s)) or s for s in _ancestry(after, new)]
            assert origins[: was.depth] == was.ancestry[: was.depth], moment
            assert [s for s in was.ancestry if s in origins] == origins, moment
        assert all(exists(after, p) for p in every_file), moment
        if stats is not None and ids["s1"] in kept_snapshots:  # the copy of s1 has s1's statistics file
            copies = [s.snapshot_id for s in after.metadata.snapshots if _copy_of(s) == ids["s1"]]
            assert [(f.snapshot_id, f.statistics_path) for f in after.metadata.statistics] == [(copies[0], stats)]
            assert exists(after, stats), moment
        if moment == "after the expiry":
            orphans = remove_orphan_files(after, OrphanOptions(older_than=datetime.now(UTC)), sources=[INDEX_FILES])
            assert not orphans.dry_run and not orphans.failed
            assert not set(orphans.orphan_files) & (every_file | ({stats} if ids["s1"] in kept_snapshots else set()))


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_dropped_ref_comes_back_on_a_same_content_copy_and_no_orphan_run_takes_its_files(
    catalog: Catalog, case: str
) -> None:
    run_with_refs_made_inside_the_commit(catalog, CASES[case], statistics=case == "tag-with-statistics")


_REF_SETS = st.lists(
    st.tuples(st.sampled_from(["tag", "branch"]), st.sampled_from(STEPS), st.integers(1, 4)), min_size=1, max_size=4
).map(lambda drawn: tuple((f"r{i}", kind, step, keep) for i, (kind, step, keep) in enumerate(drawn)))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(refs=_REF_SETS, statistics=st.booleans())
def test_any_refs_dropped_come_back_on_copies(sqlite_catalog: Catalog, refs: tuple[Ref, ...], statistics: bool) -> None:
    """Tags and branches (keeping 1 to 4 snapshots) on any expiring snapshots, several on one, shared chains."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(commit_fence, "validates_requirements_in_process", lambda catalog: False)
        run_with_refs_made_inside_the_commit(sqlite_catalog, refs, statistics)


def test_a_table_retention_raised_inside_the_commit_keeps_every_snapshot_it_keeps_as_a_copy(catalog: Catalog) -> None:
    """Snapshots no ref points at come back as copies too: each reads its original's rows, none of their files
    goes in an orphan run."""
    table, _ = make_history(catalog)
    name = ".".join(table.name())
    before = snapshot_rows(table)
    files = reachable(table)
    _race_into_the_commit(
        catalog,
        lambda: (
            catalog.load_table(name)
            .transaction()
            .set_properties({"history.expire.max-snapshot-age-ms": str(86_400_000)})
            .commit_transaction()
        ),
    )

    report = expire(table, lambda r, s: None)

    assert report.committed and report.deleted_files == [] and report.kept_all_files
    for moment in ("after the expiry", "after an orphan run"):
        after = load_table(catalog, name)
        read = snapshot_rows(after)
        copies = {_copy_of(s): s.snapshot_id for s in after.metadata.snapshots if _copy_of(s) is not None}
        assert set(report.expired_snapshot_ids) == set(copies), moment
        assert all(read[f"snapshot:{copy}"] == before[f"snapshot:{old}"] for old, copy in copies.items()), moment
        assert all(exists(after, p) for p in files), moment
        if moment == "after the expiry":
            orphans = remove_orphan_files(after, OrphanOptions(older_than=datetime.now(UTC)), sources=[INDEX_FILES])
            assert not orphans.failed and not set(orphans.orphan_files) & files


def test_a_restore_raced_by_snapshots_on_a_new_branch_is_refused_and_the_sequence_number_kept(
    catalog: Catalog,
) -> None:
    """Inside the restore's commit another writer makes a branch and two snapshots on it: that moves no ref the
    restore asserts, but the copies' sequence numbers are no longer above the table's last, and every copy has
    a parent, so the catalog refuses the restore instead of lowering the last sequence number (which a copy
    without a parent would do, and a later commit would reuse). The run fails naming it; nothing is deleted."""
    table, ids = make_history(catalog)
    name = ".".join(table.name())
    files = reachable(table)

    def two_snapshots_on_a_new_branch() -> None:
        writer = catalog.load_table(name)
        writer.manage_snapshots().create_branch(ids["s3"], "x").commit()
        writer.append(rows(900, 1), branch="x")
        writer.append(rows(901, 1), branch="x")

    _race_into_the_commit(catalog, lambda: _make_refs(catalog.load_table(name), ids, CASES["branch"]))
    race_into_commit(catalog, two_snapshots_on_a_new_branch, lambda u: any(isinstance(x, AddSnapshotUpdate) for x in u))

    with pytest.raises(ExpiryRestoreError) as raised:
        expire(table, lambda r, s: None)

    after = load_table(catalog, name)
    message = str(raised.value)
    assert "\n" not in message and "branch 'b'" in message and "cannot put back" in message, message
    assert "b" not in after.metadata.refs and "x" in after.metadata.refs
    assert after.metadata.last_sequence_number == max(s.sequence_number or 0 for s in after.metadata.snapshots)  # type: ignore[union-attr]  # a format-version 2 table
    assert all(exists(after, p) for p in files)
