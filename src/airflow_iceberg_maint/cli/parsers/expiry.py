"""``iceberg-maint expire-snapshots``'s arguments; ``airflow_iceberg_maint.cli.expiry`` runs it."""

from __future__ import annotations

from typing import Any

from airflow_iceberg_maint.cli.parsers import Command
from airflow_iceberg_maint.cli.parsers.values import (
    _positive,
    add_cache_options,
    add_json_flag,
    add_lease_wait,
    timestamp,
)
from airflow_iceberg_maint.fs.batches import DEFAULT_MAX_CONCURRENT_DELETES


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "expire-snapshots", help="expire old snapshots and delete the files only they reached (no listing)"
    )
    parser.add_argument("table", help="namespace.table")
    age = parser.add_mutually_exclusive_group()
    age.add_argument(
        "--older-than-days",
        type=float,
        help="expire snapshots older than this many days (default: history.expire.max-snapshot-age-ms, else 5 days)",
    )
    age.add_argument("--older-than", type=timestamp, help="expire snapshots older than this ISO 8601 timestamp")
    parser.add_argument(
        "--retain-last",
        type=int,
        help="every branch keeps at least its N newest ancestors "
        "(default: history.expire.min-snapshots-to-keep, else 1)",
    )
    parser.add_argument("--dry-run", action="store_true", help="report, commit nothing, delete nothing")
    parser.add_argument("--max-concurrent-deletes", type=_positive, default=DEFAULT_MAX_CONCURRENT_DELETES)
    add_cache_options(parser)
    add_lease_wait(parser)
    add_json_flag(parser)
    parser.set_defaults(func=Command("airflow_iceberg_maint.cli.expiry", "run"))
