"""``rewrite_manifests`` over random histories (hypothesis): appends to random partitions, partition-spec
evolution, overwrites, position and equality deletes, at any target size. Every snapshot reads the same rows
before and after (a reader applying every delete by sequence number), each live file keeps its sequence numbers
and snapshot id, and no new manifest holds two groups (S21)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import EqualTo
from pyiceberg.transforms import IdentityTransform

from airflow_iceberg_maint.catalog import load_table
from airflow_iceberg_maint.compaction.manifest_plan import group_key
from airflow_iceberg_maint.compaction.manifests import rewrite_manifests
from tests.compaction.test_rewrite_manifests import entries
from tests.expiry.history import snapshot_rows
from tests.index.row_deletes import commit_equality_deletes, commit_position_deletes
from tests.orphans.scenario import CATEGORIES, SCHEMA, rows

#: One step of a history: (kind, a number that picks what it touches).
STEPS = st.lists(
    st.tuples(st.sampled_from(["append", "append", "evolve", "overwrite", "position", "equality"]), st.integers(0, 99)),
    min_size=1,
    max_size=7,
)


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> SqlCatalog:
    root: Path = tmp_path_factory.mktemp("property")
    catalog = SqlCatalog("default", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse")
    catalog.create_namespace("db")
    return catalog


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS, target=st.sampled_from([4500, 6000, 20000, 8 * 1024 * 1024]))
def test_any_history_reads_the_same_after_a_rewrite(catalog: SqlCatalog, steps: list, target: int) -> None:
    table = catalog.create_table(f"db.p{uuid.uuid4().hex[:10]}", schema=SCHEMA, properties={"format-version": "2"})
    table.append(rows(0, 6))
    evolved = equality = False
    for kind, pick in steps:
        files = sorted(table.inspect.files()["file_path"].to_pylist())
        if kind == "append":
            table.append(rows(100 + pick * 7, 1 + pick % 9))
        elif kind == "evolve" and not evolved:
            with table.update_spec() as spec:
                spec.add_field("category", IdentityTransform(), "category")
            evolved = True
        elif kind == "overwrite" and not equality:  # pyiceberg's overwrite reads the table: no equality deletes
            # mypy reads EqualTo's pydantic fields, not its __init__(term, literal)
            row_filter = EqualTo("category", CATEGORIES[pick % 6])  # type: ignore[arg-type, call-arg]
            table.overwrite(rows(1000 + pick, 3), overwrite_filter=row_filter)
        elif kind == "position" and files:
            commit_position_deletes(table, {files[pick % len(files)]: [0]})
        elif kind == "equality":
            commit_equality_deletes(table, ["id"], [[pick % 6], [100 + pick * 7]])
            equality = True
    table = load_table(catalog, ".".join(table.name()))
    before_rows, before_entries = snapshot_rows(table), entries(table)
    parent = table.metadata.current_snapshot_id

    report = rewrite_manifests(table, target_manifest_size_bytes=target, dry_run=False)

    after = load_table(catalog, ".".join(table.name()))
    after_rows = snapshot_rows(after)
    current = after.metadata.current_snapshot_id
    assert {k: v for k, v in after_rows.items() if k != f"snapshot:{current}" or current == parent} == before_rows
    assert after_rows[f"snapshot:{current}"] == before_rows[f"snapshot:{parent}"]
    assert (current != parent) == bool(report.commits)
    assert entries(after) == before_entries
    if report.commits:
        snapshot = after.current_snapshot()
        assert snapshot is not None and snapshot.snapshot_id == report.commits[0]
        for manifest in snapshot.manifests(after.io):
            listed = manifest.fetch_manifest_entry(after.io, discard_deleted=False)
            assert len({group_key(manifest, e) for e in listed}) == 1
    again = rewrite_manifests(after, target_manifest_size_bytes=target, dry_run=False)
    assert again.commits == []
