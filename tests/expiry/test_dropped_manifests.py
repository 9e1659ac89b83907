"""Expiry reads no kept manifest when it drops no manifest, and finds the same files as reading them all (S14).

- Over random histories (fast and merging appends, overwrites, deletes, tags, branches with
  their own commits, statistics files) and random cutoffs, the dry run's deleted files and bytes
  equal those of the full algorithm: every kept reference read with the orphan engine's walk
  (``collect_referenced``, as expiry did before), the candidates subtracted from it.
- On the local S3 servers (moto, SeaweedFS), an expiry that drops no manifest makes no GET of any manifest (every
  read of the table's files counted through its FileIO); one that drops a manifest reads them.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata

from airflow_iceberg_maint.expiry import files, run
from airflow_iceberg_maint.expiry.dropped import Sized, expired_lists, read_lists
from airflow_iceberg_maint.expiry.run import ExpiryReport, expire_snapshots
from airflow_iceberg_maint.expiry.settings import ExpireOptions
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES, INDEX_SNAPSHOTS
from airflow_iceberg_maint.reachability.reference_walk import ReferenceWalk, collect_referenced
from airflow_iceberg_maint.reachability.referenced import ReferencedSet
from airflow_iceberg_maint.reachability.sources import ReferenceSource
from tests.expiry.history import after_clock_passes, set_statistics_file
from tests.orphans.scenario import SCHEMA, Files, rows

OPS = ("append", "merge", "overwrite", "delete", "tag", "branch", "stats")


def every_kept_reference(
    walk: ReferenceWalk,
    before: TableMetadata,
    after: tuple[TableMetadata, str],
    expired: set[int],
    sources: Sequence[ReferenceSource],
) -> Sized:
    """The full algorithm: every reference of the metadata after the expiry read, kept manifests included."""
    kept = ReferencedSet(walk.equivalence)
    collect_referenced(kept, walk, sources, *after)
    reached = read_lists(walk.table.io, expired_lists(before, expired))
    return files._unreferenced(files._expired_reach(walk, before, expired, reached, kept), kept)


def _step(table: Table, op: str, n: int) -> None:
    start = 1000 * n
    if op == "append":
        table.append(rows(start, 3))
    elif op == "merge":  # a merging append: the manifests so far become one, the old ones are dropped
        with table.transaction() as tx:
            tx.set_properties({"commit.manifest-merge.enabled": "true", "commit.manifest.min-count-to-merge": "2"})
            tx.append(rows(start, 3))
            tx.set_properties({"commit.manifest-merge.enabled": "false"})
    elif op == "overwrite":
        table.overwrite(rows(start, 2), overwrite_filter=f"id < {start - 998}")
    elif op == "delete":
        table.delete(f"id = {start - 1000}")
    elif op == "tag" and table.current_snapshot() is not None:
        table.manage_snapshots().create_tag(table.metadata.current_snapshot_id, f"t{n}").commit()
    elif op == "branch" and table.current_snapshot() is not None:
        table.manage_snapshots().create_branch(table.metadata.current_snapshot_id, f"b{n}").commit()
        table.append(rows(start + 500, 2), branch=f"b{n}")
    elif op == "stats" and table.current_snapshot() is not None:
        path = f"{table.location()}/metadata/stats-{n}.puffin"
        Files(table).put(path, b"PFA1stats")
        set_statistics_file(table, table.metadata.current_snapshot_id, path)
    snapshot = table.current_snapshot()
    if snapshot is not None:
        after_clock_passes(max(s.timestamp_ms for s in table.metadata.snapshots))


def _history(catalog: Catalog, ops: Sequence[str]) -> Table:
    table = catalog.create_table("db.h", schema=SCHEMA, properties={"format-version": "2"})
    table.append(rows(0, 3))
    after_clock_passes(table.current_snapshot().timestamp_ms)
    for n, op in enumerate(ops, start=1):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a delete or overwrite that matched no row commits nothing: fine
            _step(table, op, n)
    return catalog.load_table("db.h")


def _dry_run(table: Table, older_than: datetime, retain_last: int) -> ExpiryReport:
    options = ExpireOptions(older_than=older_than, retain_last=retain_last, dry_run=True)
    return expire_snapshots(table, options, sources=[INDEX_FILES], pins=[INDEX_SNAPSHOTS], now=datetime.now(UTC))


_SLOW = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


@settings(max_examples=8, deadline=None, suppress_health_check=_SLOW)
@given(
    ops=st.lists(st.sampled_from(OPS), min_size=2, max_size=6),
    cut=st.integers(min_value=0, max_value=8),
    retain_last=st.integers(min_value=1, max_value=2),
)
def test_the_dry_run_deletes_what_reading_every_kept_reference_does(
    monkeypatch: pytest.MonkeyPatch, ops: list[str], cut: int, retain_last: int
) -> None:
    with TemporaryDirectory() as folder:
        warehouse = Path(folder) / "warehouse"
        warehouse.mkdir()
        catalog = SqlCatalog("h", uri=f"sqlite:///{folder}/catalog.db", warehouse=f"file://{warehouse}")
        catalog.create_namespace("db")
        table = _history(catalog, ops)
        times = sorted(s.timestamp_ms for s in table.metadata.snapshots)
        older_than = datetime.fromtimestamp((times[min(cut, len(times) - 1)] + 1) / 1000, UTC)

        ours = _dry_run(table, older_than, retain_last)
        with monkeypatch.context() as patched:
            patched.setattr(run, "deletable_files", every_kept_reference)
            full = _dry_run(catalog.load_table("db.h"), older_than, retain_last)

    assert ours.expired_snapshot_ids == full.expired_snapshot_ids
    assert ours.deleted_files == full.deleted_files
    assert ours.deleted_bytes == full.deleted_bytes


class _ReadCounter:
    """Every file opened for reading through pyiceberg's pyarrow FileIO, by path (passed through unchanged)."""

    def __init__(self) -> None:
        self.opened: list[str] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        new_input = PyArrowFileIO.new_input
        counter = self

        def counted(io: PyArrowFileIO, location: str) -> Any:
            found = new_input(io, location)
            real_open = found.open

            def open_(seekable: bool = True) -> Any:
                counter.opened.append(location)
                return real_open(seekable=seekable)

            found.open = open_  # type: ignore[method-assign]
            return found

        monkeypatch.setattr(PyArrowFileIO, "new_input", counted)


