"""One table's health report: its statistics, what expiry would free, the last orphan run's findings, the score.

``HealthReport.to_json`` is the ``health --json`` object of docs/cli.md (the contract's keys, then the
details); ``values`` gives the numbers a trigger expression names (``names``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from pyiceberg.table import Table

from airflow_iceberg_maint.health.expirable import Expirable, expirable
from airflow_iceberg_maint.health.names import NEVER_RUN_DAYS
from airflow_iceberg_maint.health.score import Deduction, ScoreInputs, deductions, score
from airflow_iceberg_maint.health.stats import TableStats, table_stats

#: Partitions listed in the report (those with the most small files, then the highest delete ratio).
PARTITIONS_SHOWN = 20
_SECONDS_PER_DAY = 86_400.0


class RunRecord(Protocol):
    """A table's record of one job in the state store (``state.cleanup.RunRecord``)."""

    @property
    def last_success_at(self) -> datetime | None: ...
    @property
    def last_attempt_at(self) -> datetime | None: ...
    @property
    def last_attempt_status(self) -> str | None: ...
    @property
    def last_attempt_dry_run(self) -> bool | None: ...
    @property
    def last_attempt_counts(self) -> Mapping[str, int]: ...


@dataclass(frozen=True)
class OrphanFindings:
    """The last orphan run's record in the state store, as it was recorded."""

    at: datetime
    dry_run: bool
    status: str | None
    orphan_files: int | None
    orphan_bytes: int | None
    deleted_files: int | None
    failed_deletes: int | None

    @classmethod
    def from_state(cls, state: RunRecord | None) -> OrphanFindings | None:
        if state is None or state.last_attempt_at is None:
            return None
        counts = state.last_attempt_counts
        return cls(
            state.last_attempt_at,
            bool(state.last_attempt_dry_run),
            state.last_attempt_status,
            counts.get("orphan_file_count"),
            counts.get("orphan_bytes"),
            counts.get("deleted_file_count"),
            counts.get("failed_count"),
        )

    @property
    def bytes_left(self) -> int:
        """Orphan bytes the run left: all it found on a dry run or when deletes failed (at most that), else 0."""
        if self.orphan_bytes is None or not (self.dry_run or self.failed_deletes):
            return 0
        return self.orphan_bytes

    def to_json(self, now: datetime) -> dict[str, Any]:
        return {
            "at": self.at.astimezone(UTC).isoformat(),
            "age_days": round((now - self.at).total_seconds() / _SECONDS_PER_DAY, 3),
            "dry_run": self.dry_run,
            "status": self.status,
            "orphan_files": self.orphan_files,
            "orphan_bytes": self.orphan_bytes,
            "deleted_files": self.deleted_files,
            "failed_deletes": self.failed_deletes,
            "orphan_bytes_left": self.bytes_left,
        }


