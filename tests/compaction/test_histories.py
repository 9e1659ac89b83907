"""Property: over random histories of appends, deletes of each kind and compactions, every snapshot of the
table reads exactly the rows the oracle tracked for it (the current one and every older one)."""

from __future__ import annotations

import tempfile
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint import rewrite_data_files
from tests.compaction.helpers import read_live
from tests.index.oracle_table import POOLS, OracleTable

STEP = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 120)),
    st.tuples(st.just("positions"), st.integers(1, 15)),
    st.tuples(st.just("vector"), st.integers(1, 5)),
    st.tuples(st.just("equality"), st.sampled_from(["k_int", "k_str"])),
    st.tuples(st.just("compact"), st.sampled_from(["binpack", "sort", "part"])),
)


def _rows(rows: Any) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(sorted(r.items())) for r in rows)


def _apply(oracle: OracleTable, catalog: SqlCatalog, step: tuple[str, Any]) -> None:
    kind, value = step
    if kind == "append":
        oracle.append(value)
    elif kind == "positions" and oracle.rows:
        oracle.delete_positions(value)
    elif kind == "vector" and len(oracle.rows) > value:
        oracle.delete_with_deletion_vector(value)
    elif kind == "equality" and oracle.rows:
        oracle.delete_equality(value, [oracle.rng.choice(POOLS[value])])
    elif kind == "compact":
        # "part": only the files that may hold the older half of the rows, so deletes keep applying to others.
        report = rewrite_data_files(
            oracle.table,
            dry_run=False,
            min_input_files=2,
            strategy="sort" if value == "sort" else "binpack",
            sort=["rid"] if value == "sort" else (),
            where=f"rid < {oracle.next_rid // 2}" if value == "part" else None,
        )
        assert report.failed == []
        oracle.table = catalog.load_table("db.t")
        for snapshot_id in report.commits:
            oracle.history[snapshot_id] = list(oracle.rows.values())


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(STEP, min_size=2, max_size=8), seed=st.integers(0, 1000))
def test_random_histories_read_the_same_rows(steps: list[tuple[str, Any]], seed: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        catalog = SqlCatalog("default", uri=f"sqlite:///{tmp}/c.db", warehouse=f"file://{tmp}/wh")
        catalog.create_namespace("db")
        oracle = OracleTable.create(catalog, "t", seed, {"write.target-file-size-bytes": str(16 * 1024)})
        oracle.append(50)
        for step in [*steps, ("compact", "binpack")]:
            _apply(oracle, catalog, step)
        table = catalog.load_table("db.t")
        assert read_live(table) == _rows(oracle.rows.values())
        for snapshot_id, rows in oracle.history.items():
            assert read_live(table, snapshot_id) == _rows(rows), snapshot_id
        again = rewrite_data_files(table, dry_run=False, min_input_files=2)
        assert again.commits == []  # nothing left to do
