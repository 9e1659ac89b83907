"""The public Python API (docs/python.md): its examples run as written, its defaults are the safe ones, and bad
input is refused with the project's typed one-line errors before anything is loaded or changed.

Real parts only: SQLite catalogs, Parquet files on local disk, the engines the command line runs.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.expressions import GreaterThanOrEqual
from pyiceberg.table import Table

import airflow_iceberg_maint
from airflow_iceberg_maint import (
    InvalidInputError,
    MaintenanceError,
    PrefixMismatchMode,
    TableNotFoundError,
    create_index,
    expire_index_extracts,
    expire_snapshots,
    index_lag,
    list_indexes,
    lookup_index,
    lookup_index_range,
    refresh_index,
    remove_orphan_files,
    remove_unreferenced_index_files,
)
from airflow_iceberg_maint.index.lifecycle.references import index_file_batches
from airflow_iceberg_maint.orphans.options import PREFIX_MISMATCH_MODES
from tests.orphans.scenario import SCHEMA, rows

ROOT = Path(__file__).resolve().parent.parent
PYTHON_MD = ROOT / "docs" / "python.md"
TEN_DAYS = 10 * 86400


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)


def test_the_examples_of_python_md_run_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = python_blocks(PYTHON_MD.read_text(encoding="utf-8"))
    assert len(blocks) >= 4, "docs/python.md shows orphans, expiry, an index lookup and the errors"
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "python_md"}
    for number, block in enumerate(blocks, 1):
        exec(compile(block, f"docs/python.md, python block {number}", "exec"), namespace)
    # What the blocks asserted, seen from here: the stray file went, one snapshot expired, the index answered.
    assert namespace["report"].deleted_file_count == 1 and not namespace["stray"].exists()
    assert namespace["expiry"].committed and len(namespace["expiry"].expired_snapshot_ids) == 1
    assert namespace["found"].rows.num_rows == 2


def _files(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root``: its size and modification time (ns)."""
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*")) if p.is_file()}


def _age(root: Path, seconds: float) -> None:
    then = time.time() - seconds
    for path in root.rglob("*"):
        if path.is_file():
            os.utime(path, (then, then))


def _local(table: Table) -> Path:
    return Path(table.location().removeprefix("file://"))


def _indexed_table(catalog: Catalog) -> Table:
    """Three appends, an index refreshed after the second, and two old unreferenced files; every file
    (index files included) is ten days old, so only what is referenced or protected is kept."""
    table = catalog.create_table("db.events", schema=SCHEMA)
    table.append(rows(0, 50))
    table.append(rows(50, 50))
    create_index(table, "by_id", ordering="id", with_row_location=True)
    refresh_index(table, "by_id")
    table.append(rows(100, 5))
    table = catalog.load_table("db.events")
    for name in ("stray-1.parquet", "stray-2.parquet"):
        (_local(table) / "data" / name).write_bytes(b"nothing references this")
    _age(_local(table), TEN_DAYS)
    return table


def test_dry_run_is_the_default_and_deletes_and_commits_nothing(sqlite_catalog: Catalog, warehouse: Path) -> None:
    table = _indexed_table(sqlite_catalog)
    leftover = _local(table) / "index" / "by_id" / "leftover.parquet"  # as a failed build leaves one
    leftover.write_bytes(b"no extract lists this")
    before, metadata_location = _files(warehouse), table.metadata_location

    orphans = remove_orphan_files("db.events", catalog=sqlite_catalog)
    expiry = expire_snapshots(table, older_than=datetime.now(UTC), retain_last=1)
    unreferenced = remove_unreferenced_index_files(table, older_than_days=0)

    # Each found something a real run would remove, and removed nothing.
    assert orphans.dry_run and sorted(Path(p).name for p in orphans.orphan_files) == [
        "stray-1.parquet",
        "stray-2.parquet",
    ]
    assert orphans.deleted_file_count == 0
    assert expiry.dry_run and expiry.expired_snapshot_ids and expiry.deleted_files and not expiry.committed
    assert unreferenced.dry_run and [Path(p).name for p in unreferenced.unreferenced_files] == ["leftover.parquet"]
    assert unreferenced.deleted_file_count == 0
    assert _files(warehouse) == before
    assert sqlite_catalog.load_table("db.events").metadata_location == metadata_location


class _Keep:
    """A caller's reference source: keeps the files it names."""

    def __init__(self, name: str, paths: list[str]) -> None:
        self.name, self._paths = name, paths

    def path_batches(self, table: Table) -> Iterator[list[str]]:
        yield list(self._paths)