@dataclass
class HealthReport:
    table: str
    table_uuid: str
    now: datetime
    stats: TableStats
    expirable: Expirable
    snapshots: int
    oldest_snapshot_ms: int | None
    metadata_files: int
    last_orphan_run: OrphanFindings | None
    days_since: dict[str, float] = field(default_factory=dict)  # days_since_last_orphan_run, _expiry, _compaction
    deductions: list[Deduction] = field(default_factory=list)

    @property
    def score(self) -> int:
        return score(self.deductions)

    @property
    def oldest_snapshot_at(self) -> datetime | None:
        if self.oldest_snapshot_ms is None:
            return None
        return datetime.fromtimestamp(self.oldest_snapshot_ms / 1000, UTC)

    def _partitions(self) -> list[dict[str, Any]]:
        parts = [p for p in self.stats.partitions.values() if p.small_data_files or p.delete_files]
        parts.sort(key=lambda p: (-p.small_data_files, -p.delete_ratio, p.partition))
        return [p.to_json() for p in parts[:PARTITIONS_SHOWN]]

    def values(self) -> dict[str, float]:
        """The numbers a trigger or score expression may name (``names.HEALTH_NAMES``)."""
        s = self.stats
        oldest = self.oldest_snapshot_at
        return {
            "data_files": s.data_files,
            "data_bytes": s.data_bytes,
            "data_rows": s.data_rows,
            "small_data_files": s.small_data_files,
            "small_files": s.small_data_files,
            "delete_files": s.delete_files,
            "position_delete_files": s.position_deletes,
            "equality_delete_files": s.equality_deletes,
            "deletion_vector_files": s.deletion_vectors,
            "delete_bytes": s.delete_bytes,
            "deleted_rows": s.deleted_rows,
            "delete_ratio": min(1.0, s.deleted_rows / s.data_rows) if s.data_rows else 0.0,
            "snapshots": self.snapshots,
            "oldest_snapshot_age_days": (self.now - oldest).total_seconds() / _SECONDS_PER_DAY if oldest else 0.0,
            "manifests": s.manifests,
            "manifest_bytes": s.manifest_bytes,
            "metadata_files": self.metadata_files,
            "expirable_snapshots": len(self.expirable.snapshot_ids),
            "expirable_bytes": self.expirable.bytes,
            "orphan_bytes": self.last_orphan_run.bytes_left if self.last_orphan_run else 0,
            "score": self.score,
            "days_since_last_orphan_run": self.days_since.get("orphan", NEVER_RUN_DAYS),
            "days_since_last_expiry": self.days_since.get("expiry", NEVER_RUN_DAYS),
            "days_since_last_compaction": self.days_since.get("compaction", NEVER_RUN_DAYS),
        }

    def to_json(self) -> dict[str, Any]:
        s = self.stats
        oldest = self.oldest_snapshot_at
        return {
            "table": self.table,
            "snapshot_id": s.snapshot_id,
            "data_files": s.data_files,
            "data_bytes": s.data_bytes,
            "small_data_files": s.small_data_files,
            "file_size_histogram": s.histogram_json(),
            "delete_files": {
                "position": s.position_deletes,
                "equality": s.equality_deletes,
                "deletion_vector": s.deletion_vectors,
            },
            "deleted_rows": s.deleted_rows,
            "snapshots": self.snapshots,
            "oldest_snapshot_at": oldest.isoformat() if oldest else None,
            "manifests": s.manifests,
            "manifest_bytes": s.manifest_bytes,
            "metadata_files": self.metadata_files,
            "expirable_snapshots": len(self.expirable.snapshot_ids),
            "expirable_bytes": self.expirable.bytes,
            "score": self.score,
            "deductions": [d.to_json() for d in self.deductions],
            # Details beyond the contract's keys.
            "table_uuid": self.table_uuid,
            "target_file_size_bytes": s.target_file_size_bytes,
            "data_rows": s.data_rows,
            "delete_bytes": s.delete_bytes,
            "manifest_entries": s.manifest_entries,
            "surplus_manifests": s.surplus_manifests,
            "partition_count": len(s.partitions),
            "partitions": self._partitions(),
            "max_manifests_per_partition": max((len(p.manifests) for p in s.partitions.values()), default=0),
            "expirable_snapshot_ids": self.expirable.snapshot_ids,
            "expiry_refused": "gc.enabled=false" if self.expirable.gc_disabled else None,
            "last_orphan_run": self.last_orphan_run.to_json(self.now) if self.last_orphan_run else None,
        }


def _days_since(state: RunRecord | None, now: datetime) -> float | None:
    if state is None or state.last_success_at is None:
        return None
    return (now - state.last_success_at).total_seconds() / _SECONDS_PER_DAY


def build_report(
    table: Table,
    *,
    target_file_size_bytes: int | None = None,
    last_orphan_run: RunRecord | None = None,
    last_expiry: RunRecord | None = None,
    last_compaction: RunRecord | None = None,
    now: datetime | None = None,
    reader_processes: int | None = None,
    cache: str | None = None,
) -> HealthReport:
    """Read ``table``'s metadata and manifests and score it (``last_orphan_run``: its orphan-removal record).

    ``cache``: the digest cache's folder (S22), used by what expiry would free; None: no cache.
    """
    now = now or datetime.now(UTC)
    metadata = table.metadata
    stats = table_stats(table, target_file_size_bytes)
    freed = expirable(table, now, reader_processes, cache)
    findings = OrphanFindings.from_state(last_orphan_run)
    days = {
        k: d
        for k, s in (("orphan", last_orphan_run), ("expiry", last_expiry), ("compaction", last_compaction))
        if (d := _days_since(s, now)) is not None
    }
    report = HealthReport(
        table=".".join(table.name()),
        table_uuid=str(metadata.table_uuid),
        now=now,
        stats=stats,
        expirable=freed,
        snapshots=len(metadata.snapshots),
        oldest_snapshot_ms=min((s.timestamp_ms for s in metadata.snapshots), default=None),
        metadata_files=1 + len(metadata.metadata_log),
        last_orphan_run=findings,
        days_since=days,
    )
    report.deductions = deductions(
        ScoreInputs(
            data_files=stats.data_files,
            compactable_small_files=stats.compactable_small_files,
            data_rows=stats.data_rows,
            deleted_rows=stats.deleted_rows,
            live_bytes=stats.data_bytes + stats.delete_bytes + stats.manifest_bytes,
            expirable_bytes=freed.bytes,
            expirable_snapshots=len(freed.snapshot_ids),
            surplus_manifests=stats.surplus_manifests,
            orphan_bytes=findings.bytes_left if findings else 0,
        )
    )
    return report
