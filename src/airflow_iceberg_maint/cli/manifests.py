"""``iceberg-maint rewrite-manifests``: regroup one table's manifests by partition, in one ``replace`` commit."""

from __future__ import annotations

import argparse
import math
from typing import Any

from airflow_iceberg_maint.api.compaction import rewrite_manifests
from airflow_iceberg_maint.cli import add_json_flag, cli_catalog
from airflow_iceberg_maint.cli.lease import add_lease_wait, table_lease
from airflow_iceberg_maint.compaction.manifests import TARGET_SIZE_PROPERTY, ManifestRewriteReport

MB = 1024 * 1024


def _megabytes(text: str) -> int:
    """A size in MB (decimals allowed) as a whole number of bytes >= 1."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value * MB < 1:
        raise argparse.ArgumentTypeError(f"expected a number of MB > 0, got {text!r}")
    return int(value * MB)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "rewrite-manifests", help="regroup the current snapshot's manifests by partition (one replace commit)"
    )
    parser.add_argument("table", help="namespace.table")
    parser.add_argument(
        "--target-manifest-size-mb",
        type=_megabytes,
        dest="target_bytes",
        metavar="N",
        help=f"target size of each manifest (default: the table's {TARGET_SIZE_PROPERTY}, else 8 MB)",
    )
    parser.add_argument("--dry-run", action="store_true", help="report the plan, write nothing, commit nothing")
    add_lease_wait(parser)
    add_json_flag(parser)
    parser.set_defaults(func=run)


def _text(report: ManifestRewriteReport) -> str:
    verb = "would rewrite" if report.dry_run else "rewrote"
    added = "about " if report.dry_run else ""
    commits = ", ".join(str(c) for c in report.commits) or "none"
    return (
        f"table {report.table}: {verb} {report.rewritten_manifests} manifests into {added}{report.added_manifests} "
        f"(target {report.target_manifest_size_bytes} bytes), kept {report.kept_manifests}; commits: {commits}"
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    with table_lease(args, args.table):
        report = rewrite_manifests(
            args.table, catalog=cli_catalog(args), target_manifest_size_bytes=args.target_bytes, dry_run=args.dry_run
        )
    return {**report.to_json(), "__text__": _text(report)}
