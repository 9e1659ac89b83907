"""Which page shows a report, and what it needs: orphan removal, snapshot expiry and compaction each
have a layout of their own, chosen by the report's own keys (``orphan_files``, ``expired_snapshot_ids``,
``groups``), so an expiry's report never reads as an orphan run that found nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Paths listed on a report page; the raw JSON has them all.
REPORT_LIST_LIMIT = 10_000

#: What a report's ``stage`` means to a reader ("done" is the end of the run, not a phase).
STAGE_WORDS = {
    "planned": "stopped after planning: nothing was deleted after this point",
    "matched": "stopped after matching: nothing was deleted",
    "retention": "stopped after planning the retention",
    "done": "finished",
}


def report_kind(report: Mapping[str, Any]) -> str:
    """``expiry``, ``compaction`` or ``orphans``."""
    if "expired_snapshot_ids" in report:
        return "expiry"
    if "groups" in report and "rewritten_data_files" in report:
        return "compaction"
    return "orphans"


def _sections(report: Mapping[str, Any], *keys: tuple[str, str]) -> list[tuple[str, Any]]:
    return [(title, report.get(key)) for title, key in keys]


def report_view(report: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The template of the report's kind and its context."""
    kind = report_kind(report)
    common = {
        "report": report,
        "stage_words": STAGE_WORDS.get(str(report.get("stage")), f"stage {report.get('stage')}"),
    }
    failed = ("Failed deletes", "failed")
    if kind == "expiry":
        files = list(report.get("deleted_files") or [])
        ids = list(report.get("expired_snapshot_ids") or [])
        snapshots = report.get("expired_snapshots") or [
            {"snapshot_id": i, "committed_at": None, "operation": None} for i in ids
        ]
        sections = _sections(
            report,
            failed,
            ("Kept, not approved (snapshots)", "not_approved_snapshot_ids"),
            ("Kept, not approved (files)", "not_approved_files"),
        )
        context = {"files": files, "shown": files[:REPORT_LIST_LIMIT], "snapshots": snapshots}
        return "expiry_report.html", {
            **common,
            **context,
            "by_kind": report.get("deleted_by_kind"),
            "sections": sections,
        }
    if kind == "compaction":
        sections = _sections(report, ("Skipped groups", "skipped_groups"), ("Failed groups", "failed"))
        return "compaction_report.html", {**common, "sections": sections}
    files = list(report.get("orphan_files") or [])
    sections = _sections(report, ("Conflicts", "conflicts"), ("Protected locations", "protected_locations"), failed)
    return "report.html", {**common, "files": files, "shown": files[:REPORT_LIST_LIMIT], "sections": sections}
