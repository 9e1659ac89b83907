"""Which data files a rewrite takes, grouped per partition of each spec, from the manifests alone.

A data file is a candidate when it is below 75% or above 180% of the target size, or has at least
``delete_file_threshold`` delete files applying to it. A group (one partition of one spec) is
rewritten when it holds a candidate with deletes, or at least ``min_input_files`` candidates (and
more than one: a group of one file without deletes would only be rewritten into itself).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.expressions.parser import parse
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.typedef import Record

from airflow_iceberg_maint.compaction.live_files import applying_deletes
from airflow_iceberg_maint.compaction.options import RewriteOptions
from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.index.source.snapshot_files import SnapshotFiles, plan_snapshot
from airflow_iceberg_maint.pyiceberg_compat import bounds_may_match

if TYPE_CHECKING:
    from airflow_iceberg_maint.compaction.report import DataRewriteReport


@dataclass(frozen=True)
class PlannedFile:
    data_file: DataFile
    sequence_number: int
    deletes: tuple[DataFile, ...]

    @property
    def path(self) -> str:
        return self.data_file.file_path


@dataclass(frozen=True)
class FileGroupPlan:
    """One partition of one spec to rewrite. ``group_id`` is stable across plans of the same files' partition."""

    group_id: str
    spec_id: int
    #: Partition field name -> value (as JSON renders it).
    partition: dict[str, Any]
    files: tuple[PlannedFile, ...]
    partition_record: Record = field(repr=False, compare=False)

    @property
    def input_files(self) -> tuple[str, ...]:
        """The paths of the data files rewritten."""
        return tuple(f.path for f in self.files)

    @property
    def input_bytes(self) -> int:
        return sum(f.data_file.file_size_in_bytes for f in self.files)

    @property
    def input_records(self) -> int:
        return sum(f.data_file.record_count for f in self.files)

    @property
    def delete_files(self) -> tuple[str, ...]:
        """The paths of the delete files applied to the input files."""
        return tuple(sorted({d.file_path for f in self.files for d in f.deletes}))

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "spec_id": self.spec_id,
            "input_files": len(self.files),
            "input_bytes": self.input_bytes,
            "output_files": None,
            "output_bytes": None,
            "delete_files": len(self.delete_files),
        }


@dataclass(frozen=True)
class DataRewritePlan:
    table: str
    table_uuid: str
    snapshot_id: int | None
    options: RewriteOptions
    groups: list[FileGroupPlan]
    #: ``{"partition", "reason"}`` of each partition holding candidates that is not rewritten.
    skipped_groups: list[dict[str, Any]]
    snapshot_files: SnapshotFiles | None = field(default=None, repr=False, compare=False)

    def report(self) -> DataRewriteReport:
        from airflow_iceberg_maint.compaction.report import DataRewriteReport

        return DataRewriteReport.of_plan(self)

    def to_json(self) -> dict[str, Any]:
        """The JSON of a dry run (``rewrite-data-files --dry-run --json``)."""
        return self.report().to_json()


def row_filter(table: Table, where: str | None) -> BooleanExpression:
    """``where`` parsed by pyiceberg and bound to the table's schema (refused with one line when it is not)."""
    if where is None:
        return AlwaysTrue()
    try:
        expression = parse(where)
        bounds_may_match(table.schema(), expression)  # binds: an unknown column is refused here
    except Exception as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InvalidInputError(
            f"where {where!r}: expected a row filter in pyiceberg's syntax, e.g. 'day >= 3' ({reason})"
        ) from None
    return expression


def _json_value(value: Any) -> Any:
    return value if value is None or isinstance(value, bool | int | float | str) else str(value)


def partition_json(table: Table, spec_id: int, partition: Record) -> dict[str, Any]:
    spec = table.metadata.specs()[spec_id]
    return {f.name: _json_value(partition[i]) for i, f in enumerate(spec.fields)}


def group_id_of(spec_id: int, partition: dict[str, Any]) -> str:
    return f"{spec_id}/{json.dumps(partition, sort_keys=True, separators=(',', ':'))}"


def _is_candidate(options: RewriteOptions, planned: PlannedFile) -> bool:
    size = planned.data_file.file_size_in_bytes
    return (
        size < options.min_file_bytes
        or size > options.max_file_bytes
        or len(planned.deletes) >= options.delete_file_threshold
    )


def plan_rewrite(table: Table, options: RewriteOptions) -> DataRewritePlan:
    """The groups a rewrite of the table's current snapshot takes; reads manifests only, changes nothing."""
    name = ".".join(table.name())
    uuid = str(table.metadata.table_uuid)
    expression = row_filter(table, options.where)
    snapshot = table.current_snapshot()
    if snapshot is None:
        return DataRewritePlan(name, uuid, None, options, [], [])
    files = plan_snapshot(table, snapshot)
    may_match = bounds_may_match(table.schema(), expression)
    by_partition: dict[tuple[int, str], list[PlannedFile]] = {}
    records: dict[tuple[int, str], tuple[dict[str, Any], Record]] = {}
    for path in sorted(files.data_files):
        live = files.data_files[path]
        data_file = live.data_file
        if not may_match(data_file):
            continue
        planned = PlannedFile(data_file, live.sequence_number, applying_deletes(table, files, path))
        if not _is_candidate(options, planned):
            continue
        partition = partition_json(table, data_file.spec_id, data_file.partition)
        key = (data_file.spec_id, group_id_of(data_file.spec_id, partition))
        by_partition.setdefault(key, []).append(planned)
        records[key] = (partition, data_file.partition)
    groups: list[FileGroupPlan] = []
    skipped: list[dict[str, Any]] = []
    for key in sorted(by_partition, key=lambda k: k[1]):
        candidates = by_partition[key]
        partition, record = records[key]
        with_deletes = any(f.deletes for f in candidates)
        if with_deletes or (len(candidates) > 1 and len(candidates) >= options.min_input_files):
            groups.append(FileGroupPlan(key[1], key[0], partition, tuple(candidates), record))
        elif len(candidates) > 1:  # one file without deletes is the usual state after a rewrite: not reported
            reason = f"{len(candidates)} candidate files, fewer than min-input-files {options.min_input_files}"
            skipped.append({"partition": partition, "reason": reason})
    return DataRewritePlan(name, uuid, snapshot.snapshot_id, options, groups, skipped, files)
