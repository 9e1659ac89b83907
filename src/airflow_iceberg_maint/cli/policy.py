"""``iceberg-maint policy validate``: check a policy file without running anything."""

from __future__ import annotations

import argparse
from typing import Any

from airflow_iceberg_maint.cli import add_json_flag
from airflow_iceberg_maint.policy.policies import load_policies


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("policy", help="work with maintenance policy files")
    actions = parser.add_subparsers(dest="action", required=True)
    validate = actions.add_parser("validate", help="validate a policy file (JSON or YAML)")
    validate.add_argument("file", help="policy file")
    add_json_flag(validate)
    validate.set_defaults(func=run_validate)


def run_validate(args: argparse.Namespace) -> dict[str, Any]:
    policies = load_policies(args.file)
    names = ", ".join(p.name for p in policies)
    return {
        "file": args.file,
        "valid": True,
        "policies": [p.to_json() for p in policies],
        "__text__": f"{args.file}: {len(policies)} valid {'policy' if len(policies) == 1 else 'policies'}: {names}",
    }
