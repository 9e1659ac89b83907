"""The names of the maintenance jobs, which key every state record and name every policy's ``type``.

They live with the records rather than with the policies so that ``state`` imports nothing above it;
``policy.policies`` re-exports them under the names it always had.
"""

from __future__ import annotations

ORPHAN_FILE_REMOVAL = "system_iceberg_orphan_file_removal"
SNAPSHOT_EXPIRY = "system_iceberg_snapshot_expiry"
DATA_COMPACTION = "system_iceberg_data_compaction"
