"""``iceberg-maint health``'s arguments; ``airflow_iceberg_maint.cli.health`` runs it."""

from __future__ import annotations

from typing import Any

from airflow_iceberg_maint.cli.parsers import Command
from airflow_iceberg_maint.cli.parsers.values import _positive, add_cache_options, add_json_flag
from airflow_iceberg_maint.health.names import DEFAULT_PARALLELISM

FORMATS = ("text", "table")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "health",
        help="statistics and a score from metadata and manifests: what each table needs, worst first",
        description="Reads metadata and manifests only. The last orphan run's findings come from the state store "
        "($ICEBERG_MAINT_STATE_URL).",
    )
    parser.add_argument("table", nargs="?", help="namespace.table")
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("--namespace", metavar="NS", help="every table of namespace NS (and those under it)")
    scope.add_argument("--all", action="store_true", help="every table of the catalog")
    parser.add_argument(
        "--target-file-size-mb",
        type=_positive,
        metavar="N",
        help="data files below 75%% of N MiB are small (default: write.target-file-size-bytes, else 512)",
    )
    parser.add_argument(
        "--parallelism",
        type=_positive,
        default=DEFAULT_PARALLELISM,
        help=f"tables read at a time with --namespace or --all (default {DEFAULT_PARALLELISM})",
    )
    parser.add_argument("--format", choices=FORMATS, default="text", help="text (default) or a table for people")
    add_cache_options(parser)
    add_json_flag(parser)
    parser.set_defaults(func=Command("airflow_iceberg_maint.cli.health", "run"))
