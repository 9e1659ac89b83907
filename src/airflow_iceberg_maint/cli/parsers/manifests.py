"""``iceberg-maint rewrite-manifests``'s arguments; ``airflow_iceberg_maint.cli.manifests`` runs it."""

from __future__ import annotations

import argparse
import math
from typing import Any

from airflow_iceberg_maint.cli.parsers import Command
from airflow_iceberg_maint.cli.parsers.values import add_json_flag, add_lease_wait
from airflow_iceberg_maint.compaction.options import MANIFEST_TARGET_SIZE_PROPERTY

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
        help=f"target size of each manifest (default: the table's {MANIFEST_TARGET_SIZE_PROPERTY}, else 8 MB)",
    )
    parser.add_argument("--dry-run", action="store_true", help="report the plan, write nothing, commit nothing")
    add_lease_wait(parser)
    add_json_flag(parser)
    parser.set_defaults(func=Command("airflow_iceberg_maint.cli.manifests", "run"))
