"""``iceberg-maint rewrite-data-files``: compact the data files of one table, every delete applied."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from airflow_iceberg_maint.api.compaction import Strategy, rewrite_data_files
from airflow_iceberg_maint.cli.catalog import cli_catalog
from airflow_iceberg_maint.cli.lease import table_lease
from airflow_iceberg_maint.compaction.report import DataRewriteReport
from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.state.cleanup import SqlStateStore, record_compaction_run

MB = 1024 * 1024


def _strategy(args: argparse.Namespace) -> Strategy:
    """``--strategy``, else the strategy ``--sort`` or ``--zorder`` implies, else bin-pack."""
    if args.strategy is not None:
        return Strategy(args.strategy)
    if args.sort and args.zorder:
        raise InvalidInputError("--sort and --zorder: give one of them")
    return Strategy.SORT if args.sort else Strategy.ZORDER if args.zorder else Strategy.BINPACK


def _text(report: DataRewriteReport) -> str:
    verb = "would rewrite" if report.dry_run else "rewrote"
    files = sum(g["input_files"] for g in report.groups) if report.dry_run else report.rewritten_data_files
    lines = [
        f"table {report.table}: {verb} {files} data files in {len(report.groups)} groups "
        f"({report.strategy}, target {report.target_file_size_bytes} bytes)"
    ]
    if not report.dry_run:
        lines.append(
            f"  added {report.added_data_files} files ({report.added_bytes} bytes), removed "
            f"{report.removed_delete_files} delete files, commits: {', '.join(map(str, report.commits)) or 'none'}"
        )
    lines += [
        f"  group {g['spec_id']} {g['partition']}: {g['input_files']} files, {g['input_bytes']} bytes"
        for g in report.groups
    ]
    lines += [f"  skipped {s['partition']}: {s['reason']}" for s in report.skipped_groups]
    lines += [f"  failed {f['group']}: {f['error']}" for f in report.failed]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> dict[str, Any]:
    strategy = _strategy(args)
    store = SqlStateStore()  # opened first: a bad state URL is refused before anything is written
    with table_lease(args, args.table):
        report = rewrite_data_files(
            args.table,
            catalog=cli_catalog(args),
            dry_run=args.dry_run,
            strategy=strategy,
            target_file_size_bytes=args.target_file_size_mb * MB if args.target_file_size_mb else None,
            min_input_files=args.min_input_files,
            where=args.where,
            sort=args.sort,
            zorder=args.zorder,
            delete_file_threshold=args.delete_file_threshold,
            max_commits=args.max_commits,
            remove_dangling_deletes=args.remove_dangling_deletes,
            memory_budget_mb=args.memory_budget_mb,
        )
        # Bookkeeping for `due`: a real run where no group failed moves the compaction clock.
        record_compaction_run(store, report.table_uuid, report.to_json(), datetime.now(UTC))
    return {**report.to_json(), "__text__": _text(report)}
