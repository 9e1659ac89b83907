"""Job configuration (docs/design.md, "Job configuration"): policy content plus evaluation time become
the exact options of one orphan-removal, snapshot-expiry or data-compaction run.

``olderThanDays`` becomes an absolute UTC cutoff, and ``location`` is validated against the
table location here, before anything is submitted; the engine validates it again (S3). An
expiry job resolves its cutoff and retain-last as the run would (the content's values, else
the table's ``history.expire.*`` properties), so the job says exactly what will be expired.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from airflow_iceberg_maint.catalog import load_table
from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.expiry.settings import ExpireOptions, resolve_settings
from airflow_iceberg_maint.fs.locations import PathEquivalence, validate_location
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.policy.due import Evaluation, evaluate_table
from airflow_iceberg_maint.policy.policies import (
    DATA_COMPACTION,
    ORPHAN_FILE_REMOVAL,
    SNAPSHOT_EXPIRY,
    DataCompactionContent,
    OrphanRemovalContent,
    Policy,
    SnapshotExpiryContent,
    attached_tables,
    policy_for_table,
)
from airflow_iceberg_maint.reachability.cutoff import cutoff_for_days, resolve_cutoff
from airflow_iceberg_maint.state.cleanup import StateStore


def _check_aware(now: datetime) -> None:
    if now.tzinfo is None:
        raise InvalidInputError(f"job time {now!r}: must be timezone-aware")


@dataclass(frozen=True)
class OrphanJobConfig:
    table: str
    older_than: datetime
    location: str
    dry_run: bool
    listing: str | None = None
    memory_budget_mb: int | None = None  # None: the engine's default

    def to_json(self) -> dict[str, Any]:
        """The job as the removal operator's arguments; the optional ones only when set."""
        body: dict[str, Any] = {
            "table": self.table,
            "older_than": self.older_than.isoformat(),
            "location": self.location,
            "dry_run": self.dry_run,
        }
        if self.listing is not None:
            body["listing"] = self.listing
        if self.memory_budget_mb is not None:
            body["memory_budget_mb"] = self.memory_budget_mb
        return body

    def to_options(self, **engine: Any) -> OrphanOptions:
        """Engine options for this job; ``engine`` adds the tuning knobs (prefix mismatch mode, ...)."""
        if self.memory_budget_mb is not None:
            engine["memory_budget_mb"] = self.memory_budget_mb
        return OrphanOptions(
            older_than=self.older_than, location=self.location, dry_run=self.dry_run, listing=self.listing, **engine
        )


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
    _check_aware(now)
    equivalence = PathEquivalence(equal_schemes or {}, equal_authorities or {})
    return OrphanJobConfig(
        table=table,
        older_than=resolve_cutoff(content.older_than_days, older_than, now).astimezone(UTC),
        location=validate_location(content.location, table_location, equivalence),
        dry_run=content.dry_run,
        listing=content.listing,
        memory_budget_mb=content.memory_budget_mb,
    )


@dataclass(frozen=True)
class ExpiryJobConfig:
    table: str
    older_than: datetime
    retain_last: int
    dry_run: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "older_than": self.older_than.isoformat(),
            "retain_last": self.retain_last,
            "dry_run": self.dry_run,
        }

    def to_options(self, **engine: Any) -> ExpireOptions:
        """Engine options for this job; ``engine`` adds the tuning knobs (parallel deletes, readers)."""
        return ExpireOptions(older_than=self.older_than, retain_last=self.retain_last, dry_run=self.dry_run, **engine)


def build_expiry_job(
    table: str,
    properties: Mapping[str, str],
    content: SnapshotExpiryContent,
    now: datetime,
    *,
    older_than: datetime | None = None,
) -> ExpiryJobConfig:
    """Resolve the cutoff and retain-last against the table's properties; ``older_than`` overrides ``olderThanDays``."""
    _check_aware(now)
    cutoff = older_than
    if cutoff is None and content.older_than_days is not None:
        cutoff = cutoff_for_days(content.older_than_days, now, "content.olderThanDays")
    settings = resolve_settings(properties, ExpireOptions(older_than=cutoff, retain_last=content.retain_last), now)
    return ExpiryJobConfig(table, settings.cutoff.astimezone(UTC), settings.retain_last, content.dry_run)


