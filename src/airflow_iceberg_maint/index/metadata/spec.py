"""The numbers of the index format (docs/index-format.md; format-version 1) and the index properties.

Field-ID limits, the layout of content-stats IDs, and each property with its documented default
(``docs/index-format.md``).
"""

from __future__ import annotations

FORMAT_VERSION = 1
INDEX_TYPE_SCALAR = "scalar"
MAX_FIELD_ID = 2147483447  # IDs above are reserved for metadata columns (table spec)

# Content stats: IDs of the bounds structs of tracking files, and of ``group_max_value``
# (docs/index-format.md, "Decisions on the questions the draft leaves open", 3).
STATS_ID_START = 10_000
STATS_ID_END = 200_000_000  # exclusive
STATS_IDS_PER_FIELD = 200
LOWER_BOUND = 1
UPPER_BOUND = 2
TIGHT_BOUNDS = 3
VALUE_COUNT = 4
NULL_VALUE_COUNT = 5
NAN_VALUE_COUNT = 6
AVG_VALUE_SIZE_IN_BYTES = 7
GROUP_MAX_VALUE = 8
MAX_STATS_FIELD_ID = (STATS_ID_END - 1 - STATS_ID_START) // STATS_IDS_PER_FIELD  # 999_949

#: The table property naming the folder that holds the table's indexes (each at ``<folder>/<name>``);
#: unset, ``<table-location>/index``. Set by ``index create --location``.
INDEX_PATH_PROPERTY = "write.index.path"

# Index properties (names and defaults decided in docs/index-format.md).
REGION_TARGET_SIZE = "write.region.target-file-size-bytes"
REGION_TARGET_SIZE_DEFAULT = 64 * 1024 * 1024
ALLOW_KEY_SPANNING = "write.region.allow-key-spanning"
ALLOW_KEY_SPANNING_DEFAULT = False
BUILD_MEMORY_BUDGET = "write.build.memory-budget-bytes"
BUILD_MEMORY_BUDGET_DEFAULT = 1024 * 1024 * 1024
PREVIOUS_VERSIONS_MAX = "write.metadata.previous-versions-max"
PREVIOUS_VERSIONS_MAX_DEFAULT = 100
DELETE_AFTER_COMMIT = "write.metadata.delete-after-commit.enabled"
DELETE_AFTER_COMMIT_DEFAULT = False
COMMIT_NUM_RETRIES = "commit.retry.num-retries"
COMMIT_NUM_RETRIES_DEFAULT = 10


def stats_base_id(field_id: int) -> int:
    """ID of the stats struct of an index field inside ``content_stats``: ``10_000 + 200 * field-id``."""
    return STATS_ID_START + STATS_IDS_PER_FIELD * field_id


def stats_metric_id(field_id: int, offset: int) -> int:
    """ID of one metric (``LOWER_BOUND``, ..., ``GROUP_MAX_VALUE``) of an index field's stats struct."""
    return stats_base_id(field_id) + offset
