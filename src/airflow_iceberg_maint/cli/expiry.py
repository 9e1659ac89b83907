"""``iceberg-maint expire-snapshots``: expire old snapshots of one table and delete the files only they reached.

Its arguments are ``airflow_iceberg_maint.cli.parsers.expiry``'s.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from airflow_iceberg_maint.api.cleanup import expire_snapshots
from airflow_iceberg_maint.cli import with_failed_deletes
from airflow_iceberg_maint.cli.catalog import cli_catalog
from airflow_iceberg_maint.cli.lease import table_lease
from airflow_iceberg_maint.cli.parsers.values import cache_option
from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.expiry.run import ExpiryReport
from airflow_iceberg_maint.expiry.settings import check_retain_last
from airflow_iceberg_maint.reachability.cutoff import cutoff_for_days
from airflow_iceberg_maint.state.cleanup import SqlStateStore, record_expiry_run


def _text(report: ExpiryReport) -> str:
    expire, delete = ("would expire", "would delete") if report.dry_run else ("expired", "deleted")
    lines = [
        f"table {report.table}: {expire} {len(report.expired_snapshot_ids)} snapshots older than "
        f"{report.older_than.isoformat()} (retaining at least {report.retain_last} a branch)",
        f"  removed refs: {', '.join(report.removed_refs) or 'none'}",
        f"  {delete} {report.deleted_file_count} files, {report.deleted_bytes} bytes",
    ]
    lines += [f"  kept snapshot {sid}: {why}" for sid, why in report.kept_for_pins.items()]
    lines += [f"  failed: {f['path']}: {f['error']}" for f in report.failed]
    if report.kept_all_files:
        lines.append(f"  {report.kept_all_files}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> dict[str, Any]:
    # Refused before any catalog call, naming the option as typed.
    now = datetime.now(UTC)
    if args.older_than_days is not None:
        cutoff_for_days(args.older_than_days, now, "--older-than-days")
    if args.older_than is not None and args.older_than > now:
        when = args.older_than.isoformat()
        raise InvalidInputError(f"--older-than {when}: is in the future (now is {now.isoformat()})")
    if args.retain_last is not None:
        check_retain_last(args.retain_last, "--retain-last")
    store = SqlStateStore()  # opened first: a bad state URL is refused before anything is expired
    with table_lease(args, args.table):
        report = expire_snapshots(
            args.table,
            catalog=cli_catalog(args),
            older_than=args.older_than,
            older_than_days=args.older_than_days,
            retain_last=args.retain_last,
            dry_run=args.dry_run,
            max_concurrent_deletes=args.max_concurrent_deletes,
            cache=cache_option(args),
        )
        result = report.to_json()
        # Bookkeeping for `due`: only a real run without failed deletes moves the last-expiry clock.
        record_expiry_run(store, result, datetime.now(UTC))
    return with_failed_deletes({**result, "__text__": _text(report)})
