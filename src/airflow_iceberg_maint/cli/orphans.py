"""``iceberg-maint orphans``: find and remove orphan files of one table (arguments: ``cli.parsers.orphans``)."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import Any

from airflow_iceberg_maint.api.cleanup import PrefixMismatchMode, remove_orphan_files
from airflow_iceberg_maint.cli import with_failed_deletes
from airflow_iceberg_maint.cli.catalog import cli_catalog
from airflow_iceberg_maint.cli.lease import table_lease
from airflow_iceberg_maint.cli.parsers.values import cache_option
from airflow_iceberg_maint.errors import PrefixMismatchError
from airflow_iceberg_maint.orphans.report import OrphanReport
from airflow_iceberg_maint.reachability.cutoff import cutoff_for_days
from airflow_iceberg_maint.state.cleanup import SqlStateStore, record_orphan_run


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
            cache=cache_option(args),
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
