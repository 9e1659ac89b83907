"""``iceberg-maint policy validate``: check a policy file without running anything (arguments: ``parsers.policy``)."""

from __future__ import annotations

import argparse
from typing import Any

from airflow_iceberg_maint.policy.policies import load_policies


def run_validate(args: argparse.Namespace) -> dict[str, Any]:
    policies = load_policies(args.file)
    names = ", ".join(p.name for p in policies)
    return {
        "file": args.file,
        "valid": True,
        "policies": [p.to_json() for p in policies],
        "__text__": f"{args.file}: {len(policies)} valid {'policy' if len(policies) == 1 else 'policies'}: {names}",
    }
