"""Snapshot expiry with a human review: the review of a dry run, and the expiry of only what was approved.

``expiry_review`` turns an expiry dry run's report into what an approval form shows;
``IcebergExpireApprovedSnapshotsOperator`` then plans again from the table as it is (the
reviewed cutoff and retain-last) and commits and deletes only what the fresh plan and the
reviewed list both hold (safety rule S16): a snapshot, ref or file the reviewer did not see is
kept, and so is an approved one the fresh plan no longer expires or finds unreachable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from airflow_iceberg_maint.airflow import arguments, config
from airflow_iceberg_maint.airflow.operators.expiry import IcebergExpireSnapshotsOperator
from airflow_iceberg_maint.airflow.operators.reviewed import REVIEW_PATHS, paths_markdown, read_reviewed, shown_paths
from airflow_iceberg_maint.airflow.reports import read_report
from airflow_iceberg_maint.airflow.ui.wording import absolute_time, plural, size
from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.expiry.settings import Approval, ExpireOptions


def expiry_review(report: Mapping[str, Any], uri: str, paths: int = REVIEW_PATHS) -> dict[str, Any]:
    """What a reviewer sees of an expiry dry run: the snapshots (with their commit time and operation),
    refs, files by kind, bytes and the full report's page."""
    files = list(report["deleted_files"])
    ids = list(report["expired_snapshot_ids"])
    described = {s["snapshot_id"]: s for s in report.get("expired_snapshots") or []}
    snapshots = [described.get(i, {"snapshot_id": i, "committed_at": None, "operation": None}) for i in ids]
    return {
        "table": report["table"],
        "older_than": report["older_than"],
        "retain_last": report["retain_last"],
        "expired_snapshot_count": len(ids),
        "first_snapshot_ids": ids[:paths],
        "first_snapshots": snapshots[:paths],
        "removed_refs": list(report["removed_refs"]),
        "file_count": len(files),
        "bytes": int(report["deleted_bytes"]),
        "by_kind": {k: dict(v) for k, v in (report.get("deleted_by_kind") or {}).items() if v.get("count")},
        **shown_paths(files, uri, paths),
    }


def load_expiry_review(report: str, iceberg_conn_id: str, paths: int = REVIEW_PATHS) -> dict[str, Any]:
    """``expiry_review`` of the expiry dry run's report at ``report``."""
    return expiry_review(read_reviewed(report, iceberg_conn_id), report, paths)


#: How the form names each kind of file, in the order it lists them.
KIND_NOUNS = {
    "data": "data file",
    "position_delete": "position delete file",
    "equality_delete": "equality delete file",
    "deletion_vector": "deletion vector",
    "manifest": "manifest",
    "manifest_list": "manifest list",
    "statistics": "statistics file",
    "other": "other file",
}


def expiry_markdown(review: Mapping[str, Any]) -> str:
    """The expiry part of an approval form's body: what approving expires and deletes."""
    refs = ", ".join(f"`{name}`" for name in review["removed_refs"]) or "none"
    shown = review.get("first_snapshots") or [{"snapshot_id": i} for i in review["first_snapshot_ids"]]
    more = review["expired_snapshot_count"] - len(shown)
    kinds = [
        f"{plural(tally['count'], KIND_NOUNS.get(kind, kind))} ({size(tally['bytes'])})"
        for kind, tally in sorted(review.get("by_kind", {}).items(), key=lambda kv: list(KIND_NOUNS).index(kv[0]))
    ]
    lines = [
        f"**{plural(review['expired_snapshot_count'], 'snapshot')} to expire** (committed before "
        f"{absolute_time(review['older_than'])}; each branch keeps its "
        f"{plural(review['retain_last'], 'newest snapshot')}); refs removed: {refs}.",
        "",
        *[
            f"- snapshot `{s['snapshot_id']}`: {s.get('operation') or 'operation unknown'}, "
            f"committed {absolute_time(s.get('committed_at'))}"
            for s in shown
        ],
        *([f"- ... and {more} more"] if more else []),
        "",
        f"**Approving deletes {plural(review['file_count'], 'file')} ({size(review['bytes'])})** that only "
        "these snapshots reach" + (": " + ", ".join(kinds) + "." if kinds else "."),
        "",
        *paths_markdown(review, "Full expiry report"),
    ]
    return "\n".join(lines)


class IcebergExpireApprovedSnapshotsOperator(IcebergExpireSnapshotsOperator):
    """Expire what a reviewed dry run listed and a fresh plan still expires; delete only approved files.

    ``approved_report`` is the URI of the expiry dry run's report. The run takes the report's
    cutoff and retain-last, plans again from the table as it is, and limits the plan to the
    report's lists: only approved snapshots expire, only approved refs are removed, only approved
    files (of those the fresh plan finds unreachable and the re-check keeps unreachable) are
    deleted. What the fresh plan adds is kept and counted (``not_approved_*`` in the report and
    XCom). Other arguments are the expiry operator's; ``older_than_days``, ``older_than``,
    ``retain_last`` and ``dry_run`` are ignored (they come from the reviewed run).

    :param approved_report: URI of the reviewed dry run's report.
    """

    template_fields: Sequence[str] = (*IcebergExpireSnapshotsOperator.template_fields, "approved_report")

    def __init__(self, *, approved_report: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.approved_report = approved_report

    def _approved_report(self) -> str | None:
        return arguments.optional_str(self.approved_report, "approved_report")

    def _options(self, now: datetime) -> ExpireOptions:
        uri = arguments.optional_str(self.approved_report, "approved_report")
        if not uri:
            raise InvalidInputError("argument approved_report: the URI of the reviewed dry run's report is required")
        table = arguments.optional_str(self.table, "table")
        reviewed = read_report(uri, dict(self.hook.catalog.properties))
        if reviewed.get("table") != table or not reviewed.get("dry_run") or "expired_snapshot_ids" not in reviewed:
            raise InvalidInputError(f"approved_report {uri}: not an expiry dry run of table {table}")
        return ExpireOptions(
            older_than=datetime.fromisoformat(reviewed["older_than"]),
            retain_last=int(reviewed["retain_last"]),
            max_concurrent_deletes=arguments.positive_int(self.max_concurrent_deletes, "max_concurrent_deletes"),
            cache=config.digest_cache_location(),
            approved=Approval(
                snapshot_ids=frozenset(int(i) for i in reviewed["expired_snapshot_ids"]),
                refs=frozenset(reviewed["removed_refs"]),
                files=frozenset(reviewed["deleted_files"]),
                table_uuid=str(reviewed.get("table_uuid")),
                report=uri,
            ),
        )
