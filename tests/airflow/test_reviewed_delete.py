"""The reviewed removal's delete: only files of the approved list that a fresh check still finds orphaned (S16)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from airflow.sdk.exceptions import AirflowFailException
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.airflow.operators.reviewed import (
    IcebergDeleteApprovedOrphansOperator,
    load_review,
    orphan_review,
)
from tests.airflow.conftest import remover

TABLE = "demo.orders"


def aged(path: Path) -> Path:
    stamp = time.time() - 10 * 86_400
    os.utime(path, (stamp, stamp))
    return path


def test_only_approved_files_still_orphaned_are_deleted(
    demo_tables: dict, catalog: SqlCatalog, state_url: str, tmp_path: Path, context: dict
) -> None:
    planted = demo_tables[TABLE]
    data = planted["old"].parent
    later_referenced = data / "00000-0-added-later.parquet"
    pq.write_table(pa.table({"id": pa.array([7, 8], pa.int64())}), later_referenced)
    aged(later_referenced)

    dry = remover(state_url, tmp_path, table=TABLE, dry_run=True).execute(context)
    reviewed = json.loads(Path(dry["report"].removeprefix("file://")).read_text())
    approved = sorted([planted["old_uri"], f"file://{later_referenced}"])
    assert sorted(reviewed["orphan_files"]) == approved
    assert load_review(dry["report"], "iceberg_default") == orphan_review(reviewed, dry["report"])
    review = orphan_review(reviewed, dry["report"], paths=1)
    assert (review["orphan_file_count"], review["first_paths"], review["more_paths"]) == (2, approved[:1], 1)
    assert review["report_page"].startswith("/iceberg-maint/report?uri=file%3A%2F%2F")

    # After the review: a commit references one approved file, and a new orphan appears.
    catalog.load_table(TABLE).add_files([str(later_referenced)])
    unseen = data / "00000-0-after-review.parquet"
    unseen.write_bytes(b"PAR1" + b"\0" * 60)
    aged(unseen)

    delete = IcebergDeleteApprovedOrphansOperator(
        task_id="delete_approved",
        table=TABLE,
        approved_report=dry["report"],
        state_url=state_url,
        report_location=f"file://{tmp_path}/reports",
    )
    context["ti"].run_id = "manual__approved"
    result = delete.execute(context)

    assert not planted["old"].exists()
    assert later_referenced.exists() and unseen.exists() and planted["fresh"].exists()
    assert result == {
        "table": TABLE,
        "approved_count": 2,
        "deleted_file_count": 1,
        "kept_not_orphan_count": 1,
        "kept_not_approved_count": 1,
        "failed_count": 0,
        "report": f"file://{tmp_path}/reports/unit/manual__approved/demo.orders.json",
    }
    report = json.loads(Path(result["report"].removeprefix("file://")).read_text())
    assert report["deleted_files"] == [planted["old_uri"]]
    assert report["kept_not_orphan"] == [f"file://{later_referenced}"]
    assert report["kept_not_approved"] == [f"file://{unseen}"]
    assert sorted(catalog.load_table(TABLE).scan().to_arrow()["id"].to_pylist()) == [1, 2, 3, 7, 8]


def test_a_report_that_is_not_a_dry_run_of_the_table_is_refused(
    demo_tables: dict, state_url: str, tmp_path: Path, context: dict
) -> None:
    dry = remover(state_url, tmp_path, table="demo.events", dry_run=True).execute(context)
    delete = IcebergDeleteApprovedOrphansOperator(
        task_id="delete_approved",
        table=TABLE,
        approved_report=dry["report"],
        state_url=state_url,
        report_location=f"file://{tmp_path}/other",
    )
    with pytest.raises(AirflowFailException, match=r"approved_report .*: not a dry run of table demo\.orders"):
        delete.execute(context)
    assert demo_tables[TABLE]["old"].exists() and demo_tables["demo.events"]["old"].exists()
