"""What an orphan-removal run reports (``OrphanReport``): the orphans by kind, what was kept and why, timings."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, overload

from airflow_iceberg_maint.orphans.listing.listed_rows import paths_of
from airflow_iceberg_maint.orphans.listing.spilled_batches import SpilledBatches

log = logging.getLogger(__name__)

KINDS = ("data", "delete", "manifest", "manifest_list", "metadata", "statistics", "other")


@dataclass
class OrphanReport:
    table: str
    table_uuid: str
    location: str
    older_than: datetime
    dry_run: bool
    orphan_files: Sequence[str] = field(default_factory=list)
    orphan_bytes: int = 0
    deleted_file_count: int = 0
    failed: list[dict[str, str]] = field(default_factory=list)
    conflicts: list[dict[str, str]] = field(default_factory=list)
    by_kind: dict[str, dict[str, int]] = field(default_factory=lambda: {k: {"count": 0, "bytes": 0} for k in KINDS})
    files_listed: int = 0
    list_calls: int = 0
    delete_requests: int = 0
    referenced_files: int = 0
    snapshots: int = 0
    manifests_read: int = 0
    kept_equivalent: int = 0
    kept_by_recheck: int = 0
    kept_undecodable: list[str] = field(default_factory=list)
    protected_locations: list[dict[str, str]] = field(default_factory=list)
    kept_protected: int = 0
    phase_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def orphan_file_count(self) -> int:
        return len(self.orphan_files)

    def summary(self) -> dict[str, Any]:
        """Everything but the orphan list: small enough for an XCom."""
        return {
            "table": self.table,
            "table_uuid": self.table_uuid,
            "location": self.location,
            "older_than": self.older_than.isoformat(),
            "dry_run": self.dry_run,
            "orphan_file_count": self.orphan_file_count,
            "orphan_bytes": self.orphan_bytes,
            "deleted_file_count": self.deleted_file_count,
            "failed": self.failed,
            "conflicts": self.conflicts,
            "by_kind": self.by_kind,
            "files_listed": self.files_listed,
            "list_calls": self.list_calls,
            "delete_requests": self.delete_requests,
            "referenced_files": self.referenced_files,
            "snapshots": self.snapshots,
            "manifests_read": self.manifests_read,
            "kept_equivalent": self.kept_equivalent,
            "kept_by_recheck": self.kept_by_recheck,
            "kept_undecodable": self.kept_undecodable,
            "protected_locations": self.protected_locations,
            "kept_protected": self.kept_protected,
            "phase_seconds": self.phase_seconds,
        }

    def to_json(self) -> dict[str, Any]:
        """The ``orphans --json`` object of docs/cli.md."""
        return {**self.summary(), "orphan_files": list(self.orphan_files)}


#: Called with the report and a stage: ``matched`` (orphans before the re-check) and ``planned``
#: (the final list, just before anything is deleted), so a caller can save what a run would delete
#: before a later failure or a crash can lose it.
StageHook = Callable[[OrphanReport, str], None]


class Timed(Protocol):
    """A report that times its phases (orphan removal's, expiry's)."""

    phase_seconds: dict[str, float]


class Phases:
    """Each phase's own duration, in the order the phases ran (never the time since the start)."""

    def __init__(self, report: Timed) -> None:
        self.report = report
        self.started = time.perf_counter()

    def done(self, name: str) -> None:
        now = time.perf_counter()
        self.report.phase_seconds[name] = round(now - self.started, 3)
        self.started = now


def file_kind(path: str) -> str:
    """A best guess from the name, for the report only."""
    name = path.rsplit("/", 1)[-1]
    in_metadata = "/metadata/" in path
    if name.endswith((".metadata.json", ".metadata.json.gz")) or name == "version-hint.text":
        return "metadata"
    if in_metadata and name.startswith("snap-") and name.endswith(".avro"):
        return "manifest_list"
    if in_metadata and name.endswith(".avro"):
        return "manifest"
    if in_metadata and name.endswith((".puffin", ".stats")):
        return "statistics"
    if "delete" in name or name.endswith(".puffin"):
        return "delete"
    if name.endswith((".parquet", ".orc", ".avro")):
        return "data"
    return "other"


class PathColumn(Sequence[str]):
    """Listed paths read from their rows (``ROWS_SCHEMA``: exact bytes, in memory or on local disk) when asked.

    The orphans of a large table sit in the report this way until it is written, within the
    scan's memory budget. Equal to any sequence of the same paths.
    """

    def __init__(self, rows: SpilledBatches) -> None:
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> list[str]: ...
    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            return paths_of(self._rows.rows(start, stop))[::step] if stop > start else []
        if not -len(self) <= index < len(self):
            raise IndexError(f"orphan {index} of {len(self)}")
        index %= len(self)
        return paths_of(self._rows.rows(index, index + 1))[0]

    def __iter__(self) -> Iterator[str]:
        for batch in self._rows.batches():
            yield from paths_of(batch)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]  # equal to lists, so unhashable as they are

    def __repr__(self) -> str:
        return f"PathColumn({list(self)!r})"


def tally(report: OrphanReport, orphans: SpilledBatches) -> None:
    """Set the report's orphan list (listed rows), its bytes and its count and bytes by kind."""
    report.orphan_files = PathColumn(orphans)
    report.orphan_bytes = 0
    report.by_kind = {k: {"count": 0, "bytes": 0} for k in KINDS}
    for batch in orphans.batches():
        for path, size in zip(paths_of(batch), batch.column("size").to_pylist(), strict=True):
            kind = report.by_kind[file_kind(path)]
            kind["count"] += 1
            kind["bytes"] += size
            report.orphan_bytes += size


def printable(path: str) -> str:
    """A listed path for reports and logs; bytes that are not UTF-8 appear as ``\\xNN``."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def report_undecodable(report: OrphanReport, paths: Sequence[str]) -> None:
    report.kept_undecodable = [printable(p) for p in paths]
    if paths:
        log.warning(
            "%d listed files are kept: their names are not UTF-8, so no metadata path can name them "
            "exactly (first: %s)",
            len(paths),
            report.kept_undecodable[0],
        )
