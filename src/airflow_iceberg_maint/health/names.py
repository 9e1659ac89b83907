"""The values a policy's ``trigger`` and ``score`` expressions may name (docs/health.md, "Triggers").

The health keys that are numbers (``delete_files`` is the total of its kinds, each kind has its own
name), a few derived from them, and the clocks of the state store. A table never run has
``NEVER_RUN_DAYS`` days since its last run, so ``days_since_last_run >= 7`` holds for it.
"""

from __future__ import annotations

#: Numbers of the health report (``HealthReport.values``).
HEALTH_NAMES = (
    "data_files",
    "data_bytes",
    "data_rows",
    "small_data_files",
    "small_files",  # the same as small_data_files
    "delete_files",
    "position_delete_files",
    "equality_delete_files",
    "deletion_vector_files",
    "delete_bytes",
    "deleted_rows",
    "delete_ratio",
    "snapshots",
    "oldest_snapshot_age_days",
    "manifests",
    "manifest_bytes",
    "metadata_files",
    "expirable_snapshots",
    "expirable_bytes",
    "orphan_bytes",
    "score",
    "days_since_last_orphan_run",
    "days_since_last_expiry",
    "days_since_last_compaction",
)
#: Days since the last successful run of the policy's own kind (set by ``due``).
DAYS_SINCE_LAST_RUN = "days_since_last_run"
EXPRESSION_NAMES = frozenset({*HEALTH_NAMES, DAYS_SINCE_LAST_RUN})
#: Days since the last run of a table never run (JSON has no infinity); the same as ``due``'s score then.
NEVER_RUN_DAYS = 1_000_000.0

#: Tables read at a time by a fleet scan.
DEFAULT_PARALLELISM = 4
