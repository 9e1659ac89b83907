"""Expiring old extracts of an index, then deleting the files no remaining extract references.

Which extracts go: with ``retain_last`` N, all but the N newest; with ``older_than``, those
created before it; with both, those created before it beyond the N newest. The newest extract
(latest ``timestamp-ms``) is never expired. The metadata change is committed first (S6); only
then are the expired extracts' tracking and region files deleted, minus every file a remaining
extract still lists (read from the committed metadata, so a concurrent commit is accounted for).
When the commit's outcome is unknown (a create with no clear answer, a timeout or SIGTERM during
it), nothing is deleted: the expired extracts may still be live.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from pyiceberg.table import Table

from airflow_iceberg_maint.errors import CommitOutcomeUnknownError, InvalidInputError, MetadataReadError
from airflow_iceberg_maint.fs.backends import storage_for
from airflow_iceberg_maint.fs.batches import DEFAULT_MAX_CONCURRENT_DELETES
from airflow_iceberg_maint.fs.locations import PathEquivalence
from airflow_iceberg_maint.index.lifecycle.references import extract_file_batches, not_referenced
from airflow_iceberg_maint.index.metadata.model import Extract, IndexMetadata
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.reachability.referenced import ReferencedSet

log = logging.getLogger(__name__)


def extracts_to_expire(metadata: IndexMetadata, retain_last: int | None, older_than_ms: int | None) -> list[Extract]:
    """The extracts the rules select, oldest first; never the newest one."""
    # Newest first: by timestamp, and on a tie the later one in the list.
    ranked = sorted(enumerate(metadata.extracts), key=lambda p: (p[1].timestamp_ms, p[0]), reverse=True)
    keep = max(retain_last or 1, 1)
    candidates = [extract for _, extract in ranked[keep:]]
    if older_than_ms is not None:
        candidates = [e for e in candidates if e.timestamp_ms < older_than_ms]
    return sorted(candidates, key=lambda e: e.timestamp_ms)


def _check_arguments(retain_last: int | None, older_than: datetime | None) -> int | None:
    """Validate the selection; returns the cutoff in ms from the epoch (or None)."""
    if retain_last is None and older_than is None:
        raise InvalidInputError("expire: give --retain-last N, --older-than TIMESTAMP, or both")
    if retain_last is not None and retain_last < 1:
        raise InvalidInputError(
            f"--retain-last {retain_last}: must be at least 1 (the newest extract is never expired)"
        )
    if older_than is None:
        return None
    cutoff = older_than if older_than.tzinfo else older_than.replace(tzinfo=UTC)
    return int(cutoff.timestamp() * 1000)


def expire_extracts(
    table: Table,
    name: str,
    retain_last: int | None,
    older_than: datetime | None,
    max_concurrent_deletes: int = DEFAULT_MAX_CONCURRENT_DELETES,
) -> dict[str, Any]:
    """Expire extracts of index ``name``; the ``index expire`` JSON: index, expired_extract_ids, deleted_files."""
    older_than_ms = _check_arguments(retain_last, older_than)
    store = IndexStore(table)
    current, _, _ = store.load(name)
    result: dict[str, Any] = {"index": name, "expired_extract_ids": [], "deleted_files": 0, "failed": []}
    if not extracts_to_expire(current, retain_last, older_than_ms):
        return result

    expired: list[Extract] = []

    def update(base: IndexMetadata) -> IndexMetadata:
        expired[:] = extracts_to_expire(base, retain_last, older_than_ms)
        return base.without_extracts(e.extract_id for e in expired)

    try:
        committed, _ = store.commit(name, update)
    except CommitOutcomeUnknownError as exc:
        raise CommitOutcomeUnknownError(f"expire: no file was deleted: {exc}") from exc
    result["expired_extract_ids"] = [e.extract_id for e in expired]
    log.info("index %s: expired extracts %s", name, result["expired_extract_ids"])

    try:
        remaining = list(extract_file_batches(table, committed))
        candidates = list(extract_file_batches(table, replace(committed, extracts=tuple(expired))))
    except MetadataReadError as exc:
        raise MetadataReadError(
            f"index {name!r}: extracts {result['expired_extract_ids']} were expired, but no file was deleted: {exc}"
        ) from exc
    refs = ReferencedSet(PathEquivalence())
    for batch in remaining:
        refs.add(batch)
    unique = list(dict.fromkeys(path for batch in candidates for path in batch))
    doomed = not_referenced(unique, refs)
    if doomed:
        storage = storage_for(store.index_dir(name), table.io.properties)
        outcome = storage.delete_files(doomed, max_concurrent_deletes)
        result["deleted_files"] = len(outcome.deleted)
        result["failed"] = [{"path": p, "error": e} for p, e in outcome.failed]
    return result
