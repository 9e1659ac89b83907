"""Reference sources passed to the engine by tests, the way the CLI and operators pass the index's."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from pyiceberg.table import Table

from airflow_iceberg_maint.fs.locations import local_path
from tests.orphans.scenario import Files


def broken(table: Table) -> Iterator[list[str]]:
    raise OSError("index metadata unreadable")
    yield []


def first_region(table: Table) -> Iterator[list[str]]:
    yield [table.location() + "/index/idx/region-1.parquet"]


def commit_late_file(table: Table) -> Iterator[list[str]]:
    """Runs while the engine collects references, after listing started: another writer commits."""
    other = table.catalog.load_table(table.name())
    late = table.location() + "/data/late.parquet"
    if late not in set(other.inspect.files()["file_path"].to_pylist()):
        other.add_files([late])
    assert Files(other).exists(late)
    yield []


def commit_then_lose_metadata(table: Table) -> Iterator[list[str]]:
    """Another writer commits, and the metadata file the catalog now names goes missing (deleted in flight)."""
    other = table.catalog.load_table(table.name())
    other.append(other.scan().to_arrow().slice(0, 1))
    os.remove(local_path(other.metadata_location))
    yield []


@dataclass(frozen=True)
class Source:
    name: str
    batches: Callable[[Table], Iterable[list[str]]]

    def path_batches(self, table: Table) -> Iterable[list[str]]:
        return self.batches(table)


BROKEN = Source("broken", broken)
FIRST_REGION = Source("first region", first_region)
COMMIT_LATE_FILE = Source("commit late file", commit_late_file)
COMMIT_THEN_LOSE_METADATA = Source("commit then lose metadata", commit_then_lose_metadata)
