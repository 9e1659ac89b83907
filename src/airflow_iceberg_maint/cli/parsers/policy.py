"""``iceberg-maint policy validate``'s arguments; ``airflow_iceberg_maint.cli.policy`` runs it."""

from __future__ import annotations

from typing import Any

from airflow_iceberg_maint.cli.parsers import Command
from airflow_iceberg_maint.cli.parsers.values import add_json_flag


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("policy", help="work with maintenance policy files")
    actions = parser.add_subparsers(dest="action", required=True)
    validate = actions.add_parser("validate", help="validate a policy file (JSON or YAML)")
    validate.add_argument("file", help="policy file")
    add_json_flag(validate)
    validate.set_defaults(func=Command("airflow_iceberg_maint.cli.policy", "run_validate"))