def _manifests(table: Table) -> set[str]:
    return set(table.inspect.all_manifests()["path"].to_pylist())


def _fast_appends(catalog: Catalog, count: int) -> Iterator[Table]:
    table = catalog.create_table("db.s", schema=SCHEMA, properties={"format-version": "2"})
    for n in itertools.count():
        if n == count:
            return
        table.append(rows(10 * n, 2))
        after_clock_passes(table.current_snapshot().timestamp_ms)
        yield table


@pytest.mark.parametrize("backend", ["s3_catalog", "seaweed_s3_catalog"])  # moto and SeaweedFS
def test_on_s3_an_expiry_that_drops_no_manifest_reads_none(
    backend: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    s3_catalog: Catalog = request.getfixturevalue(backend)
    tables = list(_fast_appends(s3_catalog, 5))
    table = tables[-1]
    path = f"{table.location()}/metadata/stats-a1.puffin"
    Files(table).put(path, b"PFA1stats")
    first = table.metadata.snapshots[0]
    set_statistics_file(table, first.snapshot_id, path)
    table = s3_catalog.load_table("db.s")
    older_than = datetime.fromtimestamp((table.metadata.snapshots[2].timestamp_ms + 1) / 1000, UTC)
    manifests, lists = _manifests(table), {s.manifest_list for s in table.metadata.snapshots}
    expired_lists = {s.manifest_list for s in table.metadata.snapshots[:3]}
    counter = _ReadCounter()
    counter.install(monkeypatch)

    report = _dry_run(table, older_than, 1)

    assert len(report.expired_snapshot_ids) == 3
    assert set(report.deleted_files) == expired_lists | {path}
    assert set(counter.opened) & manifests == set()
    assert lists <= set(counter.opened)  # it did read the table's manifest lists through the counter


@pytest.mark.s3
def test_on_s3_an_expiry_that_drops_a_manifest_reads_the_kept_ones(
    s3_catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = list(_fast_appends(s3_catalog, 3))[-1]
    table.overwrite(rows(100, 2), overwrite_filter="id < 1")  # rewrites the first append's manifest
    after_clock_passes(table.current_snapshot().timestamp_ms)
    table = s3_catalog.load_table("db.s")
    older_than = datetime.fromtimestamp((table.metadata.snapshots[-1].timestamp_ms - 1) / 1000, UTC)
    kept = table.current_snapshot()
    assert kept is not None
    kept_manifests = {m.manifest_path for m in kept.manifests(table.io)}
    counter = _ReadCounter()
    counter.install(monkeypatch)

    report = _dry_run(table, older_than, 1)

    assert any(p.endswith(".parquet") for p in report.deleted_files)  # the overwritten rows' data file
    assert kept_manifests & set(counter.opened)
