"""Job configuration (the spec's adapter layer): policy content plus evaluation time become
the exact options of one orphan-removal run.

``olderThanDays`` becomes an absolute UTC cutoff, and ``location`` is validated against the
table location here, before anything is submitted; the engine validates it again (S3).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.locations import PathEquivalence, validate_location
from airflow_iceberg_maint.orphans import OrphanOptions, resolve_cutoff
from airflow_iceberg_maint.policies import OrphanRemovalContent


@dataclass(frozen=True)
class OrphanJobConfig:
    table: str
    older_than: datetime
    location: str
    dry_run: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "older_than": self.older_than.isoformat(),
            "location": self.location,
            "dry_run": self.dry_run,
        }

    def to_options(self, **engine: Any) -> OrphanOptions:
        """Engine options for this job; ``engine`` adds the tuning knobs (prefix mismatch mode, ...)."""
        return OrphanOptions(older_than=self.older_than, location=self.location, dry_run=self.dry_run, **engine)


def build_orphan_job(
    table: str,
    table_location: str,
    content: OrphanRemovalContent,
    now: datetime,
    *,
    older_than: datetime | None = None,
    equal_schemes: Mapping[str, str] | None = None,
    equal_authorities: Mapping[str, str] | None = None,
) -> OrphanJobConfig:
    """Resolve the cutoff and validate the scan location; ``older_than`` overrides ``olderThanDays``."""
    if now.tzinfo is None:
        raise InvalidInputError(f"job time {now!r}: must be timezone-aware")
    equivalence = PathEquivalence(equal_schemes or {}, equal_authorities or {})
    return OrphanJobConfig(
        table=table,
        older_than=resolve_cutoff(content.older_than_days, older_than, now).astimezone(UTC),
        location=validate_location(content.location, table_location, equivalence),
        dry_run=content.dry_run,
    )
