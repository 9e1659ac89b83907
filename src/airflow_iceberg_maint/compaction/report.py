"""The report of a data-file rewrite, with the command line's JSON keys (docs/cli.md, "Compaction")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_iceberg_maint.compaction.planning import DataRewritePlan, FileGroupPlan
    from airflow_iceberg_maint.compaction.rewriter import GroupOutput


@dataclass
class DataRewriteReport:
    table: str
    table_uuid: str
    dry_run: bool
    strategy: str
    target_file_size_bytes: int
    #: One entry per group taken (``FileGroupPlan.to_json``); ``output_*`` set once the group committed.
    groups: list[dict[str, Any]] = field(default_factory=list)
    rewritten_data_files: int = 0
    added_data_files: int = 0
    removed_delete_files: int = 0
    rewritten_bytes: int = 0
    added_bytes: int = 0
    commits: list[int] = field(default_factory=list)
    skipped_groups: list[dict[str, Any]] = field(default_factory=list)
    failed: list[dict[str, str]] = field(default_factory=list)
    _index: dict[str, int] = field(default_factory=dict, repr=False)

    @classmethod
    def of_plan(
        cls, plan: DataRewritePlan, groups: list[FileGroupPlan] | None = None, dry_run: bool = True
    ) -> DataRewriteReport:
        taken = plan.groups if groups is None else groups
        report = cls(
            table=plan.table,
            table_uuid=plan.table_uuid,
            dry_run=dry_run,
            strategy=plan.options.strategy.value,
            target_file_size_bytes=plan.options.target_file_size_bytes,
            groups=[g.to_json() for g in taken],
            skipped_groups=list(plan.skipped_groups),
        )
        report._index = {g.group_id: i for i, g in enumerate(taken)}
        return report

    def committed(self, output: GroupOutput) -> None:
        entry = self.groups[self._index[output.group.group_id]]
        entry["output_files"], entry["output_bytes"] = len(output.files), output.output_bytes
        self.rewritten_data_files += len(output.group.files)
        self.rewritten_bytes += output.group.input_bytes
        self.added_data_files += len(output.files)
        self.added_bytes += output.output_bytes

    def fail(self, group_id: str, error: str) -> None:
        self.failed.append({"group": group_id, "error": error})

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "dry_run": self.dry_run,
            "strategy": self.strategy,
            "target_file_size_bytes": self.target_file_size_bytes,
            "groups": [dict(g) for g in self.groups],
            "rewritten_data_files": self.rewritten_data_files,
            "added_data_files": self.added_data_files,
            "removed_delete_files": self.removed_delete_files,
            "rewritten_bytes": self.rewritten_bytes,
            "added_bytes": self.added_bytes,
            "commits": list(self.commits),
            "skipped_groups": [dict(s) for s in self.skipped_groups],
            "failed": [dict(f) for f in self.failed],
        }

    def summary(self) -> dict[str, Any]:
        """What the state store records of a run (``state.cleanup``)."""
        return {"table_uuid": self.table_uuid, **self.to_json()}
