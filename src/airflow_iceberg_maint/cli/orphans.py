"""``iceberg-maint orphans``: find and remove orphan files of one table."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import Any

from airflow_iceberg_maint.api.cleanup import PrefixMismatchMode, remove_orphan_files
from airflow_iceberg_maint.cli import add_json_flag, cli_catalog, timestamp, with_failed_deletes
from airflow_iceberg_maint.cli.lease import add_lease_wait, table_lease
from airflow_iceberg_maint.errors import InvalidInputError, PrefixMismatchError
from airflow_iceberg_maint.fs.locations import parse_equivalence_map
from airflow_iceberg_maint.orphans.options import DEFAULT_MEMORY_BUDGET_MB, PREFIX_MISMATCH_MODES
from airflow_iceberg_maint.orphans.report import OrphanReport
from airflow_iceberg_maint.reachability.cutoff import cutoff_for_days
from airflow_iceberg_maint.state.cleanup import SqlStateStore, record_orphan_run


def _mapping(text: str) -> dict[str, str]:
    try:
        return parse_equivalence_map(text)
    except InvalidInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


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
    add_lease_wait(parser)
    add_json_flag(parser)
    parser.set_defaults(func=run)


def _text(report: OrphanReport) -> str:
    verb = "would delete" if report.dry_run else "deleted"
    count = report.orphan_file_count if report.dry_run else report.deleted_file_count
    lines = [
        f"table {report.table}: {report.orphan_file_count} orphan files ({report.orphan_bytes} bytes) under "
        f"{report.location}, older than {report.older_than.isoformat()}; {verb} {count}",
        f"listed {report.files_listed} files in {report.list_calls} list calls; "
        f"{report.referenced_files} referenced files",
    ]
    lines += [f"  {kind}: {t['count']} files, {t['bytes']} bytes" for kind, t in report.by_kind.items() if t["count"]]
    lines += [f"  failed: {f['path']}: {f['error']}" for f in report.failed]
    lines += [f"  conflict: {c['listed']} vs {c['referenced']}" for c in report.conflicts]
    lines += [f"  kept whole: {p['location']}: {p['reason']}" for p in report.protected_locations]
    lines += [f"  kept, name not UTF-8: {path}" for path in report.kept_undecodable]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.older_than_days is not None:
        cutoff_for_days(args.older_than_days, datetime.now(UTC), "--older-than-days")  # refused before any catalog call
    with table_lease(args, args.table):
        return _remove(args)


def _remove(args: argparse.Namespace) -> dict[str, Any]:
    try:
        report = remove_orphan_files(
            args.table,
            catalog=cli_catalog(args),
            older_than=args.older_than,
            older_than_days=args.older_than_days,
            location=args.location,
            dry_run=args.dry_run,
            prefix_mismatch_mode=PrefixMismatchMode(args.prefix_mismatch_mode),
            equal_schemes=args.equal_schemes,
            equal_authorities=args.equal_authorities,
            max_concurrent_deletes=args.max_concurrent_deletes,
            only_this_table=args.only_this_table,
            listing=args.listing,
            memory_budget_mb=args.memory_budget_mb,
        )
    except PrefixMismatchError as exc:
        # The pairs are the useful part of this failure: print them before the one-line error.
        if args.json and isinstance(exc.report, OrphanReport):
            json.dump(exc.report.to_json(), sys.stdout, default=str)
            sys.stdout.write("\n")
        raise
    # Bookkeeping for `due`: only a real run without failed deletes moves the last-cleanup clock.
    record_orphan_run(SqlStateStore(), report.summary(), datetime.now(UTC))
    return with_failed_deletes({**report.to_json(), "__text__": _text(report)})