class _Pin:
    """A caller's snapshot pin."""

    name = "caller"

    def __init__(self, snapshot_id: int) -> None:
        self._snapshot_id = snapshot_id

    def snapshot_ids(self, table: Table) -> dict[int, str]:
        return {self._snapshot_id: "kept by the caller"}


# The caller's sources: none, one keeping a stray file, one naming nothing, and two.
SOURCE_CASES: dict[str, Callable[[str], list[_Keep]]] = {
    "none": lambda kept: [],
    "one": lambda kept: [_Keep("mine", [kept])],
    "empty": lambda kept: [_Keep("nothing", [])],
    "two": lambda kept: [_Keep("nothing", []), _Keep("mine", [kept])],
}


@pytest.mark.parametrize("case", SOURCE_CASES)
def test_index_files_survive_orphan_removal_whatever_sources_the_caller_adds(
    sqlite_catalog: Catalog, case: str
) -> None:
    table = _indexed_table(sqlite_catalog)
    index_files = {p for batch in index_file_batches(table) for p in batch}
    strays = [f"{table.location()}/data/stray-1.parquet", f"{table.location()}/data/stray-2.parquet"]
    sources = SOURCE_CASES[case](strays[0])
    kept_by_caller = {p for s in sources for batch in s.path_batches(table) for p in batch}

    report = remove_orphan_files(table, extra_sources=sources, dry_run=False)

    assert sorted(report.orphan_files) == sorted(set(strays) - kept_by_caller)
    assert report.deleted_file_count == len(report.orphan_files)
    assert all(Path(p.removeprefix("file://")).exists() for p in index_files | kept_by_caller)
    assert lookup_index(table, "by_id", [7, 101]).rows.num_rows == 2


@pytest.mark.parametrize("caller_pins", [False, True])
def test_expiry_keeps_the_index_pin_and_every_index_file_beside_the_callers_pins(
    sqlite_catalog: Catalog, caller_pins: bool
) -> None:
    table = _indexed_table(sqlite_catalog)
    first, extracted, head = (s.snapshot_id for s in table.snapshots())
    index_files = {p for batch in index_file_batches(table) for p in batch}
    pins = [_Pin(first)] if caller_pins else []

    report = expire_snapshots(
        table, older_than=datetime.now(UTC), retain_last=1, extra_pins=pins, extra_sources=[], dry_run=False
    )

    expected_pins = {str(extracted): "newest extract of index by_id"}
    if caller_pins:
        expected_pins[str(first)] = "kept by the caller"
    assert report.kept_for_pins == expected_pins
    assert report.expired_snapshot_ids == ([] if caller_pins else [first])
    assert {s.snapshot_id for s in sqlite_catalog.load_table("db.events").snapshots()} == (
        {first, extracted, head} if caller_pins else {extracted, head}
    )
    assert not index_files & set(report.deleted_files)
    assert all(Path(p.removeprefix("file://")).exists() for p in index_files)


def test_the_index_operations_list_look_up_expire_and_clean(sqlite_catalog: Catalog) -> None:
    table = _indexed_table(sqlite_catalog)
    first_extract = table.snapshots()[1].snapshot_id
    info = create_index(table, "by_category", ordering=["category", "id"], identity=["id"])

    assert info.ordering == ["category", "id"] and info.extracts == 0 and info.location.endswith("/index/by_category")
    listed = {i.name: i for i in list_indexes("db.events", catalog=sqlite_catalog)}
    assert sorted(listed) == ["by_category", "by_id"] and listed["by_category"] == info
    assert listed["by_id"].extracts == 1 and listed["by_id"].newest_extract_snapshot_id == first_extract

    refreshed = refresh_index(table, "by_id")
    assert refreshed.extract.source_table_snapshot_id == table.snapshots()[-1].snapshot_id
    assert index_lag(table, "by_id").snapshots_behind == 0
    expected = table.scan(row_filter=GreaterThanOrEqual("id", 48)).to_arrow().to_pylist()  # type: ignore[arg-type, call-arg]
    ranged = lookup_index_range(table, "by_id", low=48, high=None)
    assert sorted(r["id"] for r in ranged.rows.to_pylist()) == sorted(r["id"] for r in expected)
    assert lookup_index(table, "by_id", pa.array([3, 104])).rows.column("id").to_pylist() == [3, 104]

    expired = expire_index_extracts(table, "by_id", retain_last=1)
    assert len(expired.expired_extract_ids) == 1 and expired.deleted_file_count > 0 and not expired.failed
    assert list_indexes(table)[1].extracts == 1

    leftover = _local(table) / "index" / "by_id" / "leftover.parquet"
    leftover.write_bytes(b"no extract lists this")
    _age(leftover.parent, TEN_DAYS)
    cleaned = remove_unreferenced_index_files(table, "by_id", older_than_days=1, dry_run=False)
    assert [Path(p).name for p in cleaned.unreferenced_files] == ["leftover.parquet"]
    assert cleaned.deleted_file_count == 1 and not leftover.exists()
    assert lookup_index(table, "by_id", [7]).rows.num_rows == 1


