"""``iceberg-maint rewrite-manifests``: regroup one table's manifests by partition, in one ``replace`` commit."""

from __future__ import annotations

import argparse
from typing import Any

from airflow_iceberg_maint.api.compaction import rewrite_manifests
from airflow_iceberg_maint.cli.catalog import cli_catalog
from airflow_iceberg_maint.cli.lease import table_lease
from airflow_iceberg_maint.compaction.manifests import ManifestRewriteReport


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