@dataclass(frozen=True)
class CompactionJobConfig:
    """A data compaction (rewrite data files, then manifests); None: the table's property, else the default."""

    table: str
    target_file_size_mb: float | None
    min_input_files: int | None
    strategy: str
    dry_run: bool

    def to_json(self) -> dict[str, Any]:
        """The job as the rewrite operator's arguments."""
        return {
            "table": self.table,
            "target_file_size_mb": self.target_file_size_mb,
            "min_input_files": self.min_input_files,
            "strategy": self.strategy,
            "dry_run": self.dry_run,
        }


def build_compaction_job(table: str, content: DataCompactionContent) -> CompactionJobConfig:
    return CompactionJobConfig(
        table, content.target_file_size_mb, content.min_input_files, content.strategy, content.dry_run
    )


JobT = TypeVar("JobT")


@dataclass(frozen=True)
class JobPlan(Generic[JobT]):
    """Every attached table's evaluation, and a job for each due one, highest score first."""

    evaluations: list[Evaluation]
    jobs: list[tuple[JobT, str]]  # (job, policy name)


OrphanPlan = JobPlan[OrphanJobConfig]
ExpiryPlan = JobPlan[ExpiryJobConfig]
CompactionPlan = JobPlan[CompactionJobConfig]


def _plan_jobs(
    catalog: Catalog,
    policies: list[Policy[Any]],
    store: StateStore,
    now: datetime,
    source: str,
    policy_type: str,
    build: Callable[[str, Table, Policy[Any]], JobT],
) -> JobPlan[JobT]:
    """Evaluate each table the policies of a type attach and ``build`` a job for the due ones."""
    evaluations: list[Evaluation] = []
    jobs: list[tuple[JobT, str, float]] = []
    for name in attached_tables(catalog, policies, policy_type):
        table = load_table(catalog, name)
        uuid = str(table.metadata.table_uuid)
        evaluation = evaluate_table(name, uuid, policies, store, now, source, policy_type, loaded=table)
        evaluations.append(evaluation)
        policy = policy_for_table(policies, name, policy_type)
        if evaluation.due and policy is not None:
            jobs.append((build(name, table, policy), policy.name, evaluation.score))
    jobs.sort(key=lambda entry: entry[2], reverse=True)
    return JobPlan(evaluations, [(job, policy_name) for job, policy_name, _ in jobs])


def plan_orphan_jobs(
    catalog: Catalog, policies: list[Policy[Any]], store: StateStore, now: datetime, source: str = "the policies"
) -> OrphanPlan:
    """Evaluate each table the orphan-removal policies attach and configure a job for the due ones."""

    def build(name: str, table: Table, policy: Policy[Any]) -> OrphanJobConfig:
        return build_orphan_job(name, table.metadata.location, policy.content, now)

    return _plan_jobs(catalog, policies, store, now, source, ORPHAN_FILE_REMOVAL, build)


def plan_expiry_jobs(
    catalog: Catalog, policies: list[Policy[Any]], store: StateStore, now: datetime, source: str = "the policies"
) -> ExpiryPlan:
    """Evaluate each table the snapshot-expiry policies attach and configure a job for the due ones."""

    def build(name: str, table: Table, policy: Policy[Any]) -> ExpiryJobConfig:
        return build_expiry_job(name, table.metadata.properties, policy.content, now)

    return _plan_jobs(catalog, policies, store, now, source, SNAPSHOT_EXPIRY, build)


def plan_compaction_jobs(
    catalog: Catalog, policies: list[Policy[Any]], store: StateStore, now: datetime, source: str = "the policies"
) -> CompactionPlan:
    """Evaluate each table the data-compaction policies attach and configure a job for the due ones."""

    def build(name: str, table: Table, policy: Policy[Any]) -> CompactionJobConfig:
        return build_compaction_job(name, policy.content)

    return _plan_jobs(catalog, policies, store, now, source, DATA_COMPACTION, build)
