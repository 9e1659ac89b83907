"""Property: whatever the history and whatever is planted, a run deletes only the oracle's orphans.

Hypothesis draws a history (appends, overwrites, row deletes, snapshot expiry) and planted files
(plain, hidden, in partition folders) for each spelling case below. The oracle resolves every
path the table references on the local disk (``os.path.realpath``: ``.`` segments, ``//`` and
symlinks), so a listed file is an orphan only if no reference names the same file, and nothing
under another table's location is ever one. The property: the deleted set is a subset of the
oracle's orphans (equal to it in the plain case), no live file is missing afterwards, and every
snapshot still reads its rows.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform

from airflow_iceberg_maint.errors import LocationRefusedError
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from tests.orphans.scenario import SCHEMA, rows
from tests.reliability import oracle
from tests.reliability.figures import report, scale
from tests.reliability.histories import write_history

pytestmark = pytest.mark.reliability

settings.register_profile(
    "reliability",
    max_examples=6,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile(
    "reliability-soak",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
PROFILE = settings.get_profile("reliability-soak" if scale(0, 1) else "reliability")


SPELLINGS = ["plain", "dot_segments", "double_slash", "symlink_scan", "nested_table", "non_utf8_name"]

OPS = st.lists(st.sampled_from(["append", "append", "overwrite", "delete", "expire"]), min_size=1, max_size=6)
PLANTS = st.lists(
    st.tuples(
        st.sampled_from(
            ["data", "data/{partition}", "metadata", "misc", "data/_tmp", "data/.staging", "metadata/.hidden"]
        ),
        st.text(alphabet="abcxyz-_.0", min_size=1, max_size=8).filter(lambda n: n not in (".", "..")),
    ),
    max_size=6,
)


def _write(path: str | bytes, data: bytes = b"planted") -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)


def _real(path: str) -> str:
    return os.path.realpath(oracle.fs_path(path))


class Case:
    """One example: a table with a history, planted files, and one spelling case applied."""

    def __init__(self, root: str, spelling: str, ops: list[str], plants: list[tuple[str, str]]) -> None:
        self.catalog = SqlCatalog("default", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/wh")
        self.catalog.create_namespace("db")
        spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "category"))
        table = self.catalog.create_table("db.t", schema=SCHEMA, partition_spec=spec)
        write_history(table, ops)
        self.location = table.location().rstrip("/")
        self.scan_location: str | None = None
        self.protected_roots: list[str] = []  # other tables' locations: nothing under them is an orphan
        self.unnameable: list[bytes] = []  # names that cannot be compared exactly: kept
        getattr(self, f"_{spelling}")(table)
        partitions = sorted(d for d in os.listdir(oracle.fs_path(f"{self.location}/data")) if "=" in d) or ["p"]
        for i, (folder, name) in enumerate(plants):
            _write(oracle.fs_path(f"{self.location}/{folder.format(partition=partitions[0])}/{i}{name}"))

    def table(self) -> Table:
        return self.catalog.load_table("db.t")

    def _plain(self, table: Table) -> None:
        pass

    def _add_files(self, table: Table, spelled: Callable[[str], str]) -> None:
        """Commit an existing Parquet file through ``add_files`` under an odd spelling of its path."""
        plain = f"{self.location}/data/added.parquet"
        os.makedirs(oracle.fs_path(f"{self.location}/data"), exist_ok=True)
        pq.write_table(
            pa.table({"id": pa.array([1, 2], pa.int64()), "category": pa.array(["a", "a"])}), oracle.fs_path(plain)
        )
        table.add_files([spelled(plain)])

    def _dot_segments(self, table: Table) -> None:
        self._add_files(table, lambda p: p.replace("/data/", "/data/./"))

    def _double_slash(self, table: Table) -> None:
        self._add_files(table, lambda p: p.replace("/data/", "/data//"))

    def _symlink_scan(self, table: Table) -> None:
        os.makedirs(oracle.fs_path(f"{self.location}/data"), exist_ok=True)
        os.symlink(oracle.fs_path(f"{self.location}/metadata"), oracle.fs_path(f"{self.location}/data/alias"))
        self.scan_location = f"{self.location}/data/alias"

    def _nested_table(self, table: Table) -> None:
        inner_location = f"{self.location}/data/inner"
        inner = self.catalog.create_table("db.inner", schema=SCHEMA, location=inner_location)
        inner.append(rows(0, 7))
        inner.append(rows(7, 7))
        _write(oracle.fs_path(f"{inner_location}/data/inner-orphan.parquet"))
        self.protected_roots.append(inner_location)

    def _non_utf8_name(self, table: Table) -> None:
        name = os.fsencode(oracle.fs_path(f"{self.location}/data")) + b"/odd-\xff\xfe.parquet"
        _write(name)
        self.unnameable.append(name)

    def orphans(self, table: Table) -> set[str]:
        """The oracle: listed files that no reference resolves to, outside other tables' locations."""
        live = {_real(p) for p in oracle.live_files(table)}
        roots = [_real(r) + os.sep for r in self.protected_roots]
        listed = oracle.listing(self.location)
        return {
            _real(p)
            for p in listed
            if _real(p) not in live
            and not any(_real(p).startswith(r) for r in roots)
            and os.fsencode(oracle.fs_path(p)) not in self.unnameable
        }


def _check(spelling: str, ops: list[str], plants: list[tuple[str, str]], figures: dict[str, int]) -> None:
    root = tempfile.mkdtemp(prefix="prop-")
    try:
        case = Case(root, spelling, ops, plants)
        table = case.table()
        expected = case.orphans(table)
        live = oracle.live_files(table)
        counts = oracle.snapshot_rows(table)
        nested_before = oracle.listing(case.protected_roots[0]) if case.protected_roots else set()
        options = OrphanOptions(older_than=datetime.now(UTC), location=case.scan_location)
        try:
            done = remove_orphan_files(table, options, sources=[INDEX_FILES])
            deleted = {_real(p) for p in done.orphan_files}
        except LocationRefusedError:
            deleted = set()
            figures["refused"] += 1
        assert deleted <= expected, f"deleted files the oracle keeps: {sorted(deleted - expected)}"
        if spelling == "plain":
            assert deleted == expected
        assert oracle.missing(live) == []
        assert oracle.snapshot_rows(case.table()) == counts
        assert all(os.path.exists(name) for name in case.unnameable)
        if case.protected_roots:
            assert oracle.listing(case.protected_roots[0]) == nested_before
            inner = case.catalog.load_table("db.inner")
            assert len(inner.scan().to_arrow()) == 14
        figures["examples"] += 1
        figures["deleted"] += len(deleted)
        figures["oracle_orphans"] += len(expected)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_deleted_files_are_always_oracle_orphans(spelling: str) -> None:
    figures: dict[str, Any] = {"examples": 0, "deleted": 0, "oracle_orphans": 0, "refused": 0}

    @PROFILE
    @given(ops=OPS, plants=PLANTS)
    def prop(ops: list[str], plants: list[tuple[str, str]]) -> None:
        _check(spelling, ops, plants, figures)

    prop()
    report(f"property[{spelling}]", **figures, files_lost=0)
