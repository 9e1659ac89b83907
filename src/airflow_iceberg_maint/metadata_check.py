"""The fields of a table metadata file the Iceberg spec requires, checked before pyiceberg parses it.

pyiceberg fills many required fields it does not find with defaults: a file without
``snapshots`` parses as a table with none (and every data file would look unreferenced), one
without ``table-uuid`` gets a random UUID, a snapshot without ``summary`` an empty one. So the
loader checks the raw JSON first: every field the spec requires of the file's format version is
present and not null, every snapshot has what the spec requires of it, and the current snapshot
and every ref name a snapshot the file lists. A file that fails is damaged metadata (S2, S7).
"""

from __future__ import annotations

import json
from typing import Any

from airflow_iceberg_maint.errors import DamagedMetadataError

_TABLE_V1 = ("format-version", "location", "last-updated-ms", "last-column-id")
_TABLE_V2 = (
    *_TABLE_V1,
    "table-uuid",
    "last-sequence-number",
    "schemas",
    "current-schema-id",
    "partition-specs",
    "default-spec-id",
    "last-partition-id",
    "sort-orders",
    "default-sort-order-id",
)
_SNAPSHOT_V1 = ("snapshot-id", "timestamp-ms")
_SNAPSHOT_V2 = (*_SNAPSHOT_V1, "sequence-number", "manifest-list", "summary")
# A snapshot id of "no current snapshot" (older writers wrote -1 rather than leave it out).
_NO_SNAPSHOT = (None, -1)


def checked_metadata_text(data: bytes, subject: str) -> str:
    """``data`` as text when it is JSON table metadata with every field the spec requires; else a
    ``DamagedMetadataError`` naming ``subject`` (the table and its file) and the first problem."""
    try:
        text = data.decode("utf-8")
        body = json.loads(text)
    except ValueError as exc:
        detail = " ".join(str(exc).split())
        raise DamagedMetadataError(f"{subject} cannot be parsed ({detail}); nothing was done") from exc
    problem = _problem(body)
    if problem:
        raise DamagedMetadataError(f"{subject} is not valid table metadata ({problem}); nothing was done")
    return text


def _missing(body: dict[str, Any], required: tuple[str, ...]) -> list[str]:
    return [name for name in required if body.get(name) is None]


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _problem(body: Any) -> str | None:
    if not isinstance(body, dict):
        return f"a JSON {type(body).__name__}, expected an object"
    version = body.get("format-version")
    if version not in (1, 2, 3):
        return f"format-version {version!r}, expected 1, 2 or 3"
    missing = _missing(body, _TABLE_V1 if version == 1 else _TABLE_V2)
    if version == 1 and body.get("schema") is None and body.get("schemas") is None:
        missing.append("schema")
    if missing:
        return f"required fields missing: {', '.join(missing)}"
    snapshots = body.get("snapshots", [])
    if not isinstance(snapshots, list) or not all(isinstance(s, dict) for s in snapshots):
        return "snapshots: expected a list of objects"
    for snapshot in snapshots:
        if not _is_id(snapshot.get("snapshot-id")):
            return f"snapshot-id {snapshot.get('snapshot-id')!r}: expected an integer"
        if version == 1 and snapshot.get("manifest-list") is None and "manifests" in snapshot:
            return None  # refused with its own message when pyiceberg parses it (load_errors)
        absent = _missing(snapshot, _SNAPSHOT_V1 if version == 1 else _SNAPSHOT_V2)
        if absent:
            return f"snapshot {snapshot.get('snapshot-id', '?')}: required fields missing: {', '.join(absent)}"
    ids = {s["snapshot-id"] for s in snapshots}
    current = body.get("current-snapshot-id")
    if current not in _NO_SNAPSHOT and not (_is_id(current) and current in ids):
        return f"current-snapshot-id {current} is not among its snapshots"
    refs = body.get("refs") or {}
    if not isinstance(refs, dict):
        return "refs: expected an object"
    for name, ref in refs.items():
        target = ref.get("snapshot-id") if isinstance(ref, dict) else None
        if not (_is_id(target) and target in ids):
            return f"ref {name!r} points at snapshot {target}, which is not among its snapshots"
    return None
