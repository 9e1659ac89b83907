"""The status page over many tables: the time of one view, from stored records to HTML.

    .venv/bin/python bench/status_page.py              # 1,000 tables, 2 indexes each
    .venv/bin/python bench/status_page.py --tables 5000

The records live in a SQL state store (``[iceberg_maint] state_url`` on a SQLite file): one cleanup
state and one index-lag record per table, the tables of one policy glob and an index-definition file
naming every table. A view reads them in two queries, parses the two files (cached by mtime after
the first view) and renders the page; no catalog is involved. The median of ``--repeat`` views is kept.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml


def _prepare(root: Path, tables: int) -> None:
    from airflow_iceberg_maint.state.cleanup import SqlStateStore, record_attempt
    from airflow_iceberg_maint.state.status_records import SqlRecords, index_lag_key

    url = f"sqlite:///{root}/state.db"
    states, records = SqlStateStore(url), SqlRecords(url)
    now = datetime.now(UTC)
    names = [f"bench.t{i:05d}" for i in range(tables)]
    for i, name in enumerate(names):
        record_attempt(
            states,
            table_uuid=f"00000000-0000-0000-0000-{i:012d}",
            table=name,
            at=now - timedelta(days=i % 10),
            dry_run=i % 3 == 0,
            succeeded=True,
            counts={"orphan_file_count": i, "orphan_bytes": i * 1000, "deleted_file_count": i, "failed_count": 0},
            report=f"s3://ops/reports/iceberg_orphan_cleanup_scheduled/run/{name}.json",
        )
        lag = {
            "snapshots_behind": i % 4,
            "lag_seconds": float(i % 4 * 60),
            "lagging": i % 4 > 1,
            "reasons": [],
            "checked_at": now.isoformat(),
        }
        records.put(
            index_lag_key(name),
            {"table": name, "indexes": {"by_id": {"index": "by_id", **lag}, "by_kind": {"index": "by_kind", **lag}}},
            "",
        )
    (root / "policies.yaml").write_text(
        yaml.safe_dump(
            [
                {
                    "name": "weekly",
                    "type": "system_iceberg_orphan_file_removal",
                    "minIntervalDays": 7,
                    "tables": ["bench.*"],
                    "content": {"olderThanDays": 3},
                }
            ]
        )
    )
    (root / "indexes.yaml").write_text(
        yaml.safe_dump(
            [
                {
                    "table": name,
                    "indexes": [{"name": "by_id", "ordering": "id"}, {"name": "by_kind", "ordering": "kind"}],
                }
                for name in names
            ]
        )
    )
    os.environ["AIRFLOW__ICEBERG_MAINT__STATE_URL"] = url
    os.environ["AIRFLOW__ICEBERG_MAINT__POLICY_FILE"] = str(root / "policies.yaml")
    os.environ["AIRFLOW__ICEBERG_MAINT__INDEX_DEFINITIONS_FILE"] = str(root / "indexes.yaml")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    with tempfile.TemporaryDirectory(prefix="bench-status-") as folder:
        os.environ.setdefault("AIRFLOW_HOME", folder)
        _prepare(Path(folder), args.tables)
        from airflow_iceberg_maint.airflow.plugin import status_page

        seconds, size, first = [], 0, 0.0
        for attempt in range(args.repeat + 1):
            started = time.perf_counter()
            size = len(status_page().body)
            elapsed = time.perf_counter() - started
            if attempt == 0:
                first = elapsed  # parses the definition files
            else:
                seconds.append(elapsed)
        print(
            f"status page, {args.tables} tables: first view {first:.3f} s (parses the files), "
            f"then median {statistics.median(seconds):.3f} s over {args.repeat} views, {size / 1e6:.2f} MB of HTML"
        )


if __name__ == "__main__":
    main()