def _future() -> datetime:
    return datetime.now(UTC) + timedelta(days=1)


# (call, the error's type, its message: exact, or a pattern when it holds a time)
BAD_INPUT: dict[str, tuple[Callable[[str, Any], object], type[MaintenanceError], str]] = {
    "negative days": (
        lambda t, c: remove_orphan_files(t, catalog=c, older_than_days=-1),
        InvalidInputError,
        "older_than_days -1: expected a finite number of days >= 0",
    ),
    "days not finite": (
        lambda t, c: expire_snapshots(t, catalog=c, older_than_days=float("nan")),
        InvalidInputError,
        "older_than_days nan: expected a finite number of days >= 0",
    ),
    "days before 1970": (
        lambda t, c: remove_orphan_files(t, catalog=c, older_than_days=1e6),
        InvalidInputError,
        r"older_than_days 1e\+06: expected at most \d+ days \(back to 1970-01-01\)",
    ),
    "days as text": (
        lambda t, c: remove_orphan_files(t, catalog=c, older_than_days="3"),  # type: ignore[arg-type]  # deliberately wrong: the API's check is tested
        InvalidInputError,
        "older_than_days '3': expected a number of days >= 0",
    ),
    "future cutoff (orphans)": (
        lambda t, c: remove_orphan_files(t, catalog=c, older_than=_future()),
        InvalidInputError,
        r"older_than \S+: is in the future \(now is \S+\)",
    ),
    "future cutoff (expiry)": (
        lambda t, c: expire_snapshots(t, catalog=c, older_than=_future().replace(tzinfo=None)),
        InvalidInputError,
        r"older_than \S+\+00:00: is in the future \(now is \S+\)",
    ),
    "both cutoffs": (
        lambda t, c: expire_snapshots(t, catalog=c, older_than=datetime.now(UTC), older_than_days=1),
        InvalidInputError,
        "older_than and older_than_days: give one of them, not both",
    ),
    "dry_run not a bool": (
        lambda t, c: remove_orphan_files(t, catalog=c, dry_run=0),  # type: ignore[arg-type]  # deliberately wrong: the API's check is tested
        InvalidInputError,
        "dry_run 0: expected True or False",
    ),
    "unknown mode": (
        lambda t, c: remove_orphan_files(t, catalog=c, prefix_mismatch_mode="sometimes"),  # type: ignore[arg-type]  # deliberately wrong: the API's check is tested
        InvalidInputError,
        "prefix_mismatch_mode 'sometimes': expected one of PrefixMismatchMode.ERROR, PrefixMismatchMode.IGNORE, "
        "PrefixMismatchMode.DELETE",
    ),
    "no deletes allowed": (
        lambda t, c: remove_orphan_files(t, catalog=c, max_concurrent_deletes=0),
        InvalidInputError,
        "max_concurrent_deletes 0: expected a whole number >= 1",
    ),
    "no memory": (
        lambda t, c: remove_orphan_files(t, catalog=c, memory_budget_mb=0),
        InvalidInputError,
        "memory_budget_mb 0: expected a whole number >= 1",
    ),
    "empty listing": (
        lambda t, c: remove_orphan_files(t, catalog=c, listing=" "),
        InvalidInputError,
        "listing: must not be empty (omit it to list storage)",
    ),
    "retain nothing": (
        lambda t, c: expire_snapshots(t, catalog=c, retain_last=0),
        InvalidInputError,
        "retain_last 0: expected a whole number >= 1 (every branch keeps its head)",
    ),
    "one source, not a list": (
        lambda t, c: remove_orphan_files(t, catalog=c, extra_sources=_Keep("mine", [])),  # type: ignore[arg-type]  # deliberately wrong: the API's check is tested
        InvalidInputError,
        "extra_sources: expected a list or tuple, got _Keep",
    ),
    "a pin without snapshot_ids": (
        lambda t, c: expire_snapshots(t, catalog=c, extra_pins=[_Keep("mine", [])]),  # type: ignore[list-item]  # deliberately wrong: the API's check is tested
        InvalidInputError,
        r"extra_pins: <.*_Keep object at \w+> lacks snapshot_ids",
    ),
    "index expiry selecting nothing": (
        lambda t, c: expire_index_extracts(t, "by_id", catalog=c),
        InvalidInputError,
        "expire_index_extracts: give retain_last, older_than, or both",
    ),
    "lookup keys as text": (
        lambda t, c: lookup_index(t, "by_id", "7", catalog=c),
        InvalidInputError,
        "keys '7': expected a list of key values (a tuple each for several columns)",
    ),
    "no namespace": (
        lambda t, c: remove_orphan_files("events", catalog=c),
        InvalidInputError,
        "table 'events': expected 'namespace.table'",
    ),
}


