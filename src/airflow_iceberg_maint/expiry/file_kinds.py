"""What an expiry deletes, described for people: each file's kind, and each expired snapshot's commit.

The expiry's own plan (``expiry.files``) finds paths and sizes only, fast; the report and the
approval form say what those paths are (data, delete files, manifests, manifest lists,
statistics) and which commits expire, from the metadata the plan read, before anything is
deleted: only the manifests the expiry deletes are opened.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFileContent, FileFormat
from pyiceberg.table.metadata import TableMetadata

from airflow_iceberg_maint.reachability.manifests import live_file_contents, manifest_paths

#: The kinds, in the order the report lists them.
KINDS = ("data", "position_delete", "equality_delete", "deletion_vector", "manifest", "manifest_list", "statistics")
OTHER = "other"


def _content_kind(content: int, file_format: str) -> str:
    if content == DataFileContent.EQUALITY_DELETES:
        return "equality_delete"
    if content == DataFileContent.POSITION_DELETES:
        return "deletion_vector" if file_format.upper() == FileFormat.PUFFIN.value else "position_delete"
    return "data"


def file_kinds(io: FileIO, before: TableMetadata, expired: Iterable[int], paths: Iterable[str]) -> dict[str, str]:
    """The kind of each of ``paths`` (files the expiry of ``expired`` snapshots of ``before`` deletes).

    Statistics files and manifest lists are known from the metadata, manifests from the expired
    manifest lists (through ``io``'s digest cache when it has one); entries are decoded only
    when paths are left, and only of the manifests deleted: an expiry that drops no manifest
    opens none.
    """
    wanted, ids = set(paths), set(expired)
    kinds: dict[str, str] = {}
    for stats in [*before.statistics, *before.partition_statistics]:
        if stats.statistics_path in wanted:
            kinds[stats.statistics_path] = "statistics"
    snapshots = [s for s in before.snapshots if s.snapshot_id in ids]
    for snapshot in snapshots:
        if snapshot.manifest_list in wanted:
            kinds[snapshot.manifest_list] = "manifest_list"
    # ``kinds`` only ever holds paths of ``wanted``: every path has its kind once the sizes are equal.
    for snapshot in snapshots:
        if len(kinds) == len(wanted):
            break
        for manifest_path in manifest_paths(io, snapshot.manifest_list) if snapshot.manifest_list else []:
            if manifest_path in wanted:
                kinds.setdefault(manifest_path, "manifest")
    if len(kinds) < len(wanted):
        _entry_kinds(io, wanted, kinds)
    return {path: kinds.get(path, OTHER) for path in wanted}


def _entry_kinds(io: FileIO, wanted: set[str], kinds: dict[str, str]) -> None:
    """The kinds of the live entries in ``wanted`` of the deleted manifests (the only ones whose files go)."""
    for manifest in [path for path, kind in kinds.items() if kind == "manifest"]:
        if len(kinds) == len(wanted):
            return
        for path, content, file_format in live_file_contents(io, manifest):
            if path in wanted:
                kinds[path] = _content_kind(content, file_format)


def by_kind(paths: Iterable[str], kinds: Mapping[str, str], sizes: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """``{kind: {count, bytes}}`` of ``paths``, every kind listed (zero when none), ``other`` when any."""
    tally = {kind: {"count": 0, "bytes": 0} for kind in KINDS}
    for path in paths:
        one = tally.setdefault(kinds.get(path, OTHER), {"count": 0, "bytes": 0})
        one["count"] += 1
        one["bytes"] += int(sizes.get(path, 0))
    return tally


def snapshot_commits(before: TableMetadata, snapshot_ids: Iterable[int]) -> list[dict[str, Any]]:
    """Each snapshot's ``{snapshot_id, committed_at, operation}`` (ISO time, UTC), in the order given."""
    found = {s.snapshot_id: s for s in before.snapshots}
    commits = []
    for snapshot_id in snapshot_ids:
        snapshot = found.get(snapshot_id)
        committed = datetime.fromtimestamp(snapshot.timestamp_ms / 1000, UTC).isoformat() if snapshot else None
        operation = snapshot.summary.operation.value if snapshot and snapshot.summary else None
        commits.append({"snapshot_id": snapshot_id, "committed_at": committed, "operation": operation})
    return commits
