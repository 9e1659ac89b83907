"""The plan and the markers the steps of a sharded orphan scan exchange through its scratch space.

Each step reads the plan and the markers of the steps before it; one that is missing or belongs
to another plan fails the step (S2).
"""

from __future__ import annotations

from itertools import chain
from typing import Any

import pyarrow as pa

from airflow_iceberg_maint.errors import InvalidInputError, MetadataReadError
from airflow_iceberg_maint.fs.locations import PathEquivalence
from airflow_iceberg_maint.fs.storage import FileInfo
from airflow_iceberg_maint.orphans.sharded.files import Scratch

PLAN = "plan.json"
#: What a match step leaves for the final step: the files nothing references, conflicts flagged.
UNMATCHED_SCHEMA = pa.schema([("path", pa.binary()), ("size", pa.int64()), ("conflict", pa.bool_())])


def shard_marker_name(index: int) -> str:
    return f"shards/{index:04d}.json"


def match_marker_name(index: int) -> str:
    return f"matches/{index:04d}.json"


def read_plan(store: Scratch, table_uuid: str | None = None) -> dict[str, Any]:
    plan = store.read_json(PLAN)
    if table_uuid is not None and plan["table_uuid"] != table_uuid:
        raise InvalidInputError(
            f"scratch {store.uri!r}: planned for table {plan['table']} ({plan['table_uuid']}), not table {table_uuid}"
        )
    return plan


def check_shard_index(plan: dict[str, Any], index: int) -> None:
    if not 0 <= index < plan["shards"]:
        raise InvalidInputError(f"shard {index}: expected 0 to {plan['shards'] - 1}")


def plan_equivalence(plan: dict[str, Any]) -> PathEquivalence:
    options = plan["options"]
    return PathEquivalence(options["equal_schemes"], options["equal_authorities"])


def read_markers(store: Scratch, plan: dict[str, Any], name: Any) -> list[dict[str, Any]]:
    """Every shard's (or match's) marker; a missing one, or one of another plan, fails the step (S2)."""
    markers = []
    for i in range(plan["shards"]):
        marker = store.read_json(name(i))
        if marker.get("plan_id") != plan["plan_id"]:
            raise MetadataReadError(f"scratch file {store.location(name(i))!r}: belongs to another plan")
        markers.append(marker)
    return markers


def plan_parts(plan: dict[str, Any], shards: list[dict[str, Any]], kind: str) -> list[str]:
    return [name for parts in chain([plan["parts"][kind]], (s["parts"][kind] for s in shards)) for name in parts]


def file_infos(table: pa.Table | pa.RecordBatch) -> list[FileInfo]:
    paths = table.column("path").to_pylist()
    return [
        FileInfo(p.decode("utf-8", "surrogateescape"), s, None)
        for p, s in zip(paths, table.column("size").to_pylist(), strict=True)
    ]
