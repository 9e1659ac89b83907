"""Deleting many files in steps that keep every worker busy, reporting progress after each step."""

from __future__ import annotations

from collections.abc import Sequence

from airflow_iceberg_maint.fs.storage import DeleteOutcome, SupportsBulkDelete
from airflow_iceberg_maint.progress import Phase

DEFAULT_MAX_CONCURRENT_DELETES = 8
DELETE_STEP_PER_WORKER = 5_000  # files a delete worker gets between progress updates (5 S3 requests)


def delete_in_steps(storage: SupportsBulkDelete, paths: Sequence[str], max_concurrency: int) -> DeleteOutcome:
    """Delete in steps that keep every worker busy, reporting progress after each."""
    outcome = DeleteOutcome()
    step = max_concurrency * DELETE_STEP_PER_WORKER
    with Phase("deleting", total=len(paths)) as deleting:
        for start in range(0, len(paths), step):
            chunk = list(paths[start : start + step])
            part = storage.delete_files(chunk, max_concurrency)
            outcome.deleted += part.deleted
            outcome.failed += part.failed
            outcome.requests += part.requests
            deleting.advance(len(chunk))
    return outcome
