"""Rewrite the current snapshot's manifests, one partition a manifest, in one ``replace`` commit (S21).

The plan (``manifest_plan``) names the groups to rewrite. Their live entries are written again
as EXISTING entries (Iceberg Java's ``RewriteManifests``): each keeps the snapshot id that added
its file and its data and file sequence numbers, written out in full, so every delete applies
exactly as before and time travel reads the same files. A new manifest list holds the new
manifests and the kept ones; the snapshot it makes (operation ``replace``, the parent's totals)
becomes ``main``'s head through ``commit_fence`` (S18): a commit that finds the table moved is
refused, and the rewrite is planned again on the new metadata, a bounded number of times. The
rewrite deletes nothing: files of a refused or unknown commit are orphans the next orphan run
removes, and an unknown outcome keeps them in case they are live.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.manifest import ManifestEntry, ManifestFile, ManifestWriter, write_manifest_list
from pyiceberg.table import Table, TableProperties
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update import AddSnapshotUpdate, SetSnapshotRefUpdate, TableUpdate

from airflow_iceberg_maint import fencing
from airflow_iceberg_maint.catalog import reload_to_plan_again
from airflow_iceberg_maint.commit_fence import commit_fenced
from airflow_iceberg_maint.compaction.manifest_plan import GroupKey, ManifestPlan, plan_manifest_rewrite
from airflow_iceberg_maint.compaction.options import MANIFEST_TARGET_SIZE_PROPERTY as TARGET_SIZE_PROPERTY
from airflow_iceberg_maint.compaction.options import size_property
from airflow_iceberg_maint.errors import (
    CommitOutcomeUnknownError,
    InvalidInputError,
    MaintenanceError,
    first_line,
)
from airflow_iceberg_maint.progress import Phase
from airflow_iceberg_maint.pyiceberg_compat import manifest_writer

log = logging.getLogger(__name__)

DEFAULT_TARGET_SIZE_BYTES = 8 * 1024 * 1024
COMMIT_ATTEMPTS = 4  # plans, each committed against the metadata it read


@dataclass
class ManifestRewriteReport:
    """What a manifest rewrite did, or would do (a dry run's ``added_manifests`` is an estimate)."""

    table: str
    table_uuid: str
    dry_run: bool
    target_manifest_size_bytes: int
    rewritten_manifests: int = 0
    added_manifests: int = 0
    kept_manifests: int = 0
    commits: list[int] = field(default_factory=list)
    commit_attempts: int = 0

    def to_json(self) -> dict[str, Any]:
        """The command line's JSON (docs/cli.md, "Compaction")."""
        return {
            "table": self.table,
            "dry_run": self.dry_run,
            "rewritten_manifests": self.rewritten_manifests,
            "added_manifests": self.added_manifests,
            "commits": list(self.commits),
        }


def target_size(metadata: TableMetadata, given: int | None) -> int:
    """``given``, else the table's ``commit.manifest.target-size-bytes``, else 8 MB."""
    if given is not None:
        return given
    return size_property(metadata.properties, TARGET_SIZE_PROPERTY, DEFAULT_TARGET_SIZE_BYTES)


def _refuse_format(name: str, metadata: TableMetadata) -> None:
    if metadata.format_version not in (1, 2):
        raise InvalidInputError(
            f"table {name}: format version {metadata.format_version} is not supported by rewrite-manifests "
            "(pyiceberg 0.12 writes manifests of format versions 1 and 2 only)"
        )


class _Files:
    """The new files of one attempt, named as pyiceberg names a commit's files."""

    def __init__(self, table: Table, snapshot_id: int) -> None:
        self.table, self.snapshot_id = table, snapshot_id
        self.commit = uuid.uuid4()
        self.count = 0
        self.compression: Any = table.metadata.properties.get(
            TableProperties.WRITE_AVRO_COMPRESSION, TableProperties.WRITE_AVRO_COMPRESSION_DEFAULT
        )

    def output(self, name: str) -> Any:
        return self.table.io.new_output(self.table.location_provider().new_metadata_location(name))

    def writer(self, key: GroupKey) -> ManifestWriter:
        metadata = self.table.metadata
        self.count += 1
        return manifest_writer(
            format_version=metadata.format_version,
            content=key[0],  # type: ignore[arg-type]
            spec=metadata.specs()[key[1]],
            schema=metadata.schema(),
            output_file=self.output(f"{self.commit}-m{self.count}.avro"),
            snapshot_id=self.snapshot_id,
            avro_compression=self.compression,
        )


def _write_group(files: _Files, key: GroupKey, entries: list[ManifestEntry], target: int) -> list[ManifestFile]:
    """The group's entries as EXISTING entries, in manifests that close once they reach ``target`` bytes."""
    written: list[ManifestFile] = []
    writer: ManifestWriter | None = None
    for entry in entries:
        if writer is not None and writer.tell() >= target:
            writer.__exit__(None, None, None)
            written.append(writer.to_manifest_file())
            writer = None
        if writer is None:
            writer = files.writer(key).__enter__()
        writer.existing(entry)
    if writer is not None:
        writer.__exit__(None, None, None)
        written.append(writer.to_manifest_file())
    return written


def _summary(plan: ManifestPlan, created: int) -> Summary:
    # A replace changes no data: the parent's totals hold as they are.
    previous = plan.snapshot.summary if plan.snapshot is not None and plan.snapshot.summary else None
    totals = {k: v for k, v in (previous.additional_properties if previous else {}).items() if k.startswith("total-")}
    counts = {
        "manifests-created": str(created),
        "manifests-kept": str(len(plan.kept)),
        "manifests-replaced": str(len(plan.replaced)),
        "entries-processed": str(sum(len(entries) for entries in plan.groups.values())),
    }
    return Summary(Operation.REPLACE, **totals, **counts)


def _snapshot(table: Table, plan: ManifestPlan, target: int) -> tuple[Snapshot, int]:
    """Write the new manifests and the manifest list; the snapshot (not committed) and how many manifests it adds."""
    base = table.metadata
    files = _Files(table, base.new_snapshot_id())
    written: list[ManifestFile] = []
    with Phase("writing manifests", total=len(plan.groups)) as phase:
        for key, entries in plan.ordered_groups():
            written += _write_group(files, key, entries, target)
            phase.advance()
    sequence_number = base.next_sequence_number()
    parent = plan.snapshot.snapshot_id if plan.snapshot is not None else None
    manifest_list = files.output(f"snap-{files.snapshot_id}-0-{files.commit}.avro")
    with write_manifest_list(
        format_version=base.format_version,
        output_file=manifest_list,
        snapshot_id=files.snapshot_id,
        parent_snapshot_id=parent,
        sequence_number=sequence_number,
        avro_compression=files.compression,
    ) as writer:
        writer.add_manifests(written + plan.kept)
    snapshot = Snapshot.model_validate(
        {
            "snapshot-id": files.snapshot_id,
            "parent-snapshot-id": parent,
            "sequence-number": sequence_number,
            "manifest-list": manifest_list.location,
            "summary": _summary(plan, len(written)),
            "schema-id": base.current_schema_id,
        }
    )
    return snapshot, len(written)


def _updates(base: TableMetadata, snapshot: Snapshot) -> tuple[TableUpdate, ...]:
    ref = base.refs[MAIN_BRANCH]
    return (
        AddSnapshotUpdate(snapshot=snapshot),
        SetSnapshotRefUpdate.model_validate(
            {
                "ref-name": MAIN_BRANCH,
                "type": ref.snapshot_ref_type,
                "snapshot-id": snapshot.snapshot_id,
                "max-ref-age-ms": ref.max_ref_age_ms,
                "max-snapshot-age-ms": ref.max_snapshot_age_ms,
                "min-snapshots-to-keep": ref.min_snapshots_to_keep,
            }
        ),
    )


def rewrite_manifests(
    table: Table, *, target_manifest_size_bytes: int | None = None, dry_run: bool = True
) -> ManifestRewriteReport:
    """Regroup the live entries of ``table``'s current snapshot by partition into manifests of the target size.

    A dry run reads manifests only and reports the plan. ``table`` then holds the committed metadata.
    """
    name = ".".join(table.name())
    report = ManifestRewriteReport(name, str(table.metadata.table_uuid), dry_run, DEFAULT_TARGET_SIZE_BYTES)
    for attempt in range(1, COMMIT_ATTEMPTS + 1):
        base, base_location = table.metadata, table.metadata_location
        _refuse_format(name, base)
        report.target_manifest_size_bytes = target = target_size(base, target_manifest_size_bytes)
        plan = plan_manifest_rewrite(base, table.io, target)
        report.rewritten_manifests, report.kept_manifests = len(plan.replaced), len(plan.kept)
        report.commit_attempts = attempt
        if dry_run or not plan.replaced:
            report.added_manifests = plan.expected_manifests(target)
            return report
        snapshot, report.added_manifests = _snapshot(table, plan, target)
        fencing.guard("the manifest rewrite's commit")  # the run's lease (S15), outside the try
        try:
            commit_fenced(table, base, base_location, _updates(base, snapshot))
        except CommitFailedException as exc:
            log.info("table %s: the table changed during the manifest rewrite (%s); planning again", name, exc)
            reload_to_plan_again(table, name, "the manifest rewrite", "nothing was committed")
            continue
        except Exception as exc:
            raise CommitOutcomeUnknownError(
                f"table {name}: the manifest rewrite's commit failed ({first_line(exc)}); whether it landed is "
                "unknown: its new manifests are kept (if it did not land, the next orphan run removes them)"
            ) from exc
        report.commits.append(snapshot.snapshot_id)
        return report
    raise MaintenanceError(
        f"table {name}: the table changed during each of {COMMIT_ATTEMPTS} manifest rewrite attempts; nothing was "
        "committed (the manifests written are orphans the next orphan run removes)"
    )
