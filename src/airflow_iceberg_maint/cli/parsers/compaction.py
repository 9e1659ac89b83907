"""``iceberg-maint rewrite-data-files``'s arguments; ``airflow_iceberg_maint.cli.compaction`` runs it."""

from __future__ import annotations

import argparse
from typing import Any

from airflow_iceberg_maint.cli.parsers import Command
from airflow_iceberg_maint.cli.parsers.values import _positive, add_json_flag, add_lease_wait
from airflow_iceberg_maint.compaction.options import Strategy, column_list
from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.orphans.options import DEFAULT_MEMORY_BUDGET_MB


def _columns(text: str) -> tuple[str, ...]:
    try:
        return column_list(text, "columns")
    except InvalidInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "rewrite-data-files", help="compact small data files into files of the target size, deletes applied"
    )
    parser.add_argument("table", help="namespace.table")
    parser.add_argument(
        "--target-file-size-mb",
        type=_positive,
        help="target size of the files written (default: write.target-file-size-bytes, else 512)",
    )
    parser.add_argument(
        "--min-input-files", type=_positive, help="candidates a group needs to be rewritten (default 5)"
    )
    parser.add_argument("--where", metavar="EXPR", help="only files that may hold rows matching this pyiceberg filter")
    parser.add_argument("--strategy", choices=[s.value for s in Strategy], help="binpack (default), sort or zorder")
    parser.add_argument("--sort", type=_columns, default=(), metavar="COL,...", help="sort columns (strategy sort)")
    parser.add_argument("--zorder", type=_columns, default=(), metavar="COL,...", help="z-order columns")
    parser.add_argument(
        "--delete-file-threshold",
        type=_positive,
        help="a file with this many delete files is rewritten whatever its size",
    )
    parser.add_argument("--max-commits", type=_positive, help="commit the groups in at most this many commits")
    parser.add_argument(
        "--no-remove-dangling-deletes",
        dest="remove_dangling_deletes",
        action="store_false",
        help="keep delete files that no longer apply to any data file",
    )
    parser.add_argument(
        "--memory-budget-mb", type=_positive, default=DEFAULT_MEMORY_BUDGET_MB, help="memory for a group's rows"
    )
    parser.add_argument("--dry-run", action="store_true", help="report the plan; write and commit nothing")
    add_lease_wait(parser)
    add_json_flag(parser)
    parser.set_defaults(func=Command("airflow_iceberg_maint.cli.compaction", "run"))
