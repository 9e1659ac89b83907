"""``iceberg-maint orphans``'s arguments; ``airflow_iceberg_maint.cli.orphans`` runs it."""

from __future__ import annotations

import argparse
from typing import Any

from airflow_iceberg_maint.cli.parsers import Command
from airflow_iceberg_maint.cli.parsers.values import (
    _positive,
    add_cache_options,
    add_json_flag,
    add_lease_wait,
    timestamp,
)
from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.fs.locations import parse_equivalence_map
from airflow_iceberg_maint.orphans.options import DEFAULT_MEMORY_BUDGET_MB, PREFIX_MISMATCH_MODES


def _mapping(text: str) -> dict[str, str]:
    try:
        return parse_equivalence_map(text)
    except InvalidInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("orphans", help="find and remove orphan files")
    parser.add_argument("table", help="namespace.table")
    age = parser.add_mutually_exclusive_group()
    age.add_argument("--older-than-days", type=float, help="only files older than this many days (default 3)")
    age.add_argument("--older-than", type=timestamp, help="only files older than this ISO 8601 timestamp")
    parser.add_argument("--location", help="scan this location (the table location or a path under it)")
    parser.add_argument("--dry-run", action="store_true", help="report, delete nothing")
    parser.add_argument("--prefix-mismatch-mode", choices=PREFIX_MISMATCH_MODES, default="error")
    parser.add_argument("--equal-schemes", type=_mapping, default={}, help="e.g. s3a=s3,s3n=s3")
    parser.add_argument("--equal-authorities", type=_mapping, default={}, help="e.g. nn1=nn2")
    parser.add_argument("--max-concurrent-deletes", type=_positive, default=8)
    parser.add_argument(
        "--only-this-table",
        action="store_true",
        help="the location holds this table only: skip the catalog pass that finds other tables nested under it",
    )
    parser.add_argument(
        "--listing",
        metavar="SOURCE",
        help="read the listing from an inventory instead of listing storage: an S3 Inventory manifest.json, "
        "or a Parquet or CSV file of path, size, last_modified",
    )
    parser.add_argument(
        "--memory-budget-mb",
        type=_positive,
        default=DEFAULT_MEMORY_BUDGET_MB,
        help="listed files and referenced paths past this many MB go to local disk (TMPDIR)",
    )
    add_cache_options(parser)
    add_lease_wait(parser)
    add_json_flag(parser)
    parser.set_defaults(func=Command("airflow_iceberg_maint.cli.orphans", "run"))