@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input_is_refused_in_one_line_before_the_catalog_is_opened(
    sqlite_catalog: Catalog, warehouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    call, error, message = BAD_INPUT[case]
    _indexed_table(sqlite_catalog)
    before = _files(warehouse)
    # A catalog nothing configures: had it been opened first, its error would be raised instead.
    monkeypatch.setenv("PYICEBERG_HOME", str(tmp_path))
    with pytest.raises(error) as raised:
        call("db.events", "not-configured")
    assert type(raised.value) is error and "\n" not in str(raised.value)
    assert re.fullmatch(message, str(raised.value)) or str(raised.value) == message, str(raised.value)
    assert _files(warehouse) == before


def test_an_unknown_table_is_a_table_not_found_error(sqlite_catalog: Catalog, warehouse: Path) -> None:
    _indexed_table(sqlite_catalog)
    before = _files(warehouse)
    for call in (remove_orphan_files, expire_snapshots):
        with pytest.raises(TableNotFoundError) as raised:
            call("db.missing", catalog=sqlite_catalog, dry_run=False)
        assert str(raised.value) == "table 'db.missing': not found in catalog 'default'"
    assert _files(warehouse) == before


def test_a_table_object_is_reloaded_with_its_complete_metadata(sqlite_catalog: Catalog) -> None:
    """A caller's ``Table`` whose metadata lacks snapshots (as a REST catalog's refs-only answer does) is read
    again from its metadata file, so that every function plans on every snapshot."""
    table = _indexed_table(sqlite_catalog)
    first, extracted, _ = (s.snapshot_id for s in table.snapshots())
    partial = Table(
        identifier=table.name(),
        metadata=table.metadata.model_copy(update={"snapshots": [table.snapshots()[-1]]}),
        metadata_location=table.metadata_location,
        io=table.io,
        catalog=table.catalog,
    )
    expiry = expire_snapshots(partial, older_than=datetime.now(UTC), retain_last=1)
    assert expiry.expired_snapshot_ids == [first]
    assert expiry.kept_for_pins == {str(extracted): "newest extract of index by_id"}
    orphans = remove_orphan_files(partial)
    assert sorted(Path(p).name for p in orphans.orphan_files) == ["stray-1.parquet", "stray-2.parquet"]
    assert orphans.snapshots == 3


def test_the_package_exports_its_api_and_nothing_else_of_the_internals() -> None:
    # What mypy sees (the imports under TYPE_CHECKING) is what __all__ lists and what Python gives.
    tree = ast.parse((ROOT / "src" / "airflow_iceberg_maint" / "__init__.py").read_text(encoding="utf-8"))
    typed = {
        alias.asname or alias.name: node.module
        for guard in tree.body
        if isinstance(guard, ast.If)
        for node in guard.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }
    assert sorted(airflow_iceberg_maint.__all__) == sorted([*typed, "__version__"])
    for name, module in typed.items():
        assert getattr(airflow_iceberg_maint, name) is getattr(importlib.import_module(module), name), name
    with pytest.raises(AttributeError, match="has no attribute 'removal'"):
        _ = airflow_iceberg_maint.removal
    assert {m.value for m in PrefixMismatchMode} == set(PREFIX_MISMATCH_MODES)


def test_importing_the_package_loads_no_engine() -> None:
    """Airflow imports the package for its provider information: that stays light (the API loads on first use)."""
    code = "import sys, airflow_iceberg_maint; print(sorted(m for m in ('pyiceberg', 'pyarrow') if m in sys.modules))"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == "[]"
