"""``iceberg-maint due``'s arguments; ``airflow_iceberg_maint.cli.due`` runs it."""

from __future__ import annotations

from typing import Any

from airflow_iceberg_maint.cli.parsers import Command
from airflow_iceberg_maint.cli.parsers.values import add_json_flag


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "due",
        help="evaluate whether a table is due for orphan-file removal and for each policy attached to it",
        description="State comes from $ICEBERG_MAINT_STATE_URL (a SQLAlchemy URL), "
        "by default a SQLite file under ~/.local/state/iceberg-maint/.",
    )
    parser.add_argument("table", help="namespace.table")
    parser.add_argument("--policy", help="policy file (JSON or YAML); without it the default interval applies")
    add_json_flag(parser)
    parser.set_defaults(func=Command("airflow_iceberg_maint.cli.due", "run"))
