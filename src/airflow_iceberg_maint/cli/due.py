"""``iceberg-maint due``: is a table due for orphan-file removal, and for each policy attached to it?

Its arguments are ``airflow_iceberg_maint.cli.parsers.due``'s.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from airflow_iceberg_maint.catalog import load_table
from airflow_iceberg_maint.cli.catalog import cli_catalog
from airflow_iceberg_maint.policy.due import Evaluation, evaluate_policies, evaluate_table
from airflow_iceberg_maint.policy.policies import load_policies
from airflow_iceberg_maint.state.cleanup import SqlStateStore


def _verdict(evaluation: Evaluation) -> str:
    return f"{'due' if evaluation.due else 'not due'} ({evaluation.reason})"


def run(args: argparse.Namespace) -> dict[str, Any]:
    # Validate the policy file before touching the catalog: a bad file is the likelier mistake.
    policies = load_policies(args.policy) if args.policy else None
    table = load_table(cli_catalog(args), args.table)
    table_uuid = str(table.metadata.table_uuid)
    store, now = SqlStateStore(), datetime.now(UTC)
    # The top-level keys stay orphan removal's (the contract before expiry); `policies` covers every type.
    result = evaluate_table(args.table, table_uuid, policies, store, now, args.policy, loaded=table)
    each = evaluate_policies(args.table, table_uuid, policies or [], store, now, loaded=table)
    lines = [f"{args.table}: {_verdict(result)}, score {result.score:g}"]
    lines += [f"  policy {e.policy!r} ({e.type}): {_verdict(e)}" for e in each]
    return {**result.to_json(), "policies": [e.policy_json() for e in each], "__text__": "\n".join(lines)}
