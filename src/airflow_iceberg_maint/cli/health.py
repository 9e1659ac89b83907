"""``iceberg-maint health``: a table's statistics and score, or every table of a namespace or catalog, worst first."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from airflow_iceberg_maint.api.health import fleet_health
from airflow_iceberg_maint.api.tables import digest_folder
from airflow_iceberg_maint.catalog import load_table
from airflow_iceberg_maint.cli.catalog import cli_catalog
from airflow_iceberg_maint.cli.parsers.values import cache_option
from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.health.fleet import check_parallelism
from airflow_iceberg_maint.health.report import HealthReport, build_report
from airflow_iceberg_maint.policy.policies import DATA_COMPACTION, ORPHAN_FILE_REMOVAL, SNAPSHOT_EXPIRY
from airflow_iceberg_maint.state.cleanup import SqlStateStore

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def human_bytes(value: int) -> str:
    size = float(value)
    for unit in _UNITS:
        if size < 1024 or unit == _UNITS[-1]:
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError  # not reached


def _text(report: HealthReport) -> str:
    body = report.to_json()
    deletes = body["delete_files"]
    lines = [
        f"{report.table}: score {report.score}",
        f"  data files: {body['data_files']} ({human_bytes(body['data_bytes'])}), "
        f"small: {body['small_data_files']} (below 75% of {human_bytes(body['target_file_size_bytes'])})",
        f"  delete files: {deletes['position']} position, {deletes['equality']} equality, "
        f"{deletes['deletion_vector']} deletion vectors; {body['deleted_rows']} deleted rows",
        f"  snapshots: {body['snapshots']} (oldest {body['oldest_snapshot_at'] or '-'}), "
        f"expirable: {body['expirable_snapshots']} ({human_bytes(body['expirable_bytes'])})",
        f"  manifests: {body['manifests']} ({human_bytes(body['manifest_bytes'])}), "
        f"metadata files: {body['metadata_files']}",
    ]
    orphans = body["last_orphan_run"]
    lines.append(
        "  last orphan run: none recorded"
        if orphans is None
        else f"  last orphan run: {orphans['at']}, {orphans['orphan_files']} orphan files "
        f"({human_bytes(orphans['orphan_bytes'] or 0)}){' (dry run)' if orphans['dry_run'] else ''}"
    )
    lines += [f"  -{d['points']}: {d['cause']} -> {d['remedy']}" for d in body["deductions"]]
    return "\n".join(lines)


def _table(reports: list[HealthReport]) -> str:
    header = ("table", "score", "data files", "small", "deletes", "snapshots", "expirable", "manifests", "first cause")
    rows = [header]
    for r in reports:
        s = r.stats
        first = r.deductions[0] if r.deductions else None
        rows.append(
            (
                r.table,
                str(r.score),
                str(s.data_files),
                str(s.small_data_files),
                str(s.delete_files),
                str(r.snapshots),
                human_bytes(r.expirable.bytes),
                str(s.manifests),
                f"{first.remedy} (-{first.points})" if first else "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def run(args: argparse.Namespace) -> dict[str, Any]:
    fleet = args.namespace is not None or args.all
    if fleet == (args.table is not None):
        raise InvalidInputError("health: give a table (namespace.table), or --namespace NS, or --all")
    check_parallelism(args.parallelism, "--parallelism")
    target = args.target_file_size_mb * 2**20 if args.target_file_size_mb is not None else None
    store, now = SqlStateStore(), datetime.now(UTC)
    cache = cache_option(args)
    folder = digest_folder(cache)
    catalog = cli_catalog(args)
    if not fleet:
        table = load_table(catalog, args.table)
        uuid = str(table.metadata.table_uuid)
        report = build_report(
            table,
            target_file_size_bytes=target,
            last_orphan_run=store.get(uuid, ORPHAN_FILE_REMOVAL),
            last_expiry=store.get(uuid, SNAPSHOT_EXPIRY),
            last_compaction=store.get(uuid, DATA_COMPACTION),
            now=now,
            cache=folder,
        )
        text = _table([report]) if args.format == "table" else _text(report)
        return {**report.to_json(), "__text__": text}
    reports = fleet_health(
        catalog,
        namespace=args.namespace,
        parallelism=args.parallelism,
        state=store,
        target_file_size_bytes=target,
        cache=cache,
    )
    failed = [{"table": name, "error": error} for name, error in reports.failed]
    text = _table(reports) if args.format == "table" else "\n".join(_text(r) for r in reports) or "no tables"
    text += "".join(f"\n{f['table']}: not read: {f['error']}" for f in failed)
    return {"tables": [r.to_json() for r in reports], "failed": failed, "__text__": text}
